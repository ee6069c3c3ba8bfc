"""The package page and the catalog at the sizes operators use (issue 21): a laptop at 1366x900, a phone,
light and dark. Sections are one click from the top, charts take the page's colours, nothing scrolls sideways.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests import dashboard_factories as f
from tests.browser.conftest import Tab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LAPTOP = {"width": 1366, "height": 900}
QWEN = f"/packages/{f.QWEN35_REPO}/"
BROKEN = f"{QWEN}?revision={f.QWEN35_SHA}"


@pytest.fixture
def open_tab(browser: Any, live_server: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def make(viewport: dict[str, int], scheme: str = "light") -> Tab:
        context = browser.new_context(viewport=viewport, color_scheme=scheme)
        contexts.append(context)
        page = context.new_page()
        tab = Tab(page, live_server.url)
        page.on("console", lambda m: tab.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: tab.console_errors.append(str(exc)))
        return tab

    yield make
    for context in contexts:
        context.close()


def in_view(tab: Tab, selector: str) -> bool:
    """The element's top edge is on screen (not under the sticky nav) and its bottom fits the viewport."""
    return bool(
        tab.page.evaluate(
            """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
                const nav = document.querySelector('nav.section-nav').getBoundingClientRect();
                return r.top >= nav.bottom - 1 && r.top < innerHeight && r.bottom <= innerHeight; }""",
            selector,
        )
    )


def test_at_1366_the_fix_and_the_history_are_one_click_from_the_top(open_tab: Any) -> None:
    f.qwen35_fleet(timezone.now())
    tab = open_tab(LAPTOP)
    tab.open(BROKEN)
    # The headline and its action lead; the nav is on the first screen.
    assert tab.page.locator("#action").bounding_box()["y"] < LAPTOP["height"]
    assert tab.page.locator("nav.section-nav").bounding_box()["y"] < LAPTOP["height"]

    tab.page.click("nav.section-nav >> text=Fix")
    tab.page.wait_for_url("**#fix")
    assert in_view(tab, "#fix h2")

    # From anywhere on the page the nav stays on screen (sticky), and History is one click away.
    tab.page.click("nav.section-nav >> text=History")
    tab.page.wait_for_url("**#history")
    assert in_view(tab, "#history")
    assert tab.page.locator("#history li.current").is_visible()
    for name in ("Audit", "Throughput", "Files", "Compare"):
        tab.page.click(f"nav.section-nav >> text={name}")
        target = name.lower()
        tab.page.wait_for_url(f"**#{target}")
        top = tab.page.evaluate(f"() => document.getElementById('{target}').getBoundingClientRect().top")
        assert 0 <= top < LAPTOP["height"], (name, top)
    tab.assert_quiet()


def test_control_without_the_nav_the_history_is_screens_below_the_top(open_tab: Any) -> None:
    f.qwen35_fleet(timezone.now())
    tab = open_tab(LAPTOP)
    tab.open(BROKEN)
    top = tab.page.evaluate("() => document.getElementById('history').getBoundingClientRect().top")
    assert top > 2 * LAPTOP["height"]


