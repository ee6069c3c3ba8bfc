"""gunicorn behind the buffering proxy docs/configuration.md documents (Debian's nginx): a chunked report is
stored, and a client that sends its body slowly holds no gunicorn worker. Each with a control straight to
gunicorn.

gunicorn (one sync worker) and nginx listen on unix sockets in a temporary folder: no ports at all.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(NGINX).exists(), reason="nginx is not installed (make system-deps does it)"),
]

NGINX_CONF = """
daemon off;
user {user};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  server {{
    listen unix:{tmp}/nginx.sock;
    client_max_body_size 8m;
    client_body_timeout 30s;
    location / {{
      proxy_pass http://unix:{tmp}/gunicorn.sock;
      proxy_set_header Host localhost;
      proxy_request_buffering on;
    }}
  }}
}}
"""


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_for_socket(path: Path, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if path.exists():
            try:
                with connect(path) as s:
                    s.sendall(b"GET /api/v1/ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
                    if s.recv(64):
                        return
            except OSError:
                pass
        assert proc.poll() is None, f"{proc.args[0]} exited"
        proc_wait(proc, 0.1)
    raise AssertionError(f"{path} never answered")


def proc_wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(seconds)


def connect(path: Path, timeout: float = 10) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def status_of(s: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(folder with gunicorn.sock and nginx.sock, a node token) on a fresh SQLite database."""
    tmp = tmp_path_factory.mktemp("proxy")
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL", "CACHE_URL")}
    env |= {"DEBUG": "true", "DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "MESHDASH_NODE_RATE_LIMIT": "0"}
    manage(env, "migrate", "--noinput", "-v0")
    token = manage(env, "create_node", "proxy-test").strip().splitlines()[-1]
    gunicorn = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "meshdash.wsgi", "--workers", "1", "--bind",
         f"unix:{tmp}/gunicorn.sock", "--timeout", "120"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    # Workers run as this user (as root nginx would drop to nobody, who may not open our sockets).
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, user=getpass.getuser()))
    nginx = subprocess.Popen(
        [NGINX, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], stderr=subprocess.DEVNULL
    )
    try:
        wait_for_socket(tmp / "gunicorn.sock", gunicorn)
        wait_for_socket(tmp / "nginx.sock", nginx)
        yield tmp, token
    finally:
        for proc in (nginx, gunicorn):
            proc.terminate()
            proc.wait(30)


def report_body() -> bytes:
    return json.dumps(
        {
            "report_id": str(uuid.uuid4()),
            "observed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "package": {"repo": "meshllm/x-layers", "revision": "a" * 40},
            "timings": {"predicted_n": 8, "predicted_ms": 100.0, "predicted_per_second": 80.0},
        }
    ).encode()


