"""The package page's reads compiled once per process (packages_app.compiled.rows) read what their querysets
do, rows converted by the ORM's converters; a stand-in that a query rewrites is refused at compile time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from packages_app import baselines, compiled, judgements, node_plans, speedup_cells, throughput
from packages_app.catalog import lookups
from packages_app.fleet import plans, ranking, runs, serving, stages, topology
from packages_app.models import Node, NodeJudgement, NodeRun, Revision, Rollup, Serving
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def hourly_rollups_for_old_reports(settings: Any) -> None:
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 100_000  # BASE_TIME is in the past: keep its hour rollups


def reported() -> tuple[list[Revision], list[Node]]:
    """Two revisions of one package, reported by three nodes (one unregistered) over two days."""
    package = f.make_package("meshllm/Compiled-layers")
    old = f.make_revision(package, "undeclared-mtp", latest=False)
    new = f.make_revision(package, "consistent-mtp", committed_at=f.BASE_TIME + timedelta(1))
    nodes = [f.make_node(f"box-{i}") for i in range(3)]
    for i, node in enumerate(nodes):
        for hours in (0, 5, 30):
            at = f.BASE_TIME + timedelta(hours=hours + i)
            f.make_report(node, old, 3.0 + i, at=at, registered=i < 2)
            splits = f"0..{10 + i}|x"
            mtp = bool(hours)
            f.make_report(node, new, 5.0 + i, at=at, registered=i < 2, mtp_used=mtp, stage_splits=splits)
    return [old, new], nodes


def cells(revision: Revision) -> QuerySet[Rollup]:
    """The revision's per-node total cells of the nodes that registered a run of it (box-0 and box-1)."""
    registered = Node.objects.filter(name__in=["box-0", "box-1"]).values("pk")
    return Rollup.objects.filter(revision=revision, grain="total", node_key__in=registered)


def same(build: Any, *args: Any) -> list[Any]:
    """compiled.rows(build, *args), checked against the queryset's own rows (order kept where it has one)."""
    rows = compiled.rows(build, *args)
    assert rows == list(build(*args))
    return rows


def test_each_compiled_read_of_the_package_page_reads_what_its_queryset_does() -> None:
    revisions, nodes = reported()
    for revision in revisions:
        totals = same(throughput._total_cells, revision.pk)
        assert totals and all(isinstance(row, dict) and isinstance(row["tps"], str) for row in totals)
        assert {row["first_at"].tzinfo is not None for row in totals} == {True}  # a time, on SQLite too
        assert len(same(speedup_cells._node_cells_of, revision.pk)) >= 2
        assert sorted(same(speedup_cells._ran_of, revision.pk)) == sorted(
            {(c.mtp_used,) for c in cells(revision)}
        )
        every = same(node_plans._busiest_of(node_plans.PLAN_ROWS), revision.pk)  # fewer plans: all of them
        at_one = same(node_plans._busiest_of(1), revision.pk)
        assert len(every) >= 2 and at_one and set(at_one) <= set(every)
        assert {row[0] for row in every} == {nodes[0].pk, nodes[1].pk}  # box-2 never registered a run
        assert same(node_plans._count_nodes_of, revision.pk) == [(2,)]  # box-2 never registered a run
        assert same(node_plans._unused_of, revision.pk)
        assert same(baselines._releases_of, revision.pk) == []  # no agent named its release
        NodeRun.objects.filter(revision=revision, node=nodes[0]).update(version="0.78.0")
        assert same(baselines._releases_of, revision.pk) == [(revision.pk, nodes[0].pk, "0.78.0")]
        recent = same(throughput._recent_reports, revision.pk)
        assert {row["node_name"] for row in recent} == {"box-0", "box-1"}  # box-2 never registered a run
        ranged = (f.BASE_TIME + timedelta(hours=4), f.BASE_TIME + timedelta(2))
        for grain in ("hour", "day"):
            for start, until in ((None, None), ranged):
                for regroup in (False, True):
                    assert same(throughput._series_cells, revision.pk, grain, start, until, regroup)
    assert same(node_plans._names_of, [n.pk for n in nodes]) == [(n.pk, n.name) for n in nodes]
    runs = same(plans._runs_of, revisions[1].pk, ["box-0", "box-1", "box-2", "nobody"])
    assert sorted({row[0] for row in runs}) == ["box-0", "box-1"]  # box-2 never registered a run
    first = same(lookups._first_served, [r.pk for r in revisions])
    assert first and all(at.tzinfo is not None for _, at in first)