def rgb(colour: str) -> str:
    """``#e9ecef`` as the browser writes computed colours: ``rgb(233, 236, 239)``."""
    if not colour.startswith("#"):
        return colour
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def chart_and_page_backgrounds(tab: Tab, chart: str) -> tuple[str, str, str]:
    """The plot area's fill, the paper's fill, and the background of the card the chart sits on.

    plotly draws the plot area as its own ``rect.bg`` only for some charts (lines, overlaid axes); a chart
    of bars alone (one bucket of reports) is drawn on the paper, whose fill is then the plot area's."""
    return tuple(
        tab.page.evaluate(
            """(sel) => { const el = document.querySelector(sel);
                const paper = el.querySelector('.main-svg').style.background, bg = el.querySelector('.bg');
                return [bg ? bg.style.fill : paper, paper,
                        getComputedStyle(el.closest('section')).backgroundColor]; }""",
            chart,
        )
    )


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_charts_take_the_page_background_and_text_colour_in_both_schemes(open_tab: Any, scheme: str) -> None:
    f.qwen35_fleet(timezone.now())
    tab = open_tab(LAPTOP, scheme)
    tab.open(BROKEN)
    tab.page.wait_for_function(
        "() => [...document.querySelectorAll('[data-chart]')].every(c => c.querySelector('.main-svg'))"
    )
    for chart in ("#layout-chart", "[data-chart=chart-timeline]", "[data-chart=chart-strategies]"):
        plot, paper, card = chart_and_page_backgrounds(tab, chart)
        assert plot == card, (chart, plot, card)
        assert paper in (card, ""), (chart, paper, card)
    body_colour = tab.page.evaluate("() => getComputedStyle(document.body).color")
    # The stage-split label and the tensors line are drawn in the page's text colour, never a fixed dark ink.
    label = tab.page.locator("#layout-chart .annotation-text").first
    assert label.evaluate("el => el.style.fill") == body_colour
    tensors = tab.page.evaluate(
        "() => document.getElementById('layout-chart')._fullData.find(t => t.name === 'tensors').line.color"
    )
    assert rgb(tensors) == body_colour
    if scheme == "dark":
        # Control: the same figure drawn without the page's colours keeps plotly's white plot area.
        raw = tab.page.evaluate(
            """() => { const el = document.createElement('div');
                document.getElementById('layout').appendChild(el);
                const fig = JSON.parse(document.getElementById('chart-layout').textContent);
                return Plotly.newPlot(el, fig.data, fig.layout)
                    .then(() => el.querySelector('.bg').style.fill); }"""
        )
        assert raw == "rgb(255, 255, 255)" != plot
    tab.screenshot(f"package-charts-{scheme}")
    tab.assert_quiet()


def test_the_catalog_fits_a_1366_laptop_with_fleet_notes_and_long_names(open_tab: Any) -> None:
    f.qwen35_fleet(timezone.now())
    for verdict in ("undeclared-mtp", "declared-without-weights", "invalid-manifest", "consistent-no-mtp"):
        f.make_revision(f.make_package(f"meshllm/{verdict}-layers"), verdict)
    longest = "meshllm/" + ("Very-Long-Model-Name-" * 5)[:81] + "-layers"  # 96 characters, the Hub's limit
    f.make_revision(f.make_package(longest), "undeclared-mtp")
    tab = open_tab(LAPTOP)
    tab.open("/")
    sizes = tab.page.evaluate(
        """() => { const wrap = document.querySelector('table.catalog').closest('.table-wrap');
            return [document.documentElement.scrollWidth, wrap.scrollWidth, wrap.clientWidth]; }"""
    )
    page_width, table_width, box_width = sizes
    assert page_width <= LAPTOP["width"], sizes
    assert table_width <= box_width, f"the catalog table is {table_width} px in a {box_width} px box"
    # Every column a row has is on screen: the last header cell ends inside the box.
    right = tab.page.evaluate(
        "() => document.querySelector('table.catalog thead th:last-child').getBoundingClientRect().right"
    )
    assert right <= LAPTOP["width"]
    assert tab.page.locator("table.catalog tr.row-notes").count() >= 3
    tab.screenshot("catalog-1366")
    tab.assert_quiet()


