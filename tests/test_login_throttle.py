"""Every login path throttled the same way (issue 22, visitor side, item 2).

The admin's login page counts failures against the same normalised username and client address as the
site's; the username is counted as Django looks it up (NFKC), so full-width and mathematical letters are
the same account; behind a trusted proxy (``MESHDASH_TRUSTED_PROXIES``) the address is the client's from
X-Forwarded-For, and a forged header from anyone else is ignored. Each guard has its control.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.test import Client, RequestFactory

from meshdash.settings import trusted_proxies
from packages_app.web import access, ratelimit

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
ADMIN_LOGIN = "/" + django_settings.MESHDASH_ADMIN_PATH + "login/"
SITE_LOGIN = "/accounts/login/"
FULL_WIDTH_ROOT = "\uff52\uff4f\uff4f\uff54"  # full-width "root"
MATH_BOLD_ROOT = "\U0001d42b\U0001d428\U0001d428\U0001d42d"  # mathematical bold "root"


@pytest.fixture(autouse=True)
def fresh_cache(settings: Any) -> None:
    cache.clear()
    settings.MESHDASH_LOGIN_FAILURE_LIMIT = 5


@pytest.fixture
def root() -> User:
    return User.objects.create_superuser("root", password=PASSWORD)


def sign_in(client: Client, url: str, username: str, password: str, **extra: Any) -> bool:
    """Post the login form; True when the session is signed in afterwards."""
    client.post(url, {"username": username, "password": password, "next": "/"}, **extra)
    return "_auth_user_id" in client.session


# --- the admin's login page -----------------------------------------------------------------------


def test_the_admin_login_is_locked_out_after_the_failure_limit_even_for_the_right_password(
    client: Client, root: User
) -> None:
    assert not any(sign_in(client, ADMIN_LOGIN, "root", f"guess-{i}") for i in range(25))
    response = client.post(ADMIN_LOGIN, {"username": "root", "password": PASSWORD})
    assert "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_control_the_stock_admin_form_lets_25_guesses_then_the_right_password_in(
    client: Client, root: User
) -> None:
    admin.site.login_form = AdminAuthenticationForm  # admin.site is lazy: restored by hand below
    try:
        assert not any(sign_in(client, ADMIN_LOGIN, "root", f"guess-{i}") for i in range(25))
        assert sign_in(client, ADMIN_LOGIN, "root", PASSWORD)
    finally:
        admin.site.login_form = access.ThrottledAdminAuthenticationForm


def test_failures_on_the_site_login_lock_the_admin_login_and_the_other_way_round(root: User) -> None:
    for i in range(5):
        sign_in(Client(REMOTE_ADDR="10.0.0.1"), SITE_LOGIN, "root", f"guess-{i}")
    assert not sign_in(Client(REMOTE_ADDR="10.0.0.2"), ADMIN_LOGIN, "root", PASSWORD)
    cache.clear()
    for i in range(5):
        sign_in(Client(REMOTE_ADDR="10.0.0.3"), ADMIN_LOGIN, "root", f"guess-{i}")
    assert not sign_in(Client(REMOTE_ADDR="10.0.0.4"), SITE_LOGIN, "root", PASSWORD)


def test_guessing_from_one_address_across_usernames_locks_the_admin_login_too(root: User) -> None:
    client = Client(REMOTE_ADDR="10.0.0.9")
    for i in range(5):
        sign_in(client, SITE_LOGIN, f"user{i}", "wrong")
    assert not sign_in(client, ADMIN_LOGIN, "root", PASSWORD)


# --- the username as Django looks it up ----------------------------------------------------------------


@pytest.mark.parametrize("url", [SITE_LOGIN, ADMIN_LOGIN])
@pytest.mark.parametrize("look_alike", [FULL_WIDTH_ROOT, MATH_BOLD_ROOT, " root", "ROOT"])
def test_a_look_alike_username_counts_against_the_locked_account(
    root: User, url: str, look_alike: str
) -> None:
    for i in range(5):
        sign_in(Client(REMOTE_ADDR=f"10.1.0.{i}"), SITE_LOGIN, "root", f"guess-{i}")
    assert not sign_in(Client(REMOTE_ADDR="10.2.0.1"), url, look_alike, PASSWORD)
    assert not sign_in(Client(REMOTE_ADDR="10.2.0.2"), url, "root", PASSWORD)


@pytest.mark.parametrize("look_alike", [FULL_WIDTH_ROOT, MATH_BOLD_ROOT])
def test_control_counting_the_name_as_typed_lets_the_look_alike_sign_in_as_root(
    root: User, look_alike: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access, "login_name", lambda username: username.strip().lower())
    for i in range(5):
        sign_in(Client(REMOTE_ADDR=f"10.1.0.{i}"), SITE_LOGIN, "root", f"guess-{i}")
    assert not sign_in(Client(REMOTE_ADDR="10.2.0.2"), SITE_LOGIN, "root", PASSWORD)  # root is locked
    client = Client(REMOTE_ADDR="10.2.0.1")
    assert sign_in(client, SITE_LOGIN, look_alike, PASSWORD)  # ...and Django signs the look-alike in
    assert client.session["_auth_user_id"] == str(root.pk)


def test_the_login_name_is_djangos_nfkc_name_case_folded() -> None:
    assert {access.login_name(n) for n in ("root", FULL_WIDTH_ROOT, MATH_BOLD_ROOT, " Root ")} == {"root"}
    assert access.login_name("r\u043e\u043et") != "root"  # Cyrillic o: another account, NFKC agrees


# --- the client behind a trusted proxy ----------------------------------------------------------------


def address(remote: str, forwarded: str | None = None) -> str:
    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return ratelimit.client_address(RequestFactory().get("/", **meta))


def test_without_trusted_proxies_the_forwarded_header_is_ignored(settings: Any) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = []
    assert address("127.0.0.1", "203.0.113.7") == "127.0.0.1"


def test_behind_a_trusted_proxy_the_client_is_the_nearest_untrusted_hop(settings: Any) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = trusted_proxies("127.0.0.1, 10.0.0.0/8")
    assert address("127.0.0.1", "203.0.113.7") == "203.0.113.7"
    # A client forging the header: nginx appends the real address, the forged part is further left.
    assert address("127.0.0.1", "198.51.100.1, 203.0.113.7") == "203.0.113.7"
    # Two trusted proxies in a row (a load balancer in 10/8, then nginx on loopback).
    assert address("127.0.0.1", "203.0.113.7, 10.1.2.3") == "203.0.113.7"
    assert address("127.0.0.1", "203.0.113.7, garbage") == "127.0.0.1"  # garbled: believe no further
    assert address("127.0.0.1", "") == "127.0.0.1"
    assert address("127.0.0.1", "2001:db8::0001") == "2001:db8::1"
    assert address("10.0.0.5", "10.0.0.6") == "10.0.0.6"  # all trusted: the furthest one


def test_a_forwarded_header_from_a_peer_that_is_not_trusted_is_ignored(settings: Any) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = trusted_proxies("127.0.0.1")
    assert address("192.0.2.50", "203.0.113.7") == "192.0.2.50"


@pytest.mark.parametrize("value", ["localhost", "10.0.0.0/33", "127.0.0.1,,nope", "1.2.3"])
def test_a_trusted_proxy_setting_that_is_not_an_address_stops_the_process(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="MESHDASH_TRUSTED_PROXIES"):
        trusted_proxies(value)


def test_trusted_proxies_are_off_by_default() -> None:
    assert trusted_proxies("") == [] and django_settings.MESHDASH_TRUSTED_PROXIES == []


def guess_behind_proxy(clients: list[str], root_client: str) -> bool:
    """Each client address fails once with its own username through the proxy; then root signs in
    from ``root_client``."""
    for i, ip in enumerate(clients):
        sign_in(Client(REMOTE_ADDR="127.0.0.1"), SITE_LOGIN, f"user{i}", "wrong", HTTP_X_FORWARDED_FOR=ip)
    client = Client(REMOTE_ADDR="127.0.0.1")
    return sign_in(client, SITE_LOGIN, "root", PASSWORD, HTTP_X_FORWARDED_FOR=root_client)


def test_behind_a_trusted_proxy_one_guessing_client_does_not_lock_the_others_out(
    root: User, settings: Any
) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = trusted_proxies("127.0.0.1")
    assert guess_behind_proxy(["203.0.113.7"] * 5, "198.51.100.20")
    assert not guess_behind_proxy(["203.0.113.8"] * 5, "203.0.113.8")  # the guesser itself is locked


def test_control_without_the_setting_every_client_behind_the_proxy_shares_one_budget(
    root: User, settings: Any
) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = []
    assert not guess_behind_proxy(["203.0.113.7"] * 5, "198.51.100.20")


def test_the_check_rate_limit_keys_on_the_client_behind_a_trusted_proxy(settings: Any) -> None:
    settings.MESHDASH_TRUSTED_PROXIES = trusted_proxies("127.0.0.1")
    settings.MESHDASH_CHECK_RATE_LIMIT = 1
    client = Client(REMOTE_ADDR="127.0.0.1")

    def check(ip: str) -> int:
        api = "/api/v1/check-manifest"
        return client.post(api, b"{}", content_type="application/json", HTTP_X_FORWARDED_FOR=ip).status_code

    assert check("203.0.113.7") != 429 and check("203.0.113.7") == 429
    assert check("198.51.100.20") != 429  # another client behind the same proxy has its own minute


def test_every_login_view_in_the_url_conf_uses_a_throttled_form() -> None:
    from django.contrib.auth.views import LoginView
    from django.urls import URLPattern, URLResolver, get_resolver

    def views(patterns: list[Any]) -> list[Any]:
        found = []
        for p in patterns:
            if isinstance(p, URLResolver):
                found += views(p.url_patterns)
            elif isinstance(p, URLPattern):
                found.append(p.callback)
        return found

    login_views = [
        v for v in views(get_resolver().url_patterns) if getattr(v, "view_class", None) is LoginView
    ]
    assert login_views, "the site's login view"
    for view in login_views:
        assert issubclass(view.view_initkwargs["authentication_form"], access.ThrottledLoginMixin)
    assert issubclass(admin.site.login_form, access.ThrottledLoginMixin)


# --- parallel guesses (issue 48): counted before the password is checked ---------------------------------


def _parallel_guesses(count: int) -> int:
    """``count`` sign-ins with a wrong password at once, from one address; how many passwords were checked
    (each check made slow, as a real hash is, so the guesses overlap)."""
    checked = threading.Semaphore(0)
    start = threading.Barrier(count)

    def slow_wrong_password(request: Any = None, **credentials: Any) -> None:
        checked.release()
        time.sleep(0.05)
        return None

    def guess(i: int) -> None:
        request = RequestFactory().post(SITE_LOGIN, REMOTE_ADDR="198.51.100.9")
        data = {"username": "root", "password": f"guess-{i}"}
        form = access.ThrottledAuthenticationForm(request, data=data)
        start.wait(10)
        form.is_valid()

    with mock.patch("django.contrib.auth.forms.authenticate", slow_wrong_password):
        threads = [threading.Thread(target=guess, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    return sum(1 for _ in iter(lambda: checked.acquire(blocking=False), False))


def test_thirty_parallel_guesses_get_at_most_the_limit_of_password_checks() -> None:
    assert _parallel_guesses(30) <= 5


def test_control_checking_before_counting_lets_parallel_guesses_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def check_then_count(self: Any) -> Any:  # the order before issue 48
        keys = access._failure_keys(self.request, str(self.data.get("username", "")))
        if any(int(cache.get(k) or 0) >= 5 for k in keys):
            raise ValidationError("Too many failed sign-ins", code="throttled")
        try:
            return super(access.ThrottledLoginMixin, self).clean()
        except ValidationError:
            for key in keys:
                ratelimit.count_hit(key, 900)
            raise

    monkeypatch.setattr(access.ThrottledLoginMixin, "clean", check_then_count)
    assert _parallel_guesses(30) > 5  # the issue saw 7; here every guess overlaps the first checks


def test_a_right_password_after_four_wrong_ones_signs_in_and_gives_its_count_back(
    client: Client, root: User
) -> None:
    assert not any(sign_in(client, SITE_LOGIN, "root", f"guess-{i}") for i in range(4))
    assert sign_in(client, SITE_LOGIN, "root", PASSWORD)
    keys = access._failure_keys(RequestFactory().post(SITE_LOGIN), "root")
    assert cache.get(keys[0]) == 4  # the four failures; the sign-in itself not counted
