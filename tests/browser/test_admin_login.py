"""The admin in a real browser: log in and find the scheduler's app."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer


@pytest.mark.django_db(transaction=True)
def test_log_in_to_the_admin(live_server: LiveServer, page: Page) -> None:
    get_user_model().objects.create_superuser("admin", "admin@example.com", "pw-for-tests")
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "pw-for-tests")
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()
    expect(page).to_have_title("Site administration | Django site admin")


@pytest.mark.django_db(transaction=True)
def test_wrong_password_is_refused(live_server: LiveServer, page: Page) -> None:
    get_user_model().objects.create_superuser("admin", "admin@example.com", "pw-for-tests")
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "wrong")
    page.click("input[type=submit]")
    expect(page.locator(".errornote")).to_contain_text("correct username and password")