def test_reports_in_one_hour_draw_a_bar_never_a_sub_second_time_axis(open_tab: Any) -> None:
    package = f.qwen35_package()
    f.qwen35_reports(package.revisions.get(commit_sha=f.QWEN35_SHA))
    tab = open_tab(LAPTOP)
    tab.open(BROKEN)
    tab.page.wait_for_selector("[data-chart=chart-timeline] .main-svg")
    timeline = "document.querySelector('[data-chart=chart-timeline]')"
    axis = tab.page.evaluate(f"() => {timeline}._fullLayout.xaxis.type")
    ticks = tab.page.locator("[data-chart=chart-timeline] .xtick text").all_text_contents()
    assert axis == "category"
    assert ticks == ["disabled @ 0..27|27..41"]
    assert not any(":" in tick for tick in ticks)
    tab.assert_quiet()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_compare_page_draws_both_revisions_and_their_spread_in_the_page_colours(
    open_tab: Any, scheme: str
) -> None:
    f.qwen35_fleet(timezone.now())
    tab = open_tab(LAPTOP, scheme)
    tab.open(f"{QWEN}compare")
    tab.page.wait_for_function(
        "() => [...document.querySelectorAll('[data-chart]')].every(c => c.querySelector('.main-svg'))"
    )
    names = tab.page.evaluate(
        "() => document.querySelector('[data-chart=chart-compare-timeline]')._fullData.map(t => t.name)"
    )
    assert names == [f"before {f.QWEN35_SHA[:8]}", f"after {f.QWEN35_FIXED_SHA[:8]}"]
    spread = "document.querySelector('[data-chart=chart-compare-spread]')"
    assert tab.page.evaluate(f"() => {spread}._fullData.map(t => t.type)") == ["bar", "scatter"] * 2
    # Drawn, not only given: two boxes and two pairs of whiskers.
    assert tab.page.locator("[data-chart=chart-compare-spread] .bars .point").count() == 2
    assert tab.page.locator("[data-chart=chart-compare-spread] .errorbar").count() == 2
    for chart in ("chart-compare-timeline", "chart-compare-spread"):
        plot, card = tab.page.evaluate(
            """(id) => { const el = document.querySelector(`[data-chart=${id}]`);
                const card = getComputedStyle(el.closest('section')).backgroundColor;
                return [el._fullLayout.plot_bgcolor, card]; }""",
            chart,
        )
        assert rgb(plot) == card, (chart, plot, card)
    assert "95 % interval" in tab.page.locator("#ratio").inner_text()
    tab.screenshot(f"compare-{scheme}")
    tab.assert_quiet()


@pytest.mark.parametrize(("scheme", "viewport"), [("light", LAPTOP), ("dark", {"width": 390, "height": 844})])
def test_the_range_picker_waits_for_custom_dates_and_draws_only_them(
    open_tab: Any, scheme: str, viewport: dict[str, int]
) -> None:
    package = f.qwen35_package()
    revision = package.revisions.get(commit_sha=f.QWEN35_SHA)
    node = f.make_node()
    today = timezone.now() - timedelta(hours=1)
    for days in (0, 3, 20):
        f.make_report(node, revision, 3.0 + days, at=today - timedelta(days=days))
    tab = open_tab(viewport, scheme)
    tab.open(BROKEN)
    # Choosing "custom" does not reload the page: it waits for the dates (the other choices apply at once).
    tab.page.select_option("#time-range", "custom")
    tab.page.wait_for_timeout(300)
    assert "range=" not in tab.page.url
    assert tab.page.evaluate("document.activeElement.name") == "start"
    start = (today - timedelta(days=5)).date().isoformat()
    tab.page.fill("input[name=start]", start)
    tab.page.fill("input[name=end]", today.date().isoformat())
    with tab.page.expect_navigation():
        tab.page.click("form.range-picker button[type=submit]")
    assert f"start={start}" in tab.page.url and "range=custom" in tab.page.url
    tab.page.wait_for_selector("[data-chart=chart-timeline] .main-svg")
    xs = tab.page.evaluate(
        "() => document.querySelector('[data-chart=chart-timeline]').data.flatMap((t) => t.x).map(String)"
    )
    days = {x[:10] for x in xs}
    assert (today - timedelta(days=20)).date().isoformat() not in days
    assert today.date().isoformat() in days
    assert tab.page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    tab.screenshot(f"range-picker-{scheme}-{viewport['width']}")
    # Typing a date alone switches the select to custom.
    tab.open(BROKEN)
    tab.page.fill("input[name=end]", today.date().isoformat())
    tab.page.dispatch_event("input[name=end]", "change")
    assert tab.page.input_value("#time-range") == "custom"
    tab.assert_quiet()


