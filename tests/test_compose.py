"""docker-compose.yml, Dockerfile and .env.example agree with the code: services, commands, ports, env names.

There is no Docker engine here, so each command is checked against what it names: manage.py
subcommands and their options, the Celery app and its CLI, gunicorn's module path and options.
"""

from __future__ import annotations

import http.server
import importlib
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, get_commands, load_command_class
from gunicorn.config import Config as GunicornConfig

ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = ("web", "worker", "beat", "devhub")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines())
    return {k.strip(): v.strip() for k, v in (p for p in pairs if len(p) == 2) if not k.startswith("#")}


def names_the_code_reads() -> set[str]:
    """Environment variables read by settings (env* helpers, os.environ) and by the hub package (HF_TOKEN)."""
    sources = [ROOT / "meshdash" / "settings.py", *sorted((ROOT / "packages_app" / "hub").glob("*.py"))]
    pattern = re.compile(
        r"""(?:env(?:str|bool|int|list)\(|os\.environ\.get\(|os\.environ\[)\s*["']([A-Z0-9_]+)"""
    )
    return {name for path in sources for name in pattern.findall(path.read_text())}


def shell_commands(service: dict[str, Any]) -> list[list[str]]:
    """A service's command as argv lists: ``sh -c "a && exec b"`` gives [a, b]."""
    command = service["command"]
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:2] != ["sh", "-c"]:
        return [argv]
    return [shlex.split(part.strip().removeprefix("exec ")) for part in argv[2].split("&&")]


def check_manage_py(argv: list[str]) -> None:
    """``python manage.py NAME ARGS``: the command exists and its parser accepts ARGS."""
    assert argv[:2] == ["python", "manage.py"], argv
    name, args = argv[2], argv[3:]
    commands = get_commands()
    assert name in commands, f"manage.py has no {name!r} command"
    parser = load_command_class(commands[name], name).create_parser("manage.py", name)
    parser.parse_args(args)  # CommandError on an unknown option


def check_gunicorn(argv: list[str]) -> int:
    """``gunicorn MODULE ARGS``: options parse, MODULE exposes a WSGI callable; returns the bound port."""
    assert argv[0] == "gunicorn"
    options = GunicornConfig().parser().parse_args(argv[1:])
    module, _, attribute = options.args[0].partition(":")
    assert callable(getattr(importlib.import_module(module), attribute or "application"))
    return int(options.bind[0].rsplit(":", 1)[1])


def check_celery(argv: list[str]) -> None:
    """``celery -A APP SUB ARGS``: the app loads and Celery's own CLI accepts the options."""
    assert argv[:3] == ["celery", "-A", "meshdash"]
    result = subprocess.run(
        [sys.executable, "-m", "celery", *argv[1:], "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "meshdash.settings"},
    )
    assert result.returncode == 0, result.stderr


def published_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(p).rsplit(":", 1)[1]) for p in service.get("ports", [])}


# --- services ------------------------------------------------------------------------------------------


def test_the_compose_file_declares_the_production_shape(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"postgres", "redis", "web", "worker", "beat", "devhub"}
    assert services["devhub"]["profiles"] == ["demo"]
    assert all("profiles" not in services[name] for name in ("postgres", "redis", "web", "worker", "beat"))


