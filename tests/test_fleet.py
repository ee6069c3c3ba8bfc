"""What the fleet runs: served revisions in the catalog and the API, nodes, topologies, before/after, CSV."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from packages_app import glossary, sketch
from packages_app.audit.assessment import parse_stored
from packages_app.audit.releases import known_releases, release_for
from packages_app.fleet import compare as fleet_compare
from packages_app.fleet import figures as fleet_figures
from packages_app.fleet import nodes as fleet_nodes
from packages_app.fleet import ranking as fleet_ranking
from packages_app.fleet import served as fleet_served
from packages_app.fleet import serving as fleet_serving
from packages_app.fleet import topology as fleet_topology
from packages_app.fleet import window as fleet_window
from packages_app.models import Node, NodeRun, Package, RevisionRollup, Serving
from packages_app.verdicts import VERDICTS, Cause
from tests import dashboard_factories as f
from tests.rollup_checks import assert_revision_rollups_add_up_the_every_node_cells

pytestmark = pytest.mark.django_db
NEWEST_VERSION = known_releases()[-1].release.removeprefix("v")


def text(response: Any) -> str:
    return response.content.decode()


# --- served revisions in the catalog -------------------------------------------------------------


def test_the_catalog_says_nodes_still_run_the_broken_revision_although_the_latest_is_fixed(
    client: Client,
) -> None:
    f.qwen35_fleet(timezone.now())
    body = text(client.get("/"))
    assert "Latest serves with MTP, but 4 nodes ran" in body
    assert "<code>69cbd9fc</code>" in body
    assert "headline-not-servable" in body and "verdict-undeclared-mtp" in body
    assert "Synthetic: not servable (undeclared-mtp)." in body  # its headline sentence, not only a badge


def test_the_alert_and_inconsistent_filters_match_a_package_through_a_served_revision(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    f.make_revision(f.make_package("meshllm/Fine-layers"), "consistent-mtp")
    for params in ({"alert": "on"}, {"verdict": "inconsistent"}, {"verdict": "undeclared-mtp"}):
        body = text(client.get("/", params))
        assert "Qwen3.5-35B-A3B" in body, params
        assert "Fine-layers" not in body, params
    api = client.get("/api/v1/packages", {"alert": "1"}).json()
    assert [r["repo_id"] for r in api["results"]] == [f.QWEN35_REPO]
    assert api["results"][0]["served_revisions"][0]["commit_sha"] == f.QWEN35_SHA
    assert api["results"][0]["served_revisions"][0]["nodes"] == 4


def test_a_served_revision_counts_each_node_once_and_only_its_rows_in_the_window() -> None:
    now = timezone.now()
    package = f.make_package("meshllm/Served-layers")
    old = f.make_revision(package, "undeclared-mtp")
    latest = f.make_revision(
        package, "consistent-mtp", commit_sha="b" * 40, committed_at=f.BASE_TIME + timedelta(1)
    )
    a, b, gone = f.make_node("box-a"), f.make_node("box-b"), f.make_node("box-gone")
    for topology in ("lab-1", "lab-2"):  # two Serving rows of one node
        f.make_report(a, old, 3.1, at=now - timedelta(hours=1), topology_id=topology)
    f.make_report(b, old, 3.2, at=now - timedelta(hours=2), mtp_used=True)
    f.make_report(gone, old, 3.3, at=now - timedelta(days=9))  # MTP unused, before the window
    f.make_report(b, latest, 5.3, at=now - timedelta(hours=1), mtp_used=True)

    served = fleet_served.served_revisions([package.pk], fleet_window.window_start())[package.pk]

    assert [(s.commit_sha, s.is_latest, s.nodes, s.reports) for s in served] == [
        (old.commit_sha, False, 2, 3),
        ("b" * 40, True, 1, 1),
    ]
    assert served[0].alert is True and served[1].alert is False  # box-a left MTP unused in the window


def test_reports_older_than_the_window_no_longer_flag_the_package(client: Client) -> None:
    f.qwen35_fleet(timezone.now() - timedelta(days=10))
    assert "Qwen3.5" not in text(client.get("/", {"alert": "on"}))
    assert "Qwen3.5" in text(client.get("/", {"alert": "on", "days": "30"}))


def test_the_alert_needs_a_report_showing_mtp_unused_inside_the_window(client: Client) -> None:
    now = timezone.now()
    broken, _ = f.qwen35_fleet(now - timedelta(days=10))  # MTP unused, ten days ago
    node = f.Node.objects.get(name="gpu-box-1")
    f.make_report(node, broken, 6.0, at=now - timedelta(hours=1), mtp_used=True)
    assert "Qwen3.5" not in text(client.get("/", {"alert": "on"}))  # its node uses MTP now
    broken_page = text(client.get("/", {"verdict": "inconsistent"}))
    assert "Qwen3.5" in broken_page  # it still runs a broken revision
    assert "Qwen3.5" in text(client.get("/", {"alert": "on", "days": "30"}))
    (row,) = client.get("/api/v1/packages", {"verdict": "inconsistent"}).json()["results"]
    (served,) = row["served_revisions"]
    assert (served["nodes"], served["reports"], served["alert"]) == (1, 1, False)


def test_the_inconsistent_facet_counts_packages_matched_through_served_revisions(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    facets = client.get("/api/v1/packages").json()["facets"]["verdict"]
    assert facets["inconsistent"] == 1
    assert facets["consistent-mtp"] == 1


def test_the_served_revisions_of_a_package_a_filter_or_its_privacy_hides_leave_the_facets(
    client: Client,
) -> None:
    f.qwen35_fleet(timezone.now())
    f.make_revision(f.make_package("meshllm/Fine-layers"), "consistent-mtp")

    def verdicts(**params: str) -> dict[str, int]:
        return client.get("/api/v1/packages", params).json()["facets"]["verdict"]

    assert verdicts()["inconsistent"] == 1  # Qwen3.5, through the broken 69cbd9fc its nodes ran
    assert verdicts(q="Qwen")["inconsistent"] == 1
    searched = verdicts(q="Fine")
    assert (searched["inconsistent"], searched["consistent-mtp"]) == (0, 1)
    Package.objects.filter(repo_id=f.QWEN35_REPO).update(private=True)
    assert verdicts()["inconsistent"] == 0


def test_a_filtered_catalog_whose_packages_nodes_ran_broken_revisions_costs_the_same_queries(
    client: Client,
) -> None:
    def add(count: int, start: int) -> None:
        node = f.make_node(f"node-{start}")
        for i in range(start, start + count):
            package = f.make_package(f"meshllm/p{i}-layers")
            broken = f.make_revision(package, "undeclared-mtp", latest=False)
            f.make_revision(package, "consistent-mtp")
            f.make_report(node, broken, 3.0, at=timezone.now())

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert "ran" in text(client.get("/", {"q": "layers", "verdict": "inconsistent"}))
        return len(captured)

    add(3, 0)
    three = queries()
    add(27, 100)
    assert queries() == three


# --- nodes and topologies --------------------------------------------------------------------------


def test_the_nodes_page_lists_what_each_node_serves_with_its_layer_range(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    body = text(client.get("/nodes/"))
    for name in f.FLEET_NODES:
        assert f'href="/nodes/{name}/"' in body
    assert "69cbd9fc" in body and "964edc7e" in body
    assert "0..27" in body
    # Their version is unknown (no agent registered a run), but MTP unused needs no prediction.
    assert "cause-mtp-unused" in body and "run 964edc7e (serves with MTP)" in body


def test_the_needs_action_filter_keeps_only_nodes_with_something_to_do(client: Client) -> None:
    _, fixed = f.qwen35_fleet(timezone.now())
    fresh = f.make_node("fresh-only")
    f.make_report(fresh, fixed, 5.3, at=timezone.now(), mtp_used=True)
    rows = fleet_nodes.node_rows(fleet_window.window_start(), needs_action=True)
    # gpu-box-1 ran 69cbd9fc, then moved on to 964edc7e an hour later: history, nothing to do.
    assert {r.node.name for r in rows} == set(f.FLEET_NODES) - {"gpu-box-1"}
    everyone = {r.node.name: r for r in fleet_nodes.node_rows(fleet_window.window_start())}
    assert not everyone["fresh-only"].needs_action and not everyone["gpu-box-1"].needs_action
    moved = [s.advice for s in everyone["gpu-box-1"].serving if not s.is_latest]
    assert [a.cause for a in moved] == [Cause.MOVED_ON] and "Moved on to 964edc7e" in moved[0].text
    listed = text(client.get("/nodes/", {"action": "1"}))
    assert "mac-studio" in listed and "fresh-only" not in listed
    assert "fresh-only" not in text(client.get("/nodes/", {"stale": "1"}))  # the old bookmark still works


def test_the_needs_action_filter_is_the_advice_not_the_sql_ranking(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose only need is what its own release refuses is invisible to the SQL flag that ranks
    /nodes/; planting a flag that sees nothing shows the filter does not lean on it."""
    f.qwen35_fleet(timezone.now())
    needing = {r.node.name for r in fleet_nodes.node_rows(fleet_window.window_start()) if r.needs_action}
    assert needing
    monkeypatch.setattr(fleet_ranking, "flagged_servings", lambda servings, since: servings.none())
    listed = text(client.get("/nodes/", {"action": "1"}))
    assert all(f'href="/nodes/{name}/"' in listed for name in needing)
    assert f"{len(needing)} node" in listed


