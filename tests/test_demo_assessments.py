"""One answer per revision, on every surface: for each demo revision, the headline status and action it
was built to show (packages_app/devhub/generator.py states them) on the catalog row, the package page, the
API list and detail, the CSV, `audit_package`, and, for what a manifest alone can show, `check_manifest`.
No page for any demo revision shows two statuses that contradict each other."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from packages_app import hub, ingest
from packages_app.devhub import DEMO_PACKAGES, DevHub
from packages_app.devhub.generator import DemoPackage, DemoRevision
from packages_app.verdicts import ActionKind, Status

pytestmark = pytest.mark.django_db
# What a manifest checked alone can show: the headlines that need no weights to decide.
WITHOUT_WEIGHTS = {Status.INVALID_MANIFEST, Status.NOT_SERVABLE}


def _cases() -> list[Any]:
    return [
        pytest.param(p, r, id=f"{p.repo_id.split('/')[1]}@{r.sha[:8]}-{r.headline}")
        for p in DEMO_PACKAGES
        for r in p.revisions
    ]


def statuses_on(html: str) -> set[str]:
    """Every headline status a page shows as a badge."""
    return set(re.findall(r'class="badge headline headline-([a-z-]+) ', html))


def exit_code(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command(*args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.parametrize(("package", "revision"), _cases())
def test_every_surface_gives_the_demo_revision_the_headline_it_was_built_to_show(
    hub_settings: DevHub, client: Client, package: DemoPackage, revision: DemoRevision
) -> None:
    status, action = Status(revision.headline), ActionKind(revision.action)
    source = hub.HubSource(package.repo_id, endpoint=hub_settings.url, max_retries=1)
    rev = ingest.ingest_revision(package.repo_id, revision.sha, source=source).revision
    assert rev.headline == status, rev.assessment
    owner, name = package.repo_id.split("/")

    # The catalog row (the only revision ingested is the package's latest), and no other status on it.
    catalog = client.get("/", {"q": name}).content.decode()
    assert statuses_on(catalog) == {status.value}
    if status.needs_action:
        assert rev.assessment["headline"]["action"]["text"] in catalog.replace("&#x27;", "'").replace(
            "&quot;", '"'
        )

    # The package page leads with it; a served or history badge never shows another status for it.
    page = client.get(f"/packages/{owner}/{name}/", {"revision": revision.sha}).content.decode()
    box = page[page.index('id="assessment"') : page.index('id="findings"')]
    assert statuses_on(box) == {status.value}
    assert statuses_on(page) == {status.value}
    assert f"assessment-{status.tone.value}" in page

    # The API, list and detail, with the same field names.
    listed = client.get("/api/v1/packages", {"q": name}).json()["results"]
    (row,) = [r for r in listed if r["repo_id"] == package.repo_id]
    assert row["headline"]["status"] == status and row["headline"]["action"]["kind"] == action
    assert row["latest_revision"]["headline"] == row["headline"]
    detail = client.get(f"/api/v1/packages/{owner}/{name}", {"revision": revision.sha}).json()
    assert detail["assessment"]["headline"] == row["headline"]
    assert (
        detail["assessment"]["mtp"]["verdict"] == revision.verdict == row["latest_revision"]["mtp"]["verdict"]
    )

    # The CSV.
    lines = list(csv.DictReader(io.StringIO(client.get("/catalog.csv", {"q": name}).content.decode())))
    (line,) = [r for r in lines if r["repo_id"] == package.repo_id]
    assert line["status"] == status and line["action"] == row["headline"]["action"]["text"]

    # audit_package reads the Hub at the same sha and prints the same headline first.
    code, printed = exit_code("audit_package", package.repo_id, "--revision", revision.sha, "--json")
    assert json.loads(printed)["assessment"]["headline"] == row["headline"]
    assert code == (0 if not status.needs_action and action is ActionKind.NOTHING else 1)

    # check_manifest sees only the manifest: the same status where that is enough, else "weights not read".
    manifest = bytes(rev.manifest_bytes)
    checked = client.post("/api/v1/check-manifest", manifest, content_type="application/json").json()
    alone = Status(checked["assessment"]["headline"]["status"])
    # The split-certification gate needs the carrier's architecture: the same bytes are a tracked revision
    # here, whose carrier was read (a manifest nobody tracks says the gate is not pinned down instead).
    assert alone == (status if status in WITHOUT_WEIGHTS else Status.WEIGHTS_UNREAD)


def test_the_demo_covers_every_status_a_revision_can_earn() -> None:
    shown = {r.headline for p in DEMO_PACKAGES for r in p.revisions}
    earned = {s.value for s in Status} - {Status.NOT_ASSESSED, Status.WEIGHTS_UNREAD}
    assert shown == earned


def test_every_problem_a_demo_revision_raises_has_its_own_glossary_entry(
    hub_settings: DevHub, client: Client
) -> None:
    from packages_app.glossary import PROBLEMS

    codes: set[str] = set()
    for package in DEMO_PACKAGES:
        source = hub.HubSource(package.repo_id, endpoint=hub_settings.url, max_retries=1)
        for revision in package.revisions:
            rev = ingest.ingest_revision(package.repo_id, revision.sha, source=source).revision
            codes |= {p["code"] for p in (rev.audit or {}).get("problems", [])}
    assert "v1_offline_only" in codes  # the demo's schema-v1 revisions raise it
    assert sorted(codes - set(PROBLEMS)) == []
    glossary = client.get("/glossary/").content.decode()
    for code in codes:
        assert f'id="problem-{code.replace("_", "-")}"' in glossary, code
