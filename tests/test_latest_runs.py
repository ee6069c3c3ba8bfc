"""Each node's newest registered run (fleet.runs.latest_runs), as the nodes pages show its release, devices
and registered-only row: the run updated last (the higher id on a tie), and for a reader who may not see
private packages, the newest run of a public package or of none. Checked against that rule computed
in Python over random runs, and (PostgreSQL) read from the index that keeps each node's runs in order.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from packages_app.fleet import sql as fleet_sql
from packages_app.fleet.runs import latest_runs
from packages_app.models import Node, NodeRun, Package, Revision
from tests.dashboard_factories import make_node

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 1, tzinfo=UTC)


def random_runs(seed: int) -> None:
    """Nodes with runs of public, private and unknown-privacy packages' revisions, runs naming a repo no
    stored revision confirms, and runs naming none; updated at a few shared times, so ties happen."""
    rng = random.Random(seed)
    revisions = []
    for i, private in enumerate((False, False, True, None)):
        package = Package.objects.create(repo_id=f"meshllm/p{i}-layers", private=private)
        revisions += [
            Revision.objects.create(package=package, commit_sha=f"{i}{j}".ljust(40, "0")) for j in (1, 2)
        ]
    for n in range(12):
        node = make_node(f"node-{n}")
        for r in range(rng.randrange(0, 6)):  # some nodes have no run at all
            kind = rng.random()
            revision = rng.choice(revisions) if kind < 0.7 else None
            repo = revision.package.repo_id if revision else ("meshllm/unknown-layers" if kind < 0.85 else "")
            run = NodeRun.objects.create(
                node=node, run_id=f"{n}-{r}", revision=revision, repo_id=repo, version=f"0.{n}.{r}"
            )
            NodeRun.objects.filter(pk=run.pk).update(updated_at=START + timedelta(hours=rng.randrange(3)))


def newest_by_rule(show_private: bool) -> dict[int, tuple[str, bool]]:
    """Each node's newest run by the rule in the module's docstring: its version (one a run) and whether
    its package is known to be public."""
    newest: dict[int, tuple[datetime, int, str, bool]] = {}
    for run in NodeRun.objects.select_related("revision__package"):
        public = run.revision is not None and run.revision.package.private is False
        if not (show_private or public or (run.revision is None and run.repo_id == "")):
            continue
        candidate = (run.updated_at, run.pk, run.version, public)
        newest[run.node_id] = max(newest.get(run.node_id, candidate), candidate)
    return {node: (version, public) for node, (_at, _pk, version, public) in newest.items()}


@pytest.mark.parametrize("seed", range(4))
def test_each_nodes_newest_run_is_the_one_the_rule_picks(seed: int) -> None:
    random_runs(seed)
    ids = list(Node.objects.values_list("pk", flat=True))
    for show_private in (False, True):
        expected = newest_by_rule(show_private)
        for among in (ids, Node.objects.values_list("pk", flat=True)):  # a list, or the query of the ids
            found = latest_runs(among, show_private)
            assert {node: (r.version, r.public) for node, r in found.items()} == expected, (
                seed,
                show_private,
            )
    assert latest_runs([], show_private=True) == {}


def plan_of_latest_runs() -> str:
    """PostgreSQL's plan, run, of latest_runs for every node (the judging read) of ``random_runs``."""
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    random_runs(0)
    with CaptureQueriesContext(connection) as queries:
        latest_runs(Node.objects.values_list("pk", flat=True), show_private=False)
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:  # a few rows: make the planner use an index if one can answer
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN ANALYZE " + query["sql"])
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_newest_run_is_read_from_the_nodes_index_once_a_node() -> None:
    """PostgreSQL finds each node's newest run as the first entry of noderun_node_newest it reads
    backwards, never ranking all its runs (a node of the catalog seed registered 3,800), and once a node
    (``fleet.sql.Fenced``)."""
    plan = plan_of_latest_runs()
    assert "Index Scan Backward using noderun_node_newest" in plan, plan
    assert "WindowAgg" not in plan and "Sort" not in plan, plan
    assert _reads_per_node(plan) == [Node.objects.count()], plan


def test_control_unfenced_each_nodes_newest_run_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_sql.Fenced, "template", "(%(subquery)s)")
    plan = plan_of_latest_runs()
    assert _reads_per_node(plan) != [Node.objects.count()], plan


def _reads_per_node(plan: str) -> list[int]:
    """How many times the plan read noderun_node_newest (the loops of each scan of it)."""
    return [
        int(line.rsplit("loops=", 1)[1].rstrip(")"))
        for line in plan.splitlines()
        if "using noderun_node_newest" in line
    ]
