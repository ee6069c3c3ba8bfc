"""Rollups equal the raw reports: counts and sums exactly, medians within the sketch's 1 %.

However the reports arrive: one by one, in batches, replayed, from racing threads, linked to their
revision later, or from a storing process killed after its rollup upsert and before its commit.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.db.models import Count, Sum

from packages_app import reports, sketch, throughput
from packages_app.models import (
    LastServed,
    Node,
    NodeRollup,
    NodeRun,
    Package,
    PlanRollup,
    Report,
    Revision,
    RevisionRollup,
    Rollup,
    Serving,
    SplitRollup,
)
from packages_app.nodes.report_schema import validate_report_body
from packages_app.rollups import cells as rollups_cells
from packages_app.rollups import quartiles as rollups_quartiles
from packages_app.rollups import rebuild as rollups_rebuild
from packages_app.rollups import upsert as rollups_upsert
from tests.migrating import back_to_the_leaf, migrate  # noqa: F401 (a fixture)
from tests.rollup_checks import (
    assert_quartiles_kept,
    assert_revision_rollups_add_up_the_every_node_cells,
    plan_rollups,
    revision_rollups,
    split_rollups,
)

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = connection.vendor == "postgresql"
REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
SHA = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"
STRATEGIES = [("native-mtp", "Integrated"), ("disabled", "Disabled"), ("ngram-cache", "Disabled")]


@pytest.fixture
def revision() -> Revision:
    package = Package.objects.create(repo_id=REPO, private=False)
    return Revision.objects.create(package=package, commit_sha=SHA, mtp_detected=True)


def node(name: str) -> Node:
    """A node whose agent registered a run of REPO at SHA (ingested or not): its reports count publicly."""
    sender = Node.objects.create(name=name, token_hash=name.ljust(64, "0"), token_prefix=name[:12])
    NodeRun.objects.create(node=sender, run_id=f"run-{name}", repo_id=REPO, commit_sha=SHA)
    return sender


def body(rng: random.Random, *, repo: str = REPO, sha: str = SHA) -> dict[str, Any]:
    strategy, source = rng.choice(STRATEGIES)
    proposed = rng.randint(1, 200) if strategy == "native-mtp" else 0
    splits = rng.choice([(0, 27, 41), (0, 20, 41)])
    return {
        "report_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "observed_at": datetime.now(UTC).isoformat(),
        "package": {"repo": repo, "revision": sha},
        "topology": {
            "topology_id": rng.choice(["topo", "lab-2"]),
            "stages": [
                {"node": "a", "layer_start": splits[0], "layer_end": splits[1]},
                {"node": "b", "layer_start": splits[1], "layer_end": splits[2]},
            ],
        },
        "speculative": {
            "requested_strategy": rng.choice(["auto", "disabled"]),
            "effective_strategy": strategy,
            "mtp_source": source,
        },
        "timings": {
            "predicted_per_second": round(rng.lognormvariate(1.5, 0.5), 3),
            "prompt_per_second": round(rng.uniform(100, 900), 2),
            "predicted_n": 256,
            "speculative_proposed_n": proposed,
            "speculative_accepted_n": rng.randint(0, proposed),
            "speculative_windows": proposed // 2,
        },
    }


def valid(data: dict[str, Any]) -> reports.ValidReport:
    report, digest = validate_report_body(data)
    return reports.ValidReport(report=report, digest=digest, body=data)


def assert_rollups_match_raw(revision: Revision) -> None:
    """Every grain's counts and sums equal the raw reports'; every total median within 1 %."""
    raw = Report.objects.filter(revision=revision)
    sums = {
        "n": Count("id"),
        "accepted": Sum("speculative_accepted_n"),
        "proposed": Sum("speculative_proposed_n"),
    }
    expected = raw.aggregate(**sums)
    for grain in Rollup.Grain:
        for nodes in (Rollup.objects.filter(node_key=0), Rollup.objects.exclude(node_key=0)):
            cells = nodes.filter(revision=revision, grain=grain)
            if grain == Rollup.Grain.HOUR and not cells.exists():
                continue  # only when the reports are older than the hourly window
            got = cells.aggregate(n=Sum("reports"), accepted=Sum("accepted"), proposed=Sum("proposed"))
            assert got == expected, (grain, got, expected)
    per_node = Counter(raw.values_list("node_id", flat=True))
    totals = Rollup.objects.filter(revision=revision, grain=Rollup.Grain.TOTAL).exclude(node_key=0)
    assert _sum_by_node(totals) == dict(per_node)
    assert_medians_match(revision)
    assert_last_served_matches(revision, assert_serving_matches_raw(revision))
    assert _node_rollups(revision) == _node_rollups_expected(revision)
    assert_revision_rollups_add_up_the_every_node_cells()


def _node_rollups_expected(revision: Revision | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Each node's hour and day Rollup cells, every strategy and topology together: reports, decode-rate
    bins and reports per (requested, effective, MTP used)."""
    cells = Rollup.objects.exclude(node_key=0).exclude(grain="total")
    if revision is not None:
        cells = cells.filter(revision=revision)
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    for *key, count, bins, requested, strategy, used in cells.values_list(
        *rollups_upsert.NODE_ROLLUP_KEY, "reports", "tps_sketch", "requested_strategy", "strategy", "mtp_used"
    ):
        row = expected.setdefault(tuple(key), {"reports": 0, "bins": Counter(), "strategies": Counter()})
        row["reports"] += count
        row["bins"].update(sketch.from_json(bins))
        row["strategies"][(requested, strategy, bool(used))] += count
    return expected