def test_postgres_keeps_its_data_in_a_volume_and_reports_its_health(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    postgres = services["postgres"]
    volume = next(v.split(":")[0] for v in postgres["volumes"] if v.endswith(":/var/lib/postgresql/data"))
    assert volume in compose["volumes"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_redis_persists_every_message_and_never_evicts_one(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--maxmemory-policy noeviction" in command
    assert any(v.endswith(":/data") and v.split(":")[0] in compose["volumes"] for v in redis["volumes"])
    assert "ping" in redis["healthcheck"]["test"]


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_wait_for_healthy_postgres_and_redis(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert services[name]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_reach_postgres_and_redis_by_service_name(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    env = services[name]["environment"]
    database, broker = urlsplit(env["DATABASE_URL"]), urlsplit(env["CELERY_BROKER_URL"])
    postgres = services["postgres"]["environment"]
    assert (database.hostname, database.port) == ("postgres", 5432)
    assert (database.username, database.password) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
    )
    assert database.path == f"/{postgres['POSTGRES_DB']}"
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)
    assert urlsplit(env["REDIS_URL"]).path != broker.path, "the cache and the broker share a Redis database"


# --- commands -----------------------------------------------------------------------------------------


def test_web_migrates_collects_static_and_serves_with_gunicorn_on_its_published_port(
    services: dict[str, dict[str, Any]],
) -> None:
    *setup, server = shell_commands(services["web"])
    assert [argv[2] for argv in setup] == ["migrate", "collectstatic"]
    for argv in setup:
        check_manage_py(argv)
    assert check_gunicorn(server) in published_ports(services["web"])


def test_static_files_are_served_by_whitenoise_right_after_the_security_middleware() -> None:
    middleware = settings.MIDDLEWARE
    assert middleware.index("whitenoise.middleware.WhiteNoiseMiddleware") == 2
    assert middleware[1] == "django.middleware.security.SecurityMiddleware"
    # Only the probes come first: a container probe is plain HTTP to 127.0.0.1 (tests/test_health.py).
    assert middleware[0] == "packages_app.web.health.ProbeMiddleware"


def probe_url(service: dict[str, Any]) -> str:
    """The URL a service's healthcheck fetches (``python -c "...urlopen('URL'...)"``)."""
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], test
    (url,) = re.findall(r"urlopen\('([^']+)'", test[3])
    return url


def test_web_is_healthy_when_readyz_answers_on_the_port_gunicorn_binds(
    services: dict[str, dict[str, Any]],
) -> None:
    url = urlsplit(probe_url(services["web"]))
    assert (url.hostname, url.path) == ("127.0.0.1", "/readyz")
    assert url.port == check_gunicorn(shell_commands(services["web"])[-1])
    check = services["web"]["healthcheck"]
    assert check["start_period"] and check["timeout"] and check["retries"]


def test_the_web_probe_fails_its_command_on_a_503(services: dict[str, dict[str, Any]]) -> None:
    """urlopen raises on a 503, so the one-line probe exits non-zero: run it against a closed port and
    against a server that answers 503."""
    script = services["web"]["healthcheck"]["test"][3]

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(int(self.path == "/readyz" and status))
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exits = {}
    try:
        for status in (200, 503):
            probe = script.replace("127.0.0.1:8000", f"127.0.0.1:{server.server_port}")
            run = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30)
            exits[status] = run.returncode
    finally:
        server.shutdown()
        server.server_close()
    assert exits[200] == 0 and exits[503] != 0


def test_the_worker_is_healthy_when_it_answers_a_celery_ping(services: dict[str, dict[str, Any]]) -> None:
    test = services["worker"]["healthcheck"]["test"]
    assert test[:2] == ["CMD-SHELL", test[1]]
    argv = shlex.split(test[1])
    check_celery(argv[: argv.index("-d")])
    assert argv[3:5] == ["inspect", "ping"] and argv[argv.index("-d") + 1] == "celery@$$HOSTNAME"


@pytest.mark.parametrize(("name", "subcommand"), [("worker", "worker"), ("beat", "beat")])
def test_worker_and_beat_run_the_meshdash_celery_app(
    services: dict[str, dict[str, Any]], name: str, subcommand: str
) -> None:
    (argv,) = shell_commands(services[name])
    assert argv[3] == subcommand
    check_celery(argv)


def test_the_devhub_command_exists_and_listens_on_its_published_port(
    services: dict[str, dict[str, Any]],
) -> None:
    (argv,) = shell_commands(services["devhub"])
    check_manage_py(argv)
    assert int(argv[argv.index("--port") + 1]) in published_ports(services["devhub"])


def test_the_dockerfile_serves_the_same_wsgi_module_on_the_port_it_exposes() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd is not None
    port = check_gunicorn(yaml.safe_load(cmd.group(1)))
    assert f"EXPOSE {port}" in dockerfile
    for name in re.findall(r"python manage\.py (\w+)", dockerfile):
        assert name in get_commands()


def test_a_broken_command_would_be_caught() -> None:
    with pytest.raises(AssertionError, match="no 'migrat' command"):
        check_manage_py(["python", "manage.py", "migrat"])
    with pytest.raises(CommandError, match="unrecognized arguments"):
        check_manage_py(["python", "manage.py", "migrate", "--no-such-option"])
    with pytest.raises(ModuleNotFoundError):
        check_gunicorn(["gunicorn", "meshdash.wsgl", "--bind", "0.0.0.0:8000"])


# --- environment variables -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", APP_SERVICES)
def test_every_variable_compose_sets_for_the_app_is_one_the_code_reads(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    assert set(services[name]["environment"]) - names_the_code_reads() == set()
    assert services[name]["env_file"] == ".env"


def test_every_variable_in_env_example_is_one_the_code_reads() -> None:
    assert set(env_example()) - names_the_code_reads() == set()


def test_env_example_names_what_production_requires() -> None:
    example = env_example()
    assert example["DEBUG"] == "false"
    assert {"SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL"} <= set(example)


def test_settings_load_with_the_example_environment() -> None:
    code = (
        "import meshdash.settings as s\n"
        "print(s.DEBUG, s.CELERY_VISIBILITY_TIMEOUT > s.CELERY_TASK_TIME_LIMIT)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env_example()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_the_env_name_scan_finds_the_settings_it_should() -> None:
    assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "HF_TOKEN", "MESHDASH_WEBHOOK_SECRET"} <= (
        names_the_code_reads()
    )
