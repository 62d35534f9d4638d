"""The ``--database ALIAS`` option of ``runscheduler`` and ``htask``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_htask.db import database_option

__all__ = ["add_database_option", "database_of"]


def add_database_option(parser: CommandParser) -> None:
    parser.add_argument(
        "--database",
        default=None,
        metavar="ALIAS",
        help="the DATABASES alias of the scheduler's tables (HTASK['DATABASE'], else "
        "the routers': 'default' without them)",
    )


def database_of(options: dict[str, Any], returncode: int = 1) -> str:
    """The alias the options name (a CommandError naming a bad one, with ``returncode``)."""
    try:
        return database_option(options["database"])
    except ValueError as exc:
        raise CommandError(str(exc), returncode=returncode) from exc
