"""Advice that names every step (issue 45 item 4), as a user reads it in Chromium: a fix names the release it
needs, the uncertified split's advice has its action on /nodes/ and the node's page, and the package box
beside "MTP unused" names and links the node (and says what it should do)."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from packages_app.audit.assessment import Assessment
from packages_app.audit.releases import known_releases
from packages_app.models import Node, NodeRun, Revision
from tests import dashboard_factories as f
from tests.browser.conftest import Tab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def ran(node: Node, revision: Revision, version: str, mtp: bool = False, **run: Any) -> None:
    """The node's agent registered the run on ``version``; it reported three decodes (without MTP)."""
    NodeRun.objects.create(
        node=node,
        run_id=f"run-{node.name}",
        revision=revision,
        repo_id=revision.package.repo_id,
        commit_sha=revision.commit_sha,
        version=version,
        **run,
    )
    for _ in range(3):
        f.make_report(node, revision, 3.2, at=timezone.now(), mtp_used=mtp)


NEWEST = known_releases()[-1].release


def fixed_on_the_newest_only() -> dict[str, Any]:
    """The republished package-v2 revision as the demo's matrix judges it: the newest release admits it,
    v0.72.1's loading of v2 is not pinned down, the releases between refuse it (their ABI)."""
    assessment = f.assessment("consistent-mtp", 2, (40,))
    for row in assessment["servable"]:
        if row["release"] != NEWEST:
            row["admitted"] = None if row["release"] == "v0.72.1" else False
    return assessment


def test_a_node_on_an_old_release_is_told_which_release_its_fix_needs(tab: Tab) -> None:
    package = f.make_package(f.QWEN35_REPO)
    broken = f.make_revision(package, "undeclared-mtp", latest=False)  # schema v1: v0.72.1 serves it
    judged = fixed_on_the_newest_only()
    fixed = f.make_revision(
        package, "consistent-mtp", schema_version=2, assessment=judged, headline=judged["headline"]["status"]
    )
    assert Assessment.from_json(fixed.assessment) is not None
    ran(f.make_node("old-qwen"), broken, "0.72.1")
    needs = NEWEST
    tab.open("/nodes/old-qwen/")
    banner = tab.page.locator(".alert-banner").inner_text()
    assert (
        f"run {fixed.commit_sha[:8]} (serves with MTP) on mesh-llm {needs} (v0.72.1 is not known to load it)"
        in banner
    )
    tab.open("/nodes/")
    assert f"on mesh-llm {needs}" in tab.page.locator("td[data-label=Advice]").first.inner_text()
    tab.assert_quiet()


def test_the_uncertified_split_advice_says_what_to_do_on_the_nodes_pages(tab: Tab) -> None:
    revision = f.make_revision(
        f.make_package("meshllm/GLM-5.1-UD-Q4_K_XL-layers"), "consistent-mtp", schema_version=2
    )
    ran(f.make_node("demo-glm51"), revision, "0.78.0", mtp=True, certification="uncertified_override")
    for path in ("/nodes/", "/nodes/demo-glm51/"):
        tab.open(path)
        advice = tab.page.locator("td[data-label=Advice]").first.inner_text()
        assert "Serves an uncertified split" in advice
        assert "for verified output serve it on one node (without --split)" in advice
    tab.assert_quiet()


def test_the_package_box_beside_mtp_unused_names_and_links_the_node(tab: Tab) -> None:
    revision = f.make_revision(
        f.make_package("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers"), "consistent-mtp", schema_version=2
    )
    node = f.make_node("demo-glm")
    ran(node, revision, "0.78.0")
    tab.open("/packages/meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers/")
    box = tab.page.locator(".node-notes")
    text = box.inner_text()
    assert "MTP weights present but never used in 3 reports from 1 node: demo-glm." in text
    assert "The package needs nothing; that node does" in text
    assert "demo-glm: " in text  # its advice, by name, below
    box.get_by_role("link", name="demo-glm").first.click()
    tab.page.wait_for_load_state("load")
    assert tab.page.url.endswith("/nodes/demo-glm/")
    tab.assert_quiet()
