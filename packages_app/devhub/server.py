"""devhub's HTTP side: a local, Hub-compatible server (the routes huggingface_hub uses) over a devhub root.

It speaks the read part of the Hub API - repo listing and info, refs, commits, tree,
paths-info, and `resolve` downloads with byte ranges - from the records and sparse blobs in
`store.py`, with the Hub's error codes (`X-Error-Code`) and auth behaviour for private and gated
repos. It also speaks the write routes of `docs/domain.md` section 8, answering with the shapes the Hub's
OpenAPI description gives (`tests/test_devhub_conformance.py` validates each): `preupload` (every file
`regular`: devhub takes no LFS upload), `commit/<rev>` (NDJSON, regular files only) to a branch, to
`refs/pr/N` (a new commit on an open or draft PR), or with `create_pr=1` a new PR made from `parentCommit`
(5 to 40 hex digits, as huggingface_hub sends it); `discussions` (list with the Hub's filters, create a
discussion or a draft PR, details with the diff), and on one discussion `comment`, `title`, `status`
(with an optional comment), `merge` (with an optional comment; a new commit on the target branch) and
`comment/<id>/edit` / `hide`. What the Hub leaves undocumented (statuses, merge commits, hidden comments,
which webhook each change sends) is assumed as `discussions.py` says. Writes need a token (``token`` or one
of ``users``, whose name authors what it writes); any known user may change any discussion except edit
another's comment; writes live in memory (a restart forgets them) and are announced to ``on_event`` as
the Hub's webhook payloads (version 3). URLs of datasets carry `/datasets/`.
It counts requests and bytes per path and can be scripted to fail (429/5xx + Retry-After).
Like the real Hub, it can answer LFS file reads with a redirect to a second origin (its "CDN", another
port): a signed URL that keeps the Range, refuses an Authorization header (as S3 does) and needs no
token. It must not import huggingface_hub: it is what that client talks to.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import logging
import queue
import re
import threading
from base64 import b64decode
from binascii import Error as Base64Error
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from . import discussions
from .discussions import CLOSED_STATUSES, OPEN_STATUSES, Discussion, repo_web_url
from .generator import DEVHUB_TOKEN
from .store import Commit, FileEntry, RepoRecord, Store, git_blob_sha1

logger = logging.getLogger(__name__)

MAX_RANGE_BYTES = 64 << 20  # one response never carries more than this from a ranged read
MAX_BODY_BYTES = 1 << 20
MAX_PATHS = 1000
_CHUNK = 1 << 20
_RANGE = re.compile(r"^bytes=(\d{0,19})-(\d{0,19})$")  # bounded: int() of huge digit strings raises
_INVALID_TOKEN = "Invalid credentials in Authorization header"  # noqa: S105 - the Hub's message
MAX_COMMIT_FILES = 100  # one devhub commit; the manifest fix is one
EventFn = Callable[[dict[str, Any]], None]


class HubError(Exception):
    """An error answered the way the Hub answers it: status, `X-Error-Code`, JSON `{"error": ...}`."""

    def __init__(
        self, status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


# --- counters and scripted faults -------------------------------------------------------------


@dataclass
class PathStats:
    requests: int = 0
    bytes: int = 0


@dataclass
class Counters:
    """Requests and body bytes served, in total and per URL path (query string excluded)."""

    requests: int = 0
    bytes_served: int = 0
    api_requests: int = 0
    resolve_requests: int = 0
    by_path: dict[str, PathStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count_request(self, path: str) -> None:
        with self._lock:
            self.requests += 1
            if "/resolve/" in path:
                self.resolve_requests += 1
            elif path.startswith("/api/"):
                self.api_requests += 1
            self.by_path.setdefault(path, PathStats()).requests += 1

    def count_bytes(self, path: str, n: int) -> None:
        with self._lock:
            self.bytes_served += n
            self.by_path.setdefault(path, PathStats()).bytes += n

    def reset(self) -> None:
        with self._lock:
            self.requests = self.bytes_served = self.api_requests = self.resolve_requests = 0
            self.by_path.clear()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "bytes_served": self.bytes_served,
                "api_requests": self.api_requests,
                "resolve_requests": self.resolve_requests,
                "by_path": {p: {"requests": s.requests, "bytes": s.bytes} for p, s in self.by_path.items()},
            }


@dataclass
class _Fault:
    status: int
    remaining: int
    retry_after: int | None
    match: str


class FaultPlan:
    """Scripted failures: the next `count` requests whose path contains `match` get `status`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []

    def add(self, status: int = 429, count: int = 1, *, retry_after: int | None = 1, match: str = "") -> None:
        with self._lock:
            self._faults.append(_Fault(status, count, retry_after, match))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, path: str) -> HubError | None:
        with self._lock:
            fault = next((f for f in self._faults if f.remaining > 0 and f.match in path), None)
            if fault is None:
                return None
            fault.remaining -= 1
        return _fault_error(fault)


def _fault_error(fault: _Fault) -> HubError:
    headers = {}
    if fault.retry_after is not None:
        headers["Retry-After"] = str(fault.retry_after)
    if fault.status == 429:
        resource = "resolvers" if "/resolve/" in fault.match else "api"
        headers["RateLimit"] = f'"{resource}";r=0;t={fault.retry_after or 0}'
        headers["RateLimit-Policy"] = f'"fixed window";"{resource}";q=500;w=300'
        return HubError(429, "You have exceeded our hourly quotas for action: api.", headers=headers)
    return HubError(fault.status, "devhub: injected failure", headers=headers)


# --- the server -------------------------------------------------------------------------------


