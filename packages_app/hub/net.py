"""Bounded outbound HTTP: the session huggingface_hub uses, and the one ranged GET for the Hub and plain URLs.

huggingface_hub reads everything through one shared httpx2 client; ``install_session`` replaces its
factory (``set_client_factory``, the library's own hook) with a client whose every request, whoever
makes it, is bounded:

- connect and read timeouts on every socket operation, whatever timeout the caller passed
  (huggingface_hub passes ``timeout=None``), and a deadline per call: a slow drip fails at the deadline;
- bodies counted as they stream and refused past a cap; unasked-for compression refused;
- a Retry-After (or rate-limit reset) longer than a few seconds is not slept on inside the worker:
  the call fails as retryable, carrying the wait (capped), for the task to retry later.

Inside a ``bounded_call`` (every call of ``client`` and ``sources``) the call's ``Policy`` also holds:
requests, redirects and pagination links go only to the configured endpoint's origin and its CDN
origins; only https unless the endpoint is an explicitly configured development server; never to a
loopback, link-local or private address after DNS resolution (the socket connects to the address that
was checked, so a second DNS answer cannot swap it); the Authorization header only to the endpoint's
origin; and a cap on requests and bytes per call (pagination).

Imports nothing from Django.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, but not re-exported for mypy
    hf_raise_for_status,
    http_stream_backoff,
    parse_ratelimit_headers,
    set_client_factory,
)
from huggingface_hub.utils._http import hf_request_event_hook

from packages_app import metrics
from packages_app.hub.errors import (
    EXPECTED_ERRORS,
    RETRY_STATUS,
    HubError,
    HubRefused,
    HubUnavailable,
    retry_after,
    translate,
)

MiB = 1024 * 1024
DRAIN_SLACK = 64 * 1024  # bytes past a ranged read's length still read, to keep the connection
Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}

# Where the real Hub sends file reads (LFS and Xet storage): the default CDN origins.
HUB_CDN_ORIGINS = (
    "https://cdn-lfs.huggingface.co",
    "https://cdn-lfs.hf.co",
    "https://cdn-lfs-us-1.hf.co",
    "https://cdn-lfs-eu-1.hf.co",
    "https://cas-bridge.xethub.hf.co",
)


@dataclass(frozen=True)
class Limits:
    """Every bound on outbound HTTP; ``client.limits_from_settings`` fills it from Django settings."""

    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    call_deadline: float = 90.0  # one call: its retries, redirects and pages together
    ingest_deadline: float = 480.0  # everything one source does (one ingest), under Celery's soft limit
    max_retry_after: float = 600.0  # a longer Retry-After is cut to this
    inline_retry_after: float = 5.0  # waits up to this are slept in-process; longer ones go to the task
    max_response_bytes: int = 32 * MiB  # one response body (JSON pages); ranged reads stop at their length
    max_pages: int = 100  # requests of one listing (pagination)
    max_listing_bytes: int = 64 * MiB  # bytes of one listing, all pages together


DEFAULT_LIMITS = Limits()


def origin_of(url: str) -> Origin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme, 0))


def show_origin(origin: Origin) -> str:
    return f"{origin[0]}://{origin[1]}:{origin[2]}"


@dataclass(frozen=True)
class Policy:
    """Where one source may send requests, and with which limits."""

    endpoint: Origin
    cdn: frozenset[Origin] = frozenset()
    development: bool = False  # plain http and private addresses allowed (devhub)
    limits: Limits = DEFAULT_LIMITS

    @classmethod
    def for_endpoint(
        cls, endpoint: str, cdn: Iterable[str] = HUB_CDN_ORIGINS, *, development: bool, limits: Limits
    ) -> Policy:
        origins = frozenset(origin_of(c) for c in cdn)
        return cls(origin_of(endpoint), origins, development, limits)

    def check_url(self, url: str) -> Origin:
        """Refuse a URL outside the endpoint and its CDN, or over plain http outside development."""
        origin = origin_of(url)
        if origin != self.endpoint and origin not in self.cdn:
            raise HubRefused(
                f"refused to follow a link to {show_origin(origin)}: only the Hub endpoint "
                f"{show_origin(self.endpoint)} and its CDN origins are fetched"
            )
        if origin[0] != "https" and not self.development:
            raise HubRefused(
                f"refused plain {origin[0]} to {show_origin(origin)}: only https, unless the endpoint "
                "is a development server (MESHDASH_HUB_DEV=1)"
            )
        return origin


@dataclass
class Call:
    """One bounded call (a file read, a listing): its policy, deadline and what it has spent."""

    policy: Policy
    what: str
    deadline: float
    max_requests: int | None = None
    max_bytes: int | None = None
    requests: int = 0
    bytes: int = 0

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("hub_call", default=None)
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("hub_deadline", default=None)
_DEFAULT_POLICY_LIMITS: list[Limits] = [DEFAULT_LIMITS]  # requests made outside any bounded call
_SENT_AT: contextvars.ContextVar[float | None] = contextvars.ContextVar("hub_sent_at", default=None)


@contextmanager
def bounded_call(
    policy: Policy,
    what: str,
    *,
    budget_deadline: float | None = None,
    max_requests: int | None = None,
    max_bytes: int | None = None,
) -> Iterator[Call]:
    """Run the requests of one call under ``policy``, within ``call_deadline`` and ``budget_deadline``."""
    deadline = time.monotonic() + policy.limits.call_deadline
    if budget_deadline is not None:
        if budget_deadline <= time.monotonic():
            budget = policy.limits.ingest_deadline
            raise HubRefused(f"{what}: the {budget:.0f} s budget for this ingest's Hub requests ran out")
        deadline = min(deadline, budget_deadline)
    call = Call(policy, what, deadline, max_requests, max_bytes)
    token = _CALL.set(call)
    deadline_token = _DEADLINE.set(deadline)  # every socket of the call; ends with the call
    try:
        yield call
    except HubError as exc:  # refusals from the socket layer do not know what was asked for: say it
        metrics.HUB_ERRORS.labels(error_kind(exc)).inc()
        if str(exc).startswith(what):
            raise
        raise _naming(exc, what) from exc
    finally:
        _DEADLINE.reset(deadline_token)
        _CALL.reset(token)


def error_kind(exc: HubError) -> str:
    """HubUnavailable -> "unavailable": the metric label of an error (a closed list: the error classes)."""
    name = type(exc).__name__.removeprefix("Hub")
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-") or "error"


def _naming(exc: HubError, what: str) -> HubError:
    if isinstance(exc, HubUnavailable):
        return HubUnavailable(f"{what}: {exc}", exc.retry_after)
    return type(exc)(f"{what}: {exc}")


# --- the hooks ------------------------------------------------------------------------------------


def _limits() -> Limits:
    call = _CALL.get()
    return call.policy.limits if call is not None else _DEFAULT_POLICY_LIMITS[0]


def _guard_request(request: httpx2.Request) -> None:
    """Every request and redirect hop: deadline, request cap, allowed origin, who gets the token."""
    hf_request_event_hook(request)
    request.headers["Accept-Encoding"] = "identity"  # counted bytes are the bytes kept
    _SENT_AT.set(time.monotonic())
    call = _CALL.get()
    if call is None:  # its deadline is the one ``_BoundedClient.send`` set around it
        return
    if call.remaining() <= 0:
        raise HubUnavailable(
            f"{call.what}: no answer within the {call.policy.limits.call_deadline:.0f} s deadline"
        )
    call.requests += 1
    if call.max_requests is not None and call.requests > call.max_requests:
        raise HubRefused(f"{call.what}: more than {call.max_requests} requests (pages or redirects); stopped")
    origin = call.policy.check_url(str(request.url))
    drop_credentials(request, origin, call.policy)


def drop_credentials(request: httpx2.Request, origin: Origin, policy: Policy) -> None:
    """The token goes only to the endpoint's origin: never to the CDN, never along a pagination link."""
    if origin != policy.endpoint:
        request.headers.pop("Authorization", None)