def _node_rollups(revision: Revision | None = None) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The stored NodeRollup rows, their strategy keys read back (rollups.upsert.strategy_key)."""
    rows = NodeRollup.objects.all() if revision is None else NodeRollup.objects.filter(revision=revision)
    got: dict[tuple[Any, ...], dict[str, Any]] = {}
    for *key, count, bins, strategies in rows.values_list(
        *rollups_upsert.NODE_ROLLUP_KEY, "reports", "tps_sketch", "strategies"
    ):
        pairs: Counter[tuple[str, str, bool]] = Counter()
        for text, n in strategies.items():
            requested, effective, used = json.loads(text)
            pairs[(requested, effective, bool(used))] += n
        got[tuple(key)] = {"reports": count, "bins": Counter(sketch.from_json(bins)), "strategies": pairs}
    return got


def assert_serving_matches_raw(
    revision: Revision, sole: bool = True
) -> dict[tuple[int, str, str], dict[str, Any]]:
    """Per node x topology x split and the same for every node: reports, MTP-unused reports, first
    and last arrival, the last unused one and the strategy they all ran (or ""), exactly as the raw
    reports say (without ``sole``, before the strategy's column: migration 0023)."""
    expected: dict[tuple[int, str, str], dict[str, Any]] = {}
    ran: dict[tuple[int, str, str], set[str]] = {}
    raw = Report.objects.filter(revision=revision).values_list(
        "node_id",
        "topology_id",
        "stage_splits",
        "received_at",
        "mtp_used",
        "requested_strategy",
        "effective_strategy",
    )
    for node_id, topology, splits, at, mtp_used, requested, effective in raw:
        unused = rollups_cells.shows_mtp_unused(mtp_used, requested)
        for key in ((node_id, topology, splits), (Rollup.ALL_NODES, topology, splits)):
            row = expected.setdefault(
                key, {"reports": 0, "unused": 0, "first_at": at, "last_at": at, "last_unused_at": None}
            )
            ran.setdefault(key, set()).add(rollups_upsert.strategy_key(requested, effective, mtp_used))
            row["reports"] += 1
            row["unused"] += int(unused)
            row["first_at"], row["last_at"] = min(row["first_at"], at), max(row["last_at"], at)
            if unused and (row["last_unused_at"] is None or at > row["last_unused_at"]):
                row["last_unused_at"] = at
    for key, strategies in ran.items() if sole else ():
        expected[key]["sole_strategy"] = strategies.pop() if len(strategies) == 1 else ""
    got = {
        (row.pop("node_key"), row.pop("topology_id"), row.pop("stage_splits")): row
        for row in Serving.objects.filter(revision=revision).values(
            "node_key",
            "topology_id",
            "stage_splits",
            "reports",
            "unused",
            "first_at",
            "last_at",
            "last_unused_at",
            *(["sole_strategy"] if sole else []),
        )
    }
    assert got == expected
    return got


def assert_last_served_matches(
    revision: Revision, serving: dict[tuple[int, str, str], dict[str, Any]]
) -> None:
    """The revision's LastServed row holds the newest times of its every-node rows (none: no row)."""
    every = [row for (node, _, _), row in serving.items() if node == Rollup.ALL_NODES]
    got = LastServed.objects.filter(revision=revision).values("last_at", "last_unused_at").first()
    if not every:
        assert got is None
        return
    unused = [row["last_unused_at"] for row in every if row["last_unused_at"] is not None]
    assert got == {
        "last_at": max(row["last_at"] for row in every),
        "last_unused_at": max(unused, default=None),
    }


def _sum_by_node(cells: Any) -> dict[int, int]:
    result: dict[int, int] = {}
    for key, count in cells.values_list("node_key", "reports"):
        result[key] = result.get(key, 0) + count
    return result


def assert_medians_match(revision: Revision) -> None:
    for strategy, _ in STRATEGIES:
        values = list(
            Report.objects.filter(revision=revision, effective_strategy=strategy)
            .exclude(predicted_per_second=None)
            .values_list("predicted_per_second", flat=True)
        )
        cells = Rollup.objects.filter(revision=revision, grain="total", node_key=0, strategy=strategy)
        merged = sketch.merged(sketch.from_json(bins) for bins in cells.values_list("tps_sketch", flat=True))
        if values:
            assert sketch.median(merged) == pytest.approx(statistics.median(values), rel=sketch.ALPHA)
        else:
            assert merged == {}


@pytest.mark.django_db
def test_batches_with_replays_and_conflicts_are_counted_once(revision: Revision) -> None:
    rng = random.Random(1)
    a, b = node("node-a"), node("node-b")
    bodies = [body(rng) for _ in range(120)]
    now = datetime.now(UTC)
    reports.store_reports(a, [valid(x) for x in bodies[:80]], now)
    reports.store_reports(a, [valid(x) for x in bodies[40:] + bodies[:10]], now + timedelta(seconds=1))
    reports.store_reports(b, [valid(x) for x in bodies[:30]], now + timedelta(seconds=2))
    changed = {**bodies[0], "timings": {**bodies[0]["timings"], "predicted_per_second": 1.0}}
    reports.store_reports(a, [valid(changed)], now + timedelta(seconds=3))  # a conflict: stored as was
    for x in bodies[100:]:
        reports.store_report(b, valid(x), now + timedelta(seconds=4))
        reports.store_report(b, valid(x), now + timedelta(seconds=5))  # a verbatim replay
    assert Report.objects.count() == 120 + 30 + 20
    assert_rollups_match_raw(revision)


@pytest.mark.django_db
def test_reports_that_arrive_before_their_revision_are_rolled_up_when_it_is_linked() -> None:
    rng = random.Random(2)
    sender = node("node-a")
    reports.store_reports(sender, [valid(body(rng)) for _ in range(25)], datetime.now(UTC))
    assert not Rollup.objects.exists()  # no revision yet
    package = Package.objects.create(repo_id=REPO, private=False)
    revision = Revision.objects.create(package=package, commit_sha=SHA, mtp_detected=True)
    assert reports.link_reports_to_revision(revision) == 25
    assert reports.link_reports_to_revision(revision) == 0  # a second link adds nothing
    assert_rollups_match_raw(revision)


@pytest.mark.django_db
def test_rebuild_rollups_gives_the_rows_the_store_paths_wrote(revision: Revision) -> None:
    rng = random.Random(4)
    sender = node("node-a")
    for second in range(5):
        at = datetime.now(UTC) - timedelta(hours=second * 7)
        reports.store_reports(sender, [valid(body(rng)) for _ in range(20)], at)
    assert_rebuild_writes_the_same_rows()


@pytest.mark.django_db
def test_rebuild_matches_the_store_paths_on_every_kind_of_row(revision: Revision) -> None:
    """Spans and reports, llama-server draft_n counters, null, zero and tiny rates, old and recent,
    several nodes: what rebuild_rollups computes (in SQL on PostgreSQL) is what the stores wrote."""
    rng = random.Random(9)
    now = datetime.now(UTC)
    senders = [node("node-a"), node("node-b")]
    for i in range(120):
        at = now - timedelta(hours=rng.choice([0, 3, 30, 24 * 20, 24 * 400]), minutes=rng.randint(0, 59))
        counters = rng.choice(
            [
                {"speculative_proposed_n": 80, "speculative_accepted_n": 50, "speculative_windows": 40},
                {"draft_n": 60, "draft_n_accepted": 31},
                {"speculative_proposed_n": 0, "speculative_accepted_n": 0},
                {},
            ]
        )
        row = Report(
            node=rng.choice(senders),
            report_id=uuid.UUID(int=rng.getrandbits(128)),
            body_sha256="0" * 64,
            received_at=at,
            # On time, a replay (moved to when observed) and clocks not believed (refused: at arrival).
            observed_at=at
            + rng.choice([timedelta(0), -timedelta(hours=30), -timedelta(days=10), timedelta(hours=1)]),
            repo_id=REPO,
            commit_sha=SHA,
            revision=revision,
            stage_splits=rng.choice(["0..27|27..41", ""]),
            topology_id=rng.choice(["lab-1", "lab-2", ""]),
            requested_strategy=rng.choice(["auto", "disabled", "mtp", ""]),
            effective_strategy=rng.choice(["native-mtp", "disabled", "ngram-cache"]),
            mtp_used=rng.random() < 0.4,
            source=rng.choice(["report", "otlp"]),
            predicted_per_second=rng.choice([None, 0.0, 1e-12, round(rng.lognormvariate(1.5, 0.5), 3)]),
            prompt_per_second=rng.choice([None, round(rng.uniform(100, 900), 2)]),
            body={"i": i},
            **counters,
        )
        reports.insert_claimed(row.node, [row])
    assert_rebuild_writes_the_same_rows()


@pytest.mark.django_db
def test_every_nodes_cells_without_topologies_are_the_every_node_rollups_added_up(
    revision: Revision, settings: Any
) -> None:
    """Three topologies, strategies, splits, hours and days of two registered nodes, one of them over the
    daily cap, and a node that never registered a run: the RevisionRollup rows are Rollup's every-node
    cells added up over topologies, so they count neither the unregistered node nor the reports past the
    cap; the rebuild and the migrations' fills give the same rows (and the same PlanRollup and SplitRollup
    rows, the per-node total cells added up)."""
    settings.MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY = 12
    rng = random.Random(43)
    a, b = node("node-a"), node("node-b")
    stranger = Node.objects.create(name="stranger", token_hash="s".ljust(64, "0"), token_prefix="stranger")
    now = datetime.now(UTC)
    for i, sender in enumerate([a, b, stranger, a, b, a]):
        bodies = [body(rng) for _ in range(25)]
        for data in bodies:
            data["topology"]["topology_id"] = rng.choice(["topo", "lab-2", "lab-3"])
        reports.store_reports(sender, [valid(data) for data in bodies], now - timedelta(hours=11 * i))
    every = Rollup.objects.filter(revision=revision, node_key=Rollup.ALL_NODES)
    assert every.count() > RevisionRollup.objects.count() > 0  # the topologies were split, and are not here
    days = Counter(
        (sender, at.date())
        for sender, at in Report.objects.exclude(node=stranger).values_list("node", "received_at")
    )
    public = RevisionRollup.objects.filter(grain=Rollup.Grain.TOTAL).aggregate(n=Sum("reports"))["n"]
    assert public == sum(min(n, 12) for n in days.values()) < sum(days.values())
    assert_revision_rollups_add_up_the_every_node_cells()
    assert_rebuild_writes_the_same_rows()

    stored = revision_rollups()
    RevisionRollup.objects.all().delete()
    filling = importlib.import_module("packages_app.migrations.0032_revision_rollups")
    filling.fill(None, SimpleNamespace(connection=connection))
    filled = revision_rollups()
    assert filled.keys() == stored.keys()
    for key, row in stored.items():
        assert filled[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}

    for model, read, migration in (
        (PlanRollup, plan_rollups, "0036_plan_rollups"),
        (SplitRollup, split_rollups, "0042_split_rollups"),
    ):
        kept = read()
        model.objects.all().delete()
        filling = importlib.import_module(f"packages_app.migrations.{migration}")
        filling.fill(None, SimpleNamespace(connection=connection))
        filled = read()
        assert kept and filled.keys() == kept.keys(), model
        for key, row in kept.items():
            assert filled[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}


@pytest.mark.django_db
def test_a_replayed_spool_is_placed_when_observed_and_a_clock_not_believed_when_it_arrived(
    revision: Revision,
) -> None:
    """48 reports observed over 4 days arrive in one hour (an agent replaying its spool): each lands in the
    hour and day its node observed it, and the totals count them as moved; one observed an hour ahead of
    arrival and one 10 days before it are refused that time and placed at arrival."""
    sender = node("node-a")
    arrived = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
    rng = random.Random(3)
    bodies = []
    for i in range(48):
        data = body(rng)
        data["observed_at"] = (arrived - timedelta(hours=2 * i + 1)).isoformat()
        bodies.append(data)
    for offset in (timedelta(hours=1), -timedelta(days=10)):
        data = body(rng)
        data["observed_at"] = (arrived + offset).isoformat()
        bodies.append(data)
    reports.store_reports(sender, [valid(data) for data in bodies], arrived)

    every = Rollup.objects.filter(revision=revision, node_key=Rollup.ALL_NODES)
    hours = Counter()
    for start, count in every.filter(grain=Rollup.Grain.HOUR).values_list("bucket_start", "reports"):
        hours[start] += count
    arrival_hour = arrived.replace(minute=0)
    assert hours[arrival_hour] == 2  # the two refused ones, at arrival
    assert sorted(hours) == sorted(
        {arrived.replace(minute=0) - timedelta(hours=2 * i + 1) for i in range(48)} | {arrival_hour}
    )
    days = {
        start.date() for start in every.filter(grain=Rollup.Grain.DAY).values_list("bucket_start", flat=True)
    }
    assert len(days) >= 4  # 96 hours of observations span four or five calendar days
    totals = every.filter(grain=Rollup.Grain.TOTAL).aggregate(moved=Sum("moved"), refused=Sum("refused"))
    assert totals == {"moved": 48, "refused": 2}
    flagged = Report.objects.filter(clock_skew_flagged=True).count()
    assert flagged == 2  # a replay is not clock skew; the two refused times are
    figures = throughput.revision_throughput(revision.pk)
    assert figures is not None and (figures.moved, figures.refused) == (48, 2)
    assert figures.bucket == "hour" and len({p.bucket for p in figures.series}) == 49
    assert_rebuild_writes_the_same_rows()


def assert_rebuild_writes_the_same_rows() -> None:
    before, servings, nodes, every = _rows(), _serving_rows(), _node_rollups(), revision_rollups()
    plans, splits = plan_rollups(), split_rollups()
    assert servings, "the stores wrote no Serving rows"
    assert nodes == _node_rollups_expected(), "the stores wrote NodeRollup rows unlike their cells"
    assert_revision_rollups_add_up_the_every_node_cells()
    call_command("rebuild_rollups", stdout=StringIO())
    assert _node_rollups() == nodes
    rebuilt = revision_rollups()
    assert rebuilt.keys() == every.keys()
    for key, row in every.items():
        assert rebuilt[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}
    for kept, rebuilt in ((plans, plan_rollups()), (splits, split_rollups())):
        assert rebuilt.keys() == kept.keys()
        for key, row in kept.items():
            assert rebuilt[key] == {
                k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()
            }
    after = _rows()
    assert after.keys() == before.keys()
    for key, row in before.items():
        assert after[key] == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in row.items()}
    assert _serving_rows() == servings