class DevHub:
    """The server in a background thread (for tests and benches); `url` is valid after `start()`."""

    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        faults: FaultPlan | None = None,
        *,
        page_size: int | None = None,
        max_range_bytes: int = MAX_RANGE_BYTES,
        redirect_to_cdn: bool = False,
        users: Mapping[str, str] | None = None,
        on_event: EventFn | None = None,
    ) -> None:
        self.root = root
        self.host = host
        self.port = port
        self.token = token or DEVHUB_TOKEN
        self.faults = faults or FaultPlan()
        self.page_size = page_size
        self.max_range_bytes = max_range_bytes
        self.counters = Counters()
        self.repos: dict[tuple[str, str], RepoRecord] = {}
        self.store = Store(root)
        self.url = ""
        self.redirect_to_cdn = redirect_to_cdn  # LFS reads answer 302 to cdn_url, as the Hub's do
        self.cdn_url = ""
        self.users = {self.token: "devhub"} | dict(users or {})  # write tokens -> the user they act as
        self.on_event = on_event  # gets each webhook payload (discussion and repo.content events)
        self.discussions: dict[str, list[Discussion]] = {}  # repo id -> its PRs, numbered from 1
        self.write_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._cdn: ThreadingHTTPServer | None = None

    def start(self) -> DevHub:
        self.repos = self.store.load_repos()
        handler = type("BoundHandler", (_Handler,), {"hub": self})
        server = ThreadingHTTPServer((self.host, self.port), handler)
        server.daemon_threads = True  # idle keep-alive connections must not block stop()
        self._server = server
        self.port = int(server.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        # A short poll interval makes stop() take ~0.1 s instead of serve_forever's default 0.5 s.
        serve = lambda: server.serve_forever(poll_interval=0.1)  # noqa: E731
        self._thread = threading.Thread(target=serve, name="devhub", daemon=True)
        self._thread.start()
        self._start_cdn()
        return self

    def _start_cdn(self) -> None:
        """The second origin: same host, another port, serving signed blob URLs."""
        handler = type("BoundCdnHandler", (_CdnHandler,), {"hub": self})
        cdn = ThreadingHTTPServer((self.host, 0), handler)
        cdn.daemon_threads = True
        self._cdn = cdn
        self.cdn_url = f"http://{self.host}:{int(cdn.server_address[1])}"
        threading.Thread(
            target=lambda: cdn.serve_forever(poll_interval=0.1), name="devhub-cdn", daemon=True
        ).start()

    def cdn_signature(self, blob: str, size: int) -> str:
        return hmac.new(self.token.encode(), f"{blob}:{size}".encode(), hashlib.sha256).hexdigest()

    def serve_forever(self) -> None:
        """Block the calling thread (the management command) until KeyboardInterrupt, then stop."""
        if self._server is None:
            self.start()
        assert self._thread is not None
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        if self._cdn is not None:
            self._cdn.shutdown()
            self._cdn.server_close()
            self._cdn = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> DevHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_next(
        self, count: int = 1, status: int = 429, *, retry_after: int | None = 1, match: str = ""
    ) -> None:
        self.faults.add(status, count, retry_after=retry_after, match=match)


# --- request handling -------------------------------------------------------------------------


@dataclass
class _Request:
    method: str
    path: str  # the raw (percent-encoded) URL path
    query: dict[str, list[str]]
    authorized: bool
    bad_token: bool
    base_url: str
    user: str | None = None  # who a write token acts as

    def flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[-1].lower() in ("1", "true")

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None


class _Handler(BaseHTTPRequestHandler):
    hub: DevHub
    _responded = False
    protocol_version = "HTTP/1.1"
    server_version = "devhub"
    timeout = 60

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("devhub: " + format, *args)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.hub.counters.count_request(url.path)
        self._responded = False
        try:
            body = self._read_body()  # also on GET: an unread body would corrupt the next keep-alive request
            fault = self.hub.faults.take(url.path)
            if fault is not None:
                raise fault
            self._route(self._request(method, url.path, url.query), body)
        except HubError as err:
            self._send_json(err.status, {"error": err.message}, _error_headers(err))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug must cost one request a 500, never the server
            logger.exception("devhub: %s %s failed", method, self.path)
            if self._responded:  # mid-body: the only honest signal left is closing the connection
                self.close_connection = True
            else:
                self._send_json(500, {"error": "devhub internal error"})

    def _request(self, method: str, path: str, query: str) -> _Request:
        header = self.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        ok = bool(token) and hmac.compare_digest(token.encode(), self.hub.token.encode())
        user = next(
            (name for known, name in self.hub.users.items() if token and hmac.compare_digest(token, known)),
            None,
        )
        host = self.headers.get("Host") or urlsplit(self.hub.url).netloc
        return _Request(
            method, path, parse_qs(query), ok, bool(token) and user is None, f"http://{host}", user
        )

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise HubError(400, "Content-Length is not a number") from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would poison the connection
            raise HubError(413, f"request body over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    def _route(self, req: _Request, body: bytes) -> None:
        segs = req.path.split("/")[1:]
        if segs[:1] == ["api"] and len(segs) >= 2 and segs[1] in ("models", "datasets"):
            return self._api(req, segs[1][:-1], segs[2:], body)
        if segs[:1] == ["datasets"] and len(segs) >= 5 and segs[3] == "resolve":
            return self._resolve(req, "dataset", segs[1:3], segs[4:])
        if len(segs) >= 4 and segs[2] == "resolve":
            return self._resolve(req, "model", segs[0:2], segs[3:])
        raise HubError(404, "Sorry, we can't find the page you are looking for.")

    def _api(self, req: _Request, repo_type: str, segs: list[str], body: bytes) -> None:
        if not segs or segs == [""]:
            return self._send_list(req, repo_type)
        if len(segs) < 2:
            raise HubError(404, "Sorry, we can't find the page you are looking for.")
        record = self._repo(req, repo_type, segs[:2])
        action, rest = (segs[2], segs[3:]) if len(segs) > 2 else ("revision", [])
        if action in _WRITE_ACTIONS:
            return self._write(req, record, action, rest, body)
        expected = "POST" if action == "paths-info" else "GET"
        if req.method != expected:
            raise HubError(405, f"{req.method} is not allowed here")
        handler = _API_ACTIONS.get(action)
        if handler is None:
            raise HubError(404, "Sorry, we can't find the page you are looking for.")
        status, payload, headers = handler(self.hub, req, record, rest, body)
        self._send_json(status, payload, headers)

    def _write(self, req: _Request, record: RepoRecord, action: str, rest: list[str], body: bytes) -> None:
        """preupload, commit and discussions; every POST needs a token that names a user; one at a time."""
        if action != "discussions" and req.method != "POST":
            raise HubError(405, f"{req.method} is not allowed here")
        if req.method == "POST" and req.user is None:
            raise HubError(401, _INVALID_TOKEN if req.bad_token else "You must be authenticated to write")
        with self.hub.write_lock:
            status, payload, headers = _WRITE_ACTIONS[action](self.hub, req, record, rest, body)
        self._send_json(status, payload, headers)

    def _send_list(self, req: _Request, repo_type: str) -> None:
        if req.method != "GET":
            raise HubError(405, f"{req.method} is not allowed here")
        status, payload, headers = _page(self.hub, req, _list_items(self.hub, req, repo_type), 1000)
        self._send_json(status, payload, headers)

    def _repo(self, req: _Request, repo_type: str, owner_name: list[str]) -> RepoRecord:
        repo_id = "/".join(unquote(s) for s in owner_name)
        record = self.hub.repos.get((repo_type, repo_id))
        if record is not None and record.private and not req.authorized:
            if req.bad_token:
                raise HubError(401, _INVALID_TOKEN)
            record = None  # the Hub does not reveal that a private repo exists
        if record is None:
            raise HubError(401, "Repository not found", "RepoNotFound")
        return record

    def _resolve(self, req: _Request, repo_type: str, owner_name: list[str], rest: list[str]) -> None:
        if req.method not in ("GET", "HEAD"):
            raise HubError(405, f"{req.method} is not allowed here")
        record = self._repo(req, repo_type, owner_name)
        if record.gated and not req.authorized:
            raise HubError(401, _gated_message(record), "GatedRepo")
        if len(rest) < 2:
            raise HubError(404, "Entry not found", "EntryNotFound")
        commit = _commit(record, unquote(rest[0]))
        path = unquote("/".join(rest[1:]))
        entry = commit.files.get(path)
        if entry is None:
            raise HubError(404, "Entry not found", "EntryNotFound")
        if self.hub.redirect_to_cdn and entry.lfs_sha256:
            return self._redirect_to_cdn(commit, entry)
        self._send_file(req, commit, path, entry)

    def _redirect_to_cdn(self, commit: Commit, entry: FileEntry) -> None:
        """The Hub's answer to an LFS read: 302 to a signed storage URL, metadata on the redirect itself."""
        query = urlencode({"size": entry.size, "sig": self.hub.cdn_signature(entry.blob, entry.size)})
        etag = f'"{entry.lfs_sha256}"'
        headers = {
            "Location": f"{self.hub.cdn_url}/blobs/{entry.blob}?{query}",
            "X-Repo-Commit": commit.sha,
            "X-Linked-Etag": etag,
            "X-Linked-Size": str(entry.size),
            "ETag": etag,
            "Content-Length": "0",
        }
        self._start(302, headers)

    def _send_file(self, req: _Request, commit: Commit, path: str, entry: FileEntry) -> None:
        etag = f'"{entry.lfs_sha256 or entry.git_oid}"'
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": etag,
            "X-Repo-Commit": commit.sha,
            "Content-Disposition": f'inline; filename="{path.rsplit("/", 1)[-1]}"',
        }
        if entry.lfs_sha256:
            headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(entry.size)}
        self._send_range(req, self.hub.store.blob_path(entry.blob), entry.size, headers)

    def _send_range(self, req: _Request, blob: Path, size: int, headers: dict[str, str]) -> None:
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header:
            start, end = _parse_range(range_header, size)
            end = min(end, start + self.hub.max_range_bytes - 1)
            status = 206
            headers = headers | {"Content-Range": f"bytes {start}-{end}/{size}"}
        length = max(0, end - start + 1)
        self._start(status, headers | {"Content-Length": str(length), "Accept-Ranges": "bytes"})
        if req.method == "GET" and length:
            self._stream(blob, start, length, req.path)

    def _stream(self, blob: Path, start: int, length: int, counted_path: str) -> None:
        with blob.open("rb") as handle:
            handle.seek(start)
            while length > 0:
                chunk = handle.read(min(_CHUNK, length))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.hub.counters.count_bytes(counted_path, len(chunk))
                length -= len(chunk)

    def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self._responded = True
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        base = {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(body))}
        self._start(status, base | dict(headers or {}))
        if self.command != "HEAD":
            self.wfile.write(body)
            self.hub.counters.count_bytes(urlsplit(self.path).path, len(body))


