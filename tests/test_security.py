"""Security: deploy checks with production settings, the CSP and the templates it relies on, the admin,
hostile repo ids at every entry point, and hostile stored text rendered inert on every page."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote, urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError
from django.test import Client
from django.urls import Resolver404, URLPattern, resolve
from django.utils import timezone

from meshdash.settings import proxy_ssl_header
from packages_app import tasks
from packages_app.devhub import DevHub
from packages_app.models import Package, PackageFile, Revision
from tests import dashboard_factories as f

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIRS = [ROOT / "templates", *ROOT.glob("packages_app/templates")]
POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "object-src": "'none'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
}
HOSTILE = (
    "</script><script>alert(1)</script><img src=x onerror=alert(2)><a href=javascript:alert(3)>x</a>{{7*7}}"
)


# --- settings: production is secure by default, development stays plain HTTP -------------------------


def settings_in_subprocess(env: dict[str, str], *names: str) -> dict[str, Any]:
    """Import meshdash.settings under exactly this environment and return the named values."""
    code = (
        "import json, meshdash.settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {list(names)!r}}}, default=str))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_ENV}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


_SETTINGS_ENV = {
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "SECURE_SSL_REDIRECT",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_HSTS_SECONDS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "MESHDASH_ADMIN_PATH",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
}


def production_env(**extra: str) -> dict[str, str]:
    return {
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "meshdash.example.org",
        **extra,
    }


def run_manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_ENV}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_deploy_check_passes_at_warning_level_with_production_settings() -> None:
    result = run_manage(production_env(), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_deploy_check_fails_on_development_settings_so_the_check_above_means_something() -> None:
    result = run_manage({"DEBUG": "true"}, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    for code in ("W004", "W008", "W009", "W012", "W016", "W018"):
        assert f"security.{code}" in result.stderr


def test_production_cookies_are_secure_and_https_is_enforced() -> None:
    values = settings_in_subprocess(
        production_env(SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto,https"),
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SESSION_COOKIE_HTTPONLY",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER",
        "X_FRAME_OPTIONS",
    )
    assert values == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "X_FRAME_OPTIONS": "DENY",
    }


def test_local_development_keeps_working_over_plain_http() -> None:
    names = ("SESSION_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS")
    values = settings_in_subprocess({"DEBUG": "true"}, *names)
    assert values == {"SESSION_COOKIE_SECURE": False, "SECURE_SSL_REDIRECT": False, "SECURE_HSTS_SECONDS": 0}


def test_each_production_default_can_be_overridden_from_the_environment() -> None:
    values = settings_in_subprocess(production_env(SECURE_SSL_REDIRECT="false"), "SECURE_SSL_REDIRECT")
    assert values == {"SECURE_SSL_REDIRECT": False}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", None),
        ("X-Forwarded-Proto,https", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("HTTP_X_FORWARDED_PROTO, https", ("HTTP_X_FORWARDED_PROTO", "https")),
    ],
)
def test_the_proxy_ssl_header_is_read_as_header_name_and_value(
    value: str, expected: tuple[str, str] | None
) -> None:
    assert proxy_ssl_header(value) == expected


@pytest.mark.parametrize("value", ["X-Forwarded-Proto", "X-Forwarded-Proto,", ",https"])
def test_a_malformed_proxy_ssl_header_stops_the_process_with_a_reason(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="Header-Name,value"):
        proxy_ssl_header(value)


# --- the Content-Security-Policy ----------------------------------------------------------------------


def parse_policy(header: str) -> dict[str, str]:
    directives = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {d[0]: d[1] if len(d) > 1 else "" for d in directives}


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/", "/ingest/", "/api/v1/packages", "/api/v1/ping", "/no-such-page/"])
def test_every_response_carries_the_content_security_policy(client: Client, url: str) -> None:
    response = client.get(url)
    assert parse_policy(response["Content-Security-Policy"]) == POLICY


@pytest.mark.django_db
def test_the_admin_login_page_carries_the_policy_too(client: Client) -> None:
    response = client.get(f"/{settings.MESHDASH_ADMIN_PATH}login/")
    assert response.status_code == 200
    assert "unsafe-inline" not in response["Content-Security-Policy"]


@dataclass
class ScriptAudit(HTMLParser):
    """Everything in a page that a CSP without 'unsafe-inline' would block or that runs script."""

    check_styles: bool = True
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script" and not attributes.get("src") and attributes.get("type") != "application/json":
            self.problems.append(f"inline <script> at line {self.getpos()[0]}")
        if self.check_styles and tag == "style":
            self.problems.append(f"inline <style> at line {self.getpos()[0]}")
        for name, value in attrs:
            self._check_attribute(tag, name, value or "")

    def _check_attribute(self, tag: str, name: str, value: str) -> None:
        if name.startswith("on"):
            self.problems.append(f"<{tag} {name}=...> inline event handler")
        if self.check_styles and name == "style":
            self.problems.append(f"<{tag} style=...> inline style")
        if name in ("href", "src", "action", "formaction") and value.strip().lower().startswith(
            "javascript:"
        ):
            self.problems.append(f"<{tag} {name}={value!r}> javascript: URL")


def audit_html(html: str, check_styles: bool = True) -> list[str]:
    parser = ScriptAudit(check_styles=check_styles)
    parser.feed(html)
    parser.close()
    return parser.problems


def template_files() -> list[Path]:
    return sorted(p for d in TEMPLATE_DIRS for p in d.rglob("*.html"))


def test_there_are_templates_to_check() -> None:
    assert len(template_files()) >= 5


@pytest.mark.parametrize("path", template_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_template_has_inline_script_handlers_styles_or_unescaped_output(path: Path) -> None:
    source = path.read_text()
    # Template tags are replaced by a neutral word so the HTML parser sees the markup around them.
    markup = re.sub(r"{%.*?%}|{{.*?}}", "x", source, flags=re.DOTALL)
    assert audit_html(markup) == []
    assert not re.search(r"\|\s*safe\b|{%\s*autoescape\s+off", source), "never |safe or autoescape off"


@pytest.mark.parametrize(
    "markup",
    [
        "<script>alert(1)</script>",
        '<script type="text/javascript">x()</script>',
        '<button onclick="go()">go</button>',
        '<a href="javascript:go()">go</a>',
        '<div style="color:red">x</div>',
        "<style>p{}</style>",
    ],
)
def test_the_page_checker_catches_what_the_policy_would_block(markup: str) -> None:
    assert audit_html(f"<p>{markup}</p>") != []


def test_the_page_checker_accepts_external_scripts_and_json_data() -> None:
    ok = '<script src="/static/a.js" defer></script><script id="d" type="application/json">{"a": 1}</script>'
    assert audit_html(ok) == []


# --- hostile stored text, rendered on every page ------------------------------------------------------


@pytest.fixture
def hostile_package(db: None) -> Package:
    """A package whose every repo-, GGUF- and node-controlled string is an attack."""
    package = f.make_package("meshllm/hostile-layers")
    old = f.make_revision(package, "consistent-mtp", commit_sha=f.sha("old"), latest=False, files=True)
    revision = f.make_revision(package, "undeclared-mtp", title=HOSTILE, files=True, error=HOSTILE)
    revision.audit["problems"][0]["message"] = HOSTILE
    revision.audit["problems"][0]["evidence"] = {"path": HOSTILE}
    revision.audit["detected"]["blocks"][3]["file"] = HOSTILE
    revision.audit["runtime"]["auto"]["explanation"] = HOSTILE
    revision.manifest_json["model_id"] = HOSTILE
    revision.save()
    kv = f.qwen35_kv() | {"general.name": HOSTILE, "tokenizer.chat_template": HOSTILE * 3}
    PackageFile.objects.filter(revision__in=[revision, old]).update(kv=kv)
    PackageFile.objects.create(revision=revision, path=f"notes/{HOSTILE[:60]}.txt", size=1)
    node = f.make_node(HOSTILE[:90])
    recent = timezone.now()  # inside the fleet pages' window, so the topology page has a run to show
    f.make_report(node, revision, 3.1, recent, effective_strategy=HOSTILE[:60], topology_id=HOSTILE[:200])
    failed = f.make_revision(package, "", status=Revision.Status.FAILED, error=HOSTILE, latest=False)
    assert failed.error == HOSTILE
    return package


HOSTILE_NODE = quote(HOSTILE[:90], safe="")
HOSTILE_TOPOLOGY = quote(HOSTILE[:200], safe="")
HOSTILE_PAGES = [
    "/",
    "/?q=%3Cscript%3Ealert(1)%3C/script%3E",
    "/?verdict=%3Cimg%20src=x%20onerror=alert(1)%3E",
    "/ingest/",
    "/packages/meshllm/hostile-layers/",
    "/packages/meshllm/hostile-layers/?revision=%3Cscript%3E",
    "/packages/meshllm/hostile-layers/files/layers/layer-001.gguf",
    "/packages/meshllm/hostile-layers/files/layers/layer-040.gguf",
    "/packages/meshllm/hostile-layers/diff",
    "/packages/meshllm/hostile-layers/compare",
    "/packages/meshllm/hostile-layers/compare?from=%3Cscript%3E&to=%3Cimg%20src=x%3E",
    "/packages/meshllm/%3Cscript%3E/",
    "/nodes/",
    "/nodes/?action=1",
    f"/nodes/{HOSTILE_NODE}/",
    f"/topologies/{HOSTILE_TOPOLOGY}/",
    "/topologies/%3Cscript%3Ealert(1)%3C/script%3E/",
    "/glossary/",
    "/check/",
    "/accounts/login/?next=%3Cscript%3Ealert(1)%3C/script%3E",
    f"/{settings.MESHDASH_ADMIN_PATH}login/?next=%3Cscript%3Ealert(1)%3C/script%3E",
    "/no-such-page/%3Cscript%3Ealert(1)%3C/script%3E",
]
# Downloads: the hostile text comes back as data, never as a page a browser would run.
HOSTILE_DOWNLOADS = {
    "/catalog.csv": "text/csv",
    "/packages/meshllm/hostile-layers/reports.csv": "text/csv",
    "/packages/meshllm/hostile-layers/manifest.patched.json": "application/json",
}
# Routes that are not pages: the JSON APIs (test_json_endpoints_... below, and their own tests), and the
# operators' actions, which answer a POST with a redirect (tests/test_fixes_web.py, tests/test_access.py).
NOT_PAGES = {
    "api_reports", "api_reports_batch", "api_runs", "api_baselines", "otlp_traces", "api_ping",
    "api_certify_reports", "api_hook_hub", "api_check_manifest", "api_openapi", "api_packages", "api_package",
    "api_node",
    "logout", "package_untrack", "package_delete", "package_reingest", "package_sync", "package_propose_fix",
}  # fmt: skip


def page_routes() -> set[str]:
    """The name of every route of the application's URL conf (the admin's are Django's own)."""
    from packages_app.web import urls

    return {pattern.name for pattern in urls.urlpatterns if isinstance(pattern, URLPattern) and pattern.name}


