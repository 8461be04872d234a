"""The ``toolgate`` command line: ``parser`` reads the arguments, ``commands`` does the work."""

from toolgate.cli.parser import main, run

__all__ = ["main", "run"]