class _CdnHandler(_Handler):
    """devhub's second origin: ``/blobs/<key>?size=N&sig=...`` with Range; a token here is an error."""

    def _route(self, req: _Request, body: bytes) -> None:
        if req.method not in ("GET", "HEAD"):
            raise HubError(405, f"{req.method} is not allowed here")
        if self.headers.get("Authorization"):
            raise HubError(400, "Only one auth mechanism allowed; the URL is already signed")
        segs = req.path.split("/")[1:]
        size = _small_int(req.param("size") or "")
        if len(segs) != 2 or segs[0] != "blobs":
            raise HubError(404, "NoSuchKey")
        blob = unquote(segs[1])
        expected = self.hub.cdn_signature(blob, size)
        if not hmac.compare_digest((req.param("sig") or "").encode(), expected.encode()):
            raise HubError(403, "SignatureDoesNotMatch")
        self._send_range(
            req, self.hub.store.blob_path(blob), size, {"Content-Type": "application/octet-stream"}
        )


def _error_headers(err: HubError) -> dict[str, str]:
    headers = {"X-Error-Message": err.message} | err.headers
    if err.code:
        headers["X-Error-Code"] = err.code
    return headers


def _gated_message(record: RepoRecord) -> str:
    return (
        f"Access to {record.repo_type} {record.repo_id} is restricted. You must have access to it "
        "and be authenticated to access it. Please log in."
    )


