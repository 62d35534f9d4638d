"""django-htask's version, in a leaf module: what reports it (a node's row, the banner)
imports this, never the package root above every layer."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0.dev0"
