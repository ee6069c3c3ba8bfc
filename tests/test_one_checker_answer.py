"""One answer from the checker (issue 41 item 8): `check_manifest`, the /check/ page and
`POST /api/v1/check-manifest` give the same headline and the same pass/fail for the same bytes. Each takes the
split gate's architecture from the revision meshdash tracks with those bytes, and without one says the gate
was not judged: never exit 0 where the page says "not servable"."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from packages_app import hub, ingest
from packages_app.devhub import DEMO_PACKAGES, DevHub
from packages_app.devhub.generator import GLM51_REPO, QWEN38_REPO
from packages_app.models import Revision

pytestmark = pytest.mark.django_db
NOT_JUDGED = "split-serves it was not judged"


def ingested(repo_id: str, hub_settings: DevHub) -> Revision:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == repo_id)
    source = hub.HubSource(repo_id, endpoint=hub_settings.url, max_retries=1)
    return ingest.ingest_revision(repo_id, demo.main_sha, source=source).revision


def cli(path: Path) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    try:
        call_command("check_manifest", str(path), "--json", stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return int(exc.code or 0), json.loads(out.getvalue())
    return 0, json.loads(out.getvalue())


def page_headline(client: Client, manifest: bytes) -> tuple[str, str]:
    body = client.post("/check/", {"manifest": manifest.decode()}).content.decode()
    status = re.search(r'class="badge headline headline-([a-z-]+) ', body)
    sentence = re.search(r'<p class="headline-sentence">(.*?)</p>', body, re.S)
    assert status and sentence
    return status[1], html.unescape(sentence[1])


def answers(client: Client, tmp_path: Path, manifest: bytes) -> dict[str, tuple[str, str, bool]]:
    (tmp_path / "model-package.json").write_bytes(manifest)  # no carrier beside it
    code, printed = cli(tmp_path / "model-package.json")
    api = client.post("/api/v1/check-manifest", manifest, content_type="application/json").json()
    status, sentence = page_headline(client, manifest)
    return {
        "cli": (
            printed["assessment"]["headline"]["status"],
            printed["assessment"]["headline"]["sentence"],
            code == 0,
        ),
        "api": (
            api["assessment"]["headline"]["status"],
            api["assessment"]["headline"]["sentence"],
            api["passes"],
        ),
        "page": (status, sentence, status not in ("not-servable", "invalid-manifest")),
    }


@pytest.mark.parametrize(
    ("repo_id", "status", "passes"),
    [(GLM51_REPO, "not-servable", False), (QWEN38_REPO, "weights-unread", True)],
    ids=["GLM-5.1", "Qwen3.8-27B"],
)
def test_the_cli_the_page_and_the_api_give_one_answer_for_a_tracked_manifest(
    hub_settings: DevHub, client: Client, tmp_path: Path, repo_id: str, status: str, passes: bool
) -> None:
    rev = ingested(repo_id, hub_settings)

    found = answers(client, tmp_path, bytes(rev.manifest_bytes))

    assert found["cli"] == found["api"] == found["page"]
    assert found["cli"][0] == status and found["cli"][2] is passes
    assert NOT_JUDGED not in found["cli"][1]  # the tracked revision's carrier decided the gate


@pytest.mark.parametrize("repo_id", [GLM51_REPO, QWEN38_REPO], ids=["GLM-5.1", "Qwen3.8-27B"])
def test_an_untracked_manifest_says_everywhere_that_the_split_gate_was_not_judged(
    hub_settings: DevHub, client: Client, tmp_path: Path, repo_id: str
) -> None:
    manifest = bytes(ingested(repo_id, hub_settings).manifest_bytes)
    Revision.objects.all().delete()  # the same bytes, no longer tracked: no carrier anywhere

    found = answers(client, tmp_path, manifest)

    assert found["cli"] == found["api"] == found["page"]
    status, sentence, passes = found["cli"]
    assert status == "weights-unread" and NOT_JUDGED in sentence and "no carrier was read" in sentence
    assert passes is True  # admitted on one node; the split gate was not judged, not refused


def test_the_cli_names_the_tracked_revision_it_took_the_architecture_from(
    hub_settings: DevHub, tmp_path: Path
) -> None:
    rev = ingested(GLM51_REPO, hub_settings)
    path = tmp_path / "model-package.json"
    path.write_bytes(bytes(rev.manifest_bytes))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("check_manifest", str(path), stdout=out, stderr=io.StringIO())

    assert exited.value.code == 1
    assert f"meshdash tracks this exact manifest: {GLM51_REPO} at {rev.commit_sha[:12]}" in out.getvalue()
    assert "architecture (glm-dsa)" in out.getvalue()