def _parse_range(header: str, size: int) -> tuple[int, int]:
    """One `bytes=a-b`, `bytes=a-` or `bytes=-n` range -> inclusive (start, end) within the file."""
    match = _RANGE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        raise _unsatisfiable(f"unsupported Range header {header[:80]!r}", size)
    first, last = match.groups()
    if first == "":
        start, end = max(0, size - int(last)), size - 1
    else:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        raise _unsatisfiable(f"range {header[:80]!r} is outside the file ({size} bytes)", size)
    return start, end


def _unsatisfiable(message: str, size: int) -> HubError:
    return HubError(416, message, headers={"Content-Range": f"bytes */{size}"})


# --- API actions: (hub, request, repo, remaining path segments, body) -> (status, json, headers) ---

_Response = tuple[int, Any, dict[str, str]]


def _commit(record: RepoRecord, revision: str) -> Commit:
    commit = record.resolve(revision)
    if commit is None:
        raise HubError(404, f"Invalid rev id: {revision[:100]}", "RevisionNotFound")
    return commit


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _repo_summary(record: RepoRecord) -> dict[str, Any]:
    summary = {
        "_id": hashlib.sha1(record.repo_id.encode(), usedforsecurity=False).hexdigest()[:24],
        "id": record.repo_id,
        "author": record.author,
        "private": record.private,
        "gated": record.gated,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": list(record.tags),
        "createdAt": _iso(record.created_at),
    }
    if record.repo_type == "model":
        summary |= {"modelId": record.repo_id, "library_name": "gguf"}
    return summary


def _repo_info(record: RepoRecord, commit: Commit, blobs: bool) -> dict[str, Any]:
    siblings = []
    for path, entry in sorted(commit.files.items()):
        sibling: dict[str, Any] = {"rfilename": path}
        if blobs:
            sibling |= {"size": entry.size, "blobId": entry.git_oid}
            if entry.lfs_sha256:
                sibling["lfs"] = {
                    "sha256": entry.lfs_sha256,
                    "size": entry.size,
                    "pointerSize": entry.pointer_size,
                }
        siblings.append(sibling)
    return _repo_summary(record) | {
        "sha": commit.sha,
        "lastModified": _iso(commit.date),
        "cardData": dict(record.card_data),
        "siblings": siblings,
        "usedStorage": sum(e.size for e in commit.files.values()),
    }


def _info_action(hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes) -> _Response:
    commit = _commit(record, unquote("/".join(rest)) if rest else "main")
    return 200, _repo_info(record, commit, req.flag("blobs")), {}


def _refs_action(hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes) -> _Response:
    def refs(kind: str, names: Mapping[str, str]) -> list[dict[str, str]]:
        return [
            {"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": sha} for n, sha in sorted(names.items())
        ]

    payload: dict[str, Any] = {
        "branches": refs("heads", record.branches),
        "converts": [],
        "tags": refs("tags", record.tag_refs),
    }
    if req.flag("include_prs"):
        payload["pullRequests"] = [
            {"name": ref.removeprefix("refs/"), "ref": ref, "targetCommit": sha}
            for ref, sha in sorted(record.pr_refs.items())
        ]
    return 200, payload, {}


def _commits_action(
    hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes
) -> _Response:
    head = _commit(record, unquote("/".join(rest)) if rest else "main")
    formatted = "formatted" in req.query.get("expand[]", [])
    items = [_commit_json(c, formatted) for c in record.history(head)]
    return _page(hub, req, items, default_size=50)


def _commit_json(commit: Commit, formatted: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": commit.sha,
        "title": commit.title,
        "message": commit.message,
        "authors": [{"user": commit.author, "avatar": None}],
        "date": _iso(commit.date),
    }
    if formatted:
        item["formatted"] = {"title": commit.title, "message": commit.message}
    return item


def _tree_action(hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes) -> _Response:
    if not rest:
        raise HubError(404, "Sorry, we can't find the page you are looking for.")
    commit = _commit(record, unquote(rest[0]))
    base = unquote("/".join(rest[1:])).strip("/")
    tree = _Tree(commit)
    if base and base not in tree.dirs:
        raise HubError(404, f"{base} does not exist on {commit.sha}", "EntryNotFound")
    expand = req.flag("expand")
    history = record.history(commit) if expand else []
    items = [tree.entry(p, history) for p in tree.listing(base, req.flag("recursive"))]
    return _page(hub, req, items, default_size=50 if expand else 1000)


def _paths_info_action(
    hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes
) -> _Response:
    commit = _commit(record, unquote("/".join(rest)) if rest else "main")
    paths, expand = _parse_paths_body(body)
    tree = _Tree(commit)
    history = record.history(commit) if expand else []
    wanted = [p.strip("/") for p in paths]
    items = [tree.entry(p, history) for p in dict.fromkeys(wanted) if p in commit.files or p in tree.dirs]
    return 200, items, {}


def _parse_paths_body(body: bytes) -> tuple[list[str], bool]:
    """`paths` and `expand` from a form (huggingface_hub) or JSON body."""
    text = body.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise HubError(400, "paths-info body is not valid JSON") from None
        paths, expand = data.get("paths") if isinstance(data, dict) else None, data.get("expand", False)
    else:
        form = parse_qs(text)
        paths, expand = form.get("paths"), form.get("expand", ["false"])[-1].lower() == "true"
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise HubError(400, "paths-info needs a non-empty list of string `paths`")
    if len(paths) > MAX_PATHS:
        raise HubError(400, f"paths-info accepts at most {MAX_PATHS} paths")
    return paths, bool(expand)


_API_ACTIONS: dict[str, Callable[[DevHub, _Request, RepoRecord, list[str], bytes], _Response]] = {
    "revision": _info_action,
    "refs": _refs_action,
    "commits": _commits_action,
    "tree": _tree_action,
    "paths-info": _paths_info_action,
}


# --- writes: preupload, commit (and PRs), discussions --------------------------------------------