def _guard_response(response: httpx2.Response) -> None:
    """Every response: no long sleeps on Retry-After, no unasked compression, a capped streamed body."""
    _count_response(response)
    call = _CALL.get()
    limits = _limits()
    what = call.what if call is not None else str(response.request.url)
    if response.status_code in RETRY_STATUS:
        wait = _server_wait(response.headers, limits.max_retry_after)
        if wait is not None and wait > limits.inline_retry_after:
            raise HubUnavailable(
                f"{what}: the Hub answered {response.status_code} and asks to wait {wait:.0f} s", wait
            )
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise HubRefused(f"{what}: the answer is {encoding}-compressed, which was not asked for")
    # A ranged read stops at its own length (``ranged_get``); other bodies of our calls are capped here.
    ranged = "Range" in response.request.headers or response.request.method == "HEAD"
    cap = None if call is None or ranged else limits.max_response_bytes
    declared = response.headers.get("Content-Length", "")
    if cap is not None and declared.isdigit() and int(declared) > cap:
        raise HubRefused(f"{what}: the answer is {declared} bytes, over the {cap}-byte cap")
    response.stream = _CappedStream(response.stream, call, cap, what)


def _server_wait(headers: httpx2.Headers, cap: float) -> float | None:
    info = parse_ratelimit_headers(headers)
    if info is not None and info.remaining == 0:
        return min(float(info.reset_in_seconds), cap)
    return retry_after(headers, cap)