def routes_requested(urls: list[str]) -> set[str]:
    """The names of the application's routes these URLs reach."""
    found = set()
    for url in urls:
        with contextlib.suppress(Resolver404):
            match = resolve(urlsplit(url).path)
            if match.namespace == "packages_app":  # the admin's login is not the application's
                found.add(match.url_name)
    return found


def test_the_hostile_page_list_covers_every_page_the_url_conf_routes() -> None:
    requested = routes_requested(HOSTILE_PAGES) | routes_requested(list(HOSTILE_DOWNLOADS))
    assert page_routes() - NOT_PAGES - requested == set()
    assert page_routes() >= NOT_PAGES  # a route renamed or gone leaves the list


def test_control_a_page_missing_from_the_list_is_found() -> None:
    # Without the fleet pages, the check names them: the list of 11 URLs this test once had left them out.
    shortened = [url for url in HOSTILE_PAGES if not url.startswith(("/nodes/", "/topologies/"))]
    requested = routes_requested(shortened) | routes_requested(list(HOSTILE_DOWNLOADS))
    assert page_routes() - NOT_PAGES - requested == {"nodes", "node", "topology"}


@pytest.mark.django_db
@pytest.mark.parametrize("url", HOSTILE_PAGES)
def test_hostile_text_is_inert_on_every_page(client: Client, hostile_package: Package, url: str) -> None:
    response = client.get(url)
    assert response.status_code < 500
    body = response.content.decode()
    assert audit_html(body) == []
    assert "<script>alert(1)</script>" not in body and "<img src=x" not in body


