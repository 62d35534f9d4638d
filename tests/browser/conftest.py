"""Headless Chromium for end-to-end tests.

Chromium comes from Debian's ``chromium`` package (``/usr/bin/chromium``) and is driven
by Playwright from PyPI; no browser is ever downloaded. ``HTASK_CHROMIUM`` overrides
the path. A missing browser is an error, not a skip: CI installs it.
"""

from __future__ import annotations

import mimetypes
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

import django_htask

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# around it are ordinary synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# Playwright gives each launch a fresh temporary profile and runs it headless.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = os.environ.get("HTASK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            f"Chromium not found at {path!r}: install Debian's chromium package "
            "(apt-get install chromium) or set HTASK_CHROMIUM"
        )
    return path


# Module scope, not session: Playwright's sync API keeps an event loop running in this
# thread while it is open, which would break ``asyncio.run`` in every later test.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


#: The apps' static folders, served to the browser by :func:`serve_static` (the test
#: settings have no staticfiles app, so the live server serves none).
STATIC = [
    Path(django.__file__).parent / "contrib" / "admin" / "static",
    Path(django_htask.__file__).parent / "static",
]


def serve_static(route: Route) -> None:
    """Answer a request for ``/static/…`` from :data:`STATIC` (``page.route``)."""
    path = route.request.url.split("/static/", 1)[1].split("?", 1)[0]
    for folder in STATIC:
        found = folder / path
        if found.is_file():
            kind = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
            route.fulfill(path=str(found), content_type=kind)
            return
    route.fulfill(status=404)
