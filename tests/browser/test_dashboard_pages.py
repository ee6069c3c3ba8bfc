"""The dashboard in a real Chromium: filters, the motivating Qwen3.5 package, revisions, XSS, screenshots."""

from __future__ import annotations

from typing import Any

import pytest

from packages_app.models import PackageFile
from tests import dashboard_factories as f
from tests.browser.conftest import Tab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QWEN35_PATH = "/packages/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers/"
XSS_SCRIPT = "</script><script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"
TEMPLATE = "{{7*7}}"


def listed_repos(tab: Tab) -> set[str]:
    return set(tab.page.locator("table.catalog a.repo").all_text_contents())


def test_filtering_the_catalog_to_inconsistent_shows_exactly_the_inconsistent_ones(tab: Tab) -> None:
    packages = f.catalog_mix()
    tab.open("/")
    assert len(listed_repos(tab)) == len(packages)
    tab.screenshot("catalog")

    tab.page.select_option("select[name=verdict]", "inconsistent")
    tab.page.click("form.filters button[type=submit]")
    tab.page.wait_for_url("**verdict=inconsistent**")

    inconsistent = ("undeclared-mtp", "declared-without-weights", "declaration-mismatch", "invalid-manifest")
    assert listed_repos(tab) == {packages[v].repo_id for v in inconsistent}
    tab.screenshot("catalog-inconsistent")
    tab.assert_quiet()


def test_the_qwen35_page_shows_undeclared_mtp_block_40_highlighted_and_the_fix(tab: Tab) -> None:
    package = f.qwen35_package()
    f.qwen35_reports(package.revisions.get(commit_sha=f.QWEN35_SHA))
    tab.open(QWEN35_PATH)

    assert tab.page.locator("#assessment .headline-row .verdict").inner_text() == "undeclared-mtp"
    mtp_bars = tab.page.evaluate(
        "() => document.getElementById('layout-chart').data"
        ".filter(t => t.name === 'MTP (NextN) block').map(t => t.x)"
    )
    assert mtp_bars == [[40]]
    assert tab.page.locator(".legend-note .mtp-highlight").inner_text() == "40"
    assert tab.page.locator("#layout-chart .legendtext", has_text="MTP (NextN) block").count() == 1
    shapes = "() => document.getElementById('layout-chart').layout.shapes.map(s => s.x0)"
    stage_lines = tab.page.evaluate(shapes)
    assert stage_lines == [26.5]
    assert "MTP weights present but never used" in tab.page.locator("#assessment .node-notes").inner_text()
    assert tab.page.locator("#assessment .headline-row .headline").inner_text() == "not servable"
    # Charts are drawn one per frame after the first: wait for the timeline's.
    tab.page.wait_for_selector("[data-chart=chart-timeline] .main-svg")

    fix = tab.page.locator("#suggested-generation").inner_text()
    assert '"layer_indices": [\n' in fix and "40" in fix and '"native-mtp"' in fix
    tab.page.click("button[data-copy-target=suggested-generation]")
    tab.page.wait_for_function("() => document.querySelector('button.copy').textContent === 'Copied'")
    assert tab.page.evaluate("() => navigator.clipboard.readText()") == fix
    tab.screenshot("package-qwen35")
    tab.assert_quiet()


def test_switching_revisions_changes_the_verdict(tab: Tab) -> None:
    f.qwen35_package()
    tab.open(QWEN35_PATH)
    assert tab.page.locator("#assessment .headline-row .verdict").inner_text() == "undeclared-mtp"

    tab.page.select_option("form.revision-picker select", f.sha("qwen35-old"))
    tab.page.click("form.revision-picker button")
    tab.page.wait_for_url(f"**revision={f.sha('qwen35-old')}")

    assert tab.page.locator("#assessment .headline-row .verdict").inner_text() == "consistent-mtp"
    assert tab.page.locator("#fix").count() == 0
    tab.assert_quiet()


def test_the_diff_between_two_revisions_shows_the_verdict_change(tab: Tab) -> None:
    f.qwen35_package()
    tab.open(QWEN35_PATH)
    tab.page.click("text=diff with previous")
    assert "consistent-mtp → undeclared-mtp" in tab.page.locator(".verdict-change").inner_text()
    assert tab.page.locator("pre.diff .d-del", has_text='"generation"').count() == 1
    tab.screenshot("revision-diff")
    tab.assert_quiet()


def test_file_and_ingest_pages_render_for_a_phone_and_a_desktop(tab: Tab, phone_tab: Tab) -> None:
    f.catalog_mix()
    tab.open(QWEN35_PATH + "files/layers/layer-040.gguf")
    assert tab.page.locator("tr.mtp-row").count() == 4
    tab.screenshot("file-layer-040")
    tab.open("/ingest/")
    assert tab.page.locator("#unfinished progress").count() == 1
    tab.screenshot("ingest")
    for path, name in (("/", "phone-catalog"), (QWEN35_PATH, "phone-package")):
        phone_tab.open(path)
        width = phone_tab.page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390 + 1, f"{path} scrolls sideways on a phone ({width}px)"
        phone_tab.screenshot(name)
    tab.assert_quiet()
    phone_tab.assert_quiet()