def _preupload_action(
    hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes
) -> _Response:
    """Every file ``regular``: devhub takes no LFS upload (the Hub answers ``lfs`` for big or binary ones)."""
    base = _commit(record, unquote("/".join(rest)) if rest else "main")
    files = _json_object(body, "preupload").get("files")
    if not isinstance(files, list) or not files or len(files) > MAX_COMMIT_FILES:
        raise HubError(400, f"preupload needs 1 to {MAX_COMMIT_FILES} `files`")
    answer = []
    for item in files:
        path = item.get("path") if isinstance(item, dict) else None
        if not isinstance(path, str) or not path:
            raise HubError(400, "each preupload file needs a `path`")
        entry = base.files.get(path)
        oid = (entry.lfs_sha256 or entry.git_oid) if entry is not None else None
        answer.append({"path": path, "uploadMode": "regular", "shouldIgnore": False, "oid": oid})
    return 200, {"files": answer, "commitOid": base.sha}, {}


def _commit_action(hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes) -> _Response:
    """The NDJSON commit to a branch or to ``refs/pr/N``, or (``create_pr=1``) a PR from ``parentCommit``."""
    target = unquote("/".join(rest)) if rest else "main"
    target = target.removeprefix("refs/heads/")
    create_pr = req.flag("create_pr")
    pr = _pull_request_of_ref(hub, record, target)
    if pr is None and target not in record.branches:
        raise HubError(404, f"Invalid rev id: {target[:100]}", "RevisionNotFound")
    if pr is not None and (create_pr or pr.status not in OPEN_STATUSES):
        raise HubError(400, f"Pull request #{pr.num} is {pr.status}: it takes no commit here")
    header, changes = _parse_commit_body(hub, body)
    head = _commit(record, target)
    parent_sha = header.get("parentCommit")
    parent = head if parent_sha is None else _commit_by_prefix(record, parent_sha)
    if not create_pr and parent.sha != head.sha:
        raise HubError(412, f"A commit has happened since. Please refresh and try again. ({head.sha})")
    title, message = str(header.get("summary") or "")[:500], str(header.get("description") or "")
    user = req.user or "devhub"
    commit = _new_commit(record, parent, changes, title, message, user)
    if create_pr:
        pr = _open_pull_request(hub, req, record, target, parent, commit, user)
        return 200, _commit_answer(req, record, commit, pr), {}
    if pr is not None:
        old, pr.head_sha = pr.head_sha, commit.sha
        record.pr_refs[pr.ref] = commit.sha
        pr.add_event("commit", {"subject": title, "oid": commit.sha}, user)
        _emit_ref(hub, req, record, pr.ref, old, commit.sha)
        return 200, _commit_answer(req, record, commit, None), {}
    record.branches[target] = commit.sha
    _emit_ref(hub, req, record, f"refs/heads/{target}", head.sha, commit.sha)
    return 200, _commit_answer(req, record, commit, None), {}


def _commit_answer(
    req: _Request, record: RepoRecord, commit: Commit, pr: Discussion | None
) -> dict[str, Any]:
    web = repo_web_url(req.base_url, record)
    answer = {
        "success": True,
        "commitOid": commit.sha,
        "commitUrl": f"{web}/commit/{commit.sha}",
        "hookOutput": "",
    }
    return answer | ({"pullRequestUrl": pr.web_url(req.base_url, record)} if pr is not None else {})


def _pull_request_of_ref(hub: DevHub, record: RepoRecord, ref: str) -> Discussion | None:
    match = re.fullmatch(r"refs/pr/(\d{1,9})", ref)
    if match is None:
        return None
    pr = _find_discussion(hub, record, match.group(1))
    if not pr.is_pull_request:
        raise HubError(404, f"Invalid rev id: {ref[:100]}", "RevisionNotFound")
    return pr


def _commit_by_prefix(record: RepoRecord, value: object) -> Commit:
    """``parentCommit``: 5 to 40 hex digits naming exactly one commit (huggingface_hub sends any such)."""
    text = str(value).lower()
    if not re.fullmatch(r"[0-9a-f]{5,40}", text):
        raise HubError(400, f"parentCommit {text[:60]!r} is not 5 to 40 hex digits")
    found = [c for c in record.commits if c.sha.startswith(text)]
    if len(found) > 1:
        raise HubError(400, f"parentCommit {text} names more than one commit")
    if not found:
        raise HubError(404, f"Invalid rev id: {text}", "RevisionNotFound")
    return found[0]


def _open_pull_request(
    hub: DevHub, req: _Request, record: RepoRecord, target: str, parent: Commit, commit: Commit, user: str
) -> Discussion:
    pr = _new_discussion(hub, record, commit.title, user, True, target, parent.sha, commit.sha)
    pr.add_comment(commit.message, user)
    pr.add_event("commit", {"subject": commit.title, "oid": commit.sha}, user)
    record.pr_refs[pr.ref] = commit.sha
    _emit(
        hub,
        discussions.payload("discussion", "create", req.base_url, record, discussion=_hook(req, record, pr)),
    )
    _emit_ref(hub, req, record, pr.ref, None, commit.sha)
    return pr


def _new_discussion(
    hub: DevHub,
    record: RepoRecord,
    title: str,
    user: str,
    pull_request: bool,
    target: str = "main",
    base: str = "",
    head: str = "",
) -> Discussion:
    items = hub.discussions.setdefault(record.repo_id, [])
    d = Discussion(
        num=len(items) + 1,
        title=title,
        author=user,
        created_at=datetime.now(UTC),
        repo_type=record.repo_type,
        repo_id=record.repo_id,
        is_pull_request=pull_request,
        target=target,
        base_sha=base,
        head_sha=head,
    )
    items.append(d)
    return d


def _parse_commit_body(hub: DevHub, body: bytes) -> tuple[dict[str, Any], dict[str, FileEntry | None]]:
    header: dict[str, Any] | None = None
    changes: dict[str, FileEntry | None] = {}
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        item = _json_object(line, f"commit line {number}")
        key, value = item.get("key"), item.get("value")
        if not isinstance(value, dict):
            raise HubError(400, f"commit line {number}: `value` must be an object")
        if key == "header":
            header = value
        elif key == "file":
            changes[_commit_path(value)] = _stored_file(hub, value, number)
        elif key == "deletedFile":
            changes[_commit_path(value)] = None
        else:
            raise HubError(400, f"commit line {number}: devhub does not take `{str(key)[:40]}` operations")
    if header is None or not isinstance(header.get("summary"), str) or not header["summary"].strip():
        raise HubError(400, "the commit needs a header line with a non-empty `summary`")
    if not changes or len(changes) > MAX_COMMIT_FILES:
        raise HubError(400, f"a commit changes 1 to {MAX_COMMIT_FILES} files")
    return header, changes