def test_the_nodes_pages_candidate_rows_read_what_their_queryset_does() -> None:
    """fleet.ranking.top_revisions for a page's nodes: each node's busiest and flagged revisions and its
    count, for visitors and operators, at the nodes pages' and a node's page's limits."""
    f.qwen35_fleet(timezone.now())
    reported()  # and nodes whose reports are outside the window
    ids = list(Node.objects.order_by("name").values_list("pk", flat=True))
    since = timezone.now() - timedelta(days=7)
    for show_private in (False, True):
        for limit in (1, ranking.NODES_PAGE_ROWS, ranking.NODE_PAGE_ROWS):
            rows = same(ranking._tops_of(limit), ids, since, show_private)
            assert len(rows) == len(ids)
            served = ranking.top_revisions(ids, since, show_private, limit).served
            assert served == {row[0]: int(row[3] or 0) for row in rows}
    # What the pages read: some node ran a revision in the window, and each node is counted.
    assert any(ranking.top_revisions(ids, since, False, 5).revisions.values())


def unordered(build: Any, *args: Any) -> list[Any]:
    """``same`` for a read without an order: the same rows, in any order."""
    rows = compiled.rows(build, *args)
    assert sorted(map(repr, rows)) == sorted(map(repr, build(*args)))
    return rows


def test_the_nodes_pages_reads_by_pairs_and_newest_runs_read_what_their_querysets_do() -> None:
    """The shown groups (fleet.ranking._groups_read), their runs' facts (fleet.runs._runs_read) and each
    node's newest run (fleet.runs._latest_runs_read): the pairs go in as arrays, their stand-ins bound
    inside them (compiled.bound), for visitors and operators, with and without what only the rows shown
    read."""
    f.qwen35_fleet(timezone.now())
    reported()
    pairs = sorted(NodeRun.objects.values_list("node_id", "revision_id").distinct())
    nodes, revision_ids = [n for n, _ in pairs], [r for _, r in pairs]
    ids = sorted(Node.objects.values_list("pk", flat=True))
    since = f.BASE_TIME - timedelta(days=1)
    for show_private in (False, True):
        groups = unordered(ranking._groups_read, revision_ids, nodes, since, show_private)
        assert groups and {(g["node_key"], g["revision_id"]) for g in groups} <= set(pairs)
        for with_stages in (False, True):
            newest = unordered(runs._latest_runs_read, ids, show_private, with_stages)
            assert {row[0] for row in newest} <= set(ids) and newest
    for with_stages in (False, True):
        facts = same(runs._runs_read, nodes, revision_ids, with_stages)  # ordered: the newest run last
        assert {(row[0], row[1]) for row in facts} == set(pairs)
    ranked = ranking._ranked_groups(revision_ids, nodes, since, True)
    assert {(g["node_key"], g["revision_id"]) for g in ranked} == {
        (g["node_key"], g["revision_id"]) for g in groups
    }


def test_a_topologys_rows_read_what_their_queryset_does() -> None:
    """fleet.topology's read of its rows for each topology nodes ran (its id bound as a text), for visitors
    and operators: the rows in their order, with the count of all."""
    f.qwen35_fleet(timezone.now())
    reported()
    since = f.BASE_TIME - timedelta(days=1)
    topologies = sorted(set(Serving.objects.exclude(topology_id="").values_list("topology_id", flat=True)))
    assert len(topologies) >= 2
    for topology_id in [*topologies, "no-such-topology"]:
        for show_private in (False, True):
            rows = same(topology._shown_read_of(50), [topology_id], since, show_private)
            assert all(row["groups"] >= len(rows) for row in rows)
    assert len(same(topology._shown_read_of(1), [topologies[0]], since, False)) == 1