def _serving_rows() -> set[tuple[Any, ...]]:
    fields = [f.attname for f in Serving._meta.fields if f.name != "id"]
    rows = {("serving", *row) for row in Serving.objects.values_list(*fields)}
    return rows | {
        ("last", *row) for row in LastServed.objects.values_list("revision_id", "last_at", "last_unused_at")
    }


def _rows() -> dict[tuple[Any, ...], dict[str, Any]]:
    """Rollup rows by natural key; float sums may differ in the last bits (order of addition)."""
    fields = [f.attname for f in Rollup._meta.fields if f.name != "id"]
    return {tuple(row[k] for k in rollups_upsert.KEY_COLUMNS): row for row in Rollup.objects.values(*fields)}


@pytest.mark.django_db
def test_hour_rollups_past_their_window_are_pruned_and_the_day_figures_stay(
    revision: Revision, settings: Any
) -> None:
    settings.MESHDASH_ROLLUP_HOURLY_DAYS = 2
    rng = random.Random(5)
    sender = node("node-a")
    now = datetime.now(UTC)
    reports.store_reports(sender, [valid(body(rng)) for _ in range(10)], now - timedelta(days=1))
    assert Rollup.objects.filter(grain="hour").exists()
    assert rollups_rebuild.prune_hourly(now + timedelta(days=3)) > 0
    assert not Rollup.objects.filter(grain="hour").exists()
    assert_rollups_match_raw(revision)