def test_the_needing_action_page_shows_each_node_as_the_whole_list_does() -> None:
    """The filtered page lists the nodes the whole list says need action, in its order, each row whole."""
    f.qwen35_fleet(timezone.now())
    since = fleet_window.window_start()
    needing = [row for row in fleet_nodes.node_rows(since) if row.needs_action]
    page = fleet_nodes.node_page(since, needs_action=True)
    assert page.rows == needing and page.page.paginator.count == len(needing)
    assert any(s.tps is not None for row in page.rows for s in row.serving)  # the medians, not left out


def test_a_reassessed_revision_is_judged_by_its_new_assessment() -> None:
    """Assessments are parsed once a process for each stored text: a changed one is read anew."""
    broken, _ = f.qwen35_fleet(timezone.now())
    since = fleet_window.window_start()
    before = {
        s.advice.text
        for row in fleet_nodes.node_rows(since)
        for s in row.serving
        if s.revision_id == broken.pk
    }
    assert before and "The revision is not assessed yet." not in before
    f.Revision.objects.filter(pk=broken.pk).update(assessment=None)
    after = {
        s.advice.text
        for row in fleet_nodes.node_rows(since)
        for s in row.serving
        if s.revision_id == broken.pk
    }
    assert "The revision is not assessed yet." in after


