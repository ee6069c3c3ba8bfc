"""The fleet pages in Chromium, and axe-core (WCAG 2 A/AA) on every page: desktop and phone, light and dark.

axe-core comes from its npm package (``make node-deps``, run by ``make test``); without it the axe tests
are skipped with the command to run. Screenshots of each page go to artifacts/screenshots/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from tests import dashboard_factories as f
from tests.browser.conftest import DESKTOP, PHONE, Tab
from tests.test_security import HOSTILE_DOWNLOADS, NOT_PAGES, page_routes, routes_requested

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")
QWEN = f"/packages/{f.QWEN35_REPO}/"
PAGES = {
    "catalog": "/",
    "catalog-inconsistent": "/?verdict=inconsistent",
    "catalog-needs-action": "/?headline=needs-action",
    "catalog-bad-filter": "/?verdict=mostly-fine&sort=price",
    "nodes": "/nodes/",
    "nodes-needing-action": "/nodes/?action=1",
    "check": "/check/",
    "node": "/nodes/gpu-box-1/",
    "topology": "/topologies/lab-2/",
    "package": QWEN,
    "package-old-revision": f"{QWEN}?revision={f.QWEN35_SHA}",
    "compare": f"{QWEN}compare",
    "diff": f"{QWEN}diff?from={f.QWEN35_SHA}&to={f.QWEN35_FIXED_SHA}",
    "file": f"{QWEN}files/layers/layer-040.gguf?revision={f.QWEN35_SHA}",
    "ingest": "/ingest/",
    "glossary": "/glossary/",
    "login": "/accounts/login/",
    "admin-login": f"/{settings.MESHDASH_ADMIN_PATH}login/",
}


def test_every_page_the_url_conf_routes_is_walked_here() -> None:
    # Every page is checked for accessibility and fit; downloads and the JSON APIs are not pages.
    missing = (
        page_routes()
        - NOT_PAGES
        - routes_requested(list(HOSTILE_DOWNLOADS))
        - routes_requested(list(PAGES.values()))
    )
    assert missing == set()


def test_control_a_page_left_out_of_the_walk_is_named() -> None:
    walked = [path for name, path in PAGES.items() if name != "login"]
    missing = page_routes() - NOT_PAGES - routes_requested(list(HOSTILE_DOWNLOADS)) - routes_requested(walked)
    assert missing == {"login"}


def fleet_with_files() -> None:
    """The issue's fleet; the broken revision has its files, so the file page and the diff have content."""
    f.qwen35_fleet(timezone.now())


@pytest.fixture
def open_tab(browser: Any, live_server: Any) -> Iterator[Any]:
    """Open a tab at a viewport and colour scheme; CSP bypassed only so axe's script can be injected."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int], scheme: str = "light") -> Tab:
        context = browser.new_context(viewport=viewport, color_scheme=scheme, bypass_csp=True)
        contexts.append(context)
        page = context.new_page()
        tab = Tab(page, live_server.url)
        page.on("console", lambda m: tab.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: tab.console_errors.append(str(exc)))
        return tab

    yield make
    for context in contexts:
        context.close()


def axe_violations(tab: Tab) -> list[str]:
    """axe-core's serious and critical WCAG 2 A/AA violations on the open page, one line each."""
    tab.page.add_script_tag(path=str(AXE))
    options = json.dumps({"runOnly": {"type": "tag", "values": WCAG_TAGS}, "resultTypes": ["violations"]})
    result = tab.page.evaluate(f"async () => await axe.run(document, {options})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} -> {[n['target'] for n in v['nodes'][:5]]}"
        for v in result["violations"]
        if v["impact"] in BLOCKING
    ]


def wait_for_charts(tab: Tab) -> None:
    charts = tab.page.locator("[data-chart]")
    if charts.count():
        tab.page.wait_for_function(
            "() => [...document.querySelectorAll('[data-chart]')].every(c => c.querySelector('.main-svg'))"
        )


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_page_has_a_serious_or_critical_accessibility_violation(
    open_tab: Any, viewport: dict[str, int], scheme: str
) -> None:
    if not AXE.exists():
        pytest.skip("axe-core is not installed: make node-deps")
    fleet_with_files()
    tab = open_tab(viewport, scheme)
    device = "desktop" if viewport == DESKTOP else "phone"
    found = {}
    for name, path in PAGES.items():
        response = tab.open(path)
        assert response.status == 200, (name, response.status)
        wait_for_charts(tab)
        if scheme == "light" or name == "package":
            tab.screenshot(f"{name}-{device}" + ("-dark" if scheme == "dark" else ""))
        violations = axe_violations(tab)
        if violations:
            found[name] = violations
    assert found == {}, json.dumps(found, indent=1)
    tab.assert_quiet()


def test_the_catalog_flags_qwen35_because_nodes_still_serve_69cbd9fc(open_tab: Any) -> None:
    fleet_with_files()
    f.make_revision(f.make_package("meshllm/Fine-layers"), "consistent-mtp")
    tab = open_tab(DESKTOP)
    tab.open("/")
    note = tab.page.locator("table.catalog tr.row-notes", has_text="69cbd9fc")
    assert "Latest serves with MTP, but 4 nodes ran 69cbd9fc" in " ".join(note.inner_text().split())
    tab.page.check("input[name=alert]")
    tab.page.click("form.filters button[type=submit]")
    tab.page.wait_for_url("**alert=on**")
    assert tab.page.locator("table.catalog a.repo").all_text_contents() == [f.QWEN35_REPO]
    tab.screenshot("catalog-served-alert")
    tab.assert_quiet()


