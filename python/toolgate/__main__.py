"""``python -m toolgate``: the command line."""

import sys

from toolgate.cli.parser import run

if __name__ == "__main__":  # so that importing the module alone runs nothing
    sys.exit(run())