def test_a_node_page_shows_the_revision_it_serves_its_version_and_devices(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    node = f.Node.objects.get(name="mac-studio")
    NodeRun.objects.create(node=node, run_id="r1", version="0.61.2", devices=[{"name": "Metal"}])
    body = text(client.get("/nodes/mac-studio/"))
    assert "69cbd9fc" in body and "headline-not-servable" in body
    assert "0.61.2" in body and "Metal" in body
    assert 'data-chart="chart-layout"' in body
    assert client.get("/nodes/nobody/").status_code == 404


def test_a_topology_page_lists_its_stages_and_what_ran_on_them(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    body = text(client.get("/topologies/lab-2/"))
    assert "0..27|27..41" in body and "69cbd9fc" in body and "964edc7e" in body
    assert client.get("/topologies/unknown/").status_code == 404


def test_a_topology_page_counts_its_own_reports_only_and_lists_the_busiest(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = timezone.now()
    broken, fixed = f.qwen35_fleet(now)  # on lab-2
    other = f.make_node("other-box")
    for i in range(5):  # the same revision and split on another mesh, faster
        body = f.topology_body("other-box", 0, 27, 9.0)
        f.make_report(
            other, fixed, 9.0, at=now - timedelta(minutes=i), mtp_used=True, topology_id="lab-3", body=body
        )
    runs = {r.commit_sha: r for r in fleet_topology.topology_runs("lab-2", fleet_window.window_start()).runs}
    new, old = runs[fixed.commit_sha], runs[broken.commit_sha]
    assert (new.reports, old.reports) == (31, 24)
    assert new.tps is not None and abs(new.tps - 5.32) <= 0.01 * 5.32 + 0.005  # the sketch's 1 %
    assert old.alert and not new.alert
    (lab3,) = fleet_topology.topology_runs("lab-3", fleet_window.window_start()).runs
    assert lab3.reports == 5 and lab3.tps is not None and abs(lab3.tps - 9.0) <= 0.01 * 9.0
    monkeypatch.setattr(fleet_topology, "TOPOLOGY_ROWS", 1)
    body = text(client.get("/topologies/lab-2/"))
    assert "964edc7e" in body and "69cbd9fc" not in body.split("What ran on it")[1].split("Layers of")[0]
    assert "1 more (revision, split) pairs ran on it" in body


def test_the_window_reads_rollups_to_the_hour_whole_days_by_day_and_its_first_day_by_hour() -> None:
    now = timezone.now()
    _, fixed = f.qwen35_fleet(now - timedelta(days=3))
    NodeRun.objects.all().delete()  # what the nodes reported, not what their agents registered (shown always)
    edge = f.make_node("edge-box")
    f.make_report(edge, fixed, 6.0, at=now - timedelta(days=1, hours=2), mtp_used=True)  # before the window
    f.make_report(edge, fixed, 5.0, at=now - timedelta(hours=22), mtp_used=True)
    f.make_report(edge, fixed, 5.2, at=now - timedelta(hours=1), mtp_used=True)
    NodeRun.objects.all().delete()
    rows = {r.node.name: r for r in fleet_nodes.node_rows(fleet_window.window_start(1))}
    assert [s.reports for s in rows["edge-box"].serving] == [2]
    assert not rows["gpu-box-1"].serving
    week = {r.node.name: r for r in fleet_nodes.node_rows(fleet_window.window_start(7))}
    assert sum(s.reports for s in week["gpu-box-1"].serving) == 6 + 31  # 24 old reports over 4 nodes, 31 new
    assert [s.reports for s in week["edge-box"].serving] == [3]


def test_a_node_lists_at_most_its_limit_stale_revisions_first_and_counts_the_rest() -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    packages = [f.make_package(f"meshllm/Other-{i}-layers") for i in range(3)]
    others = [f.make_revision(package, "consistent-mtp", schema_version=2) for package in packages]
    node = f.Node.objects.get(name="gpu-box-1")
    for revision in others:
        for _ in range(40):  # busier than the stale revision, which still comes first
            f.make_report(node, revision, 5.0, at=timezone.now(), mtp_used=True)
    (row,) = fleet_nodes.node_rows(fleet_window.window_start(), name="gpu-box-1", limit=2)
    assert row.serving[0].revision_id == broken.pk
    assert len(row.serving) == 2 and row.hidden == 3 and row.needs_action
    assert fixed.pk not in [s.revision_id for s in row.serving]  # 31 reports: fewer than the others' 40


@pytest.mark.parametrize("limit", [2, 5])
def test_nodes_read_from_the_windows_rows_rank_as_when_read_node_by_node(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """A fleet with few rows in the window is ranked from all of them (one query); one with many, node by
    node from each one's busiest and flagged rows. Both give every node the same rows, in the same
    order, with the same count of the rest: busier revisions, flagged ones, several splits and
    topologies of one revision, and a private package's, for a reader who may see it and one who may not."""
    now = timezone.now()
    f.qwen35_fleet(now)
    node = f.Node.objects.get(name="gpu-box-1")
    secret = f.make_package("meshllm/Secret-layers")
    f.Package.objects.filter(pk=secret.pk).update(private=True)
    revisions = [
        f.make_revision(
            f.make_package(f"meshllm/Mixed-{i}-layers"), ("undeclared-mtp", "consistent-mtp")[i % 2]
        )
        for i in range(5)
    ] + [f.make_revision(secret, "consistent-mtp")]
    for i, revision in enumerate(revisions):
        for j in range(2 + 3 * i):
            at = now - timedelta(hours=j)
            splits, topology = ("0..41", "solo") if j % 3 else ("0..27|27..41", f"lab-{j % 2}")
            f.make_report(
                node, revision, 4.0, at=at, mtp_used=bool(j % 2), stage_splits=splits, topology_id=topology
            )
    since = fleet_window.window_start()
    few = fleet_ranking.few_window_rows
    monkeypatch.setattr(
        fleet_nodes, "few_window_rows", lambda ids, since, private, cap: few(ids, since, private, 10**6)
    )

    def everything() -> list[Any]:
        rows = [fleet_nodes.node_rows(since, show_private=private, limit=limit) for private in (False, True)]
        return [
            *rows,
            fleet_nodes.node_page(since, needs_action=True).rows,
            fleet_nodes.node_rows(since, name="gpu-box-1"),
        ]

    from_the_window = everything()
    monkeypatch.setattr(fleet_nodes, "few_window_rows", lambda *args: None)
    assert everything() == from_the_window
    (busy,) = [row for row in from_the_window[0] if row.node.name == "gpu-box-1"]
    assert len(busy.serving) == limit and busy.hidden > 0
    assert all(s.repo_id != "meshllm/Secret-layers" for row in from_the_window[0] for s in row.serving)
    assert any(s.repo_id == "meshllm/Secret-layers" for row in from_the_window[1] for s in row.serving)


def test_a_group_ran_one_strategy_only_when_every_topology_of_it_ran_that_one() -> None:
    """A (node, revision, split) group adds up one Serving row a topology: it ran one strategy when each
    ran the same one, read from the window's rows or ranked in SQL alike."""
    now = timezone.now()
    revision = f.make_revision(f.make_package("meshllm/Topologies-layers"), "undeclared-mtp")
    node = f.make_node("two-topologies")
    for topology, splits, mtp_used in (
        ("lab-a", "0..41", False),
        ("lab-b", "0..41", False),
        ("lab-a", "0..27|27..41", False),
        ("lab-b", "0..27|27..41", True),  # each topology's row ran one strategy, not the same one
    ):
        f.make_report(
            node, revision, 4.0, at=now, stage_splits=splits, topology_id=topology, mtp_used=mtp_used
        )
    since = fleet_window.window_start()
    window = fleet_ranking.few_window_rows([node.pk], since, False, 100)
    assert window is not None and len(window) == 4
    from_window = fleet_ranking._groups_of(window, since, {(node.pk, revision.pk)})
    ranked = fleet_ranking._ranked_groups([revision.pk], [node.pk], since, False)
    sole = {g["stage_splits"]: g["sole_strategy"] for g in from_window}
    assert sole == {g["stage_splits"]: g["sole_strategy"] for g in ranked}
    assert sole == {"0..41": '["auto", "disabled", false]', "0..27|27..41": ""}


def test_a_newer_revision_not_assessed_yet_puts_no_node_in_need_of_action() -> None:
    """Its package's latest, published and not assessed yet, is no upgrade to make: neither the SQL flag
    that ranks /nodes/ nor the advice calls for one; once assessed as better, both do."""
    package = f.make_package("meshllm/Pending-layers")
    served = f.make_revision(package, "consistent-no-mtp", schema_version=2)
    assert served.headline == "serves-no-mtp"
    pending = f.make_revision(package, "", audit=None)
    node = f.make_node("pending-box")
    for i in range(3):
        f.make_report(node, served, 3.2, at=timezone.now() - timedelta(hours=i))
    since = fleet_window.window_start()

    def judged() -> tuple[bool, bool]:
        flagged = fleet_ranking.flagged_servings(Serving.objects.filter(node_key=node.pk), since).exists()
        (row,) = fleet_nodes.node_rows(since, name="pending-box")
        return flagged, row.needs_action

    assert judged() == (False, False)
    f.Revision.objects.filter(pk=pending.pk).update(headline="serves-mtp")
    assert judged() == (True, True)


def test_a_nodes_median_comes_from_the_rollups_sketch_within_one_percent() -> None:
    f.qwen35_fleet(timezone.now())
    (served,) = [
        s
        for s in fleet_nodes.node_rows(fleet_window.window_start(), name="gpu-box-1")[0].serving
        if s.is_latest
    ]
    assert served.reports == 31 and served.layer_range == "0..27" and served.topology_id == "lab-2"
    assert served.tps is not None and abs(served.tps - 5.32) <= 0.01 * 5.32 + 0.005


# --- before and after ------------------------------------------------------------------------------


def test_the_comparison_states_the_measured_effect_of_the_fix(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    body = text(client.get(f"/packages/{f.QWEN35_REPO}/compare"))
    found = re.search(
        r"69cbd9fc -&gt; 964edc7e: ([\d.]+) -&gt; ([\d.]+) tok/s median, x([\d.]+), 24 vs 31 reports", body
    )
    assert found, body
    old, new, ratio = map(float, found.groups())
    # The exact medians are 3.15 and 5.32 (x1.69); the rollups' sketches hold them within 1 %.
    assert abs(old - 3.15) <= 0.0316 and abs(new - 5.32) <= 0.0532 and abs(ratio - 1.69) <= 0.035
    assert "too few" not in body


def chart(body: str, element_id: str) -> dict[str, Any]:
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', body, re.S)
    assert found, element_id
    return json.loads(found.group(1))


def test_the_comparison_page_charts_both_revisions_on_one_time_axis_and_the_spread_of_each(
    client: Client,
) -> None:
    f.qwen35_fleet(timezone.now())
    body = text(client.get(f"/packages/{f.QWEN35_REPO}/compare"))
    timeline = chart(body, "chart-compare-timeline")
    assert [t["name"] for t in timeline["data"]] == ["before 69cbd9fc", "after 964edc7e"]
    assert timeline["layout"]["xaxis"]["type"] == "date"
    before, after = timeline["data"]
    assert sum(before["customdata"]) == 24 and sum(after["customdata"]) == 31
    # Each hour's median is one of its revision's rates (an hour may hold a single report, 3.10 or 3.20),
    # within the sketches' 1 %.
    assert all(3.10 * 0.99 <= y <= 3.20 * 1.01 for y in before["y"])
    assert all(5.30 * 0.99 <= y <= 5.34 * 1.01 for y in after["y"])
    spread = chart(body, "chart-compare-spread")
    medians = {t["name"]: t for t in spread["data"] if t["type"] == "scatter"}
    assert list(medians) == ["before 69cbd9fc (24 reports) median", "after 964edc7e (31 reports) median"]
    # 3.10, 3.15, 3.20 eight times each: p5 3.10, p25 .. p75 around 3.15, p95 3.20 (within 1 %).
    p5, p25, p50, p75, p95 = medians["before 69cbd9fc (24 reports) median"]["customdata"][0]
    assert p5 == pytest.approx(3.10, rel=0.01) and p95 == pytest.approx(3.20, rel=0.01)
    assert p50 == pytest.approx(3.15, rel=0.01) and p25 <= p50 <= p75


def test_the_ratio_and_its_interval_are_those_of_the_compared_reports(client: Client) -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    comparison = fleet_compare.compare_revisions(broken, fixed)
    expected = sketch.ratio_of_medians(
        sketch.of_values([(3.10, 3.15, 3.20)[i % 3] for i in range(24)]),
        sketch.of_values([(5.30, 5.32, 5.34)[i % 3] for i in range(31)]),
    )
    assert comparison.interval == expected
    assert expected is not None and expected.low is not None and expected.high is not None
    assert expected.low < 5.32 / 3.15 < expected.high
    body = text(client.get(f"/packages/{f.QWEN35_REPO}/compare"))
    assert f"<strong>&times;{expected.ratio:.2f}</strong>" in body
    assert f"(95 % interval &times;{expected.low:.2f} to &times;{expected.high:.2f})" in body
    assert "not a bootstrap" in body


def test_a_comparison_with_too_few_reports_for_an_interval_says_so_on_the_page(client: Client) -> None:
    f.qwen35_fleet(timezone.now(), old_reports=3, new_reports=4)
    body = text(client.get(f"/packages/{f.QWEN35_REPO}/compare"))
    assert "too few reports on a side for an interval" in body
    assert "95 % interval" not in body


def test_a_comparison_with_few_reports_says_so() -> None:
    broken, fixed = f.qwen35_fleet(timezone.now(), old_reports=3, new_reports=4)
    comparison = fleet_compare.compare_revisions(broken, fixed)
    assert comparison.too_few
    assert "too few reports" in comparison.sentence
    assert comparison.topology == "0..27|27..41"


def register_releases(revision: Any, versions: dict[str, str]) -> None:
    """The runs the nodes' agents registered for a revision: node name -> its mesh-llm release."""
    for node, version in versions.items():
        NodeRun.objects.create(
            node=Node.objects.get(name=node),
            run_id=f"run-{node}-{revision.short_sha}",
            revision=revision,
            version=version,
        )


def test_a_comparison_says_the_release_changed_too_when_no_release_ran_both_revisions() -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    register_releases(broken, dict.fromkeys(f.FLEET_NODES, "0.72.1"))
    register_releases(fixed, {f.FLEET_NODES[0]: "0.78.0"})
    comparison = fleet_compare.compare_revisions(broken, fixed)
    assert (comparison.before.releases, comparison.after.releases) == (("0.72.1",), ("0.78.0",))
    (release,) = comparison.mixed
    assert (release.what, release.held) == ("mesh-llm release", ())
    assert comparison.sentence.endswith(
        f"Also changed: mesh-llm release 0.72.1 -> 0.78.0; x{comparison.ratio:.2f} measures the new revision "
        "and that change together"
    )
    assert (comparison.old.reports, comparison.new.reports) == (24, 31)  # nothing to hold equal: all compared


def test_a_comparison_holds_the_release_equal_when_some_release_ran_both_revisions() -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    # gpu-box-1 ran the broken revision on 0.78.0 too (6 of its 24 reports); the others on 0.72.1.
    register_releases(
        broken, {"gpu-box-1": "0.78.0", "mac-studio": "0.72.1", "a100-1": "0.72.1", "rx7900-1": "0.72.1"}
    )
    register_releases(fixed, {"gpu-box-1": "0.78.0"})
    comparison = fleet_compare.compare_revisions(broken, fixed)
    (release,) = comparison.confounders
    assert release.held == ("0.78.0",) and comparison.mixed == ()
    assert (comparison.old.reports, comparison.new.reports) == (6, 31)  # only the nodes on 0.78.0
    assert "Also changed" not in comparison.sentence
    assert sum(p.reports for p in comparison.series[0][1]) == 6


def test_control_without_registered_releases_nothing_is_said_about_them() -> None:
    broken, fixed = f.qwen35_fleet(timezone.now())
    comparison = fleet_compare.compare_revisions(broken, fixed)
    assert comparison.confounders == () and "Also changed" not in comparison.sentence


def test_a_package_with_one_revision_has_nothing_to_compare(client: Client) -> None:
    f.make_revision(f.make_package("meshllm/One-layers"))
    assert client.get("/packages/meshllm/One-layers/compare").status_code == 404


# --- audit vs reports ------------------------------------------------------------------------------


def judged_fleet(generation: dict[str, Any] | None, nextn: tuple[str, ...] | None = None) -> Any:
    """A real audit's revision (GLM-4.7, package-v2) and a node whose agent registered mesh-llm 0.78.0."""
    from tests.audit_fixtures import GLM47, build

    result = build(GLM47, 2, generation, nextn=nextn).audit()
    assert result.assessment is not None
    revision = f.make_revision(
        f.make_package("meshllm/GLM-layers"),
        result.verdict,
        audit=result.to_json(),
        assessment=result.assessment.to_json(),
        headline=result.assessment.status.value,
        schema_version=2,
    )
    node = f.make_node("judged-box")
    NodeRun.objects.create(node=node, run_id="run-1", revision=revision, version="0.78.0")
    return revision, node


def test_a_node_that_ran_what_its_release_says_fails_at_load_is_a_finding_naming_it(client: Client) -> None:
    from tests.audit_fixtures import mtp_generation

    revision, node = judged_fleet(mtp_generation(2, [47]), nextn=())  # declared, weights dropped
    f.make_report(
        node, revision, 4.0, at=timezone.now(), requested_strategy="auto", effective_strategy="disabled"
    )

    body = text(client.get("/packages/meshllm/GLM-layers/"))

    box = body[body.index('id="assessment"') : body.index('id="findings"')]
    assert "cause-contradiction" in box
    assert "judged-box on mesh-llm 0.78.0 (v0.78.0) with speculative.strategy auto" in box
    assert "the load fails" in box and "yet it ran" in box


def test_a_node_that_ran_what_its_release_predicts_raises_no_finding(client: Client) -> None:
    from tests.audit_fixtures import mtp_generation

    revision, node = judged_fleet(mtp_generation(2, [47]))
    f.make_report(
        node,
        revision,
        9.0,
        at=timezone.now(),
        mtp_used=True,
        requested_strategy="auto",
        effective_strategy="native-mtp",
    )

    body = text(client.get("/packages/meshllm/GLM-layers/"))

    assert "cause-contradiction" not in body and "cause-ok" in body


def test_a_node_on_a_release_the_matrix_does_not_know_says_so_instead_of_contradicting(
    client: Client,
) -> None:
    from tests.audit_fixtures import mtp_generation

    revision, node = judged_fleet(mtp_generation(2, [47]), nextn=())
    NodeRun.objects.filter(node=node).update(version="0.64.0")
    f.make_report(
        node, revision, 4.0, at=timezone.now(), requested_strategy="auto", effective_strategy="disabled"
    )

    body = text(client.get("/packages/meshllm/GLM-layers/"))

    assert "cause-contradiction" not in body
    assert "mesh-llm 0.64.0 is not in the release matrix" in body


# --- glossary, sizes, CSV --------------------------------------------------------------------------


def test_every_verdict_badge_links_to_its_glossary_entry(client: Client) -> None:
    f.catalog_mix()
    catalog = text(client.get("/"))
    glossary_page = text(client.get("/glossary/"))
    for verdict in VERDICTS:
        anchor = glossary.anchor("verdict", verdict)
        assert f'id="{anchor}"' in glossary_page
        assert f"/glossary/#{anchor}" in catalog


def test_sizes_are_decimal_as_the_hub_shows_them() -> None:
    assert glossary.format_decimal_size(19_967_000_000) == "20.0 GB"
    assert glossary.format_decimal_size(487_000_000) == "487 MB"
    assert glossary.format_decimal_size(999) == "999 bytes"
    assert glossary.format_decimal_size(0) == glossary.UNKNOWN


def test_the_catalog_exports_as_csv_with_the_same_filters(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    f.make_revision(f.make_package("meshllm/Fine-layers"), "consistent-mtp")
    response = client.get("/catalog.csv", {"alert": "on"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(text(response))))
    assert [r["repo_id"] for r in rows] == [f.QWEN35_REPO]
    assert rows[0]["served_broken_revisions"] == f"{f.QWEN35_SHA}:not-servable:undeclared-mtp:4"
    assert rows[0]["status"] == "serves-mtp" and rows[0]["action"] == "Synthetic: nothing to do."


def test_a_revisions_reports_export_as_csv_and_a_formula_stays_text(client: Client) -> None:
    broken, _ = f.qwen35_fleet(timezone.now(), old_reports=2, new_reports=1)
    f.make_report(f.make_node("=cmd|evil"), broken, 1.0, at=timezone.now())
    response = client.get(f"/packages/{f.QWEN35_REPO}/reports.csv", {"revision": f.QWEN35_SHA[:8]})
    rows = list(csv.DictReader(io.StringIO(text(response))))
    assert len(rows) == 3
    assert "'=cmd|evil" in {r["node"] for r in rows}


# --- rough edges a new user hit ------------------------------------------------------------------


def test_sorting_by_verdict_puts_the_worst_first(client: Client) -> None:
    f.catalog_mix()
    rows = client.get("/api/v1/packages", {"sort": "verdict"}).json()["results"]
    verdicts = [(r["latest_revision"] or {}).get("verdict") for r in rows]
    assert verdicts[:4] == [
        "invalid-manifest",
        "declared-without-weights",
        "declaration-mismatch",
        "undeclared-mtp",
    ]
    assert verdicts[-1] is None  # still ingesting: after every audited one


def test_the_json_api_names_unknown_query_parameters_in_a_400(client: Client) -> None:
    response = client.get("/api/v1/packages", {"verdcit": "inconsistent", "alert": "1"})
    assert response.status_code == 400
    assert "verdcit" in response.json()["error"]


def test_the_api_gives_null_for_an_unknown_size_and_rounded_rates(client: Client) -> None:
    f.catalog_mix()
    rows = {r["repo_id"]: r for r in client.get("/api/v1/packages").json()["results"]}
    assert rows["meshllm/DeepSeek-V4-Flash-UD-Q4_K_XL-layers"]["latest_revision"]["total_bytes"] is None


def test_hub_links_are_pinned_to_the_revision_sha(client: Client) -> None:
    f.qwen35_package()
    body = text(client.get(f"/packages/{f.QWEN35_REPO}/"))
    assert f"/{f.QWEN35_REPO}/tree/{f.QWEN35_SHA}" in body
    # Each file row links its file on the Hub (the summary folds clean layers into a range).
    assert f"/{f.QWEN35_REPO}/blob/{f.QWEN35_SHA}/layers/layer-040.gguf" in body
    every_file = text(client.get(f"/packages/{f.QWEN35_REPO}/?files=all"))
    assert f"/{f.QWEN35_REPO}/blob/{f.QWEN35_SHA}/layers/layer-000.gguf" in every_file


def test_the_nav_marks_the_needs_action_filter_as_the_current_page(client: Client) -> None:
    body = text(client.get("/", {"headline": "needs-action"}))
    assert 'href="/?headline=needs-action" aria-current="page"' in body
    assert 'href="/" aria-current="page"' not in body


def test_a_private_packages_fleet_stays_hidden_from_readers_who_may_not_see_it(client: Client) -> None:
    f.qwen35_fleet(timezone.now())
    f.Package.objects.filter(repo_id=f.QWEN35_REPO).update(private=True)
    assert "69cbd9fc" not in text(client.get("/nodes/"))
    assert "69cbd9fc" not in text(client.get("/nodes/gpu-box-1/"))
    assert client.get("/topologies/lab-2/").status_code == 404
    assert client.get(f"/packages/{f.QWEN35_REPO}/compare").status_code == 404
    assert client.get(f"/packages/{f.QWEN35_REPO}/reports.csv").status_code == 404
    assert f.QWEN35_REPO not in text(client.get("/catalog.csv"))


def test_ingest_status_badges_link_to_their_glossary_entry(client: Client) -> None:
    f.catalog_mix()
    glossary_page = text(client.get("/glossary/"))
    # The catalog badges an ingest only while it is not done; the package page always does.
    catalog = text(client.get("/"))
    package_page = text(client.get(f"/packages/{f.QWEN35_REPO}/"))
    for status, page in (("done", package_page), ("running", catalog)):
        assert f'id="runtime-{status}"' in glossary_page
        assert f"/glossary/#runtime-{status}" in page
    assert "/glossary/#runtime-done" not in catalog


def test_a_problem_code_links_to_its_entry_or_to_the_section_on_manifest_codes() -> None:
    from packages_app.templatetags.verdicts import problem_anchor

    assert problem_anchor("undeclared_mtp") == "problem-undeclared-mtp"
    assert problem_anchor("invalid_layer_indices") == "problems"


def test_the_fleet_pages_queries_do_not_grow_with_the_nodes_revisions_or_reports(client: Client) -> None:
    now = timezone.now()
    f.qwen35_fleet(now)
    pages = ["/nodes/", "/nodes/?page=2", "/nodes/?action=1", "/nodes/gpu-box-1/", "/topologies/lab-2/", "/"]
    few = [_queries(client, url) for url in pages]
    for i in range(fleet_ranking.NODES_PER_PAGE + 2):  # past the first page of nodes
        revision = f.make_revision(f.make_package(f"meshllm/Other-{i}-layers"), "undeclared-mtp")
        for name in ("gpu-box-1", f"extra-{i}"):
            node = f.Node.objects.filter(name=name).first() or f.make_node(name)
            for minutes in range(3):
                f.make_report(node, revision, 4.0, at=now - timedelta(minutes=minutes), topology_id="lab-2")
    assert [_queries(client, url) for url in pages] == few


def _queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_nodes_page_pages_its_nodes_those_likely_to_need_action_first(client: Client) -> None:
    now = timezone.now()
    _, fixed = f.qwen35_fleet(now)
    for i in range(fleet_ranking.NODES_PER_PAGE):
        f.make_report(f.make_node(f"aaa-fine-{i:02d}"), fixed, 5.3, at=now, mtp_used=True)
    first, second = text(client.get("/nodes/")), text(client.get("/nodes/", {"page": "2"}))
    total = fleet_ranking.NODES_PER_PAGE + len(f.FLEET_NODES)
    assert f"{total} nodes" in first and f"showing 1\u2013{fleet_ranking.NODES_PER_PAGE}" in first
    assert 'href="?page=2" rel="next"' in first
    # The nodes that ran the broken revision come first although their names sort last.
    assert "/nodes/mac-studio/" in first and "/nodes/aaa-fine-00/" in first
    assert f"/nodes/aaa-fine-{fleet_ranking.NODES_PER_PAGE - 1:02d}/" in second
    assert "/nodes/mac-studio/" not in second
    assert client.get("/nodes/", {"page": "999"}).status_code == 200  # the last page, never an error
    assert client.get("/nodes/", {"page": "<b>x</b>"}).status_code == 200
    flagged = text(client.get("/nodes/", {"stale": "1"}))
    assert "aaa-fine-00" not in flagged and "mac-studio" in flagged


def test_a_node_with_more_rows_than_the_count_reaches_says_at_least(monkeypatch: pytest.MonkeyPatch) -> None:
    now = timezone.now()
    node = f.make_node("busy-box")
    for i in range(5):
        f.make_report(
            node, f.make_revision(f.make_package(f"meshllm/Busy-{i}-layers"), "consistent-mtp"), 5.0, at=now
        )
    for module in (fleet_ranking, fleet_serving):  # the count stops there; the row says "at least"
        monkeypatch.setattr(module, "SERVED_COUNT_CAP", 3)
    (row,) = fleet_nodes.node_rows(fleet_window.window_start(), name="busy-box", limit=2)
    assert len(row.serving) == 2 and row.hidden == 1 and row.at_least  # counted up to the cap: 3 - 2


def test_the_fleet_seed_has_topologies_whose_nodes_serve_one_to_three_revisions_and_registered_runs(
    client: Client,
) -> None:
    from io import StringIO

    from django.apps import apps
    from django.core.management import call_command

    from packages_app.models import Report, Serving

    quiet = StringIO()
    with CaptureQueriesContext(connection) as captured:
        call_command(
            "seed_synthetic",
            shape="fleet",
            nodes=12,
            packages=20,
            revisions=3,
            reports=400,
            owner="fleet-test",
            stdout=quiet,
        )
    assert Report.objects.count() == 400
    # 400 reports hold one a day by each of the 12 nodes over the 30 days, so every node reports on each
    # day, as at 1M and 10M reports: the fleet pages' windows hold the same nodes whatever the total.
    from packages_app.seeding.rows import NOW, REPORT_SPAN

    days_by_node: dict[int, set[int]] = {}
    for node, at in Report.objects.values_list("node_id", "received_at"):
        days_by_node.setdefault(node, set()).add((at - (NOW - REPORT_SPAN)).days)
    assert len(days_by_node) == 12
    assert all(days == set(range(30)) for days in days_by_node.values()), days_by_node
    assert RevisionRollup.objects.exists()  # filled with the other rollups, and agreeing with them
    assert_revision_rollups_add_up_the_every_node_cells()
    if connection.vendor == "postgresql":  # the planner's statistics of every table the seed filled
        analyzed = {q["sql"].split()[-1].strip('"') for q in captured if q["sql"].startswith("ANALYZE")}
        filled = {
            m._meta.db_table for m in apps.get_app_config("packages_app").get_models() if m.objects.exists()
        }
        assert filled <= analyzed, filled - analyzed
    served: dict[int, set[int]] = {}
    for node, revision in Serving.objects.exclude(node_key=0).values_list("node_key", "revision_id"):
        served.setdefault(node, set()).add(revision)
    assert served and all(1 <= len(revisions) <= 3 for revisions in served.values())
    # A node serves a revision only on a release that admits it, and runs what the revision's assessment
    # predicts its setting does there: the seeded fleet never contradicts its audits.
    for run in NodeRun.objects.filter(repo_id__startswith="fleet-test/").select_related("revision"):
        release = release_for(run.version)
        assessment = parse_stored(json.dumps(run.revision.assessment))
        assert release is None or assessment.servable_on(release).admitted, (run.version, run.repo_id)
    # Each run was registered when its topology began serving it, over the seeded weeks, as an agent
    # registers it: not when the seed ran (bulk_create stamps its objects' auto_now fields with now).
    first_seen = set(
        NodeRun.objects.filter(repo_id__startswith="fleet-test/").values_list("first_seen_at", flat=True)
    )
    assert len(first_seen) > 1 and min(first_seen) < timezone.now() - timedelta(days=1), sorted(first_seen)[
        :3
    ]
    judged = fleet_nodes.node_rows(fleet_window.window_start(), placed=False)
    causes = {s.advice.cause for row in judged for s in row.serving}
    assert Cause.CONTRADICTION not in causes and Cause.REFUSED not in causes
    assert sum(bool(row.serving) for row in judged) >= 6
    rows = Serving.objects.exclude(node_key=0)
    assert rows.exclude(sole_strategy="").count() >= 0.8 * rows.count()  # a node runs what it is set to
    runs = NodeRun.objects.filter(repo_id__startswith="fleet-test/")
    assert runs.count() >= 12 and all(run.version and run.stages and run.revision_id for run in runs)
    topology = Serving.objects.filter(node_key=0).values_list("topology_id", flat=True).first()
    node = f.Node.objects.get(pk=next(iter(served))).name
    for url in ("/nodes/", f"/nodes/{node}/", f"/topologies/{topology}/"):
        assert client.get(url).status_code == 200
    call_command(
        "seed_synthetic",
        shape="fleet",
        nodes=12,
        packages=5,
        reports=0,
        owner="fleet-test",
        reset=True,
        stdout=quiet,
    )
    # The earlier runs went with their packages: what is left names the 5 packages seeded again.
    packages = set(
        f.Package.objects.filter(repo_id__startswith="fleet-test/").values_list("repo_id", flat=True)
    )
    assert len(packages) == 5
    assert set(runs.values_list("repo_id", flat=True)) <= packages and not runs.filter(revision=None).exists()


@pytest.mark.parametrize("since_hour", [3, 12, 20])
def test_a_node_row_counts_the_reports_since_the_windows_first_hour_whatever_cells_it_reads(
    since_hour: int,
) -> None:
    """The window's first day is read by its hours from since's, or as its day cell less the hours before
    since's where that is fewer cells: either way the same reports, strategies and median."""
    day = (timezone.now() - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
    since = day + timedelta(hours=since_hour, minutes=30)
    revision = f.make_revision(f.make_package("meshllm/Window-layers"), "undeclared-mtp")
    node = f.make_node("window-box")
    # Left out, and more of them than inside: counted, they would move the median.
    before = [day + timedelta(hours=h, minutes=m) for h in range(since_hour) for m in range(10)]
    inside = [day + timedelta(hours=h, minutes=10) for h in range(since_hour, 24)] + [day + timedelta(days=1)]
    for at in before:
        f.make_report(
            node, revision, 90.0, at=at, requested_strategy="ngram-cache", effective_strategy="ngram-cache"
        )
    for i, at in enumerate(inside):
        f.make_report(node, revision, (3.0, 4.0, 5.0)[i % 3], at=at)
    (row,) = fleet_nodes.node_rows(since, name="window-box")
    (served,) = row.serving
    expected = sketch.median(sketch.of_values([(3.0, 4.0, 5.0)[i % 3] for i in range(len(inside))]))
    assert served.reports == len(inside) and served.tps == round(expected or 0, 2)
    assert (served.requested, served.effective) == ("auto", "disabled")
    (judged,) = fleet_nodes.node_rows(since, name="window-box", placed=False)
    assert judged.serving[0].advice.cause is served.advice.cause


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("version", ["", "0.64.0", NEWEST_VERSION])
def test_the_needing_action_page_names_the_strategy_whether_the_judging_read_it_or_not(
    client: Client, version: str, mixed: bool
) -> None:
    """Judging which nodes need action reads a row's cells' strategies only where its reports ran several
    and the node's release is known (there, what it ran can contradict the audit); a row that ran one is
    judged by it (Serving.sole_strategy), and the page's rows read their reports afterwards. The row, its
    advice text and its reports are the whole list's either way."""
    revision = f.make_revision(f.make_package("meshllm/Judged-layers"), "undeclared-mtp")
    node = f.make_node("judged-box")
    for i in range(5):
        f.make_report(
            node, revision, 3.2, at=timezone.now() - timedelta(hours=i), effective_strategy="ngram-cache"
        )
    for i in range(2 if mixed else 0):  # fewer: the most-reported strategy is still ngram-cache
        f.make_report(node, revision, 3.2, at=timezone.now() - timedelta(hours=i, minutes=30))
    if version:
        NodeRun.objects.create(node=node, run_id="r1", revision=revision, version=version)
    since = fleet_window.window_start()
    (whole,) = fleet_nodes.node_rows(since)
    (served,) = whole.serving
    assert whole.needs_action and served.reports == (7 if mixed else 5) and served.effective == "ngram-cache"
    (judged,) = fleet_nodes.node_rows(since, needs_action=True, placed=False)
    assert judged.serving[0].advice.cause is served.advice.cause
    read = mixed and version == NEWEST_VERSION
    assert (judged.serving[0].reports == served.reports) is read  # read to judge, or left out
    if not mixed:  # judged by the strategy its reports all ran: the same advice, word for word
        assert judged.serving[0].advice == served.advice and judged.serving[0].effective == "ngram-cache"
    assert fleet_nodes.node_page(since, needs_action=True).rows == [whole]
    assert "requested auto, ran ngram-cache" in served.advice.text or version == NEWEST_VERSION
    assert escape(served.advice.text) in text(client.get("/nodes/", {"action": "1"}))


def test_a_strategy_spelt_two_ways_adds_up() -> None:
    """A node cell's strategy keys are JSON texts (Python's json.dumps, or PostgreSQL's jsonb text when
    rebuilt in SQL): two spellings of one strategy are one strategy."""
    counts = {
        '["auto", "native-mtp", true]': 2,
        '["auto","native-mtp",true]': 3,
        '["", "disabled", false]': 1,
    }
    assert fleet_figures._named(counts) == {("auto", "native-mtp", True): 5, ("", "disabled", False): 1}