@pytest.mark.django_db
def test_the_hostile_node_and_topology_pages_show_their_hostile_names_escaped(
    client: Client, hostile_package: Package
) -> None:
    # The fleet pages render the node's and the topology's names: they are found, and shown as text.
    for url in (f"/nodes/{HOSTILE_NODE}/", f"/topologies/{HOSTILE_TOPOLOGY}/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "content_type"), HOSTILE_DOWNLOADS.items())
def test_downloads_serve_hostile_text_as_data(
    client: Client, hostile_package: Package, url: str, content_type: str
) -> None:
    response = client.get(url)
    assert response.status_code == 200, url
    assert response["Content-Type"].startswith(content_type)
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["package", "revision", "packagefile", "report", "node"])
def test_hostile_text_is_inert_in_the_admin(
    admin_client: Client, hostile_package: Package, model: str
) -> None:
    response = admin_client.get(f"/{settings.MESHDASH_ADMIN_PATH}packages_app/{model}/")
    assert response.status_code in (200, 404)  # 404: that model is not registered with the admin
    # Django's own admin markup uses a few style attributes; scripts and handlers are what matter here.
    assert audit_html(response.content.decode(), check_styles=False) == []


@pytest.mark.django_db
def test_json_endpoints_return_hostile_text_as_data_not_markup(
    client: Client, hostile_package: Package
) -> None:
    response = client.get("/api/v1/packages/meshllm/hostile-layers")
    assert response["Content-Type"].startswith("application/json")
    assert response["X-Content-Type-Options"] == "nosniff"


