"""Bounded cost for anonymous manifest checks (issue 22, visitor side, item 3).

A site-wide budget of check bytes in flight (check_budget.py, shared by the web workers through the cache)
refuses a check at once with 503 + Retry-After when spent, never queues it; anonymous visitors have a
lower size cap. The attack: 12 parallel large checks from many addresses (within each address's rate
limit). The control: the same 12 with the budget off all run at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connections
from django.test import Client

from packages_app.catalog.lookups import judge_manifest
from packages_app.web import api, check_budget
from tests import dashboard_factories as f

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cache]

API = "/api/v1/check-manifest"
PAGE = "/check/"
MiB = 2**20
CHECK_SECONDS = 3.0  # each check made this slow: longer than 12 requests take to arrive on a loaded machine


@pytest.fixture(autouse=True)
def fresh_cache(settings: Any) -> Iterator[None]:
    cache.clear()
    settings.MESHDASH_CHECK_RATE_LIMIT = 0  # the per-address limit is not what is under test
    settings.MESHDASH_CHECK_BUDGET_BYTES = 8 * MiB
    settings.MESHDASH_CHECK_ANON_MAX_BYTES = 4 * MiB
    yield
    cache.clear()


def manifest(size: int) -> bytes:
    """A v1 manifest padded to about ``size`` bytes (an unknown key the parser ignores)."""
    doc = f.manifest_v1(block_count=41)
    base = len(json.dumps(doc | {"padding": ""}))
    doc["padding"] = "x" * max(0, size - base)
    return json.dumps(doc).encode()


def post(client: Client, body: bytes, address: str = "198.51.100.1") -> Any:
    return client.post(API, body, content_type="application/json", REMOTE_ADDR=address)


class SlowCheck:
    """judge_manifest made to take ``seconds``, counting how many run at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.running, self.most = seconds, 0, 0
        self.lock = threading.Lock()
        self.real = judge_manifest

    def __call__(self, data: bytes, show_private: bool = False) -> Any:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.seconds)
            return self.real(data, show_private)
        finally:
            with self.lock:
                self.running -= 1


