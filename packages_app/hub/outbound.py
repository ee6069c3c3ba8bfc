"""Outbound exchanges with receivers that are not the Hub (notification webhooks, the SMTP server), on the
Hub client's rules.

The same guards as every Hub request (net.py): the address is resolved once and checked before the
socket connects to it (no loopback, link-local or private address unless the receiver is allowed one,
so a DNS answer cannot switch it afterwards), no proxy from the environment, a connect timeout, a read
timeout, a deadline over the whole exchange (``net.exchange_deadline``: every connect, read and write of
the socket stops at it, so a receiver that drips its headers a byte at a time is cut at the deadline,
not at the worker's time limit), a capped response body, and no redirects followed (a receiver cannot
bounce the signed body to another host).

Mail goes through smtplib on the same socket (``BoundedSMTP``: ``connect_bounded``), so inside an
``exchange_deadline`` a mail server that drips its greeting or its replies is cut at that one deadline, not
only at ``EMAIL_TIMEOUT`` per socket operation. The SMTP server is the operator's own setting: no address
check.
"""

from __future__ import annotations

import io
import smtplib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore2
import httpx2

from packages_app.hub.errors import HubRefused
from packages_app.hub.net import connect_bounded, exchange_deadline, permitted_address

MAX_RESPONSE_BYTES = 64 * 1024
T = TypeVar("T")


@dataclass(frozen=True)
class OutboundLimits:
    connect_timeout: float = 5.0
    read_timeout: float = 5.0
    deadline: float = 15.0  # the whole exchange (connect, headers, body), however slowly the receiver drips


class DeliveryFailed(Exception):
    """A POST that did not deliver; ``retryable`` when trying again later may succeed."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class _CheckedBackend(httpcore2.SyncBackend):
    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.NetworkStream:
        address = permitted_address(host, port, self.allow_private)
        return connect_bounded(self, address, port, timeout, local_address, socket_options)


def _client(allow_private: bool, limits: OutboundLimits) -> httpx2.Client:
    transport = httpx2.HTTPTransport(trust_env=False)
    transport._pool = httpcore2.ConnectionPool(  # as net.make_client: the only way to set the backend
        ssl_context=httpx2.create_ssl_context(), network_backend=_CheckedBackend(allow_private)
    )
    timeout = httpx2.Timeout(limits.read_timeout, connect=limits.connect_timeout)
    return httpx2.Client(transport=transport, trust_env=False, follow_redirects=False, timeout=timeout)


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    allow_private: bool = False,
    limits: OutboundLimits | None = None,
) -> int:
    """POST ``body`` to ``url``; the status when it is 2xx, else DeliveryFailed."""
    limits = limits or OutboundLimits()
    if not url.startswith(("https://", "http://")):
        raise DeliveryFailed("the URL must start with https:// or http://", retryable=False)
    try:
        with (
            exchange_deadline(limits.deadline),
            _client(allow_private, limits) as client,
            client.stream("POST", url, content=body, headers=headers) as r,
        ):
            _drain(r)
            status = r.status_code
    except HubRefused as exc:
        raise DeliveryFailed(
            str(exc).replace("a development endpoint, MESHDASH_HUB_DEV=1", "a channel that allows them"),
            retryable=False,
        ) from None
    except (httpx2.TimeoutException, httpcore2.TimeoutException) as exc:
        raise DeliveryFailed(f"no answer in time ({type(exc).__name__})", retryable=True) from None
    except (httpx2.HTTPError, httpcore2.NetworkError, httpcore2.ProtocolError, OSError) as exc:
        raise DeliveryFailed(f"could not deliver: {exc}", retryable=True) from None
    return _judged(status)


def _drain(response: httpx2.Response) -> None:
    """Read the answer's body up to the cap; its status is what counts, and it came (a body dripped past
    the deadline ends the read, not the delivery: the message was taken)."""
    read = 0
    try:
        for chunk in response.iter_raw():  # each read stops at the exchange's deadline
            read += len(chunk)
            if read > MAX_RESPONSE_BYTES:
                break
    except (httpx2.TimeoutException, httpcore2.TimeoutException):
        return


def _judged(status: int) -> int:
    if 200 <= status < 300:
        return status
    if status == 429 or status >= 500:
        raise DeliveryFailed(f"the receiver answered {status}", retryable=True)
    if 300 <= status < 400:
        raise DeliveryFailed(f"the receiver answered {status} (a redirect, not followed)", retryable=False)
    raise DeliveryFailed(f"the receiver answered {status}", retryable=False)


# --- mail -------------------------------------------------------------------------------------------------


class _StreamFile(io.RawIOBase):
    """smtplib reads its replies line by line from ``makefile('rb')``: this file reads the bounded stream."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = _socket_errors(lambda: self.stream.read(len(buffer)))
        buffer[: len(data)] = data
        return len(data)


class _StreamSocket:
    """The part of a socket smtplib uses (``sendall``, ``makefile``, ``close``), on a bounded stream; a
    timeout or a network error of the stream is the ``OSError`` smtplib and its callers expect."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self.stream = stream

    def sendall(self, data: bytes) -> None:
        _socket_errors(lambda: self.stream.write(bytes(data)))

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        return io.BufferedReader(_StreamFile(self.stream))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, context: ssl.SSLContext, server_hostname: str) -> _StreamSocket:
        return _StreamSocket(_socket_errors(lambda: self.stream.start_tls(context, server_hostname)))


def _socket_errors(operation: Callable[[], T]) -> T:
    try:
        return operation()
    except httpcore2.TimeoutException as exc:
        raise TimeoutError(f"no answer in time ({type(exc).__name__})") from None
    except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
        raise OSError(str(exc) or type(exc).__name__) from None


class _TlsUpgrade:
    """What ``smtplib.SMTP.starttls`` calls ``wrap_socket`` on: TLS started on the bounded stream."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context

    def wrap_socket(self, sock: _StreamSocket, server_hostname: str) -> _StreamSocket:
        return sock.start_tls(self.context, server_hostname)


class BoundedSMTP(smtplib.SMTP):
    """smtplib's SMTP whose socket is ``connect_bounded``'s: every connect, read and write stops at the
    per-operation timeout and at the enclosing ``exchange_deadline``."""

    def _get_socket(self, host: str, port: int, timeout: float | None) -> Any:
        backend = httpcore2.SyncBackend()
        return _StreamSocket(_socket_errors(lambda: connect_bounded(backend, host, port, timeout)))

    def starttls(self, *args: Any, context: ssl.SSLContext | None = None, **kwargs: Any) -> tuple[int, bytes]:
        upgrade: Any = _TlsUpgrade(context or ssl.create_default_context())  # smtplib calls wrap_socket only
        reply: tuple[int, bytes] = super().starttls(context=upgrade)
        return reply


class BoundedSMTPS(BoundedSMTP):
    """SMTP over TLS from the first byte (``EMAIL_USE_SSL``), on the same bounded socket."""

    def __init__(self, *args: Any, context: ssl.SSLContext | None = None, **kwargs: Any) -> None:
        self.context = context or ssl.create_default_context()
        super().__init__(*args, **kwargs)

    def _get_socket(self, host: str, port: int, timeout: float | None) -> Any:
        return super()._get_socket(host, port, timeout).start_tls(self.context, host)
