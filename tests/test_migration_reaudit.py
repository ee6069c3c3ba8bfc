"""The issue-9 data migration re-audits stored revisions from their stored inputs and loses none of them;
the issue-19 one gives each audited revision its assessment the same way."""

from __future__ import annotations

import pytest

from packages_app.audit.releases import known_releases
from tests.audit_fixtures import QWEN35, build
from tests.migrating import back_to_the_leaf, migrate  # noqa: F401 (a fixture)

BEFORE = [("packages_app", "0002_node10_timings_flags_and_node_runs")]
AFTER = [("packages_app", "0003_issue9_reaudit")]
REFUSED_BY = [("packages_app", "0004_issue9_refused_by")]
ASSESSED = [("packages_app", "0013_issue19_assessment")]
STALE = {"verdict": "consistent-mtp", "runtime": {"auto": {"native_mtp": True, "explanation": "old"}}}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_the_migration_recomputes_the_audit_and_keeps_every_input() -> None:
    apps = migrate(BEFORE)
    package = build(QWEN35, 1)
    manifest = package.manifest_bytes()
    pkg = apps.get_model("packages_app", "Package").objects.create(repo_id=QWEN35.package)
    rev = apps.get_model("packages_app", "Revision").objects.create(
        package=pkg,
        commit_sha=package.revision,
        status="done",
        manifest_bytes=manifest,
        verdict="consistent-mtp",
        audit=STALE,
    )
    file_model = apps.get_model("packages_app", "PackageFile")
    for f in package.files:
        h = package.headers.get(f.path)
        file_model.objects.create(
            revision=rev,
            path=f.path,
            size=f.size,
            lfs_sha256=f.lfs_sha256 or "",
            header_status="parsed" if h else "pending",
            kv=h["kv"] if h else None,
            tensors=h["tensors"] if h else None,
            header_bytes=h["header_bytes"] if h else None,
            gguf_version=3 if h else None,
        )

    apps = migrate(AFTER)

    after = apps.get_model("packages_app", "Revision").objects.get(pk=rev.pk)
    assert after.verdict == "undeclared-mtp"
    # On a release that loads it auto runs no MTP; whether one does is the release matrix's answer.
    assert after.audit["runtime"]["auto"]["outcome"] == "no-mtp"
    releases = [r.release for r in known_releases()]
    assert [a["release"] for a in after.audit["compatibility"]] == releases
    assert [a["release"] for a in after.audit["compatibility"] if a["admitted"] is not False] == ["v0.72.1"]
    assert bytes(after.manifest_bytes) == manifest
    assert apps.get_model("packages_app", "PackageFile").objects.filter(revision_id=rev.pk).count() == len(
        package.files
    )

    apps = migrate(REFUSED_BY)

    refused = apps.get_model("packages_app", "Revision").objects.get(pk=rev.pk).refused_by
    refusing = "|".join(r for r in releases if r != "v0.72.1")  # v1 is offline-only since PR #1693
    assert refused == f"|{refusing}|"

    apps = migrate(ASSESSED)

    assessed = apps.get_model("packages_app", "Revision").objects.get(pk=rev.pk)
    assert assessed.headline == "not-servable"
    assert assessed.assessment["headline"]["action"]["kind"] == "republish-v2"
    assert assessed.assessment["mtp"]["verdict"] == "undeclared-mtp"
    assert bytes(assessed.manifest_bytes) == manifest