def _commit_path(value: Mapping[str, Any]) -> str:
    path = value.get("path")
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        raise HubError(400, f"invalid path in commit: {str(path)[:100]!r}")
    return path


def _stored_file(hub: DevHub, value: Mapping[str, Any], number: int) -> FileEntry:
    if value.get("encoding") != "base64" or not isinstance(value.get("content"), str):
        raise HubError(400, f"commit line {number}: a file needs base64 `content`")
    try:
        content = b64decode(value["content"], validate=True)
    except (Base64Error, ValueError):
        raise HubError(400, f"commit line {number}: `content` is not base64") from None
    return hub.store.put_bytes(content)


def _new_commit(
    record: RepoRecord,
    parent: Commit,
    changes: Mapping[str, FileEntry | None],
    title: str,
    message: str,
    author: str,
) -> Commit:
    files = dict(parent.files)
    for path, entry in changes.items():
        if entry is None:
            if files.pop(path, None) is None:
                raise HubError(404, f"A file with this name doesn't exist: {path[:100]}", "EntryNotFound")
        else:
            files[path] = entry
    now = max(datetime.now(UTC), parent.date)
    state = json.dumps([parent.sha, title, now.isoformat(), sorted((p, e.git_oid) for p, e in files.items())])
    sha = git_blob_sha1(state.encode())
    commit = Commit(sha, (parent.sha,), now, title, message, author, files)
    record.commits.append(commit)
    return commit


# --- discussions: list, create, details, comment, title, status, merge, comment edit and hide ----------


def _discussions_action(
    hub: DevHub, req: _Request, record: RepoRecord, rest: list[str], body: bytes
) -> _Response:
    if not rest:
        if req.method == "GET":
            return _discussion_list(hub, req, record)
        return _create_discussion(hub, req, record, _body(body, "discussions"))
    d = _find_discussion(hub, record, rest[0])
    if len(rest) == 1:
        if req.method != "GET":
            raise HubError(405, f"{req.method} is not allowed here")
        return 200, _discussion_detail(hub, req, record, d), {}
    if req.method != "POST":
        raise HubError(405, f"{req.method} is not allowed here")
    data, user = _body(body, rest[1]), req.user or "devhub"
    if rest[1:] in (["comment"], ["title"], ["status"], ["merge"]):
        return _DISCUSSION_CHANGES[rest[1]](hub, req, record, d, data, user)
    if len(rest) == 4 and rest[1] == "comment" and rest[3] in ("edit", "hide"):
        return _change_comment(hub, req, record, d, rest[2], rest[3], data, user)
    raise HubError(404, "Sorry, we can't find the page you are looking for.")


_Change = Callable[[DevHub, _Request, RepoRecord, Discussion, dict[str, Any], str], _Response]


def _body(body: bytes, what: str) -> dict[str, Any]:
    return _json_object(body, what) if body.strip() else {}


def _find_discussion(hub: DevHub, record: RepoRecord, num: str) -> Discussion:
    found = next((d for d in hub.discussions.get(record.repo_id, []) if str(d.num) == num), None)
    if found is None:
        raise HubError(404, "Discussion not found")
    return found


def _text_field(data: Mapping[str, Any], name: str, *, required: bool = True, limit: int = 65536) -> str:
    value = data.get(name, None if required else "")
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > limit:
        raise HubError(
            400, f"`{name}` must be a{' non-empty' if required else ''} string of at most {limit} characters"
        )
    return value


def _create_discussion(hub: DevHub, req: _Request, record: RepoRecord, data: dict[str, Any]) -> _Response:
    """``POST .../discussions {title, description, pullRequest}``: a discussion, or a draft PR."""
    title = _text_field(data, "title", limit=500)
    description = _text_field(data, "description", required=False)
    pull_request = data.get("pullRequest") is True
    head = record.branches["main"] if pull_request else ""
    d = _new_discussion(hub, record, title, req.user or "devhub", pull_request, "main", head, head)
    d.add_comment(description, d.author)
    answer: dict[str, Any] = {
        "num": d.num,
        "pullRequest": pull_request,
        "url": d.web_url(req.base_url, record),
    }
    _emit(
        hub,
        discussions.payload("discussion", "create", req.base_url, record, discussion=_hook(req, record, d)),
    )
    if pull_request:
        d.status = "draft"
        record.pr_refs[d.ref] = head
        answer["references"] = {"base": "refs/heads/main"}
        _emit_ref(hub, req, record, d.ref, None, head)
    return 200, answer, {}


def _comment(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, data: dict[str, Any], user: str
) -> _Response:
    event = d.add_comment(_text_field(data, "comment"), user)
    _emit_comment(hub, req, record, d, event, "create")
    return 200, {"newMessage": event}, {}


def _title(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, data: dict[str, Any], user: str
) -> _Response:
    title = _text_field(data, "title", limit=500)
    event = d.add_event("title-change", {"from": d.title, "to": title}, user)
    d.title = title
    _emit_discussion(hub, req, record, d)
    return 200, {"newTitle": event}, {}


def _status(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, data: dict[str, Any], user: str
) -> _Response:
    new = data.get("status")
    if new not in ("open", "closed"):
        raise HubError(400, "status must be `open` or `closed`")
    if d.status == "merged":
        raise HubError(409, "This pull request is already merged")
    _leading_comment(hub, req, record, d, data, user)
    d.status = str(new)
    event = d.add_event("status-change", {"status": d.status}, user)
    _emit_discussion(hub, req, record, d)
    return 200, {"newStatus": event}, {}


