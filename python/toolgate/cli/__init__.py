"""The ``toolgate`` command line: ``parser`` reads the arguments, ``commands`` does the work."""

from toolgate.cli.parser import main

__all__ = ["main"]