class _CappedStream(httpx2.SyncByteStream):
    """A response body counted as it streams: refused past the response cap or the call's byte budget."""

    def __init__(self, inner: Any, call: Call | None, cap: int | None, what: str) -> None:
        self.inner = inner
        self.call = call
        self.cap = cap
        self.what = what
        self.seen = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.seen += len(chunk)
            if self.call is not None:
                self.call.bytes += len(chunk)
                if self.call.max_bytes is not None and self.call.bytes > self.call.max_bytes:
                    raise HubRefused(f"{self.what}: more than {self.call.max_bytes} bytes in all; stopped")
            if self.cap is not None and self.seen > self.cap:
                raise HubRefused(f"{self.what}: an answer of more than {self.cap} bytes; stopped")
            yield chunk

    def close(self) -> None:
        self.inner.close()


# --- the sockets ------------------------------------------------------------------------------------


@contextmanager
def exchange_deadline(seconds: float) -> Iterator[float]:
    """Every connect, read and write made through ``connect_bounded`` in this block stops at the deadline:
    the whole exchange, connect, headers and body, however slowly the peer drips its answer. The one
    deadline helper for every outbound exchange (a Hub call's, ``bounded_call``, is set and reset the same
    way). Inside another exchange's deadline the earlier of the two holds: a deadline ends with the block
    that set it, so the only one still set is an enclosing block's, never a finished call's."""
    deadline = time.monotonic() + seconds
    enclosing = _DEADLINE.get()
    if enclosing is not None:
        deadline = min(deadline, enclosing)
    token = _DEADLINE.set(deadline)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)


def connect_bounded(
    backend: httpcore2.SyncBackend,
    address: str,
    port: int,
    timeout: float | None,
    local_address: str | None = None,
    socket_options: Iterable[Any] | None = None,
) -> httpcore2.NetworkStream:
    """A socket connected within the connect timeout and the deadline, whose every read and write is
    bounded by the read timeout and the deadline (``exchange_deadline``, or the Hub call's)."""
    bound = _bounded_timeout(timeout, _limits().connect_timeout)
    if bound <= 0:
        raise httpcore2.ConnectTimeout("the deadline passed before connecting")
    stream = httpcore2.SyncBackend.connect_tcp(backend, address, port, bound, local_address, socket_options)
    return _DeadlineStream(stream)


def _bounded_timeout(given: float | None, cap: float) -> float:
    deadline = _DEADLINE.get()
    bound = cap if given is None else min(given, cap)
    if deadline is not None:
        bound = min(bound, deadline - time.monotonic())
    return bound


class _DeadlineStream(httpcore2.NetworkStream):
    """A socket whose every read and write stops at the read timeout and at the call's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bound = _bounded_timeout(timeout, _limits().read_timeout)
        if bound <= 0:
            raise httpcore2.ReadTimeout("the call's deadline passed while reading")
        return self.inner.read(max_bytes, bound)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        bound = _bounded_timeout(timeout, _limits().read_timeout)
        if bound <= 0:
            raise httpcore2.WriteTimeout("the call's deadline passed while writing")
        self.inner.write(buffer, bound)

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        bound = _bounded_timeout(timeout, _limits().connect_timeout)
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, max(bound, 0.001)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


def is_public_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def permitted_address(host: str, port: int, development: bool) -> str:
    """The address to connect to: resolved once and checked, so the check and the connection agree."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore2.ConnectError(f"{host}: {exc}") from exc
    addresses = [str(info[4][0]) for info in infos]
    if development:
        return addresses[0]
    for address in addresses:
        if is_public_address(address):
            return address
    raise HubRefused(
        f"refused to connect to {host} ({', '.join(sorted(set(addresses)))}): a loopback, link-local "
        "or private address (allowed only for a development endpoint, MESHDASH_HUB_DEV=1)"
    )