def _merge_action(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, data: dict[str, Any], user: str
) -> _Response:
    if not d.is_pull_request:
        raise HubError(400, "Only a pull request can be merged")
    if d.status == "merged":
        raise HubError(409, "This pull request is already merged")
    old = record.branches[d.target]
    _merge(hub, record, d)
    _leading_comment(hub, req, record, d, data, user)
    d.add_event("status-change", {"status": "merged"}, user)
    _emit_discussion(hub, req, record, d)
    _emit_ref(hub, req, record, f"refs/heads/{d.target}", old, record.branches[d.target])
    return 200, {}, {}


def _leading_comment(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, data: dict[str, Any], user: str
) -> None:
    """The optional ``comment`` of a status change or a merge: its own comment event, before the change."""
    if str(data.get("comment") or "").strip():
        _emit_comment(hub, req, record, d, d.add_comment(_text_field(data, "comment"), user), "create")


def _change_comment(
    hub: DevHub,
    req: _Request,
    record: RepoRecord,
    d: Discussion,
    comment_id: str,
    change: str,
    data: dict[str, Any],
    user: str,
) -> _Response:
    """``comment/{id}/edit {content}`` (its author only) and ``comment/{id}/hide`` (any maintainer: every
    devhub user); both answer ``updatedComment``."""
    event = d.comment(unquote(comment_id))
    if event is None:
        raise HubError(404, "Comment not found")
    if event["data"]["hidden"]:
        raise HubError(400, "This comment is hidden")
    if change == "edit":
        if event["author"]["name"] != user:
            raise HubError(403, "Only the author of a comment can edit it")
        discussions.edit_comment(event, _text_field(data, "content"), user)
    else:
        discussions.hide_comment(event, user)
    _emit_comment(hub, req, record, d, event, "update")
    return 200, {"updatedComment": event}, {}


_DISCUSSION_CHANGES: dict[str, _Change] = {
    "comment": _comment,
    "title": _title,
    "status": _status,
    "merge": _merge_action,
}


def _discussion_list(hub: DevHub, req: _Request, record: RepoRecord) -> _Response:
    wanted_status = req.param("status") or "all"
    wanted_type = req.param("type") or "all"
    author = req.param("author")
    statuses = {"open": OPEN_STATUSES, "closed": CLOSED_STATUSES}.get(wanted_status)
    kinds = {"pull_request": (True,), "discussion": (False,)}.get(wanted_type, (True, False))
    chosen = [
        d
        for d in reversed(hub.discussions.get(record.repo_id, []))  # newest first, as the Hub lists them
        if d.is_pull_request in kinds
        and (statuses is None or d.status in statuses)
        and (author is None or d.author == author)
    ]
    size = 50
    start = _small_int(req.param("p") or "0") * size
    page = [d.summary(record) for d in chosen[start : start + size]]
    closed = sum(1 for d in chosen if d.status in CLOSED_STATUSES)
    return (
        200,
        {"discussions": page, "count": len(chosen), "start": start, "numClosedDiscussions": closed},
        {},
    )


def _discussion_detail(hub: DevHub, req: _Request, record: RepoRecord, d: Discussion) -> dict[str, Any]:
    if not d.is_pull_request:
        return d.details(record, [], None)
    conflicts = _conflicts(record, d) if d.status in OPEN_STATUSES else []
    return d.details(record, conflicts, _diff(hub, record, d) if req.flag("diff") else None)


def _diff(hub: DevHub, record: RepoRecord, pr: Discussion) -> str:
    """A unified diff of the PR's text files against its base (binary and LFS files named only)."""
    import difflib

    base, head = _commit(record, pr.base_sha), _commit(record, pr.head_sha)
    out: list[str] = []
    for path in sorted(set(base.files) | set(head.files)):
        old, new = base.files.get(path), head.files.get(path)
        if old == new:
            continue
        texts = [_text(hub, e) for e in (old, new)]
        if any(t is None for t in texts):
            out.append(f"Binary files a/{path} and b/{path} differ\n")
            continue
        before, after = texts[0] or "", texts[1] or ""
        out.extend(
            difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
            )
        )
    return "".join(out)


def _text(hub: DevHub, entry: FileEntry | None) -> str | None:
    if entry is None:
        return ""
    if entry.lfs_sha256 or entry.size > MAX_BODY_BYTES:
        return None
    try:
        return hub.store.blob_path(entry.blob).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None


def _pr_changes(record: RepoRecord, pr: Discussion) -> dict[str, FileEntry | None]:
    base, head = _commit(record, pr.base_sha), _commit(record, pr.head_sha)
    return {
        path: head.files.get(path)
        for path in set(base.files) | set(head.files)
        if base.files.get(path) != head.files.get(path)
    }


def _conflicts(record: RepoRecord, pr: Discussion) -> list[str]:
    """The PR's changed files that the target branch changed too, differently, since the PR's base."""
    base, target = _commit(record, pr.base_sha), _commit(record, pr.target)
    changes = _pr_changes(record, pr)
    return sorted(p for p in changes if target.files.get(p) not in (base.files.get(p), changes[p]))


def _merge(hub: DevHub, record: RepoRecord, pr: Discussion) -> None:
    """One new commit on the target branch: its head with the PR's changes (against the PR's base) applied.

    Its one parent is the target's head (the Hub does not document a merge commit's parents; devhub makes
    the change as one commit on the branch, which is what a reader of the branch's history sees)."""
    if pr.status != "open":
        raise HubError(400, f"Only an open pull request can be merged (this one is {pr.status})")
    conflicts = _conflicts(record, pr)
    if conflicts:
        raise HubError(409, f"Merge conflict in {', '.join(conflicts[:5])}")
    merged = _new_commit(
        record,
        _commit(record, pr.target),
        _pr_changes(record, pr),
        pr.title,
        f"{pr.description}\n\n(merged from {pr.ref})",
        pr.author,
    )
    record.branches[pr.target] = merged.sha
    pr.status, pr.merge_commit = "merged", merged.sha


# --- webhook events ---------------------------------------------------------------------------------


def _hook(req: _Request, record: RepoRecord, d: Discussion) -> dict[str, Any]:
    return discussions.webhook_discussion(req.base_url, record, d)


def _emit_discussion(hub: DevHub, req: _Request, record: RepoRecord, d: Discussion) -> None:
    _emit(
        hub,
        discussions.payload("discussion", "update", req.base_url, record, discussion=_hook(req, record, d)),
    )