def test_the_node_page_shows_the_revision_each_node_serves_over_the_layer_chart(open_tab: Any) -> None:
    fleet_with_files()
    tab = open_tab(DESKTOP)
    tab.open("/nodes/?action=1")
    # gpu-box-1 moved on to the fix; the three others still ran 69cbd9fc with its MTP weights unused.
    assert tab.page.locator("table.nodes tbody.node-group").count() == 3
    tab.page.click("text=mac-studio")
    tab.page.wait_for_url("**/nodes/mac-studio/")
    serving = tab.page.locator("#serving tbody").inner_text()
    assert "69cbd9fc" in serving and "not servable" in serving and "0..27" in serving
    assert "MTP weights unused" in serving
    wait_for_charts(tab)
    stage_lines = tab.page.evaluate(
        "() => document.getElementById('layout-chart').layout.shapes.map(s => s.x0)"
    )
    assert stage_lines == [26.5]
    tab.assert_quiet()


def test_the_comparison_states_the_measured_effect_of_the_fix(open_tab: Any) -> None:
    fleet_with_files()
    tab = open_tab(DESKTOP)
    tab.open(QWEN)
    tab.page.click("text=Compare with another revision")
    effect = tab.page.locator("#effect").inner_text()
    # The exact medians are 3.15 and 5.32; the rollups' sketches state them within 1 %.
    assert effect == (
        "69cbd9fc -> 964edc7e: 3.16 -> 5.31 tok/s median, x1.68, 24 vs 31 reports on topology 0..27|27..41"
    )
    tab.assert_quiet()


def test_the_revision_select_applies_on_change(open_tab: Any) -> None:
    fleet_with_files()
    tab = open_tab(DESKTOP)
    tab.open(QWEN)
    tab.page.select_option("form.revision-picker select", f.QWEN35_SHA)
    tab.page.wait_for_url(f"**revision={f.QWEN35_SHA}")
    assert tab.page.locator("#assessment .headline-row .verdict").inner_text() == "undeclared-mtp"
    assert tab.page.locator("form.revision-picker button[type=submit]").count() == 1  # the no-JS path
    tab.assert_quiet()


@pytest.mark.parametrize("name", ["catalog", "package-old-revision", "node", "file", "nodes", "compare"])
def test_a_phone_shows_each_page_without_sideways_scrolling(open_tab: Any, name: str) -> None:
    fleet_with_files()
    tab = open_tab(PHONE)
    tab.open(PAGES[name])
    wait_for_charts(tab)
    width = tab.page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name} is {width} px wide on a {PHONE['width']} px phone"


LAPTOP = {"width": 1366, "height": 900}


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_no_page_is_wider_than_the_window_or_cuts_a_column_off(
    open_tab: Any, viewport: dict[str, int]
) -> None:
    from tests.page_walk import OVERFLOW_JS

    fleet_with_files()
    tab = open_tab(viewport)
    found = {}
    for name, path in PAGES.items():
        tab.open(path)
        measured = tab.page.evaluate(OVERFLOW_JS)
        if measured["width"] > viewport["width"] or measured["clipped"]:
            found[name] = measured
    assert found == {}, json.dumps(found, indent=1)


def test_the_admin_is_branded_as_meshdash(open_tab: Any) -> None:
    tab = open_tab(LAPTOP)
    tab.open("/admin/login/")
    assert tab.page.title() == "Log in | meshdash admin"
    assert tab.page.locator("#site-name").inner_text() == "meshdash administration"
    assert "Django administration" not in tab.page.content()


def glm_split_short_of_its_blocks(split: str = "0..20|20..41") -> None:
    """GLM-4.7 as the demo ran it: 48 blocks (MTP at 47), split over two stages that stop at 41."""
    revision = f.make_revision(
        f.make_package("meshllm/GLM-4.7-Flash-layers"), "consistent-mtp", block_count=48
    )
    node = f.make_node("demo-glm")
    for _ in range(3):
        f.make_report(
            node, revision, 60.0, at=timezone.now(), stage_splits=split, topology_id="topo-glm", mtp_used=True
        )


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_topology_whose_stages_stop_short_of_the_package_says_which_blocks_nothing_holds(
    open_tab: Any, scheme: str
) -> None:
    glm_split_short_of_its_blocks()
    for path in ("/topologies/topo-glm/", "/nodes/demo-glm/"):
        tab = open_tab(LAPTOP, scheme)
        tab.open(path)
        note = tab.page.locator(".stage-gaps")
        assert "holds no stage for blocks 41-47 (the MTP block 47 among them)" in note.inner_text(), path
        wait_for_charts(tab)
        shaded = tab.page.evaluate(
            "() => document.getElementById('layout-chart').layout.shapes.filter(s => s.type === 'rect')"
            ".map(s => [s.x0, s.x1])"
        )
        assert shaded == [[40.5, 47.5]], path
        tab.screenshot(f"stage-gaps{path.replace('/', '-')}{scheme}")
        tab.assert_quiet()


def test_control_a_split_that_covers_the_package_is_not_flagged(open_tab: Any) -> None:
    glm_split_short_of_its_blocks("0..24|24..48")
    tab = open_tab(LAPTOP)
    tab.open("/topologies/topo-glm/")
    assert tab.page.locator(".stage-gaps").count() == 0
