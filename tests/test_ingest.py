"""The ingest services against devhub: what a revision stores, idempotence, bad input, claims."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F

from packages_app import hub, ingest, tracking
from packages_app.devhub import (
    DEMO_PACKAGES,
    GATED_REPO,
    GLM47_REPO,
    QWEN35_FIRST_SHA,
    QWEN35_REPO,
    DevHub,
    write_package_folder,
)
from packages_app.layout import FileRole
from packages_app.models import Package, PackageFile, Revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def qwen_folder(demo_catalog: Path, tmp_path: Path) -> Path:
    return write_package_folder(QWEN35_REPO, QWEN35_FIRST_SHA, tmp_path / "qwen", root=demo_catalog)


def ingest_local(folder: Path, repo_id: str = QWEN35_REPO) -> ingest.IngestOutcome:
    return ingest.ingest_revision(repo_id, hub.LOCAL_REVISION, source=hub.LocalFolderSource(folder))


def test_ingesting_the_motivating_revision_stores_every_file_and_its_header(
    hub_source: type[hub.HubSource],
) -> None:
    outcome = ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=hub_source(QWEN35_REPO))
    rev = outcome.revision
    assert outcome.ran and rev.status == Revision.Status.DONE, rev.error
    assert rev.files_done == rev.files_total > 41
    layers = PackageFile.objects.filter(revision=rev, role=FileRole.LAYER)
    assert layers.count() == 41
    assert set(layers.values_list("header_status", flat=True)) == {PackageFile.HeaderStatus.PARSED}
    block40 = layers.get(layer_index=40)
    assert block40.architecture == "qwen35moe" and block40.block_count == 41
    assert block40.nextn_predict_layers == 1
    assert any(t["name"] == "blk.40.nextn.eh_proj.weight" for t in block40.tensors)
    assert block40.kv["tokenizer.ggml.tokens"]["count"] > 150_000
    assert len(block40.lfs_sha256) == 64


def test_the_revision_keeps_the_manifest_bytes_and_their_sha256(hub_source: type[hub.HubSource]) -> None:
    source = hub_source(QWEN35_REPO)
    rev = ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=source).revision
    exact = source.read_manifest(QWEN35_FIRST_SHA)
    assert bytes(rev.manifest_bytes) == exact
    assert rev.manifest_sha256 == hashlib.sha256(exact).hexdigest()
    assert rev.schema_version == 1 and rev.manifest_json == json.loads(exact)
    assert rev.committed_at is not None and rev.title


def test_ingest_audits_the_revision(hub_source: type[hub.HubSource]) -> None:
    rev = ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=hub_source(QWEN35_REPO)).revision
    assert rev.verdict == "undeclared-mtp"
    assert rev.mtp_detected is True and rev.mtp_declared is False
    assert rev.audit["detected"]["mtp_blocks"] == [40]
    assert rev.architecture == "qwen35moe" and rev.block_count == 41
    # Schema v1 is offline-only since PR #1693: every release after it refuses it (the catalog filters on it).
    after_1693 = [a["release"] for a in rev.audit["compatibility"] if a["release"] != "v0.72.1"]
    assert rev.refused_releases == after_1693
    assert rev.headline == "not-servable" and rev.assessment["headline"]["action"]["kind"] == "republish-v2"


def test_re_ingesting_a_finished_revision_does_nothing(
    hub_source: type[hub.HubSource], devhub: DevHub
) -> None:
    ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=hub_source(QWEN35_REPO))
    rows = list(PackageFile.objects.values_list("pk", "header_status"))
    before = devhub.counters.snapshot()["requests"]
    again = ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=hub_source(QWEN35_REPO))
    assert not again.ran and again.revision.status == Revision.Status.DONE
    assert list(PackageFile.objects.values_list("pk", "header_status")) == rows
    assert devhub.counters.snapshot()["requests"] == before
    assert Revision.objects.get().attempts == 1


def test_a_v2_revision_is_audited_from_its_metadata_without_reading_layer_headers(
    hub_source: type[hub.HubSource],
) -> None:
    source = hub_source(GLM47_REPO)
    rev = ingest.ingest_revision(GLM47_REPO, None, source=source).revision
    assert rev.status == Revision.Status.DONE and rev.verdict == "consistent-mtp"
    skipped = PackageFile.objects.filter(revision=rev, header_status=PackageFile.HeaderStatus.SKIPPED)
    assert skipped.count() == 48 and rev.files_done == rev.files_total
    assert rev.fetch_requests < 10


def _demo_revision_cases() -> list[Any]:
    return [
        pytest.param(p.repo_id, r.sha, r.verdict, r.problems, id=f"{p.repo_id}@{r.sha[:8]}")
        for p in DEMO_PACKAGES
        for r in p.revisions
    ]


@pytest.mark.parametrize(("repo_id", "sha", "verdict", "problems"), _demo_revision_cases())
def test_every_demo_revision_gets_the_verdict_it_was_built_to_show(
    hub_source: type[hub.HubSource], repo_id: str, sha: str, verdict: str, problems: tuple[str, ...]
) -> None:
    rev = ingest.ingest_revision(repo_id, sha, source=hub_source(repo_id)).revision
    assert rev.verdict == verdict, rev.audit["problems"] if rev.audit else rev.error
    assert rev.audit is not None
    assert set(problems) <= {p["code"] for p in rev.audit["problems"]}


def test_a_hostile_header_fails_its_file_and_the_other_files_are_still_stored(qwen_folder: Path) -> None:
    victim = qwen_folder / "layers/layer-005.gguf"
    victim.unlink()  # a hard link to the catalog's blob: replace it, never write into it
    victim.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + b"\0" * 64)
    rev = ingest_local(qwen_folder).revision
    bad = PackageFile.objects.get(revision=rev, path="layers/layer-005.gguf")
    assert bad.header_status == PackageFile.HeaderStatus.FAILED
    assert "tensor" in bad.header_error.lower()
    parsed = PackageFile.objects.filter(revision=rev, header_status=PackageFile.HeaderStatus.PARSED)
    assert parsed.filter(role=FileRole.LAYER).count() == 40
    assert rev.status == Revision.Status.DONE
    assert "header_unreadable" in {p["code"] for p in rev.audit["problems"]}


def test_a_manifest_that_is_not_json_fails_the_revision_with_the_reason(qwen_folder: Path) -> None:
    (qwen_folder / hub.MANIFEST_PATH).write_bytes(b'{"schema_version": 1, "layers": [')
    rev = ingest_local(qwen_folder).revision
    assert rev.status == Revision.Status.FAILED
    assert "model-package.json is not valid JSON" in rev.error
    assert rev.verdict == "invalid-manifest"
    assert PackageFile.objects.filter(revision=rev).count() > 41


def test_a_folder_without_a_manifest_fails_as_not_a_package(qwen_folder: Path) -> None:
    (qwen_folder / hub.MANIFEST_PATH).unlink()
    rev = ingest_local(qwen_folder).revision
    assert rev.status == Revision.Status.FAILED
    assert "not a layer package" in rev.error


def test_a_gated_package_without_a_token_fails_with_the_reason_and_no_verdict(
    hub_source: type[hub.HubSource],
) -> None:
    with pytest.raises(hub.HubUnauthorized):
        ingest.ingest_revision(GATED_REPO, None, source=hub_source(GATED_REPO, token=""))
    rev = Revision.objects.get(package__repo_id=GATED_REPO)
    assert rev.status == Revision.Status.FAILED and "HF_TOKEN" in rev.error
    assert rev.verdict == ""


def test_a_failed_revision_can_be_retried(qwen_folder: Path) -> None:
    manifest = qwen_folder / hub.MANIFEST_PATH
    good = manifest.read_bytes()
    manifest.write_bytes(b"not json")
    assert ingest_local(qwen_folder).revision.status == Revision.Status.FAILED
    manifest.write_bytes(good)
    retried = ingest_local(qwen_folder)
    assert retried.ran and retried.revision.status == Revision.Status.DONE
    assert retried.revision.attempts == 2 and retried.revision.error == ""


def test_a_hub_outage_leaves_the_revision_queued_for_a_retry(devhub: DevHub) -> None:
    source = hub.HubSource(QWEN35_REPO, endpoint=devhub.url, max_retries=0)
    devhub.fail_next(1, 503, retry_after=0, match="model-package.json")
    with pytest.raises(hub.HubUnavailable):
        ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=source)
    rev = Revision.objects.get(commit_sha=QWEN35_FIRST_SHA)
    assert rev.status == Revision.Status.QUEUED and "503" in rev.error


def test_only_one_of_two_racing_workers_claims_a_revision() -> None:
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    rev = Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA)
    assert ingest.claim_revision(rev.pk, "worker-a")
    assert not ingest.claim_revision(rev.pk, "worker-b")


def test_a_redelivered_task_takes_over_the_revision_its_dead_worker_held() -> None:
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    rev = Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA)
    assert ingest.claim_revision(rev.pk, "task-1")
    assert ingest.claim_revision(rev.pk, "task-1")


def test_a_done_revision_cannot_be_claimed() -> None:
    package = Package.objects.create(repo_id=QWEN35_REPO, private=False)
    rev = Revision.objects.create(package=package, commit_sha=QWEN35_FIRST_SHA, status=Revision.Status.DONE)
    assert not ingest.claim_revision(rev.pk, "task-1")


def test_syncing_a_package_records_every_commit_and_ingests_them(
    hub_settings: DevHub, eager_tasks: None, django_capture_on_commit_callbacks: object
) -> None:
    from packages_app import tasks

    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        assert tasks.sync_package_task.delay(QWEN35_REPO).get() >= 1
    revisions = list(Revision.objects.order_by(F("committed_at").desc(nulls_last=True), "-id"))
    package = Package.objects.get(repo_id=QWEN35_REPO)
    assert {r.commit_sha for r in revisions} >= {QWEN35_FIRST_SHA}
    assert set(package.revisions.values_list("status", flat=True)) == {Revision.Status.DONE}
    assert package.latest_revision is not None
    assert package.latest_revision.commit_sha == revisions[0].commit_sha
    assert package.last_synced_at is not None


def test_syncing_a_package_enqueues_nothing_itself(
    hub_settings: DevHub, django_capture_on_commit_callbacks: object
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:  # type: ignore[operator]
        revisions = tracking.sync_package(QWEN35_REPO)
    assert revisions and callbacks == []
    assert {r.status for r in revisions} == {Revision.Status.QUEUED}


def test_tracking_a_package_enqueues_its_sync_only_after_commit(
    hub_settings: DevHub, django_capture_on_commit_callbacks: object
) -> None:
    from packages_app import queueing

    with django_capture_on_commit_callbacks() as callbacks:  # type: ignore[operator]
        package = tracking.track_package(QWEN35_REPO)
        assert callbacks == []  # the service stores; the edge enqueues
        queueing.enqueue_sync(package.repo_id)
    assert Package.objects.filter(repo_id=QWEN35_REPO, tracked=True).exists()
    assert len(callbacks) == 1


def test_tracking_refuses_a_bad_repo_id_and_stores_nothing() -> None:
    with pytest.raises(hub.InvalidRepoId):
        tracking.track_package("https://evil.example/x")
    assert not Package.objects.exists()


def test_discovery_tracks_the_namespace_and_catalog_packages(
    hub_settings: DevHub, django_capture_on_commit_callbacks: object
) -> None:
    with django_capture_on_commit_callbacks():  # type: ignore[operator]
        discovery = tracking.discover_packages(["meshllm"], "meshllm/catalog")
    assert QWEN35_REPO in discovery.found and discovery.tracked == discovery.found
    assert set(Package.objects.values_list("repo_id", flat=True)) == set(discovery.found)
    assert tracking.discover_packages(["meshllm"], "meshllm/catalog").tracked == []


def test_reaudit_recomputes_every_stored_revision_without_the_hub(hub_source: type[hub.HubSource]) -> None:
    ingest.ingest_revision(QWEN35_REPO, QWEN35_FIRST_SHA, source=hub_source(QWEN35_REPO))
    Revision.objects.update(verdict="", audit=None)
    assert ingest.reaudit_all() == 1
    assert Revision.objects.get().verdict == "undeclared-mtp"
