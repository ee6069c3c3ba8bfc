"""Fault tests with a hostile Hub imitation: every attack of issue 14's "hostile Hub" list, bounded.

``HostileHub`` answers the four routes meshdash uses (repo info, commits, tree, resolve) and is scripted
per test to misbehave: ignore Range and stream 200 MB, paginate 1,447 pages, drip one byte a second,
ask for a 100,000 s Retry-After, redirect to a loopback canary, send a "next" link to another host,
list a file of 10^30 bytes, serve a manifest holding 1e999999. Each test shows the bounded outcome
(time, memory, bytes sent, the problem recorded) and has a control: the same attack with the guard
switched off (a setting or a monkeypatch) succeeds, which shows the test can fail.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from packages_app import hub, ingest, tasks, tracking
from packages_app.devhub import DEVHUB_TOKEN, QWEN35_FIRST_SHA, QWEN35_REPO, DevHub
from packages_app.hub import net
from packages_app.models import Package, Revision

REPO = "meshllm/Hostile-layers"
SHA = "a" * 40
MB = 1024 * 1024
TOKEN = "hf_hostile_test_token"
MANIFEST = json.dumps({"schema_version": 1, "layers": []}).encode()


# --- the hostile imitation ------------------------------------------------------------------------


@dataclass
class Seen:
    path: str
    authorization: str


@dataclass
class Script:
    """What the hostile Hub does; each field one attack (all off by default: a well-behaved Hub)."""

    file_bytes: int = 4096  # size of every file but the manifest
    ignore_range_body: int = 0  # > 0: answer 200 with this many bytes whatever Range asked
    drip: bool = False  # headers at once, then one byte a second
    drip_headers: bool = False  # the status line, then the headers one byte a second
    retry_after: int | None = None  # every resolve answers 429 with this Retry-After
    redirect_to: str = ""  # every resolve answers 302 to this URL
    commit_pages: int = 1  # commits are one per page, this many pages, each linking the next
    next_link_to: str = ""  # the first commits page links "next" to this URL
    tree_size: int = 4096  # size the tree listing claims for layer-000.gguf
    tree_files: int = 2
    manifest: bytes = MANIFEST
    stop: threading.Event = field(default_factory=threading.Event)


class HostileHub:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.bytes_sent = 0
        handler = type("Bound", (_Hostile,), {"hub": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def stop(self) -> None:
        self.script.stop.set()
        self.server.shutdown()
        self.server.server_close()

    def requests_to(self, fragment: str) -> list[Seen]:
        return [s for s in self.seen if fragment in s.path]


class _Hostile(BaseHTTPRequestHandler):
    hub: HostileHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes: without this, each request waits on a delayed ACK.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.hub.seen.append(Seen(self.path, self.headers.get("Authorization", "")))
        script = self.hub.script
        try:
            if "/resolve/" in url.path:
                self._resolve(script, url.path)
            elif "/commits/" in url.path:
                self._commits(script, url.query)
            elif "/tree/" in url.path:
                self._json(_tree(script))
            elif "/revision/" in url.path:
                self._json({"id": REPO, "sha": SHA, "siblings": []})
            else:
                self._json({"canary": self.path, "secret": "from the inside"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _json(self, payload: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._head(
            200, {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
        )
        self._write(body)

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.hub.bytes_sent += len(data)

    def _commits(self, script: Script, query: str) -> None:
        page = int(parse_qs(query).get("page", ["1"])[0])
        headers = {}
        if script.next_link_to and page == 1:
            headers["Link"] = f'<{script.next_link_to}>; rel="next"'
        elif page < script.commit_pages:
            base = f"{self.hub.url}{urlsplit(self.path).path}"
            headers["Link"] = f'<{base}?page={page + 1}>; rel="next"'
        commit = {
            "id": f"{page:040x}",
            "title": f"commit {page}",
            "date": "2026-01-01T00:00:00.000Z",
            "authors": [],
            "message": "",
        }
        self._json([commit], headers)

    def _resolve(self, script: Script, path: str) -> None:
        if script.retry_after is not None:
            body = b'{"error": "slow down"}'
            self._head(429, {"Retry-After": str(script.retry_after), "Content-Length": str(len(body))})
            return self._write(body)
        if script.redirect_to:
            return self._head(302, {"Location": script.redirect_to, "Content-Length": "0"})
        if path.endswith("model-package.json"):
            return self._send(200, script.manifest)
        if script.drip_headers:
            return self._drip_headers(script)
        if script.drip:
            return self._drip(script)
        if script.ignore_range_body:
            return self._stream_zeros(script.ignore_range_body)
        return self._send(206, b"\0" * min(script.file_bytes, 64 * 1024))

    def _send(self, status: int, body: bytes) -> None:
        self._head(status, {"Content-Length": str(len(body))})
        self._write(body)

    def _stream_zeros(self, total: int) -> None:
        self._head(200, {"Content-Length": str(total)})
        chunk = b"\0" * (256 * 1024)
        sent = 0
        while sent < total:
            self._write(chunk[: total - sent])
            sent += len(chunk)

    def _drip_headers(self, script: Script) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        self.wfile.flush()
        while not script.stop.wait(1.0):
            self._write(b"X")
            self.wfile.flush()

    def _drip(self, script: Script) -> None:
        self._head(200, {"Content-Length": str(10**6)})
        while not script.stop.wait(1.0):  # one byte a second, until the test ends
            self._write(b"G")
            self.wfile.flush()


def _tree(script: Script) -> list[dict[str, Any]]:
    files = [{"type": "file", "path": "model-package.json", "size": len(script.manifest), "oid": "1" * 40}]
    for i in range(script.tree_files - 1):
        size = script.tree_size if i == 0 else script.file_bytes
        lfs = {"oid": f"{i:064x}", "size": size, "pointerSize": 130}
        files.append(
            {"type": "file", "path": f"layer-{i:03d}.gguf", "size": size, "oid": "2" * 40, "lfs": lfs}
        )
    return files


class Canary:
    """A loopback listener that must never be reached: counts connections and what they carried."""

    def __init__(self) -> None:
        self.hub = HostileHub(Script())
        self.url = self.hub.url

    @property
    def hits(self) -> list[Seen]:
        return self.hub.seen


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileHub]]:
    started: list[HostileHub] = []

    def start(**script: Any) -> HostileHub:
        server = HostileHub(Script(**script))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.hub.stop()


@pytest.fixture
def bounds(settings: Any) -> Any:
    """Small limits, so each attack is stopped in about a second (the defaults are in settings.py)."""
    settings.MESHDASH_HUB_DEV = True
    settings.MESHDASH_HUB_CALL_DEADLINE = 2
    settings.MESHDASH_HUB_READ_TIMEOUT = 5
    settings.MESHDASH_HUB_INGEST_DEADLINE = 30
    settings.MESHDASH_HUB_MAX_PAGES = 20
    settings.MESHDASH_HUB_MAX_LISTING_BYTES = 4 * MB
    settings.MESHDASH_MAX_REVISIONS = 50
    return settings


def source_for(server: HostileHub | str, **kwargs: Any) -> hub.HubSource:
    endpoint = server if isinstance(server, str) else server.url
    return hub.HubSource(REPO, endpoint=endpoint, max_retries=0, **kwargs)


def failed_ingest(server: HostileHub, raises: type[Exception] | None = None) -> Revision:
    """Ingest the hostile revision; it must end ``failed``, with its reason on the row."""
    if raises is None:
        ingest.ingest_revision(REPO, SHA, source=source_for(server))
    else:
        with pytest.raises(raises):
            ingest.ingest_revision(REPO, SHA, source=source_for(server))
    rev = Revision.objects.get(package__repo_id=REPO, commit_sha=SHA)
    assert rev.status == Revision.Status.FAILED
    return rev


def record(scenario: str, **figures: Any) -> None:
    """Append what an attack cost to var/hostile-hub-figures.jsonl (RELIABILITY.md quotes them)."""
    path = Path(__file__).resolve().parent.parent / "var" / "hostile-hub-figures.jsonl"
    path.parent.mkdir(exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps({"scenario": scenario, **figures}) + "\n")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.monotonic()
    try:
        result = fn()
    except Exception as exc:
        result = exc
    return time.monotonic() - began, result


# --- 1. Range ignored, 200 MB streamed ------------------------------------------------------------


def read_1_kib_of_a_range_ignoring_file(server: HostileHub) -> tuple[float, int, Any]:
    tracemalloc.start()
    try:
        seconds, data = timed(lambda: source_for(server).read_range(SHA, "layer-000.gguf", 0, 1024))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return seconds, peak, data


def test_a_server_ignoring_range_and_streaming_200_mb_costs_the_bytes_asked_for_not_the_body(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    server = hostile(ignore_range_body=200 * MB)
    seconds, peak, data = read_1_kib_of_a_range_ignoring_file(server)
    assert data == b"\0" * 1024
    assert peak < 4 * MB, peak
    assert seconds < 10, seconds  # loopback; the bound that matters is memory and bytes read
    time.sleep(0.2)
    assert server.bytes_sent < 16 * MB  # the socket was closed after the first chunk or so
    record(
        "range-ignored-200MB",
        seconds=round(seconds, 2),
        peak_mb=round(peak / MB, 1),
        sent_mb=round(server.bytes_sent / MB, 1),
    )


def test_control_reading_the_whole_body_then_slicing_takes_the_200_mb_into_memory(
    bounds: Any, hostile: Callable[..., HostileHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    def whole_body_then_slice(response: Any, skip: int, length: int) -> bytes:
        return bytes(response.read()[skip : skip + length])  # what hub.ranged_get did before

    monkeypatch.setattr(net, "_read_cut", whole_body_then_slice)
    bounds.MESHDASH_HUB_CALL_DEADLINE = 120  # time to take it all in
    server = hostile(ignore_range_body=200 * MB)
    seconds, peak, data = read_1_kib_of_a_range_ignoring_file(server)
    assert data == b"\0" * 1024
    assert peak > 200 * MB, peak
    record("range-ignored-200MB-control", seconds=round(seconds, 2), peak_mb=round(peak / MB, 1))


# --- 2. 1,447 pages of commits ----------------------------------------------------------------------


def test_commit_history_of_1447_pages_stops_at_the_revision_cap_without_asking_for_the_rest(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_MAX_REVISIONS = 10
    server = hostile(commit_pages=1447)
    seconds, commits = timed(lambda: source_for(server).list_commits(SHA))
    assert len(commits) == 10
    assert len(server.requests_to("/commits/")) == 10
    assert seconds < 20
    record("pagination-1447", requests=10, seconds=round(seconds, 2))


def test_pagination_past_the_page_cap_is_refused_with_a_reason(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_MAX_REVISIONS = 5000
    bounds.MESHDASH_HUB_MAX_PAGES = 20
    server = hostile(commit_pages=1447)
    with pytest.raises(hub.HubRefused, match="more than 20 requests"):
        source_for(server).list_commits(SHA)
    assert len(server.requests_to("/commits/")) == 20


def test_control_huggingface_hubs_own_listing_follows_all_1447_pages(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    from huggingface_hub import HfApi

    server = hostile(commit_pages=1447)
    seconds, commits = timed(lambda: HfApi(endpoint=server.url).list_repo_commits(REPO, revision=SHA))
    assert len(commits) == 1447
    assert len(server.requests_to("/commits/")) == 1447
    record("pagination-1447-control", requests=1447, seconds=round(seconds, 2))


# --- 3. a slow drip -------------------------------------------------------------------------------


@pytest.mark.parametrize("dripped", ["drip", "drip_headers"])
def test_a_slow_drip_of_one_byte_a_second_fails_at_the_call_deadline(
    bounds: Any, hostile: Callable[..., HostileHub], dripped: str
) -> None:
    server = hostile(**{dripped: True})  # the body after prompt headers, or the headers themselves
    seconds, outcome = timed(lambda: source_for(server).read_range(SHA, "layer-000.gguf", 0, 4096))
    assert isinstance(outcome, hub.HubUnavailable), outcome
    assert outcome.retryable
    assert 1.5 < seconds < 10, seconds  # the 2 s deadline, plus a loaded machine's slack
    record(f"slow-{dripped}", deadline_s=2, failed_after_s=round(seconds, 2))


def test_the_default_call_deadline_stops_a_drip_within_two_minutes() -> None:
    from django.conf import settings

    # Every socket read waits at most what is left of the call's deadline, so the deadline is the bound.
    assert settings.MESHDASH_HUB_CALL_DEADLINE < 120


def test_control_without_a_deadline_the_drip_is_still_being_read_seconds_later(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_HUB_CALL_DEADLINE = 3600
    server = hostile(drip=True)
    result: list[Any] = []
    reader = threading.Thread(
        target=lambda: result.append(
            timed(lambda: source_for(server).read_range(SHA, "layer-000.gguf", 0, 4096))
        ),
        daemon=True,
    )
    reader.start()
    reader.join(4)
    assert reader.is_alive()  # 4 s later, still reading a byte a second
    server.stop()  # ends the drip; the reader then fails on the closed connection
    reader.join(10)


# --- 4. Retry-After: 100000 -----------------------------------------------------------------------


def test_a_retry_after_of_100000_seconds_is_not_slept_on_and_is_capped_for_the_task(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    server = hostile(retry_after=100000)
    source = hub.HubSource(REPO, endpoint=server.url, max_retries=4)
    seconds, outcome = timed(lambda: source.read_range(SHA, "layer-000.gguf", 0, 4096))
    assert isinstance(outcome, hub.HubUnavailable), outcome
    assert seconds < 5  # no sleep: one request
    assert outcome.retry_after == 600
    assert tasks.retry_countdown(outcome, 0) == 600  # the task retries in 10 minutes, not 27 hours
    record("retry-after-100000", seconds=round(seconds, 3), task_countdown_s=600)


def test_control_huggingface_hubs_backoff_would_sleep_the_27_hours(
    bounds: Any, hostile: Callable[..., HostileHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub.utils import _http

    sleeps: list[float] = []

    def no_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        raise TimeoutError("the test stops the sleep")

    monkeypatch.setattr(_http.time, "sleep", no_sleep)
    monkeypatch.setattr(net, "_guard_response", lambda response: None)  # the guard off
    server = hostile(retry_after=100000)
    source = hub.HubSource(REPO, endpoint=server.url, max_retries=4)
    with pytest.raises(TimeoutError):
        source.read_range(SHA, "layer-000.gguf", 0, 4096)
    assert sleeps == [100001.0]


# --- 5. a redirect to a loopback canary ------------------------------------------------------------


def test_a_redirect_to_another_origin_is_refused_and_the_canary_never_hears_of_it(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary
) -> None:
    server = hostile(redirect_to=f"{canary.url}/latest/meta-data/")
    with pytest.raises(hub.HubRefused, match="refused to follow a link"):
        source_for(server).read_manifest(SHA)
    assert canary.hits == []


def test_an_ingest_redirected_to_a_canary_records_the_refusal_on_the_revision(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary, db: None
) -> None:
    rev = failed_ingest(hostile(redirect_to=f"{canary.url}/latest/meta-data/"))
    assert "refused to follow a link" in rev.error
    assert rev.manifest_bytes is None
    assert canary.hits == []


def test_control_without_the_origin_check_the_canary_is_fetched_and_stored_as_the_manifest(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(net.Policy, "check_url", lambda self, url: net.origin_of(url))
    server = hostile(redirect_to=f"{canary.url}/latest/meta-data/")
    data = source_for(server).read_manifest(SHA)
    assert b"from the inside" in data
    assert len(canary.hits) == 1


def test_a_private_address_is_refused_after_dns_resolution_outside_development() -> None:
    with pytest.raises(hub.HubRefused, match="loopback, link-local or private"):
        net.permitted_address("localhost", 443, development=False)
    for address in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "::1", "::ffff:127.0.0.1"):
        assert not net.is_public_address(address), address
    assert net.is_public_address("93.184.216.34")


def test_an_https_endpoint_on_loopback_is_refused_before_any_connection(
    settings: Any, canary: Canary
) -> None:
    settings.MESHDASH_HUB_DEV = False
    port = urlsplit(canary.url).port
    source = hub.HubSource(REPO, endpoint=f"https://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(hub.HubRefused, match="private address"):
        source.resolve_revision(None)
    plain = hub.HubSource(REPO, endpoint=canary.url, max_retries=0)
    with pytest.raises(hub.HubRefused, match="only https"):
        plain.resolve_revision(None)
    assert canary.hits == []


def test_control_a_development_endpoint_may_be_plain_http_on_loopback(settings: Any, canary: Canary) -> None:
    settings.MESHDASH_HUB_DEV = True
    assert hub.HubSource(REPO, endpoint=canary.url, max_retries=0).resolve_revision(None) == SHA
    assert len(canary.hits) == 1


# --- 6. a "next" link to another host, and the token ------------------------------------------------


def test_a_next_page_link_to_another_host_is_refused_and_the_token_stays_home(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary
) -> None:
    server = hostile(next_link_to=f"{canary.url}/steal?page=2")
    with pytest.raises(hub.HubRefused, match="refused to follow a link"):
        source_for(server, token=TOKEN).list_commits(SHA)
    assert server.requests_to("/commits/")[0].authorization == f"Bearer {TOKEN}"
    assert canary.hits == []


def test_a_next_link_to_an_allowed_cdn_origin_is_followed_without_the_token(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary
) -> None:
    bounds.MESHDASH_HUB_CDN_ORIGINS = [canary.url]
    server = hostile(next_link_to=f"{canary.url}/page2")
    source_for(server, token=TOKEN).list_commits(SHA)
    assert [hit.authorization for hit in canary.hits] == [""]


def test_control_without_dropping_credentials_the_next_link_host_receives_the_token(
    bounds: Any, hostile: Callable[..., HostileHub], canary: Canary, monkeypatch: pytest.MonkeyPatch
) -> None:
    bounds.MESHDASH_HUB_CDN_ORIGINS = [canary.url]
    monkeypatch.setattr(net, "drop_credentials", lambda request, origin, policy: None)
    server = hostile(next_link_to=f"{canary.url}/page2")
    source_for(server, token=TOKEN).list_commits(SHA)
    assert [hit.authorization for hit in canary.hits] == [f"Bearer {TOKEN}"]


# --- the real Hub's redirect to its CDN still works (devhub's second origin) --------------------------


@pytest.fixture
def cdn_devhub(devhub: DevHub, settings: Any) -> Iterator[DevHub]:
    settings.MESHDASH_HUB_CDN_ORIGINS = [devhub.cdn_url]
    devhub.redirect_to_cdn = True
    yield devhub
    devhub.redirect_to_cdn = False


def test_file_reads_redirected_to_the_cdn_origin_keep_their_range_and_lose_the_token(
    cdn_devhub: DevHub,
) -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=cdn_devhub.url, token=DEVHUB_TOKEN, max_retries=0)
    files = {f.path: f for f in source.list_files(QWEN35_FIRST_SHA)}
    layer = next(p for p in files if p.endswith(".gguf"))

    def cdn_requests() -> int:
        paths = cdn_devhub.counters.snapshot()["by_path"]
        return sum(v["requests"] for p, v in paths.items() if p.startswith("/blobs/"))

    before = cdn_requests()
    assert source.read_range(QWEN35_FIRST_SHA, layer, 0, 4) == b"GGUF"
    assert source.read_range(QWEN35_FIRST_SHA, layer, 1, 3) == b"GUF"  # the Range survived the redirect
    assert cdn_requests() == before + 2  # served by the CDN, which answers 400 to any Authorization


def test_a_whole_ingest_through_cdn_redirects_reads_every_header(cdn_devhub: DevHub, db: None) -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=cdn_devhub.url, max_retries=0)
    outcome = ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=source)
    assert outcome.revision.status == Revision.Status.DONE, outcome.revision.error
    assert outcome.revision.files.filter(header_status="parsed").count() >= 41


def test_control_a_cdn_origin_not_in_the_setting_is_refused(devhub: DevHub, settings: Any) -> None:
    settings.MESHDASH_HUB_CDN_ORIGINS = []
    devhub.redirect_to_cdn = True
    try:
        source = hub.HubSource(QWEN35_REPO, endpoint=devhub.url, max_retries=0)
        layer = next(f.path for f in source.list_files(QWEN35_FIRST_SHA) if f.path.endswith(".gguf"))
        with pytest.raises(hub.HubRefused, match="refused to follow a link"):
            source.read_range(QWEN35_FIRST_SHA, layer, 0, 4)
    finally:
        devhub.redirect_to_cdn = False


# --- 7. numbers out of range, too many files, too many tensors, the ingest budget ---------------------


def test_a_file_size_of_10_to_the_30_is_a_problem_on_the_revision_not_an_internal_error(
    bounds: Any, hostile: Callable[..., HostileHub], db: None
) -> None:
    rev = failed_ingest(hostile(tree_size=10**30), hub.HubRefused)
    assert "claims a size of 1000000000000000000000000000000 bytes" in rev.error
    assert "internal error" not in rev.error


def test_control_without_the_size_check_10_to_the_30_is_an_internal_error(
    bounds: Any, hostile: Callable[..., HostileHub], transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packages_app.hub import client

    monkeypatch.setattr(client, "MAX_FILE_SIZE", 10**40)
    rev = failed_ingest(hostile(tree_size=10**30), Exception)  # whatever the database raises
    assert rev.error.startswith("internal error")


def test_a_manifest_number_1e999999_is_a_problem_on_the_revision(
    bounds: Any, hostile: Callable[..., HostileHub], db: None
) -> None:
    rev = failed_ingest(hostile(manifest=b'{"schema_version": 1, "layers": [], "n_embd": 1e999999}'))
    assert "holds the number 1e999999, which overflows" in rev.error
    assert bytes(rev.manifest_bytes).endswith(b"1e999999}")  # the bytes are kept


def test_control_decoding_1e999999_as_infinity_crashes_the_ingest(
    bounds: Any, hostile: Callable[..., HostileHub], transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "_decode_manifest", lambda data: (json.loads(data), None))
    manifest = b'{"schema_version": 1, "layers": [], "n_embd": 1e999999}'
    rev = failed_ingest(hostile(manifest=manifest), Exception)  # whatever the database raises on Infinity
    assert rev.error.startswith("internal error")


def test_more_files_than_the_cap_is_a_problem_on_the_revision(
    bounds: Any, hostile: Callable[..., HostileHub], db: None
) -> None:
    bounds.MESHDASH_MAX_FILES = 100
    rev = failed_ingest(hostile(tree_files=150), hub.HubRefused)
    assert "more than 100 files" in rev.error and "MESHDASH_MAX_FILES" in rev.error
    assert rev.files.count() == 0


def test_control_under_a_higher_file_cap_all_150_files_are_stored(
    bounds: Any, hostile: Callable[..., HostileHub], db: None
) -> None:
    bounds.MESHDASH_MAX_FILES = 1000
    server = hostile(tree_files=150)
    ingest.ingest_revision(REPO, SHA, source=source_for(server))
    assert Revision.objects.get(commit_sha=SHA).files.count() == 150


def test_a_manifest_with_more_artifacts_than_the_cap_is_refused_before_the_audit(
    bounds: Any, hostile: Callable[..., HostileHub], db: None
) -> None:
    bounds.MESHDASH_MAX_MANIFEST_ARTIFACTS = 100
    layers = [{"index": i, "path": f"layer-{i:03d}.gguf"} for i in range(500)]
    rev = failed_ingest(
        hostile(manifest=json.dumps({"schema_version": 1, "layers": layers}).encode()), hub.HubRefused
    )
    assert "lists 500 artifacts; meshdash reads at most 100" in rev.error
    assert rev.audit in (None, {}) and rev.manifest_json is None and rev.manifest_bytes is not None


def gguf_claiming_tensors(count: int) -> bytes:
    import struct

    return b"GGUF" + struct.pack("<IQQ", 3, count, 0)


def test_a_file_claiming_more_tensors_than_the_cap_is_a_problem_on_that_file(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_MAX_TENSORS_PER_FILE = 1000
    server = hostile()
    source = source_for(server)
    source.read_range = lambda sha, path, start, length: gguf_claiming_tensors(5000)[start : start + length]  # type: ignore[method-assign]
    result = hub.read_header(source, SHA, "layer-000.gguf")
    assert result.error_code == "limit_exceeded" and "5000" in result.error


def test_control_the_parsers_own_tensor_limit_lets_5000_through(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_MAX_TENSORS_PER_FILE = 65536
    source = source_for(hostile())
    source.read_range = lambda sha, path, start, length: gguf_claiming_tensors(5000)[start : start + length]  # type: ignore[method-assign]
    assert hub.read_header(source, SHA, "layer-000.gguf").error_code != "limit_exceeded"


def test_the_header_bytes_of_a_revision_are_capped(bounds: Any, hostile: Callable[..., HostileHub]) -> None:
    bounds.MESHDASH_MAX_HEADER_BYTES = 10_000
    source = source_for(hostile())
    for _ in range(3):
        source.read_range(SHA, "layer-000.gguf", 0, 4096)
    with pytest.raises(hub.HubRefused, match="MESHDASH_MAX_HEADER_BYTES"):
        source.read_range(SHA, "layer-000.gguf", 0, 4096)


def test_an_ingest_whose_hub_budget_ran_out_stops_with_the_reason(
    bounds: Any, hostile: Callable[..., HostileHub]
) -> None:
    bounds.MESHDASH_HUB_INGEST_DEADLINE = 1
    source = source_for(hostile())
    source.read_range(SHA, "layer-000.gguf", 0, 16)
    time.sleep(1.1)
    with pytest.raises(hub.HubRefused, match="budget for this ingest's Hub requests ran out"):
        source.read_range(SHA, "layer-000.gguf", 0, 16)


# --- 8. bad repo ids in discover ----------------------------------------------------------------------


@pytest.fixture
def namespace_with_bad_ids(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed = ["meshllm/a--b-layers", "meshllm/Good-layers", "meshllm/..-layers", "meshllm/Fine-layers"]

    class Sibling:
        rfilename = "model-package.json"

    class Model:
        def __init__(self, repo_id: str) -> None:
            self.id = repo_id
            self.siblings = [Sibling()]  # the listing (full) names each repo's files

    monkeypatch.setattr(hub.client.HfApi, "list_models", lambda self, **kw: iter(Model(r) for r in listed))
    return listed


def test_discover_skips_and_reports_bad_repo_ids_and_tracks_the_rest(
    namespace_with_bad_ids: list[str], db: None
) -> None:
    skipped: list[tuple[str, str]] = []
    discovery = tracking.discover_packages(
        ["meshllm"], None, lambda repo_id, reason: skipped.append((repo_id, reason))
    )
    assert discovery.found == discovery.tracked == ["meshllm/Fine-layers", "meshllm/Good-layers"]
    assert sorted(Package.objects.values_list("repo_id", flat=True)) == discovery.found
    assert [r for r, _ in skipped] == ["meshllm/a--b-layers", "meshllm/..-layers"]
    assert all("cannot contain" in reason for _, reason in skipped)


def test_control_tracking_the_listed_bad_id_directly_raises_which_used_to_stop_discover(db: None) -> None:
    with pytest.raises(hub.InvalidRepoId):
        tracking.track_package("meshllm/a--b-layers")
