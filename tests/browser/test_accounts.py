"""Signing in and deleting a package in a real Chromium: the login page, the operator buttons, the
confirmation page, and the throttle's message after repeated wrong passwords."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from packages_app.models import ActionLog, Package, PackageFile
from tests import dashboard_factories as f
from tests.browser.conftest import Tab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "correct horse battery staple"
JUNK = "/packages/meshllm/junk-layers/"


@pytest.fixture
def operator() -> User:
    # Transaction tests flush the migration's "operators" group; the permissions are recreated.
    user = User.objects.create_user("olga", password=PASSWORD)
    codenames = ["delete_package", "change_package", "reingest_package", "track_package"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def sign_in(tab: Tab, password: str) -> None:
    tab.page.fill("input[name=username]", "olga")
    tab.page.fill("input[name=password]", password)
    tab.page.click("form.login button[type=submit]")
    tab.page.wait_for_load_state("load")


def test_an_operator_signs_in_and_deletes_a_package_after_confirming(tab: Tab, operator: User) -> None:
    revision = f.make_revision(f.make_package("meshllm/junk-layers"), "consistent-no-mtp")
    PackageFile.objects.create(revision=revision, path="junk.bin", size=1)
    tab.open(JUNK)
    assert tab.page.locator(".operator-actions").count() == 0
    tab.page.click("text=Sign in")
    sign_in(tab, PASSWORD)
    tab.page.wait_for_url(f"**{JUNK}")
    tab.page.click("text=Delete…")
    tab.page.wait_for_url("**/delete")
    assert "its 1 revisions and their 1 files" in tab.page.locator(".error-box").inner_text()
    tab.screenshot("package-delete-confirm")
    tab.page.click("button.danger")
    tab.page.wait_for_url(tab.base_url + "/")
    assert "Deleted meshllm/junk-layers" in tab.page.locator(".messages").inner_text()
    assert not Package.objects.exists() and ActionLog.objects.get().username == "olga"
    tab.assert_quiet()


def test_repeated_wrong_passwords_show_the_throttle_message(tab: Tab, operator: User, settings: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    settings.MESHDASH_LOGIN_FAILURE_LIMIT = 3
    tab.open("/accounts/login/")
    for _ in range(3):
        sign_in(tab, "wrong")
    sign_in(tab, PASSWORD)
    assert "Too many failed sign-ins" in tab.page.locator(".field-errors").inner_text()
    tab.screenshot("login-throttled")
    cache.clear()