def test_the_newest_reports_topologies_and_the_window_rows_read_what_their_querysets_do() -> None:
    """fleet.stages' newest topologies (lists of ids, texts and times bound; on one topology or any),
    fleet.ranking's rows of the window and their capped count, fleet.serving's shown revisions."""
    f.qwen35_fleet(timezone.now())
    revisions, _ = reported()
    since = f.BASE_TIME - timedelta(days=1)
    newest = list(
        Serving.objects.exclude(node_key=0).values_list("node_key", "revision_id", "stage_splits", "last_at")
    )
    columns = [list(column) for column in zip(*newest, strict=True)]
    first, last = min(columns[3]), max(columns[3])
    by_node = same(
        stages._newest_of(("node_id", "revision_id", "stage_splits"), False), *columns, first, last, []
    )
    assert len(by_node) >= len(newest) and any(isinstance(row[3], dict) for row in by_node)
    on = list(
        Serving.objects.filter(node_key=0).values_list(
            "revision_id", "stage_splits", "last_at", "topology_id"
        )
    )
    for topology_id in {row[3] for row in on}:
        mine = [row[:3] for row in on if row[3] == topology_id]
        columns = [list(column) for column in zip(*mine, strict=True)]
        times = columns[2]
        assert same(
            stages._newest_of(("revision_id", "stage_splits"), True),
            *columns,
            min(times),
            max(times),
            [topology_id],
        )
    ids = sorted(Node.objects.values_list("pk", flat=True))
    for show_private in (False, True):
        assert unordered(ranking._window_read, ids, since, show_private)
    assert len(same(ranking._counted_of(2), ids, since)) == 3
    assert unordered(serving._revisions_read, [r.pk for r in revisions] + [10**9])


def test_the_kept_judgements_reads_read_what_their_querysets_do() -> None:
    """packages_app.judgements' stale rows (at several clocks and digests) and its count for the nodes
    pages' paginator, for visitors and operators, needing action or not, and with no judgement at all."""
    for show_private in (False, True):
        for needs_action in (False, True):
            assert same(judgements._count_read, show_private, needs_action) == []  # none kept yet
    f.qwen35_fleet(timezone.now())
    judgements.rebuild()
    now = timezone.now()
    digest = judgements.basis()
    for at in (now - timedelta(days=30), now, now + timedelta(days=30)):
        for basis in (digest, "0" * 32, "f" * 32):
            same(judgements._stale_read, at, basis)
    assert same(judgements._stale_read, now + timedelta(days=30), digest)  # the window moved past them
    for show_private in (False, True):
        for needs_action in (False, True):
            (count,) = same(judgements._count_read, show_private, needs_action)
            kept = NodeJudgement.objects.filter(private=show_private)
            assert count == ((kept.filter(needs_action=True) if needs_action else kept).count(),)


def _bound_outside_lists(params: Sequence[Any], values: dict[Any, Any]) -> list[Any]:
    """compiled.bound as it was: a list parameter (an array) sent as compiled."""
    return [param if isinstance(param, list) else values.get(param, param) for param in params]


def test_control_with_the_arrays_bound_as_compiled_the_pairs_read_nothing(monkeypatch: Any) -> None:
    # What binding inside a list parameter is for: the pairs' arrays compiled for stand-ins (negative ids)
    # and sent as they are name no row, where the queryset finds the runs.
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's VALUES list binds each value alone: no array to bind inside")
    f.qwen35_fleet(timezone.now())
    pairs = sorted(NodeRun.objects.values_list("node_id", "revision_id").distinct())
    nodes, revision_ids = [n for n, _ in pairs], [r for _, r in pairs]
    assert list(runs._runs_read(nodes, revision_ids, False))
    compiled._compiled.cache_clear()
    monkeypatch.setattr(compiled, "bound", _bound_outside_lists)
    assert compiled.rows(runs._runs_read, nodes, revision_ids, False) == []
    compiled._compiled.cache_clear()