def twelve_parallel_checks(size: int) -> list[tuple[int, float, str]]:
    """12 clients, each from its own address, post a ``size``-byte manifest at the same moment."""
    body = manifest(size)
    results: list[tuple[int, float, str]] = []
    start = threading.Barrier(12)

    def one(i: int) -> None:
        client = Client()
        start.wait()
        began = time.monotonic()
        try:
            response = post(client, body, address=f"198.51.100.{i + 1}")
        finally:
            connections.close_all()  # this thread's own database connection
        results.append((response.status_code, time.monotonic() - began, response.get("Retry-After", "")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_twelve_parallel_large_checks_run_at_most_two_at_once_the_rest_answer_503_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = SlowCheck(CHECK_SECONDS)
    monkeypatch.setattr(api, "judge_manifest", slow)
    results = twelve_parallel_checks(4 * MiB - 4096)
    statuses = sorted(status for status, _, _ in results)
    assert slow.most <= 2  # 8 MiB budget / 4 MiB checks
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 503}
    refused = [(seconds, wait) for status, seconds, wait in results if status == 503]
    assert len(refused) >= 8  # all arrived while the first two ran: the rest refused
    assert all(seconds < CHECK_SECONDS and wait == str(check_budget.RETRY_AFTER) for seconds, wait in refused)
    assert check_budget.in_flight() == 0  # every admitted check gave its bytes back


def test_control_without_the_budget_all_twelve_run_at_once(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MESHDASH_CHECK_BUDGET_BYTES = 0
    slow = SlowCheck(CHECK_SECONDS)
    monkeypatch.setattr(api, "judge_manifest", slow)
    results = twelve_parallel_checks(4 * MiB - 4096)
    assert [status for status, _, _ in results] == [200] * 12
    assert slow.most >= 10  # every check held a worker at the same time


def test_over_the_budget_the_api_answers_503_with_a_clear_message_and_retry_after() -> None:
    with check_budget.reserve(8 * MiB):  # another worker is checking 8 MiB
        response = post(Client(), manifest(1000))
    assert response.status_code == 503 and response["Retry-After"] == "5"
    message = response.json()["error"]
    assert "busy checking other manifests" in message and "8.0 MiB" in message and "5 s" in message
    assert post(Client(), manifest(1000)).status_code == 200  # given back: the next one runs


def test_small_checks_fit_beside_a_large_one() -> None:
    with check_budget.reserve(4 * MiB):
        assert post(Client(), manifest(1000)).status_code == 200


def test_over_the_budget_the_page_answers_503_with_the_message_and_retry_after() -> None:
    with check_budget.reserve(8 * MiB):
        response = Client().post(PAGE, {"manifest": manifest(1000).decode()})
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "busy checking other manifests" in response.content.decode()


def test_a_check_bigger_than_the_whole_budget_runs_alone_rather_than_never(settings: Any) -> None:
    settings.MESHDASH_CHECK_BUDGET_BYTES = 2 * MiB
    user = User.objects.create_user("sam", password="pw-sam-123456")
    client = Client()
    client.force_login(user)
    assert post(client, manifest(3 * MiB)).status_code == 200
    with check_budget.reserve(1000):
        assert post(client, manifest(3 * MiB)).status_code == 503


def test_a_lease_lost_with_its_worker_is_forgotten_after_the_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(check_budget.time, "time", lambda: now[0])
    lost = check_budget.reserve(8 * MiB)
    lost.__enter__()  # a worker killed mid-check: __exit__ never runs
    assert post(Client(), manifest(1000)).status_code == 503
    now[0] += check_budget.SLICE * check_budget.SLICES
    assert post(Client(), manifest(1000)).status_code == 200


def test_with_the_cache_down_checks_go_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("cache down")

    monkeypatch.setattr(check_budget.cache, "add", down)
    assert post(Client(), manifest(1000)).status_code == 200


# --- the anonymous size cap ----------------------------------------------------------------------------


def test_an_anonymous_check_over_the_anonymous_cap_is_refused_before_reading_it() -> None:
    response = post(Client(), manifest(5 * MiB))
    assert response.status_code == 413
    assert "4194304 bytes (4.0 MiB) without signing in (16 MiB signed in)" in response.json()["error"]


def test_a_signed_in_user_may_check_up_to_16_mib(settings: Any) -> None:
    settings.MESHDASH_CHECK_BUDGET_BYTES = 16 * MiB
    client = Client()
    client.force_login(User.objects.create_user("sam", password="pw-sam-123456"))
    assert post(client, manifest(5 * MiB)).status_code == 200


def test_control_with_the_anonymous_cap_raised_the_same_check_runs(settings: Any) -> None:
    settings.MESHDASH_CHECK_ANON_MAX_BYTES = 16 * MiB
    assert post(Client(), manifest(5 * MiB)).status_code == 200


def test_the_page_refuses_an_anonymous_upload_over_the_cap() -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("model-package.json", manifest(5 * MiB), "application/json")
    response = Client().post(PAGE, {"file": upload})
    assert response.status_code == 413
    assert "without signing in" in response.content.decode()


def test_a_refused_body_is_drained_in_pieces_up_to_16_mib_so_a_proxy_sees_the_413() -> None:
    import io

    class Counting(io.BytesIO):
        biggest = 0

        def read(self, size: int | None = -1) -> bytes:
            piece = super().read(size)
            Counting.biggest = max(Counting.biggest, len(piece))
            return piece

    stream = Counting(b"x" * (5 * MiB))
    check_budget.drain(stream, 5 * MiB)
    assert stream.tell() == 5 * MiB and Counting.biggest == 64 * 1024  # all read, never held whole
    huge = io.BytesIO(b"x" * 1000)
    check_budget.drain(huge, 10**12)  # a declared length past the format's cap: not read at all
    assert huge.tell() == 0