def hostile_package() -> Any:
    """A package whose manifest, audit, GGUF metadata and file names carry markup and template syntax."""
    package = f.make_package("meshllm/hostile-layers")
    hostile = f"{XSS_SCRIPT} {XSS_IMG} {TEMPLATE}"
    revision = f.make_revision(package, "undeclared-mtp", title=hostile, files=True)
    revision.manifest_json["model_id"] = hostile
    revision.audit["problems"][0]["message"] = hostile
    revision.audit["problems"][0]["evidence"] = {"note": hostile}
    revision.audit["runtime"]["auto"]["why"] = hostile
    revision.audit["runtime"][hostile] = {"outcome": hostile, "why": hostile}
    revision.audit["compatibility"] = [{"release": hostile, "admitted": False, "why": hostile}]
    revision.audit["detected"]["blocks"][40]["file"] = hostile
    revision.audit["suggested_generation"]["diff"] += "\n+" + hostile
    revision.save()
    kv = f.qwen35_kv() | {"general.name": hostile, "tokenizer.chat_template": hostile * 40}
    PackageFile.objects.filter(revision=revision).update(kv=kv)
    PackageFile.objects.create(revision=revision, path=f"odd/{XSS_IMG}.gguf", header_status="parsed", kv=kv)
    node = f.make_node(XSS_SCRIPT)
    f.make_report(node, revision, 3.1, effective_strategy=XSS_IMG, stage_splits=f"0..27|{XSS_IMG}")
    return package


def test_untrusted_strings_are_shown_literally_and_run_nothing(tab: Tab) -> None:
    hostile_package()
    pages = [
        "/packages/meshllm/hostile-layers/",
        "/packages/meshllm/hostile-layers/files/layers/layer-040.gguf",
        "/?q=hostile",
    ]
    for path in pages:
        tab.open(path)
        text = tab.page.locator("main").inner_text()
        assert XSS_SCRIPT in text or path.startswith("/?"), path
        assert tab.page.locator("main img").count() == 0, path
        assert tab.page.evaluate("() => document.querySelectorAll('main script:not([type])').length") == 0
    tab.open("/packages/meshllm/hostile-layers/")
    assert TEMPLATE in tab.page.locator("#findings").inner_text()
    assert XSS_IMG in tab.page.locator("#findings").inner_text()
    # Node payloads: in the reports table and, through plotly, in chart legends, as plain text.
    # The last table of the section is the recent reports (the strategy plans come first), folded.
    tab.page.click("#throughput details.recent-reports summary")
    assert XSS_SCRIPT in tab.page.locator("#throughput table").last.inner_text()
    # One report, one hour: the timeline is one bar, labelled on its axis.
    labels = tab.page.locator("[data-chart=chart-timeline] .xtick text").all_text_contents()
    assert labels == [f"{XSS_IMG} @ 0..27|{XSS_IMG}"]
    assert tab.page.locator("#throughput img, #layout img").count() == 0
    tab.screenshot("xss-package")
    tab.assert_quiet()


def real_qwen35_v1(repo_id: str = "meshllm/real-layers") -> Any:
    """A schema-v1 Qwen3.5 revision as the capability audit really judges it (every release's row)."""
    from tests import audit_fixtures

    built = audit_fixtures.build(audit_fixtures.QWEN35, 1)
    result = built.audit()
    assert result.assessment is not None
    return f.make_revision(
        f.make_package(repo_id),
        result.verdict,
        audit=result.to_json(),
        manifest_json=built.manifest,
        assessment=result.assessment.to_json(),
        headline=result.assessment.status.value,
    )


def test_the_words_say_what_they_mean(tab: Tab) -> None:
    real_qwen35_v1()
    tab.open("/packages/meshllm/real-layers/")
    # The top bar's filter is of packages (the nodes needing action are under Nodes).
    assert tab.page.locator("header.site nav a[href='/?headline=needs-action']").inner_text() == (
        "Packages needing action"
    )
    # v0.72.1 has no split-certification gate: its split row says it admits the split, not "certified".
    row = tab.page.locator("table.releases-summary tbody tr", has_text="v0.72.1")
    split = " ".join(row.locator("td[data-label='Split across nodes']").inner_text().split())
    assert split.startswith("admits it") and "no split-certification gate" in split, split
    assert "certified" not in split.replace("split-certification", "")
    tab.assert_quiet()


GATED_ERROR = (
    "meshllm/Llama-gated-layers@f5d924ca4d61/model-package.json: the repo is gated; set HF_TOKEN to an "
    "account that was granted access"
)


def test_a_gated_revision_reads_the_same_on_its_page_its_history_the_catalog_the_api_and_ingest(
    tab: Tab, settings: Any
) -> None:
    settings.MESHDASH_HUB_DEV = True  # the demo's devhub
    package = f.make_package("meshllm/Llama-gated-layers")
    f.make_revision(package, "", status="failed", error=GATED_ERROR, audit=None, headline="")
    tab.open("/packages/meshllm/Llama-gated-layers/")
    label = "not assessed: gated"
    assert tab.page.locator("#assessment .headline-row .headline").inner_text() == label
    assert "Expected in the demo" in tab.page.locator("#assessment").inner_text()
    history = tab.page.locator("#history li").inner_text()
    assert label in history and "failed" not in history.replace("ingest failed", "")
    tab.open("/")
    assert (
        tab.page.locator("table.catalog tr", has_text="Llama-gated").locator(".headline").inner_text()
        == label
    )
    api = tab.page.request.get(tab.base_url + "/api/v1/packages/meshllm/Llama-gated-layers").json()
    assert api["revision"]["headline"] is None and api["revision"]["not_assessed"]["label"] == label
    tab.open("/ingest/")
    row = tab.page.locator("#failed tbody tr", has_text="Llama-gated")
    assert label in row.inner_text() and "expected in the demo" in row.inner_text()
    assert row.locator(".error-text").count() == 0  # not shown as an error in red
    tab.assert_quiet()
