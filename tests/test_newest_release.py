"""The headline on the newest release, saying what is inferred (issue 41 item 2; docs/rules.md section 6b):
a package v0.78.0 refuses to split reads so, with its roster marked inferred from its ABI, on the headline,
the release tables (single-node and split in their own columns) and the API; no headline is judged on an
older build while the newest release's answer is known."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from packages_app import hub, ingest
from packages_app.audit.release_tables import release_tables
from packages_app.devhub import DEMO_PACKAGES, DevHub
from packages_app.devhub.generator import GLM51_REPO, QWEN38_REPO
from packages_app.verdicts import Status
from tests.audit_fixtures import QWEN35, build, mtp_generation
from tests.test_detection_drafts import GLM_DSA

INFERRED = "roster inferred from its ABI"


def test_a_glm_dsa_package_is_judged_not_servable_split_by_the_newest_release() -> None:
    audited = build(GLM_DSA, 2, mtp_generation(2, [78])).audit()
    assessment = audited.assessment
    assert assessment is not None

    headline = assessment.headline
    assert headline.status is Status.NOT_SERVABLE and headline.release == "v0.78.0"
    assert headline.sentence.startswith(f"Not servable split by v0.78.0 ({INFERRED} 0.1.66)")
    assert "On one node v0.78.0 admits it." in headline.sentence
    assert "mesh-llm@" not in headline.sentence  # no older build decides while v0.78.0's answer is known
    newest = assessment.servable[-1]
    assert (newest.admitted, newest.split, newest.gate, newest.roster_inferred) == (True, False, False, True)
    assert newest.split_label == f"refused ({INFERRED})"


def test_a_qwen35moe_package_on_the_inferred_roster_serves_split_and_says_the_roster_is_inferred() -> None:
    audited = build(QWEN35, 2, mtp_generation(2, [40])).audit()
    assert audited.assessment is not None
    newest = audited.assessment.servable[-1]

    assert audited.assessment.status is Status.SERVES_MTP
    assert (newest.split, newest.roster_inferred) == (True, True)
    table = release_tables(audited.assessment)[-1]
    assert "v0.78.0" in table.releases and table.roster_inferred


def badge_text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.django_db
def test_the_package_page_shows_single_node_and_split_apart_and_marks_the_inferred_roster(
    hub_settings: DevHub, client: Client
) -> None:
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == GLM51_REPO)
    source = hub.HubSource(GLM51_REPO, endpoint=hub_settings.url, max_retries=1)
    ingest.ingest_revision(GLM51_REPO, demo.main_sha, source=source)

    page = client.get("/packages/meshllm/GLM-5.1-UD-Q4_K_XL-layers/").content.decode()
    box = page[page.index('id="assessment"') : page.index('id="findings"')]
    text = badge_text(box)
    assert f"Not servable split by v0.78.0 ({INFERRED} 0.1.66)" in text
    assert f"v0.78.0 admits , split refused ({INFERRED})" in text  # one node admits; split refused
    releases = page[page.index('id="releases"') :]
    assert '<th scope="col">On one node</th><th scope="col">Split across nodes</th>' in releases
    assert f">{INFERRED}</span>" in releases

    detail = client.get("/api/v1/packages/meshllm/GLM-5.1-UD-Q4_K_XL-layers").json()
    newest = detail["assessment"]["servable"][-1]
    assert newest["release"] == "v0.78.0"
    assert newest["split"]["admitted"] is False and newest["split"]["roster_inferred"] is True


@pytest.mark.django_db
def test_a_package_whose_architecture_the_roster_lists_shows_no_refusal(
    hub_settings: DevHub, client: Client
) -> None:
    # The control: the same page for an architecture on the inferred roster (qwen35) says certified.
    demo = next(p for p in DEMO_PACKAGES if p.repo_id == QWEN38_REPO)
    ingest.ingest_revision(
        QWEN38_REPO, demo.main_sha, source=hub.HubSource(QWEN38_REPO, endpoint=hub_settings.url)
    )

    page = client.get("/packages/meshllm/Qwen3.8-27B-UD-Q4_K_XL-layers/").content.decode()
    text = badge_text(page[page.index('id="assessment"') : page.index('id="findings"')])
    assert f"split certified ({INFERRED})" in text and "Not servable split" not in text