def _count_response(response: httpx2.Response) -> None:
    request = response.request
    kind = metrics.hub_kind(request.url.path, "Range" in request.headers)
    metrics.HUB_REQUESTS.labels(kind, metrics.status_class(response.status_code)).inc()
    sent_at = _SENT_AT.get()
    if sent_at is not None:
        metrics.HUB_SECONDS.labels(kind).observe(time.monotonic() - sent_at)


class _GuardedBackend(httpcore2.SyncBackend):
    """Connections checked against the call's policy and bounded by the connect timeout."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        call = _CALL.get()
        address = host if call is None else permitted_address(host, port, call.policy.development)
        return connect_bounded(self, address, port, timeout, local_address, socket_options)


class _BoundedClient(httpx2.Client):
    """A request made outside any ``bounded_call`` (huggingface_hub's own) gets a call's deadline of its
    own, over its redirects too, which ends when ``send`` returns (a streamed body read later is bounded by
    the read timeout)."""

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        if _DEADLINE.get() is not None:  # inside a bounded call or an exchange: that deadline holds
            return super().send(request, **kwargs)
        token = _DEADLINE.set(time.monotonic() + _limits().call_deadline)
        try:
            return super().send(request, **kwargs)
        finally:
            _DEADLINE.reset(token)


def make_client() -> httpx2.Client:
    """huggingface_hub's shared client, with the guards (no proxies from the environment: the address
    check must see the real peer)."""
    transport = httpx2.HTTPTransport(trust_env=False)
    transport._pool = httpcore2.ConnectionPool(  # the only way to give httpx2 a network backend
        ssl_context=httpx2.create_ssl_context(), network_backend=_GuardedBackend()
    )
    return _BoundedClient(
        transport=transport,
        trust_env=False,
        # Looked up at each call, so a test can switch one guard off to show what it stops.
        event_hooks={"request": [lambda r: _guard_request(r)], "response": [lambda r: _guard_response(r)]},
        follow_redirects=True,
        max_redirects=5,
        timeout=httpx2.Timeout(DEFAULT_LIMITS.read_timeout, connect=DEFAULT_LIMITS.connect_timeout),
    )


def install_session(default_limits: Limits | None = None) -> None:
    """Make huggingface_hub (and ``ranged_get``) use the guarded client."""
    if default_limits is not None:
        _DEFAULT_POLICY_LIMITS[0] = default_limits
    set_client_factory(make_client)


# --- the one ranged GET -------------------------------------------------------------------------


def ranged_get(
    url: str, start: int, length: int, *, headers: dict[str, str], what: str, max_retries: int = 4
) -> bytes:
    """Bytes [start, start+length) of ``url``, streamed and cut at ``length`` even if Range is ignored.

    429/5xx are retried in-process only for short waits (the response hook turns long ones into a
    retryable error); timeouts are not retried here: the call's deadline already bounds them.
    """
    if length <= 0:
        return b""
    try:
        with http_stream_backoff(
            "GET",
            url,
            headers={**headers, "Range": f"bytes={start}-{start + length - 1}"},
            max_retries=max_retries,
            base_wait_time=0.5,
            max_wait_time=_limits().inline_retry_after,
            retry_on_exceptions=(httpx2.ConnectError, httpx2.RemoteProtocolError),
            retry_on_status_codes=RETRY_STATUS,
        ) as response:
            if response.status_code == 416:  # asked past the end of the file
                return b""
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            skip = start if response.status_code == 200 else 0  # the server ignored Range
            return _read_cut(response, skip, length)
    except EXPECTED_ERRORS as exc:
        raise translate(exc, what, max_retry_after=_limits().max_retry_after) from exc


def _read_cut(response: httpx2.Response, skip: int, length: int) -> bytes:
    """Stream the body, drop the first ``skip`` bytes, keep ``length``, and stop reading there.

    A body that ends within ``DRAIN_SLACK`` bytes after that is read to its end, so the connection
    goes back to the pool; a longer one (a server ignoring Range) is cut and its connection closed.
    """
    kept = bytearray()
    extra = 0
    for chunk in response.iter_raw():
        if skip:
            dropped = min(skip, len(chunk))
            chunk, skip = chunk[dropped:], skip - dropped
        room = length - len(kept)
        kept += chunk[:room]
        extra += max(0, len(chunk) - room)
        if extra > DRAIN_SLACK:
            break
    return bytes(kept)