# --- the admin -------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_sends_anonymous_visitors_to_the_login_page(client: Client) -> None:
    response = client.get(f"/{settings.MESHDASH_ADMIN_PATH}")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
def test_the_admin_refuses_a_logged_in_user_who_is_not_staff(client: Client) -> None:
    client.force_login(User.objects.create_user("viewer", password="a-long-password-1"))
    response = client.get(f"/{settings.MESHDASH_ADMIN_PATH}packages_app/package/")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
def test_the_admin_opens_for_staff(admin_client: Client) -> None:
    assert admin_client.get(f"/{settings.MESHDASH_ADMIN_PATH}").status_code == 200


def test_the_admin_path_is_configurable() -> None:
    code = "import django; django.setup(); from django.urls import reverse; print(reverse('admin:index'))"
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_ENV}
    env = clean | {"MESHDASH_ADMIN_PATH": "ops-7f3a/", "DJANGO_SETTINGS_MODULE": "meshdash.settings"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.stdout.strip() == "/ops-7f3a/", result.stderr


@pytest.mark.parametrize("path", ["/admin/", "admin", "a dmin/", "../admin/"])
def test_a_malformed_admin_path_stops_the_process(path: str) -> None:
    code = "import meshdash.settings"
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_ENV}
    env = clean | {"MESHDASH_ADMIN_PATH": path}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0 and "MESHDASH_ADMIN_PATH" in result.stderr


# --- hostile repo ids at every entry point, refused before any request ---------------------------------