def test_a_read_that_can_match_nothing_reads_nothing() -> None:
    # An empty list of ids: the ORM refuses to compile it (EmptyResultSet) and its iteration answers [].
    assert same(node_plans._names_of, []) == []
    assert same(lookups._first_served, []) == []
    assert node_plans.ranked([], {}) == []  # a revision none of whose nodes' plans is public


def test_one_compiled_read_serves_every_value_of_its_shape() -> None:
    revisions, _ = reported()
    compiled._compiled.cache_clear()
    for revision in revisions:
        same(node_plans._count_nodes_of, revision.pk)
    assert compiled._compiled.cache_info().misses == 1 and compiled._compiled.cache_info().hits == 1


def _shifted(revision_id: int) -> QuerySet[Revision, tuple[int]]:
    # A read whose argument reaches the SQL changed: the stand-in is not among the parameters.
    return Revision.objects.filter(pk=revision_id + 1).values_list("pk")


def test_a_stand_in_the_query_rewrites_is_refused() -> None:
    revisions, _ = reported()
    with pytest.raises(ValueError, match="not parameters"):
        compiled.rows(_shifted, revisions[0].pk)


def test_control_without_the_refusal_the_read_answers_for_the_stand_in(monkeypatch: Any) -> None:
    # What the refusal stops: the SQL compiled for the stand-in (id 0) runs as it is, so the read finds
    # nothing where its queryset finds the next revision.
    revisions, _ = reported()
    compiled._compiled.cache_clear()
    monkeypatch.setattr(compiled, "_stand_in_values", lambda stand: set())
    assert list(_shifted(revisions[0].pk)) == [(revisions[1].pk,)]
    assert compiled.rows(_shifted, revisions[0].pk) == []
    compiled._compiled.cache_clear()


def _instances(ids: Sequence[int]) -> QuerySet[Revision]:
    return Revision.objects.filter(pk__in=ids)


def _flat(ids: Sequence[int]) -> QuerySet[Revision, int]:
    return Revision.objects.filter(pk__in=ids).values_list("pk", flat=True)


@pytest.mark.parametrize("build", [_instances, _flat])
def test_only_values_and_values_list_reads_are_compiled(build: Any) -> None:
    with pytest.raises(TypeError, match="values"):
        compiled.rows(build, [1, 2])


@pytest.mark.parametrize("argument", [1.5, [1, "a"], {1}])
def test_an_argument_it_cannot_bind_is_refused(argument: Any) -> None:
    with pytest.raises(TypeError, match="binds ints"):
        compiled.rows(_flat, argument)


def test_the_latest_revision_read_with_its_package_is_the_one_resolved_alone(
    django_assert_num_queries: Any,
) -> None:
    revisions, _ = reported()
    owner, name = revisions[1].package.repo_id.split("/")
    alone = lookups.resolve_revision(lookups.get_package(owner, name), None)
    package = lookups.get_package(owner, name, with_latest=True)
    with django_assert_num_queries(0):  # read with the package, its package set as the manager sets it
        latest = lookups.resolve_revision(package, None)
        assert latest == alone == revisions[1] and latest is not None and latest.package is package
    # A latest revision that is not the package's own (a row changed by hand) is not taken: the query
    # of the package's revisions answers, as without the join.
    other = f.make_revision(f.make_package("meshllm/Other-layers"), "consistent-mtp")
    type(package).objects.filter(pk=package.pk).update(latest_revision=other)
    package = lookups.get_package(owner, name, with_latest=True)
    assert lookups.resolve_revision(package, None) is None
