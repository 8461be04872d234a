"""``python -m toolgate``: the command line."""

import sys

from toolgate.cli.parser import main

sys.exit(main())
