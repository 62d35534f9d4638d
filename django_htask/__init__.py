"""django-htask: a scheduler for Django.

The engine (``django_htask.engine``) is pure Python and usable without Django.
"""

__version__ = "0.1.0.dev0"