def post_chunked(path: Path, token: str) -> int:
    body = report_body()
    head = (
        "POST /api/v1/reports HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]))
    with connect(path) as s:
        s.sendall(head + chunks + b"0\r\n\r\n")
        return status_of(s)


def test_a_chunked_report_is_stored_through_the_proxy(stack: tuple[Path, str]) -> None:
    tmp, token = stack
    assert post_chunked(tmp / "nginx.sock", token) == 201


def test_control_gunicorn_alone_sees_an_empty_chunked_body(stack: tuple[Path, str]) -> None:
    tmp, token = stack
    assert post_chunked(tmp / "gunicorn.sock", token) == 400


def hold_a_slow_body(path: Path, token: str) -> socket.socket:
    """Headers and a third of a declared body, then nothing: a slow client (with a valid token, so the
    endpoint reads the body)."""
    s = connect(path)
    s.sendall(
        b"POST /api/v1/reports HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\n".encode()
        + b"Content-Length: 3000\r\n\r\n"
        + b" " * 1000
    )
    return s


def ping(path: Path, timeout: float) -> int:
    with connect(path, timeout) as s:
        s.sendall(b"GET /api/v1/ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return status_of(s)


def test_a_slow_body_does_not_hold_the_worker_behind_the_proxy(stack: tuple[Path, str]) -> None:
    tmp, token = stack
    slow = hold_a_slow_body(tmp / "nginx.sock", token)
    try:
        assert ping(tmp / "nginx.sock", timeout=30) == 200
    finally:
        slow.close()


def test_control_a_slow_body_holds_the_only_worker_of_gunicorn_alone(stack: tuple[Path, str]) -> None:
    tmp, token = stack
    slow = hold_a_slow_body(tmp / "gunicorn.sock", token)
    try:
        with pytest.raises(TimeoutError):
            ping(tmp / "gunicorn.sock", timeout=3)  # the worker waits for the rest of the slow body
    finally:
        slow.close()


# --- the real client behind nginx (MESHDASH_TRUSTED_PROXIES) -------------------------------------------

NGINX_TCP_CONF = """
daemon off;
user {user};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{trusted_port};
    location / {{
      proxy_pass http://127.0.0.1:{trusted_upstream};
      proxy_set_header Host localhost;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
  }}
  server {{
    listen 127.0.0.1:{plain_port};
    location / {{
      proxy_pass http://127.0.0.1:{plain_upstream};
      proxy_set_header Host localhost;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        try:
            if http_status(port, "127.0.0.1", "GET", "/api/v1/ping") == 200:
                return
        except OSError:
            pass
        assert proc.poll() is None, f"{proc.args[0]} exited"
        proc_wait(proc, 0.1)
    raise AssertionError(f"port {port} never answered")


def http_status(port: int, source: str, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    """One request to nginx on loopback from the client address ``source`` (any 127.x address)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        body = b"{}" if method == "POST" else None
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def tcp_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """nginx on two loopback ports: one in front of a gunicorn that trusts it (MESHDASH_TRUSTED_PROXIES=
    127.0.0.1), one in front of a gunicorn with the setting off; a check limit of 2 a minute."""
    tmp = tmp_path_factory.mktemp("tcp-proxy")
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "REDIS_URL", "CACHE_URL")}
    env |= {"DEBUG": "true", "DATABASE_URL": f"sqlite:///{tmp}/db.sqlite3", "MESHDASH_CHECK_RATE_LIMIT": "2"}
    env |= {"MESHDASH_METRICS_TOKEN": METRICS_TOKEN}
    manage(env, "migrate", "--noinput", "-v0")
    ports = {name: free_port() for name in ("trusted", "trusted_upstream", "plain", "plain_upstream")}
    procs = []
    for name, trusted in (("trusted_upstream", "127.0.0.1"), ("plain_upstream", "")):
        procs.append(
            subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "gunicorn"),
                    "meshdash.wsgi",
                    "--workers",
                    "1",
                    "--bind",
                    f"127.0.0.1:{ports[name]}",
                    "--timeout",
                    "120",
                ],
                cwd=ROOT,
                env=env | {"MESHDASH_TRUSTED_PROXIES": trusted},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    conf = NGINX_TCP_CONF.format(
        tmp=tmp,
        user=getpass.getuser(),
        trusted_port=ports["trusted"],
        trusted_upstream=ports["trusted_upstream"],
        plain_port=ports["plain"],
        plain_upstream=ports["plain_upstream"],
    )
    (tmp / "nginx.conf").write_text(conf)
    procs.append(
        subprocess.Popen([NGINX, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], stderr=subprocess.DEVNULL)
    )
    try:
        wait_for_port(ports["trusted_upstream"], procs[0])
        wait_for_port(ports["plain_upstream"], procs[1])
        wait_for_port(ports["trusted"], procs[2])
        yield ports
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)


METRICS_TOKEN = "metrics-token-for-the-proxy-test"


@pytest.mark.parametrize("nginx", ["trusted", "plain"])
def test_through_the_readmes_nginx_metrics_need_the_token(tcp_stack: dict[str, int], nginx: str) -> None:
    # issue 48: nginx on loopback makes every visitor's peer 127.0.0.1, on the default allowed list
    port = tcp_stack[nginx]
    for source in ("127.0.0.6", "127.0.0.1"):
        assert http_status(port, source, "GET", "/metrics") == 401
    bearer = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    assert http_status(port, "127.0.0.6", "GET", "/metrics", bearer) == 200
    # its control (judged on the peer: 200 to anyone) is in tests/test_metrics.py


def checks(port: int, source: str, count: int, forged: str | None = None) -> list[int]:
    headers = {"X-Forwarded-For": forged} if forged else {}
    return [http_status(port, source, "POST", "/api/v1/check-manifest", headers) for _ in range(count)]


def test_behind_a_trusted_nginx_each_client_has_its_own_rate_limit(tcp_stack: dict[str, int]) -> None:
    port = tcp_stack["trusted"]
    assert checks(port, "127.0.0.2", 3)[2] == 429  # the limit is 2 a minute
    assert 429 not in checks(port, "127.0.0.3", 2)  # another client behind the same nginx: its own budget
    # Forging the header does not buy a new budget: nginx appends the real address, which is counted.
    assert checks(port, "127.0.0.2", 2, forged="198.51.100.7") == [429, 429]


def test_control_with_the_setting_off_every_client_behind_nginx_shares_one_budget(
    tcp_stack: dict[str, int],
) -> None:
    port = tcp_stack["plain"]
    assert checks(port, "127.0.0.4", 3)[2] == 429
    assert checks(port, "127.0.0.5", 1) == [429]  # locked out by someone else's requests