BAD_REPO_IDS = [
    "https://evil.example/meshllm/x-layers",  # a Hub URL is taken only on the Hub's own origin
    "https://huggingface.co.evil.example/meshllm/x-layers",
    "https://user:pw@huggingface.co/meshllm/x-layers",
    "https://huggingface.co/meshllm/x-layers?x=1",
    "https://huggingface.co/datasets/meshllm/catalog",
    "https://huggingface.co/meshllm/x-layers/blob/main/model-package.json",
    "https://huggingface.co/meshllm/x-layers/tree/..%2F..%2Fetc",
    "http://127.0.0.1:6379/meshllm",
    "file:///etc/passwd",
    "../../etc/passwd",
    "/etc/passwd",
    "meshllm/../secrets",
    "meshllm/a--b",
    "meshllm/a..b",
    "meshllm/x-layers.git",
    "meshllm/" + "a" * 97,
    "meshllm/x\r\nX-Injected: 1",
    "meshllm/x?revision=main",
    "meshllm/x#frag",
    "meshllm/x layers",
]


@pytest.fixture
def hub_requests(hub_settings: DevHub) -> Any:
    """The number of requests devhub has received since the test began."""
    hub_settings.counters.reset()
    return lambda: hub_settings.counters.requests


@pytest.fixture
def no_enqueue() -> Any:
    with (
        mock.patch.object(tasks.sync_package_task, "delay_on_commit") as sync,
        mock.patch.object(tasks.ingest_revision_task, "delay_on_commit") as ingest,
        mock.patch.object(tasks.track_package_task, "delay_on_commit") as track,
    ):
        yield lambda: sync.call_count + ingest.call_count + track.call_count


@pytest.mark.django_db
@pytest.mark.parametrize("repo_id", BAD_REPO_IDS)
def test_the_track_form_refuses_a_hostile_repo_id_before_any_request(
    operator_client: Client, hub_requests: Any, no_enqueue: Any, repo_id: str
) -> None:
    response = operator_client.post("/ingest/", {"repo_id": repo_id})
    assert response.status_code == 400
    assert not Package.objects.exists() and no_enqueue() == 0 and hub_requests() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["ingest", "track"])
@pytest.mark.parametrize("repo_id", BAD_REPO_IDS)
def test_the_commands_refuse_a_hostile_repo_id_before_any_request(
    hub_requests: Any, no_enqueue: Any, command: str, repo_id: str
) -> None:
    if command not in get_commands():
        pytest.skip(f"there is no `manage.py {command}` command yet")
    with pytest.raises(CommandError):
        call_command(command, repo_id, stdout=StringIO(), stderr=StringIO())
    assert not Package.objects.exists() and no_enqueue() == 0 and hub_requests() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("repo_id", [r for r in BAD_REPO_IDS if not Path(r).is_dir()])
def test_audit_package_refuses_a_hostile_repo_id_with_exit_2_before_any_request(
    hub_requests: Any, repo_id: str
) -> None:
    stderr = StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("audit_package", repo_id, stdout=StringIO(), stderr=stderr)
    assert exit_info.value.code == 2 and "error: could not audit" in stderr.getvalue()
    assert hub_requests() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("repo_id", BAD_REPO_IDS)
def test_the_webhook_refuses_a_hostile_repo_id_before_any_request(
    client: Client, settings: Any, hub_requests: Any, no_enqueue: Any, repo_id: str
) -> None:
    settings.MESHDASH_WEBHOOK_SECRET = "s3cret-webhook-value-0123456789"
    body = {
        "event": {"action": "update", "scope": "repo.content"},
        "repo": {"type": "model", "name": repo_id},
    }
    response = client.post(
        "/api/v1/hooks/hub",
        data=json.dumps(body),
        content_type="application/json",
        headers={"X-Webhook-Secret": settings.MESHDASH_WEBHOOK_SECRET},
    )
    assert response.status_code == 400 and response.json()["error"].startswith("repo.name")
    assert no_enqueue() == 0 and hub_requests() == 0