def fleet_with_an_unran_revision_between() -> tuple[Any, Any]:
    """The issue's fleet, plus a revision committed between the two that no node ran (issue 45 item 1)."""
    broken, fixed = f.qwen35_fleet(timezone.now())
    f.make_revision(
        broken.package,
        "undeclared-mtp",
        commit_sha=f.sha("qwen35-unran"),
        committed_at=f.BASE_TIME + timedelta(hours=12),
        latest=False,
        title="Touch the README",
    )
    return broken, fixed


def test_the_package_pages_compare_form_defaults_to_the_pair_compare_picks(open_tab: Any) -> None:
    broken, fixed = fleet_with_an_unran_revision_between()
    tab = open_tab(LAPTOP)
    tab.open(f"{QWEN}compare")
    picked = tab.page.input_value("#compare-from"), tab.page.input_value("#compare-to")
    assert picked == (broken.commit_sha, fixed.commit_sha)
    tab.open(QWEN)
    form = "#compare form.compare-form"
    assert tab.page.input_value(f"{form} select[name=from]") == broken.commit_sha
    assert tab.page.input_value(f"{form} select[name=to]") == fixed.commit_sha
    with tab.page.expect_navigation():
        tab.page.click(f"{form} button:has-text('Compare throughput')")
    effect = tab.page.locator("#effect").inner_text()
    assert re.match(rf"{broken.short_sha} -> {fixed.short_sha}: 3\.1\d -> 5\.3\d tok/s", effect), effect
    assert "no decode figures" not in effect
    # /compare?to=<the fixed one> alone picks the same "before".
    tab.open(f"{QWEN}compare?to={fixed.short_sha}")
    assert tab.page.input_value("#compare-from") == broken.commit_sha
    tab.assert_quiet()


def test_a_v2_packages_layer_files_read_as_described_by_the_metadata_carrier_not_as_not_a_gguf(
    open_tab: Any,
) -> None:
    package = f.make_package("meshllm/V2-layers")
    revision = f.make_revision(package, "consistent-mtp", schema_version=2, files=True)
    # As the ingest leaves a v2 package: the carrier read, the layer headers skipped (it describes them).
    revision.files.filter(role="layer").update(header_status="skipped", header_bytes=None)
    revision.files.filter(layer_index=40).update(lfs_sha256=f.sha256("other"))  # one row of its own
    revision.files.create(
        path="shared/metadata.gguf",
        role="metadata",
        size=9_000_000,
        header_status="parsed",
        header_bytes=8_900_000,
    )
    tab = open_tab(LAPTOP)
    tab.open("/packages/meshllm/V2-layers/#files")
    table = tab.page.locator("table.files")
    assert "not a GGUF" not in table.locator("tr", has_text="layer-040").inner_text()
    assert "described by shared/metadata.gguf" in table.locator("tr", has_text="layer-040").inner_text()
    assert "described by shared/metadata.gguf" in table.locator("tr.file-range").first.inner_text()
    assert "not a GGUF" in table.locator("tr", has_text="model-package.json").inner_text()
    tab.assert_quiet()


