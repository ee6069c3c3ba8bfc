"""The command-line contract: audit_package, inspect_gguf, ingest, track, reaudit (docs/design.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from packages_app.devhub import GLM47_REPO, QWEN35_FIRST_SHA, QWEN35_REPO, DevHub, write_package_folder
from packages_app.models import Package, Revision

ROOT = Path(__file__).resolve().parent.parent


def manage(
    *args: str, endpoint: str | None = None, database: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run manage.py in a fresh process, as an operator would."""
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_DISABLE_TELEMETRY": "1"}
    if endpoint:  # devhub: a development endpoint, plain http on loopback, allowed explicitly
        env["HF_ENDPOINT"] = endpoint
        env["MESHDASH_HUB_DEV"] = "1"
    env["DATABASE_URL"] = f"sqlite:///{database}" if database else "sqlite:////nonexistent/never-used.sqlite3"
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def qwen_folder(demo_catalog: Path, tmp_path: Path) -> Path:
    return write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "qwen", root=demo_catalog)


def test_audit_package_on_the_motivating_revision_exits_1_with_the_fix(devhub: DevHub) -> None:
    done = manage("audit_package", QWEN35_REPO, "--revision", QWEN35_FIRST_SHA, "--json", endpoint=devhub.url)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["verdict"] == "undeclared-mtp"
    assert doc["suggested_generation"]["generation"]["speculative_decoding"]["strategies"]
    strategies = doc["suggested_generation"]["generation"]["speculative_decoding"]["strategies"]
    assert [s["layer_indices"] for s in strategies.values()] == [[40]]
    assert set(doc) >= {"verdict", "detected", "declared", "problems", "provenance", "runtime"}


def test_audit_package_on_the_fixed_revision_exits_0(devhub: DevHub) -> None:
    done = manage("audit_package", QWEN35_REPO, "--json", endpoint=devhub.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["verdict"] == "consistent-mtp"


def test_audit_package_on_a_local_folder_needs_no_database_and_no_network(qwen_folder: Path) -> None:
    # devhub's sparse files carry a cheap stand-in LFS oid, not their bytes' sha256, so hashing is
    # skipped here; tests/test_verify.py checks the hashing on folders whose digests are real.
    done = manage("audit_package", str(qwen_folder), "--no-verify", endpoint="http://127.0.0.1:9")
    assert done.returncode == 1, done.stderr
    assert "verdict: undeclared-mtp" in done.stdout
    assert '+  "generation"' in done.stdout
    assert "blk.40.nextn" in done.stdout


def test_audit_package_says_so_when_it_cannot_audit(devhub: DevHub) -> None:
    done = manage("audit_package", "meshllm/No-Such-Package-layers", endpoint=devhub.url)
    assert done.returncode == 2
    assert "could not audit" in done.stderr and "Traceback" not in done.stderr


def test_audit_package_refuses_a_repo_id_that_is_a_path_trick() -> None:
    done = manage("audit_package", "meshllm/../../etc")
    assert done.returncode == 2 and "not" in done.stderr


def test_inspect_gguf_reads_a_header_from_the_hub_with_its_cost(devhub: DevHub) -> None:
    uri = f"hf://{QWEN35_REPO}@{QWEN35_FIRST_SHA}/layers/layer-040.gguf"
    done = manage("inspect_gguf", uri, "--json", endpoint=devhub.url)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["kv"]["general.architecture"] == "qwen35moe"
    assert doc["kv"]["qwen35moe.nextn_predict_layers"] == 1
    assert doc["kv"]["tokenizer.ggml.tokens"]["array"] == "STRING"
    assert any(t["name"] == "blk.40.nextn.eh_proj.weight" for t in doc["tensors"])
    assert 1 <= doc["fetch"]["requests"] <= 3
    assert doc["fetch"]["bytes"] >= doc["header_bytes"]


def test_inspect_gguf_reads_a_plain_http_url(devhub: DevHub) -> None:
    url = f"{devhub.url}/{QWEN35_REPO}/resolve/{QWEN35_FIRST_SHA}/layers/layer-000.gguf"
    done = manage("inspect_gguf", url, endpoint=devhub.url)
    assert done.returncode == 0, done.stderr
    assert "architecture qwen35moe, blocks 41" in done.stdout


def test_inspect_gguf_reports_a_bad_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 100)
    done = manage("inspect_gguf", str(bad))
    assert done.returncode == 1
    assert done.stderr.startswith("error:") and "Traceback" not in done.stderr


@pytest.mark.django_db
def test_ingest_command_ingests_a_revision_and_a_rerun_does_nothing(hub_settings: DevHub) -> None:
    call_command("ingest", GLM47_REPO, "--no-progress")
    rev = Revision.objects.get(package__repo_id=GLM47_REPO)
    assert rev.status == "done" and rev.verdict == "consistent-mtp"
    call_command("ingest", GLM47_REPO, "--revision", rev.commit_sha, "--no-progress")
    assert Revision.objects.get(pk=rev.pk).attempts == 1


@pytest.mark.django_db
def test_track_command_stores_the_package(hub_settings: DevHub) -> None:
    call_command("track", QWEN35_REPO)
    assert Package.objects.filter(repo_id=QWEN35_REPO, tracked=True).exists()


@pytest.mark.django_db
def test_track_command_refuses_a_url_of_another_host() -> None:
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="not a URL of the Hub"):
        call_command("track", "https://elsewhere.example/meshllm/x")


@pytest.mark.django_db
def test_track_command_takes_a_hub_url(hub_settings: DevHub) -> None:
    call_command("track", f"{hub_settings.url}/{QWEN35_REPO}/tree/main", stdout=StringIO())
    assert Package.objects.filter(repo_id=QWEN35_REPO, tracked=True).exists()


@pytest.mark.django_db
def test_track_command_stores_nothing_for_a_repo_the_hub_does_not_have(hub_settings: DevHub) -> None:
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="meshllm/does-not-exist-layers is not tracked: The Hub has no"):
        call_command("track", "meshllm/does-not-exist-layers")
    assert not Package.objects.exists()


@pytest.mark.django_db
def test_wait_ingested_counts_failed_ingests_as_failed() -> None:
    from tests import dashboard_factories as f

    package = f.make_package("meshllm/Mixed-layers")
    package.last_synced_at = f.BASE_TIME
    package.save(update_fields=["last_synced_at"])
    f.make_revision(package)
    f.make_revision(package, "", status="failed", latest=False)
    out = StringIO()
    call_command("wait_ingested", "--timeout", "1", stdout=out)
    assert (
        out.getvalue().strip() == "all 2 revisions finished: 1 ingested, 1 failed (the ingest page says why)"
    )


def test_audit_package_takes_the_short_sha_every_page_shows(devhub: DevHub) -> None:
    done = manage(
        "audit_package", QWEN35_REPO, "--revision", QWEN35_FIRST_SHA[:8], "--json", endpoint=devhub.url
    )
    assert done.returncode == 1, done.stderr  # judged (exit 1: it needs action), not "revision not found" (2)
    doc = json.loads(done.stdout)
    assert doc["provenance"]["revision"] == QWEN35_FIRST_SHA
    assert doc["verdict"] == "undeclared-mtp"


def test_audit_package_prints_words_not_python_values(devhub: DevHub) -> None:
    from packages_app.devhub import LLAMA_REPO

    done = manage("audit_package", LLAMA_REPO, endpoint=devhub.url)  # no MTP: nextn_predict_layers unset
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nextn_predict_layers not set" in done.stdout
    assert not re.search(r"\b(None|True|False)\b", done.stdout), done.stdout