@pytest.mark.django_db
def test_reports_older_than_the_hourly_window_get_day_and_total_rollups_only(revision: Revision) -> None:
    rng = random.Random(6)
    old = datetime.now(UTC) - timedelta(days=400)
    reports.store_reports(node("node-a"), [valid(body(rng)) for _ in range(10)], old)
    assert set(Rollup.objects.values_list("grain", flat=True)) == {"day", "total"}
    assert_rollups_match_raw(revision)


@pytest.mark.skipif(not POSTGRES, reason="concurrent writers need PostgreSQL (SQLite serialises them)")
@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_with_replays_add_up_exactly(revision: Revision) -> None:
    rng = random.Random(8)
    senders = [node(f"node-{i}") for i in range(3)]
    bodies = [body(rng) for _ in range(600)]
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        try:
            local = random.Random(worker)
            sender = senders[worker % len(senders)]
            for _ in range(12):
                start = local.randrange(0, len(bodies) - 50)
                batch = [valid(x) for x in bodies[start : start + 50]]
                reports.store_reports(sender, batch, datetime.now(UTC))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(worker,)) for worker in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Report.objects.count() > 600  # replays across nodes are separate reports
    assert_rollups_match_raw(revision)


@pytest.mark.skipif(not POSTGRES, reason="concurrent writers need PostgreSQL (SQLite serialises them)")
@pytest.mark.django_db(transaction=True)
def test_one_nodes_batches_listing_the_same_reports_in_opposite_orders_never_deadlock(
    revision: Revision,
) -> None:
    """Keys are claimed in report_id order and cells upserted in key order, so two batches of one
    node that share reports wait for each other instead of each holding what the other needs."""
    rng = random.Random(10)
    sender = node("node-a")
    rounds = [[valid(body(rng)) for _ in range(150)] for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def send(reverse: bool) -> None:
        try:
            for batch in rounds:
                start.wait(timeout=30)
                reports.store_reports(sender, batch[::-1] if reverse else batch, datetime.now(UTC))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(reverse,)) for reverse in (False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Report.objects.count() == 8 * 150
    assert_rollups_match_raw(revision)


def _two_writers_of_one_point(seed: int) -> None:
    """Two requested strategies that ran as one, in the same hour, stored by two nodes' transactions (no
    row of their own in common before the revision's LastServed row): the first holds its transaction
    open, its cell upserted, while the second stores."""
    rng, now = random.Random(seed), datetime.now(UTC)
    stages = body(random.Random(1))["topology"]["stages"]
    stored, commit = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def send(sender: str, requested: str, rate: float, hold: bool) -> None:
        try:
            data = body(rng)
            data["speculative"].update(
                requested_strategy=requested, effective_strategy="disabled", mtp_source="Disabled"
            )
            data["timings"]["predicted_per_second"] = rate
            data["topology"]["stages"] = stages
            with transaction.atomic():
                reports.store_report(Node.objects.get(name=sender), valid(data), now)
                if hold:
                    stored.set()
                    commit.wait(timeout=30)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    first = threading.Thread(target=send, args=("node-a", "auto", 10.0, True))
    second = threading.Thread(target=send, args=("node-b", "disabled", 30.0, False))
    first.start()
    assert stored.wait(timeout=30)
    second.start()
    second.join(timeout=0.5)  # with the point's lock, still waiting for the first to commit
    commit.set()
    first.join()
    second.join()
    assert errors == []


@pytest.mark.skipif(not POSTGRES, reason="concurrent writers need PostgreSQL (SQLite serialises them)")
@pytest.mark.django_db(transaction=True)
def test_two_writers_of_one_timeline_point_leave_its_quartiles_right(
    revision: Revision, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second writer waits on the point's lock, so it reads the first's cell once committed, and every
    cell carries the quartiles of both reports. The control, without the lock: each writer reads only its
    own cell and the point's two cells keep different, stale medians."""
    node("node-a"), node("node-b")
    _two_writers_of_one_point(seed=12)
    assert_revision_rollups_add_up_the_every_node_cells()  # (it checks each row's point quartiles)

    Report.objects.all().delete()
    for model in (Rollup, RevisionRollup, NodeRollup, PlanRollup, SplitRollup, Serving, LastServed):
        model.objects.all().delete()
    monkeypatch.setattr(rollups_quartiles, "lock", lambda points, using="default": None)
    _two_writers_of_one_point(seed=13)  # other report ids: not replays of the deleted ones
    assert RevisionRollup.objects.filter(reports=1).count() == 6  # two cells a grain, one report each
    with pytest.raises(AssertionError):
        assert_quartiles_kept()


KILLED_WRITER = """
import os, signal, sys, json
import django
django.setup()
from datetime import UTC, datetime
from django.db import transaction
from packages_app import reports
from packages_app.models import Node, Rollup
from packages_app.nodes.report_schema import validate_report_body
bodies = json.load(sys.stdin)
items = []
for b in bodies:
    report, digest = validate_report_body(b)
    items.append(reports.ValidReport(report=report, digest=digest, body=b))
with transaction.atomic():
    reports.store_reports(Node.objects.get(name="node-a"), items, datetime.now(UTC))
    assert Rollup.objects.exists()  # upserted, not committed
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not POSTGRES, reason="a second process needs the PostgreSQL test database")
@pytest.mark.django_db(transaction=True)
def test_a_writer_killed_after_its_rollup_upsert_leaves_nothing_and_a_replay_counts_once(
    revision: Revision,
) -> None:
    rng = random.Random(9)
    sender = node("node-a")
    bodies = [body(rng) for _ in range(40)]
    reports.store_reports(sender, [valid(x) for x in bodies[:10]], datetime.now(UTC))
    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "meshdash.settings"}
    env.pop("CELERY_BROKER_URL", None)
    child = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER],
        input=json.dumps(bodies),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert Report.objects.count() == 10
    assert_rollups_match_raw(revision)
    reports.store_reports(sender, [valid(x) for x in bodies], datetime.now(UTC))  # the redelivery
    assert Report.objects.count() == 40
    assert_rollups_match_raw(revision)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_migration_0012_fills_serving_from_the_stored_reports_and_going_back_adds_topologies_up(
    revision: Revision,
) -> None:
    rng = random.Random(12)
    a, b = node("node-a"), node("node-b")
    now = datetime.now(UTC)
    for i, sender in enumerate([a, b, a]):
        reports.store_reports(sender, [valid(body(rng)) for _ in range(30)], now - timedelta(days=i))
    unclaimed = Report(  # a report no revision claims yet: no Serving row
        node=a, report_id=uuid.uuid4(), body_sha256="0" * 64, received_at=now, observed_at=now, body={}
    )
    reports.insert_claimed(a, [unclaimed])
    cells = _cells_without_topology()
    migrate([("packages_app", "0011_perf12_rollup_node_time")])  # no Serving table, no topology in rollups
    assert _cells_without_topology() == cells  # what the topologies held is added up, nothing lost

    migrate([("packages_app", "0012_issue12_serving")])

    assert_serving_matches_raw(revision, sole=False)
    pairs = set(Report.objects.filter(revision=revision).values_list("topology_id", "stage_splits"))
    assert (
        Serving.objects.filter(node_key=Rollup.ALL_NODES).count() == len(pairs) == 4
    )  # 2 topologies x 2 splits


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_migration_0021_fills_last_served_from_the_serving_rows(revision: Revision) -> None:
    rng = random.Random(21)
    a, b = node("node-a"), node("node-b")
    now = datetime.now(UTC)
    for i, sender in enumerate([a, b, a]):
        reports.store_reports(sender, [valid(body(rng)) for _ in range(30)], now - timedelta(days=i))
    stored = set(LastServed.objects.values_list("revision_id", "last_at", "last_unused_at"))
    assert len(stored) == 1
    migrate([("packages_app", "0020_h25perf_busiest_and_facets")])  # no LastServed table

    migrate([("packages_app", "0021_h25_last_served")])

    assert set(LastServed.objects.values_list("revision_id", "last_at", "last_unused_at")) == stored
    assert_last_served_matches(revision, assert_serving_matches_raw(revision, sole=False))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_migration_0022_fills_each_nodes_cells_from_the_rollups(revision: Revision) -> None:
    """Topologies, strategies, hours and days of two nodes: the filled rows are the ones the stores wrote,
    and each node's cells of every strategy and topology added up."""
    rng = random.Random(22)
    a, b = node("node-a"), node("node-b")
    now = datetime.now(UTC)
    for i, sender in enumerate([a, b, a, b]):
        reports.store_reports(sender, [valid(body(rng)) for _ in range(40)], now - timedelta(hours=13 * i))
    stored = _node_rollups()
    assert len({key[1] for key in stored}) == 2 and len({key[2] for key in stored}) == 2  # grains, nodes
    migrate([("packages_app", "0021_h25_last_served")])  # no NodeRollup table

    migrate([("packages_app", "0022_h25_node_rollups")])

    assert _node_rollups() == stored == _node_rollups_expected()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_leaf")
def test_migration_0023_fills_the_strategy_each_serving_row_ran_alone(revision: Revision) -> None:
    """One node ran one strategy, the other several: the first's rows get it, the second's and the
    every-node rows none, as the stores wrote them."""
    rng = random.Random(23)
    a, b = node("node-a"), node("node-b")
    now = datetime.now(UTC)
    for i, sender in enumerate([a, b, a, b]):
        bodies = [body(rng) for _ in range(30)]
        if sender == a:
            for data in bodies:
                data["speculative"] = {"requested_strategy": "auto", "effective_strategy": "disabled"}
        reports.store_reports(sender, [valid(data) for data in bodies], now - timedelta(hours=13 * i))
    stored = _serving_rows()
    sole = Serving.objects.exclude(sole_strategy="").values_list("node_key", "sole_strategy").distinct()
    assert list(sole) == [(a.pk, rollups_upsert.strategy_key("auto", "disabled", False))]
    migrate([("packages_app", "0022_h25_node_rollups")])  # no sole_strategy column

    migrate([("packages_app", "0023_h25_serving_sole_strategy")])

    assert _serving_rows() == stored
    assert_serving_matches_raw(revision)


def _cells_without_topology() -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Every grain's reports, accepted drafts and decode-rate bins per rollup key without its topology."""
    cells: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT revision_id, grain, node_key, bucket_start, stage_splits, requested_strategy, strategy,"
            " mtp_used, reports, accepted, tps_n, tps_min, tps_max, tps_sketch FROM packages_app_rollup"
        )
        for *key, reports, accepted, n, low, high, bins in cursor.fetchall():
            bins = bins if isinstance(bins, dict) else json.loads(bins)
            old = cells.get(tuple(key), (0, 0, 0, None, None, Counter()))
            lows = [v for v in (old[3], low) if v is not None]
            highs = [v for v in (old[4], high) if v is not None]
            merged = old[5] + Counter({int(k): v for k, v in bins.items()})
            cells[tuple(key)] = (
                old[0] + reports,
                old[1] + accepted,
                old[2] + n,
                min(lows, default=None),
                max(highs, default=None),
                merged,
            )
    return cells