def test_the_diff_leads_with_the_status_change_and_folds_a_long_file_list(open_tab: Any) -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    tab = open_tab(LAPTOP)
    tab.open(f"{QWEN}diff?from={broken.short_sha}&to={fixed.short_sha}")
    change = tab.page.locator("#status-change")
    assert change.inner_text().startswith("Status changed: not servable → serves with MTP."), (
        change.inner_text()
    )
    assert "MTP verdict changed: undeclared-mtp → consistent-mtp" in change.inner_text()
    # The status change is on the first screen, above the files; the 42 removed files are folded.
    assert change.bounding_box()["y"] < LAPTOP["height"] / 2
    fold = tab.page.locator("#files-changed details.file-list-fold")
    assert fold.count() == 1 and "Removed (42)" in fold.locator("summary").inner_text()
    assert not fold.evaluate("el => el.open")
    assert not tab.page.locator("#files-changed li.d-del").first.is_visible()
    assert tab.page.evaluate("document.documentElement.scrollHeight") < 2 * LAPTOP["height"]
    tab.screenshot("diff-status-change")
    tab.assert_quiet()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_compare_page_says_the_release_upgrade_is_in_the_ratio(open_tab: Any, scheme: str) -> None:
    from packages_app.models import Node, NodeRun

    broken, fixed = f.qwen35_fleet(timezone.now())
    for revision, nodes, version in ((broken, f.FLEET_NODES, "0.72.1"), (fixed, f.FLEET_NODES[:1], "0.78.0")):
        for name in nodes:
            NodeRun.objects.create(
                node=Node.objects.get(name=name),
                run_id=f"run-{name}-{revision.short_sha}",
                revision=revision,
                version=version,
            )
    tab = open_tab(LAPTOP, scheme)
    tab.open(f"{QWEN}compare")
    effect = tab.page.locator("#effect").inner_text()
    assert "Also changed: mesh-llm release 0.72.1 -> 0.78.0" in effect, effect
    also = tab.page.locator("#also-changed")
    assert "in the ratio" in also.locator("li.mixed").inner_text()
    row = also.locator("tr", has_text="mesh-llm releases").inner_text()
    assert "0.72.1" in row and "0.78.0" in row
    tab.screenshot(f"compare-also-changed-{scheme}")
    tab.assert_quiet()


@pytest.mark.parametrize(
    ("scheme", "viewport"), [("light", LAPTOP), ("dark", LAPTOP), ("light", {"width": 390, "height": 844})]
)
def test_a_replayed_spool_is_plotted_when_observed_and_the_page_says_how_many_moved_or_refused(
    open_tab: Any, scheme: str, viewport: dict[str, int]
) -> None:
    from packages_app import reports
    from packages_app.nodes.report_schema import validate_report_body

    package = f.qwen35_package()
    node = f.make_node("spool-node")
    # Its agent registered its run: its reports count in the revision's public figures (docs/fleet.md).
    f.register_run(node, package.revisions.get(commit_sha=f.QWEN35_SHA))
    arrived = timezone.now().replace(minute=30, second=0, microsecond=0)
    bodies = []
    for i in range(50):
        observed = arrived - timedelta(hours=2 * i + 1) if i < 48 else arrived + timedelta(hours=1)
        bodies.append(
            {
                "report_id": f"00000000-0000-4000-8000-{i:012d}",
                "observed_at": observed.isoformat(),
                "package": {"repo": f.QWEN35_REPO, "revision": f.QWEN35_SHA},
                "speculative": {"requested_strategy": "auto", "effective_strategy": "disabled"},
                "timings": {"predicted_per_second": 3.1 + (i % 3) * 0.05, "predicted_n": 128},
            }
        )
    valid = [reports.ValidReport(*validate_report_body(b), body=b) for b in bodies]
    reports.store_reports(node, valid, arrived)
    tab = open_tab(viewport, scheme)
    tab.open(f"/packages/{package.repo_id}/?revision={f.QWEN35_SHA}#throughput")
    note = tab.page.locator("#placement-note").inner_text()
    assert note.startswith("48 reports are plotted when their nodes observed them"), note
    assert "2 reports were refused a place at their observed time" in note
    tab.page.wait_for_selector("[data-chart=chart-timeline] .main-svg")
    xs = tab.page.evaluate(
        "() => document.querySelector('[data-chart=chart-timeline]').data.flatMap((t) => t.x).map(String)"
    )
    hours = sorted(set(xs))
    assert len(hours) == 49, hours  # 48 observed hours and the arrival hour of the two refused
    first, last = datetime.fromisoformat(hours[0]), datetime.fromisoformat(hours[-1])
    assert last - first >= timedelta(hours=95)  # spread over four days, not bunched in the hour they arrived
    assert tab.page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    tab.screenshot(f"replayed-spool-{scheme}-{viewport['width']}")
    tab.assert_quiet()