def _emit_comment(
    hub: DevHub, req: _Request, record: RepoRecord, d: Discussion, event: dict[str, Any], action: str
) -> None:
    comment = discussions.webhook_comment(req.base_url, record, d, event)
    _emit(
        hub,
        discussions.payload(
            "discussion.comment",
            action,
            req.base_url,
            record,
            discussion=_hook(req, record, d),
            comment=comment,
        ),
    )


def _emit_ref(
    hub: DevHub, req: _Request, record: RepoRecord, ref: str, old: str | None, new: str | None
) -> None:
    """A ref moved (a branch, ``refs/pr/N``): ``repo.content`` with ``updatedRefs``, as the Hub sends it."""
    updated = [discussions.updated_ref(ref, old, new)]
    _emit(hub, discussions.payload("repo.content", "update", req.base_url, record, updatedRefs=updated))


def _emit(hub: DevHub, payload: dict[str, Any]) -> None:
    if hub.on_event is not None:
        try:
            hub.on_event(payload)
        except Exception:  # a failing listener must not undo the write the Hub already made
            logger.exception("devhub: the event listener failed")


def webhook_poster(url: str, secret: str, timeout: float = 5.0) -> EventFn:
    """An ``on_event`` POSTing each payload to ``url`` with ``X-Webhook-Secret``, as the Hub does."""
    import urllib.request

    def post(payload: dict[str, Any]) -> None:
        request = urllib.request.Request(  # noqa: S310 - the URL the operator gave devhub
            url,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "X-Webhook-Secret": secret},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            response.read(64 * 1024)

    pending: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()

    def deliver_in_order() -> None:
        while True:
            _logged(post, pending.get())

    threading.Thread(target=deliver_in_order, name="devhub-webhooks", daemon=True).start()
    return pending.put  # after the write's answer, as the Hub does, one after the other in the order made


def _logged(post: EventFn, payload: dict[str, Any]) -> None:
    try:
        post(payload)
    except Exception as exc:
        logger.warning("devhub: webhook delivery failed: %s", exc)


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise HubError(400, f"{what}: the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise HubError(400, f"{what}: the body must be a JSON object")
    return data


_WRITE_ACTIONS: dict[str, Callable[[DevHub, _Request, RepoRecord, list[str], bytes], _Response]] = {
    "preupload": _preupload_action,
    "commit": _commit_action,
    "discussions": _discussions_action,
}


class _Tree:
    """The folder structure implied by a commit's file paths."""

    def __init__(self, commit: Commit) -> None:
        self.commit = commit
        self.dirs: set[str] = set()
        for path in commit.files:
            parts = path.split("/")[:-1]
            self.dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))

    def listing(self, base: str, recursive: bool) -> list[str]:
        prefix = f"{base}/" if base else ""
        below = [p for p in sorted(self.dirs | set(self.commit.files)) if p.startswith(prefix)]
        return below if recursive else [p for p in below if "/" not in p[len(prefix) :]]

    def entry(self, path: str, history: list[Commit]) -> dict[str, Any]:
        if path in self.commit.files:
            file = self.commit.files[path]
            item: dict[str, Any] = {"type": "file", "oid": file.git_oid, "size": file.size, "path": path}
            if file.lfs_sha256:
                item["lfs"] = {"oid": file.lfs_sha256, "size": file.size, "pointerSize": file.pointer_size}
        else:
            item = {"type": "directory", "oid": self._tree_oid(path), "size": 0, "path": path}
        if history:
            item["lastCommit"] = _last_commit(path, history)
        return item

    def _tree_oid(self, folder: str) -> str:
        inside = sorted((p, e.git_oid) for p, e in self.commit.files.items() if p.startswith(folder + "/"))
        return hashlib.sha1(json.dumps(inside).encode(), usedforsecurity=False).hexdigest()


def _last_commit(path: str, history: list[Commit]) -> dict[str, str]:
    """The newest commit (of `history`, newest first) that changed `path` or anything below it."""

    def state(commit: Commit) -> list[tuple[str, str]]:
        return sorted(
            (p, e.git_oid) for p, e in commit.files.items() if p == path or p.startswith(path + "/")
        )

    changed = history[-1]
    for newer, older in itertools.pairwise(history):
        if state(newer) != state(older):
            changed = newer
            break
    return {"id": changed.sha, "title": changed.title, "date": _iso(changed.date)}


# --- listing and pagination ---------------------------------------------------------------------


def _list_items(hub: DevHub, req: _Request, repo_type: str) -> list[dict[str, Any]]:
    author = (req.param("author") or "").lower()
    search = (req.param("search") or "").lower()
    wanted_tags = set(req.query.get("filter", []))
    full = req.flag("full")
    records = [
        r
        for (kind, _), r in sorted(hub.repos.items())
        if kind == repo_type
        and (req.authorized or not r.private)
        and (not author or r.author.lower() == author)
        and search in r.repo_id.lower()
        and wanted_tags <= set(r.tags)
    ]
    if req.param("sort") == "lastModified":
        records.sort(key=lambda r: r.commits[-1].date, reverse=True)
    return [_repo_info(r, r.commits[-1], False) if full else _repo_summary(r) for r in records]


def _page(hub: DevHub, req: _Request, items: list[Any], default_size: int) -> _Response:
    """One page of `items` with a GitHub-style `Link: <...>; rel="next"` header when more remain."""
    size = hub.page_size or default_size
    limit = req.param("limit")
    if limit is not None and _small_int(limit) > 0:
        size = min(size, _small_int(limit))
    start = _small_int(req.param("cursor") or "0")
    page = items[start : start + size]
    headers = {}
    if start + size < len(items):
        query = {k: v for k, v in req.query.items() if k != "cursor"} | {"cursor": [str(start + size)]}
        headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query, doseq=True)}>; rel="next"'
    return 200, page, headers


def _small_int(text: str) -> int:
    """A non-negative query number; anything else (or absurdly long) counts as 0."""
    return int(text) if text.isdigit() and len(text) <= 12 else 0
