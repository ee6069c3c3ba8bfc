"""`mesh-llm models certify` reports (issue 41 item 6; docs/rules.md section 6b): `manage.py import_certify`
and `POST /api/v1/certify-reports` take a schema_version 1 report, keyed by manifest_sha256 to the revision it
tested; the package page and the API show "certified by ... on ...: passed / failed at <gate>"; a report for
bytes meshdash does not track is kept and listed, not dropped."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from packages_app import hub, ingest
from packages_app.audit.certify_report import CertifyReportError, parse_certify_report
from packages_app.devhub import DEMO_PACKAGES, DevHub
from packages_app.devhub.generator import QWEN38_REPO
from packages_app.models import CertifyReport, Package, Revision
from packages_app.nodes import identity
from packages_app.web.openapi import openapi_document

UNTRACKED = "0" * 64


def report(manifest_sha256: str = UNTRACKED, failed: str = "") -> dict[str, Any]:
    """A report in the shape SkippyCertificationReport serializes (certification.rs)."""
    runtime = [
        {"name": name, "status": "failed" if name == failed else "passed", "details": "HTTP 200"}
        for name in ("v1_models", "v1_chat_completions", "v1_responses")
    ]
    stage = {
        "include_embeddings": True,
        "include_output": False,
        "selected_part_count": 34,
        "verified_artifacts": 34,
        "cached_artifacts": 0,
        "materialized_path": "/cache/cert-stage-0/shared/metadata.gguf",
        "materialized_bytes": 9_000_000_000,
    }
    return {
        "schema_version": 1,
        "status": "failed" if failed else "passed",
        "input": "hf://meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers",
        "resolved_package_ref": "hf://meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers@" + "a" * 40,
        "local_package_dir": "/cache/meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers",
        "model_id": "unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_XL",
        "manifest_sha256": manifest_sha256,
        "source_model_path": "/source/Qwen3.8-27B-UD-Q4_K_XL.gguf",
        "source_model_sha256": "b" * 64,
        "source_model_bytes": 17_000_000_000,
        "layer_count": 65,
        "package_gate": {
            "name": "package_materialization",
            "status": "passed",
            "details": "manifest, selected artifacts, and two local stage ranges verified",
        },
        "materialized_stages": [
            {"stage_id": "cert-stage-0", "layer_start": 0, "layer_end": 32, **stage},
            {"stage_id": "cert-stage-1", "layer_start": 32, "layer_end": 65, **stage, "include_output": True},
        ],
        "runtime_gates": runtime,
    }


# --- the report itself ---------------------------------------------------------------------------------


def test_a_real_shaped_report_reads_as_passed_or_failed_at_its_gate() -> None:
    assert parse_certify_report(json.dumps(report()).encode()).summary() == "passed"
    failed = parse_certify_report(report(failed="v1_chat_completions"))
    assert failed.status == "failed" and failed.summary() == "failed at v1_chat_completions"


MALFORMED: dict[str, tuple[Any, str]] = {
    "not JSON": (b"{", ""),
    "a list": ([], ""),
    "schema 2": (report() | {"schema_version": 2}, "schema_version"),
    "an unknown status": (report() | {"status": "ok"}, "status"),
    "a status its gates contradict": (report() | {"status": "passed"} | {"runtime_gates": []}, ""),
    "no manifest digest": ({k: v for k, v in report().items() if k != "manifest_sha256"}, "manifest_sha256"),
    "a short manifest digest": (report("abc"), "manifest_sha256"),
    "a gate without a name": (report() | {"package_gate": {"status": "passed"}}, "package_gate.name"),
    "thousands of gates": (report() | {"runtime_gates": [report()["package_gate"]] * 1000}, "runtime_gates"),
    "a negative layer count": (report() | {"layer_count": -1}, "layer_count"),
    "arrays nested deep": (b"[" * 100_000 + b"]" * 100_000, ""),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_report_is_refused_naming_the_field(case: str) -> None:
    body, field = MALFORMED[case]
    if case == "a status its gates contradict":
        body = report(failed="v1_models") | {"status": "passed"}
        field = "status"
    with pytest.raises(CertifyReportError) as refused:
        parse_certify_report(body if isinstance(body, bytes) else json.dumps(body).encode())
    assert refused.value.field == field


# --- import_certify --------------------------------------------------------------------------------------


def import_certify(path: Path, *flags: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_certify", str(path), *flags, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def tracked(hub_settings: DevHub) -> Revision:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN38_REPO)
    source = hub.HubSource(QWEN38_REPO, endpoint=hub_settings.url, max_retries=1)
    return ingest.ingest_revision(QWEN38_REPO, demo.main_sha, source=source).revision


@pytest.mark.django_db
def test_import_certify_ties_the_report_to_the_revision_it_tested_and_the_page_and_api_show_it(
    hub_settings: DevHub, client: Client, tmp_path: Path
) -> None:
    rev = tracked(hub_settings)
    path = tmp_path / "certify.json"
    path.write_text(json.dumps(report(rev.manifest_sha256, failed="v1_chat_completions")))

    code, out, _ = import_certify(path, "--by", "olga")

    assert code == 0 and f"for {QWEN38_REPO} at {rev.commit_sha[:12]}" in out
    page = client.get("/packages/meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers/").content.decode()
    box = page[page.index('id="certify"') : page.index('id="certify"') + 1500]
    assert "certified by olga on " in box and ">failed at v1_chat_completions</span>" in box
    detail = client.get("/api/v1/packages/meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers").json()
    (shown,) = detail["certify_reports"]
    assert shown["summary"] == "failed at v1_chat_completions" and shown["certified_by"] == "olga"
    assert shown["revision"] == {"repo_id": QWEN38_REPO, "commit_sha": rev.commit_sha}
    # The same report again is stored once.
    assert import_certify(path, "--by", "olga")[1].startswith("already there, unchanged")
    assert CertifyReport.objects.count() == 1


@pytest.mark.django_db
def test_a_report_for_bytes_meshdash_does_not_track_is_kept_and_listed_to_who_may_see_private(
    client: Client, operator_client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "certify.json"
    path.write_text(json.dumps(report()))

    code, out, _ = import_certify(path)

    assert code == 0 and "which no tracked revision holds (kept, listed)" in out
    assert CertifyReport.objects.get().manifest_sha256 == UNTRACKED
    listed = operator_client.get("/api/v1/certify-reports").json()["results"]
    assert [r["manifest_sha256"] for r in listed] == [UNTRACKED] and listed[0]["revision"] is None
    # It names a package ref, maybe a private repo's: a reader who may not see private ones is not shown it.
    assert client.get("/api/v1/certify-reports").json()["results"] == []


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["not JSON", "a short manifest digest", "schema 2"])
def test_import_certify_of_a_malformed_file_exits_2_and_writes_nothing(tmp_path: Path, case: str) -> None:
    body, _ = MALFORMED[case]
    path = tmp_path / "certify.json"
    path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())

    code, out, err = import_certify(path)

    assert code == 2 and out == "" and "nothing was imported" in err
    assert not CertifyReport.objects.exists()
    # The control: a well-formed report with the same command is stored.
    path.write_text(json.dumps(report()))
    assert import_certify(path)[0] == 0 and CertifyReport.objects.count() == 1


# --- the API upload ---------------------------------------------------------------------------------------


def post(client: Client, body: Any, token: str | None, content_type: str = "application/json") -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post("/api/v1/certify-reports", data, content_type=content_type, **headers)


@pytest.mark.django_db
def test_the_api_takes_a_report_from_a_node_and_names_the_node_as_who_certified_it(
    hub_settings: DevHub, client: Client
) -> None:
    rev = tracked(hub_settings)
    token = identity.create_node("gpu-box-1").token

    stored = post(client, report(rev.manifest_sha256), token)
    again = post(client, report(rev.manifest_sha256), token)

    assert stored.status_code == 201 and stored.json()["certified_by"] == "node gpu-box-1"
    assert stored.json()["revision"]["commit_sha"] == rev.commit_sha and stored.json()["duplicate"] is False
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert CertifyReport.objects.count() == 1
    listed = client.get("/api/v1/certify-reports").json()["results"]  # tracked, public: anyone sees it
    assert [r["summary"] for r in listed] == ["passed"]


@pytest.mark.django_db
def test_the_api_refuses_without_a_token_a_malformed_report_and_a_body_over_the_cap(client: Client) -> None:
    token = identity.create_node("gpu-box-1").token

    anonymous = post(client, report(), None)
    malformed = post(client, report("abc"), token)
    too_big = post(client, report() | {"input": "x" * (1024 * 1024)}, token)
    not_json = post(client, b"status=passed", token, content_type="text/plain")

    assert anonymous.status_code == 401 and "node token" in anonymous.json()["error"]
    assert malformed.status_code == 400 and malformed.json()["field"] == "manifest_sha256"
    assert too_big.status_code == 413 and not_json.status_code == 415
    assert not CertifyReport.objects.exists()
    assert post(client, report(), token).status_code == 201  # the control: the same node, a good report


def test_the_openapi_document_describes_the_upload_and_the_list() -> None:
    path = openapi_document()["paths"]["/api/v1/certify-reports"]
    assert path["post"]["security"] == [{"nodeToken": []}]
    assert {"201", "200", "400", "401", "413"} <= set(path["post"]["responses"])
    assert "CertifyReportOut" in openapi_document()["components"]["schemas"]
    assert "get" in path


@pytest.mark.django_db
def test_a_report_stored_before_its_revision_is_ingested_shows_once_it_is(
    hub_settings: DevHub, client: Client, tmp_path: Path
) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN38_REPO)
    rev = tracked(hub_settings)
    manifest_sha256 = rev.manifest_sha256
    Package.objects.all().delete()
    path = tmp_path / "certify.json"
    path.write_text(json.dumps(report(manifest_sha256)))
    assert "kept, listed" in import_certify(path)[1]

    ingest.ingest_revision(
        QWEN38_REPO, demo.main_sha, source=hub.HubSource(QWEN38_REPO, endpoint=hub_settings.url)
    )

    detail = client.get("/api/v1/packages/meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers").json()
    assert [r["summary"] for r in detail["certify_reports"]] == ["passed"]
    assert detail["certify_reports"][0]["revision"]["repo_id"] == QWEN38_REPO
