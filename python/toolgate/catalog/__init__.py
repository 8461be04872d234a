"""Tools and catalogs: what a tool is, and how tools are read, checked and named.

>>> from toolgate.catalog import Catalog
>>> catalog = Catalog.load("github.tools-list.json")  # doctest: +SKIP
"""

from toolgate.catalog.catalog import Catalog, CatalogDiff
from toolgate.catalog.tool import Tool
from toolgate.errors import CatalogWarning, InvalidToolsError, UnknownToolError
from toolgate.formats.raw import DEFAULT_SERVER

__all__ = [
    "DEFAULT_SERVER",
    "Catalog",
    "CatalogDiff",
    "CatalogWarning",
    "InvalidToolsError",
    "Tool",
    "UnknownToolError",
]
