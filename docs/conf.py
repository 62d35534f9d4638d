"""Sphinx configuration for the django-htask documentation."""

import importlib.util
import os
import sys
from pathlib import Path

import django

# The API reference (api.md) imports the package with autodoc: Django must be set up.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

project = "django-htask"
author = "django-htask developers"
copyright = "2026, django-htask developers"

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# django_htask.backends needs django.tasks (Django >= 6.0): on Django 5.2 what it imports
# from Django 6 is mocked, so that its reference is built from the same docstrings.
if importlib.util.find_spec("django.tasks") is None:
    autodoc_mock_imports = ["django.tasks", "django.utils.json"]
