"""/metrics: who may scrape it, which counters move after an ingest and a report batch, the database's
gauges, bounded labels; and a live gunicorn with several workers (multiprocess mode) plus a Celery
worker writing to the same folder, scraped from outside."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from prometheus_client import REGISTRY, CollectorRegistry, Counter, values
from prometheus_client.parser import text_string_to_metric_families

from packages_app import metrics, monitoring, tasks
from packages_app.devhub import QWEN35_FIRST_SHA, QWEN35_REPO, DevHub
from packages_app.models import Revision
from packages_app.nodes import identity as nodes
from packages_app.verdicts import Status
from tests.dashboard_factories import register_run

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "scrape-token-" + "x" * 20

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def scrape(settings: Any) -> Callable[[], Samples]:
    settings.MESHDASH_METRICS_CACHE_SECONDS = 0  # each scrape reads the database
    client = Client()

    def get() -> Samples:
        response = client.get("/metrics")
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain; version=")
        return parse(response.content.decode())

    return get


def report(index: int = 0, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "report_id": str(uuid.uuid4()),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": QWEN35_REPO, "revision": QWEN35_FIRST_SHA},
        "speculative": {
            "requested_strategy": "auto",
            "effective_strategy": "disabled",
            "mtp_source": "Disabled",
        },
        "timings": {"predicted_n": 256 + index, "predicted_ms": 80757.0, "predicted_per_second": 3.17},
    }
    return body | changes


def post_batch(client: Client, token: str, bodies: list[dict[str, Any]]) -> Any:
    return client.post(
        "/api/v1/reports/batch",
        json.dumps({"reports": bodies}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


# --- who may scrape ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_scraper_from_another_address_is_refused_and_loopback_is_allowed_by_default(settings: Any) -> None:
    settings.MESHDASH_METRICS_TOKEN = ""
    outside = Client(REMOTE_ADDR="203.0.113.9").get("/metrics")
    assert outside.status_code == 403 and b"meshdash_" not in outside.content
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200  # control


@pytest.mark.django_db
def test_with_a_token_set_a_scraper_needs_it_unless_its_address_is_allowed(settings: Any) -> None:
    settings.MESHDASH_METRICS_TOKEN = TOKEN
    settings.MESHDASH_METRICS_ALLOWED_ADDRESSES = ["10.1.0.0/16"]
    outside = Client(REMOTE_ADDR="203.0.113.9")
    assert outside.get("/metrics").status_code == 401
    assert outside.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-token-xxxxxxxxxxxx").status_code == 401
    assert outside.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert Client(REMOTE_ADDR="10.1.4.2").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 401  # loopback no longer listed


@pytest.mark.django_db
@pytest.mark.parametrize("trusted", [[], ["127.0.0.1/32"]], ids=["proxy-not-trusted", "proxy-trusted"])
def test_behind_a_loopback_proxy_a_visitor_needs_the_token(settings: Any, trusted: list[str]) -> None:
    # issue 48: nginx on loopback makes every visitor's peer 127.0.0.1, which the default list allows
    settings.MESHDASH_METRICS_TOKEN = TOKEN
    settings.MESHDASH_TRUSTED_PROXIES = trusted
    through_nginx = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    refused = through_nginx.get("/metrics")
    assert refused.status_code == 401 and b"meshdash_" not in refused.content
    assert through_nginx.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200  # a scraper on this host


@pytest.mark.django_db
def test_control_judged_on_the_peer_a_visitor_through_nginx_reads_the_metrics(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packages_app.web import metrics_view

    settings.MESHDASH_METRICS_TOKEN = TOKEN
    monkeypatch.setattr(metrics_view, "scraper_address", lambda request: request.META["REMOTE_ADDR"])
    leaked = Client(REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").get("/metrics")
    assert leaked.status_code == 200 and b"meshdash_" in leaked.content  # the finding


@pytest.mark.django_db
def test_metrics_answer_a_prometheus_scrape_on_an_unlisted_host_over_plain_http(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["meshdash.example.org"]
    settings.MESHDASH_PUBLIC_READ = False
    response = Client(HTTP_HOST="web:8000").get("/metrics")
    assert response.status_code == 200 and b"meshdash_database_up 1.0" in response.content


def test_bad_settings_stop_the_process_at_start() -> None:
    for env in ({"MESHDASH_METRICS_TOKEN": "short"}, {"MESHDASH_METRICS_ALLOWED_ADDRESSES": "10.0.0.0/33"}):
        result = subprocess.run(
            [sys.executable, "-c", "import meshdash.settings"],
            cwd=ROOT,
            env={**os.environ, "DEBUG": "true", **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr, env


def test_an_empty_multiprocess_setting_counts_in_memory_not_in_files_in_the_working_folder(
    tmp_path: Path,
) -> None:
    script = "from packages_app import metrics; metrics.count_ingest('done')"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": "", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.glob("*.db")) == []  # prometheus_client alone writes counter_<pid>.db here


def test_with_a_multiprocess_folder_each_process_writes_its_own_files_there_named_by_host_and_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "metrics"  # not there yet: a fresh volume
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    monkeypatch.setattr(values, "ValueClass", metrics.value_class(os.environ))
    Counter("meshdash_probe", "One count, to see where it is written.", registry=CollectorRegistry()).inc()
    assert [p.name for p in folder.iterdir()] == [f"counter_{socket.gethostname()}_{os.getpid()}.db"]


def test_an_empty_multiprocess_setting_counts_in_memory_and_none_leaves_prometheus_clients_choice() -> None:
    assert metrics.value_class({"PROMETHEUS_MULTIPROC_DIR": ""}) is values.MutexValue
    assert metrics.value_class({}) is values.ValueClass


def test_a_batch_of_no_reports_counts_nothing_and_an_open_outcome_counts_as_invalid() -> None:
    def counted(outcome: str) -> float:
        sample = REGISTRY.get_sample_value("meshdash_reports_total", {"source": "runs", "outcome": outcome})
        return sample or 0.0

    before = counted("created"), counted("invalid")
    metrics.count_reports("runs", "created", 0)
    metrics.count_reports("runs", "meshllm/a-layers", 2)
    assert (counted("created"), counted("invalid")) == (before[0], before[1] + 2)


# --- counters and gauges ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_ingest_moves_the_ingest_and_hub_counters_and_the_revision_gauges(
    hub_settings: DevHub, eager_tasks: None, scrape: Callable[[], Samples]
) -> None:
    before = scrape()
    result = tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    assert result.result == Revision.Status.DONE
    after = scrape()
    assert (
        value(after, "meshdash_ingests_total", outcome="done")
        == value(before, "meshdash_ingests_total", outcome="done") + 1
    )
    hub_before = sum(v for (n, _), v in before.items() if n == "meshdash_hub_requests_total")
    hub_after = sum(v for (n, _), v in after.items() if n == "meshdash_hub_requests_total")
    assert hub_after > hub_before
    assert value(after, "meshdash_hub_requests_total", kind="file-range", status="2xx") > value(
        before, "meshdash_hub_requests_total", kind="file-range", status="2xx"
    )
    assert value(after, "meshdash_hub_request_seconds_count", kind="api") > 0
    headline = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA).headline
    assert value(after, "meshdash_revisions", status=headline) == 1
    assert sum(value(after, "meshdash_revisions", status=s.value) for s in Status) == 1


@pytest.mark.django_db
def test_a_report_batch_moves_the_report_counters_by_outcome_and_the_node_gauges(
    hub_settings: DevHub, eager_tasks: None, scrape: Callable[[], Samples]
) -> None:
    tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    token = nodes.create_node("node-m").token
    # Its agent registered its run: its reports count in the revision's public figures and serving rows.
    register_run(nodes.get_node("node-m"), Revision.objects.get(commit_sha=QWEN35_FIRST_SHA))
    before = scrape()
    first, second = report(0), report(1)
    answer = post_batch(Client(), token, [first, second, {"report_id": "not-a-uuid"}])
    assert [r["status"] for r in answer.json()["results"]] == [201, 201, 400]
    post_batch(Client(), token, [first])  # a replay
    after = scrape()

    def moved(outcome: str) -> float:
        name = "meshdash_reports_total"
        return value(after, name, source="report", outcome=outcome) - value(
            before, name, source="report", outcome=outcome
        )

    assert (moved("created"), moved("invalid"), moved("duplicate")) == (2, 1, 1)
    assert value(after, "meshdash_nodes_seen") == 1
    headline = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA).headline
    assert value(after, "meshdash_served_revisions", status=headline) == 1
    assert value(after, "meshdash_rollup_lag_seconds") == 0
    # The first Qwen3.5 revision needs action (its headline is not a "serves" one): counted by cause.
    assert Status(headline).needs_action
    assert sum(v for (n, _), v in after.items() if n == "meshdash_nodes_needing_action") == 1


@pytest.mark.django_db
def test_refused_report_requests_are_counted_by_reason(scrape: Callable[[], Samples]) -> None:
    before = scrape()
    assert post_batch(Client(), "no-such-token", [report()]).status_code == 401
    answer = Client().post(
        "/api/v1/reports", "x", content_type="text/plain", HTTP_AUTHORIZATION="Bearer no-such-token"
    )
    assert answer.status_code == 401
    after = scrape()
    name = "meshdash_report_requests_refused_total"
    assert (
        value(after, name, source="report", reason="unauthorized")
        - value(before, name, source="report", reason="unauthorized")
        == 2
    )


@pytest.mark.django_db
def test_labels_never_carry_repo_or_node_names(
    hub_settings: DevHub, eager_tasks: None, scrape: Callable[[], Samples]
) -> None:
    tasks.ingest_revision_task.apply(args=(QWEN35_REPO, QWEN35_FIRST_SHA))
    for n in range(3):
        post_batch(Client(), nodes.create_node(f"node-{n}").token, [report(n)])
    label_values = {v for (_, labels) in scrape() for _, v in labels}
    assert not {v for v in label_values if "/" in v or v.startswith("node-") or QWEN35_FIRST_SHA in v}


def test_an_open_label_value_is_folded_into_a_closed_one() -> None:
    assert metrics.bounded("meshllm/Qwen3.5-layers", metrics.INGEST_OUTCOMES) == "other"
    assert metrics.status_class(429) == "429" and metrics.status_class(503) == "5xx"
    assert metrics.status_class(0) == "1xx" and metrics.status_class(999) == "5xx"
    assert metrics.hub_kind("/api/models/x", False) == "api"
    assert metrics.hub_kind("/x/resolve/main/a.gguf", True) == "file-range"
    assert metrics.hub_kind("/x/resolve/main/README.md", False) == "file"
    assert metrics.hub_kind("/favicon.ico", False) == "other"
    assert monitoring.headline_of("something-else") == Status.NOT_ASSESSED.value


@pytest.mark.django_db
def test_the_database_gauges_are_read_at_most_once_per_cache_period(
    settings: Any, django_assert_num_queries: Any
) -> None:
    settings.MESHDASH_METRICS_CACHE_SECONDS = 30
    from django.core.cache import cache

    from packages_app.web.metrics_view import FIGURES_KEY

    cache.delete(FIGURES_KEY)
    client = Client()
    client.get("/metrics")
    with django_assert_num_queries(0):
        assert client.get("/metrics").status_code == 200


# --- live: gunicorn with several workers and a Celery worker, one multiprocess folder ------------------

needs_services = pytest.mark.skipif(
    not os.environ.get("CELERY_BROKER_URL") or connection.vendor != "postgresql",
    reason="needs CELERY_BROKER_URL and a PostgreSQL DATABASE_URL (make test-services)",
)


def database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture(params=[True], ids=["multiprocess"])
def live(
    request: pytest.FixtureRequest, devhub: DevHub, transactional_db: None, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """gunicorn (3 workers) and a Celery worker (2 children) sharing one PROMETHEUS_MULTIPROC_DIR (or,
    with the parameter False, each process counting alone)."""
    from meshdash.celery import app
    from tests.test_faults import free_port, wait_until

    app.control.purge()
    port = free_port()
    folder = tmp_path / "prom"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "HF_ENDPOINT": devhub.url,
        "PROMETHEUS_MULTIPROC_DIR": str(folder) if request.param else "",
        "MESHDASH_METRICS_CACHE_SECONDS": "0",
    }
    log = (tmp_path / "live.log").open("wb")
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "meshdash.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "3"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "meshdash", "worker", "-c", "2", "--loglevel=INFO"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: http_get(base + "/healthz")[0] == 200, 60), (
            tmp_path / "live.log"
        ).read_text()
        yield {"base": base, "folder": folder, "wait_until": wait_until}
    finally:
        for proc in (web, worker):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in (web, worker):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def http_get(url: str, body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


@pytest.mark.services
@pytest.mark.serial
@needs_services
def test_a_live_gunicorn_with_three_workers_and_a_celery_worker_expose_one_set_of_moving_counters(
    live: dict[str, Any],
) -> None:
    base, wait_until = live["base"], live["wait_until"]
    tasks.ingest_revision_task.delay(QWEN35_REPO, QWEN35_FIRST_SHA)  # run by the Celery worker's children

    def ingested() -> bool:
        return (
            value(parse(http_get(base + "/metrics")[1].decode()), "meshdash_ingests_total", outcome="done")
            == 1
        )

    assert wait_until(ingested, 180)
    token = nodes.create_node("node-live").token
    # its agent registered the run: since issue 48 only such a node's reports make a served revision
    register_run(nodes.get_node("node-live"), Revision.objects.get(commit_sha=QWEN35_FIRST_SHA))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    batches = 12  # spread over the three gunicorn workers
    for n in range(batches):
        body = json.dumps({"reports": [report(2 * n), report(2 * n + 1)]}).encode()
        assert http_get(base + "/api/v1/reports/batch", body, **headers)[0] == 200
    scrapes = [parse(http_get(base + "/metrics")[1].decode()) for _ in range(6)]
    created = {value(s, "meshdash_reports_total", source="report", outcome="created") for s in scrapes}
    assert created == {2 * batches}  # whichever worker answers, it adds up every process's files
    assert {value(s, "meshdash_ingests_total", outcome="done") for s in scrapes} == {1}
    assert all(value(s, "meshdash_hub_requests_total", kind="file-range", status="2xx") > 0 for s in scrapes)
    headline = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA).headline
    assert all(value(s, "meshdash_served_revisions", status=headline) == 1 for s in scrapes)
    writers = {p.name.rsplit("_", 1)[-1] for p in live["folder"].glob("counter_*.db")}
    assert len(writers) >= 2  # web workers and worker children each wrote their own file


@pytest.mark.services
@pytest.mark.serial
@needs_services
@pytest.mark.parametrize("live", [False], ids=["no-folder"], indirect=True)
def test_control_without_the_multiprocess_folder_the_workers_ingest_is_never_seen(
    live: dict[str, Any],
) -> None:
    base, wait_until = live["base"], live["wait_until"]
    tasks.ingest_revision_task.delay(QWEN35_REPO, QWEN35_FIRST_SHA)

    def done() -> bool:
        return Revision.objects.filter(commit_sha=QWEN35_FIRST_SHA, status="done").exists()

    assert wait_until(done, 180)
    scrapes = [parse(http_get(base + "/metrics")[1].decode()) for _ in range(6)]
    # The Celery child counted its ingest in its own memory: no web worker can show it.
    assert {value(s, "meshdash_ingests_total", outcome="done") for s in scrapes} == {0}
    assert all(value(s, "meshdash_revisions", status=Status.NOT_ASSESSED.value) == 0 for s in scrapes)
