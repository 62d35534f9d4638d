"""Sphinx configuration for the django-htask documentation."""

project = "django-htask"
author = "django-htask developers"
copyright = "2026, django-htask developers"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
