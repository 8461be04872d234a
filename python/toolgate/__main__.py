"""``python -m toolgate``: the command line."""

import sys

from toolgate.cli import main

sys.exit(main())
