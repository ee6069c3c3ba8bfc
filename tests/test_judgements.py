"""Each node's judgement kept (packages_app.judgements, issue 43): the stored rows say what the computed
judgement (fleet.nodes.node_rows, as /nodes/?action=1 judged every node per request) says, over the test
fleets, after each event that changes it (each with its control: without the hook, the row is stale), and
after random events; rebuilding writes the same rows as keeping them."""

from __future__ import annotations

import dataclasses
import io
import random
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Max
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from packages_app import ingest, judgements, telemetry, tracking
from packages_app.audit import releases
from packages_app.fleet import nodes as fleet_nodes
from packages_app.fleet import serving as fleet_serving
from packages_app.fleet import window as fleet_window
from packages_app.models import Node, NodeJudgement, NodeRun, Package, Report, Serving
from packages_app.nodes import identity
from packages_app.verdicts import Cause
from tests import dashboard_factories as f
from tests.test_fleet_registered import plan_for, register_through_the_agent

pytestmark = pytest.mark.django_db

Judged = dict[str, tuple[bool, str, int | None, str]]  # node name -> (needs action, cause, revision, advice)


def computed(now: datetime, private: bool) -> Judged:
    """The judgement made per request: every node's rows as the needing-action list judged them."""
    since = fleet_window.window_start(now=now)
    result: Judged = {}
    for row in fleet_nodes.node_rows(since, show_private=private, placed=False):
        advice = row.advice
        about = next((s.revision_id for s in row.serving if advice is not None and s.advice is advice), None)
        text = advice.text if advice else ""
        result[row.node.name] = (advice is not None, advice.cause.value if advice else "", about, text)
    return result


def stored(private: bool) -> Judged:
    """The kept rows as they stand (no judging anew on read)."""
    rows = NodeJudgement.objects.filter(private=private)
    return {r.node_name: (r.needs_action, r.cause, r.revision_id, r.advice.get("text", "")) for r in rows}


def agrees(now: datetime | None = None) -> bool:
    now = now or timezone.now()
    return all(stored(private) == computed(now, private) for private in judgements.AUDIENCES)


def snapshot() -> list[tuple[Any, ...]]:
    """Every column of every row but when it was judged and until when: a row judged an hour later may
    be valid until an hour later (its cells read by the hour)."""
    fields = ("node_id", "private", "node_name", "needs_action", "cause", "cause_rank", "revision_id")
    return sorted(NodeJudgement.objects.values_list(*fields, "advice", "basis"), key=repr)


def needing(private: bool = False) -> set[str]:
    return {name for name, (needs, *_) in stored(private).items() if needs}


# --- the test fleets -----------------------------------------------------------------------------


def test_over_the_issue_fleet_the_kept_rows_are_the_computed_judgement_and_the_page_the_same() -> None:
    now = timezone.now()
    f.qwen35_fleet(now)
    assert needing(), "the fleet has nodes needing action"
    assert agrees(now)
    since = fleet_window.window_start(now=now)
    for private in judgements.AUDIENCES:
        kept = judgements.node_page(1, needs_action=True, show_private=private, now=now)
        before = fleet_nodes.node_page(since, 1, needs_action=True, show_private=private)
        assert kept.rows == before.rows and kept.page.paginator.count == before.page.paginator.count


def test_over_the_catalog_mix_and_a_registered_run_the_kept_rows_are_the_computed_judgement(
    client: Client,
) -> None:
    now = timezone.now()
    mix = f.catalog_mix()
    nodes = [f.make_node(f"mix-{i}") for i in range(5)]
    for i, package in enumerate(mix.values()):
        revision = package.latest_revision
        assert revision is not None
        f.make_report(nodes[i % 5], revision, 3.0 + i, at=now - timedelta(hours=i), mtp_used=bool(i % 2))
    package = f.make_package("meshllm/Other-GLM-layers")
    older = f.make_revision(package, "undeclared-mtp")
    f.make_revision(package, "consistent-mtp")
    register_through_the_agent(client, plan_for(older), identity.create_node("demo-glm").token)
    assert "demo-glm" in needing()
    assert agrees(now)
    kept = judgements.node_page(1, needs_action=True, show_private=False, now=now)
    assert kept.rows == fleet_nodes.node_page(fleet_window.window_start(now=now), 1, needs_action=True).rows


def test_the_whole_nodes_list_ranks_by_the_kept_judgement_needing_action_first_then_by_name() -> None:
    now = timezone.now()
    f.qwen35_fleet(now)
    f.make_node("a-quiet-node")  # first by name, nothing to do
    rows = judgements.node_page(1, needs_action=False, show_private=False, now=now).rows
    flags = [row.needs_action for row in rows]
    quiet = [row.node.name for row in rows if not row.needs_action]
    assert flags == sorted(flags, reverse=True) and quiet == sorted(quiet) and quiet[0] == "a-quiet-node"


def test_rebuild_writes_the_rows_kept_incrementally() -> None:
    now = timezone.now()
    f.qwen35_fleet(now)
    kept = snapshot()
    call_command("rebuild_judgements", stdout=io.StringIO())
    assert snapshot() == kept


# --- each event, with its control ------------------------------------------------------------------


def broken_revision() -> Any:
    return f.qwen35_package(with_history=False).revisions.get(commit_sha=f.QWEN35_SHA)


def test_a_stored_report_judges_its_node_in_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    assert needing() == set()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))  # MTP weights, left unused
    assert needing() == {"n1"} and agrees()


def test_control_without_the_store_hook_a_stored_report_leaves_the_row_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    monkeypatch.setattr(judgements, "serving_changing", lambda servings: lambda: 0)
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))
    assert needing() == set() and not agrees()


def registered_setup(client: Client) -> Any:
    package = f.make_package("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers")
    older = f.make_revision(package, "undeclared-mtp")
    f.make_revision(package, "consistent-mtp")
    register_through_the_agent(client, plan_for(older), identity.create_node("demo-glm").token)
    return older


def test_a_registered_run_judges_its_node_in_the_registration(client: Client) -> None:
    registered_setup(client)
    assert needing() == {"demo-glm"} and agrees()


def test_control_without_the_registration_hook_the_row_is_stale(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry.judgements, "judge", lambda *a, **k: 0)
    registered_setup(client)
    assert needing() == set() and not agrees()


def newer_latest(client: Client, monkeypatch: pytest.MonkeyPatch) -> Package:
    """A node's agent registered a run of the package's latest; then a revision with a better headline
    is ingested, not yet the latest (its audit judged no node: none serves it)."""
    package = f.make_package("meshllm/GLM-4.7-Flash-UD-Q4_K_XL-layers")
    older = f.make_revision(package, "consistent-no-mtp", committed_at=f.BASE_TIME, schema_version=2)
    register_through_the_agent(client, plan_for(older), identity.create_node("demo-glm").token)
    with monkeypatch.context() as m:
        m.setattr(judgements, "revisions_changed", lambda *a, **k: 0)
        f.make_revision(
            package,
            "consistent-mtp",
            committed_at=f.BASE_TIME + timedelta(days=1),
            latest=False,
            schema_version=2,
        )
    assert needing() == set()  # nothing to do on the latest: until the newer one is
    return package


def test_a_new_latest_revision_judges_the_nodes_of_its_package(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = newer_latest(client, monkeypatch)
    before = stored(False)
    tracking.refresh_latest(package)  # the ingest names the new revision the package's latest
    assert stored(False) != before and needing() == {"demo-glm"} and agrees()


def test_control_without_the_ingest_hook_a_new_latest_leaves_the_row_stale(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = newer_latest(client, monkeypatch)
    monkeypatch.setattr(tracking.judgements, "packages_changed", lambda *a, **k: 0)
    tracking.refresh_latest(package)
    assert not agrees()


def test_a_reaudit_judges_the_nodes_of_the_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))
    assert needing() == {"n1"}
    with monkeypatch.context() as m:  # its stored assessment made wrong behind the hooks' back ...
        m.setattr(judgements, "revisions_changed", lambda *a, **k: 0)
        type(broken).objects.filter(pk=broken.pk).update(assessment=None, headline="", mtp_detected=False)
        judgements.judge(None)
    assert needing() == set()
    ingest.audit_revision(broken)  # ... and re-audited from its stored headers
    assert needing() == {"n1"} and agrees()


def test_control_without_the_reaudit_hook_the_row_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))
    monkeypatch.setattr(judgements, "revisions_changed", lambda *a, **k: 0)
    type(broken).objects.filter(pk=broken.pk).update(assessment=None, headline="", mtp_detected=False)
    judgements.judge(None)
    ingest.audit_revision(broken)
    assert needing() == set() and not agrees()


def test_a_package_found_private_judges_its_nodes_for_visitors(monkeypatch: pytest.MonkeyPatch) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))
    tracking.record_privacy(broken.package, SimpleNamespace(private=True))
    assert needing(private=False) == set() and needing(private=True) == {"n1"} and agrees()


def test_control_without_the_privacy_hook_the_visitors_row_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=1))
    monkeypatch.setattr(tracking.judgements, "packages_changed", lambda *a, **k: 0)
    tracking.record_privacy(broken.package, SimpleNamespace(private=True))
    assert needing(private=False) == {"n1"} and not agrees()


@pytest.fixture
def no_releases(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A release matrix that no longer knows the node's release (as a deploy of a new releases.toml)."""

    def swap() -> None:
        monkeypatch.setattr(releases, "known_releases", lambda: ())
        releases.clear_release_lookups()

    yield swap
    monkeypatch.undo()
    releases.clear_release_lookups()


def test_a_new_release_matrix_judges_every_node_anew_when_read(client: Client, no_releases: Any) -> None:
    registered_setup(client)
    before = stored(False)
    no_releases()
    assert stored(False) == before and not agrees()  # nothing judged it yet ...
    judgements.fresh()  # ... the next read does: its rows rest on another matrix
    assert stored(False) != before and agrees()


def test_control_without_the_basis_a_new_release_matrix_leaves_the_rows_stale(
    client: Client, no_releases: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered_setup(client)
    old = judgements.basis()
    no_releases()
    monkeypatch.setattr(judgements, "basis", lambda: old)
    judgements.fresh()
    assert not agrees()


@pytest.fixture
def reworded(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A deploy whose rules word every advice otherwise (mesh-llm's rules move, meshdash's with them): the
    code judging differs, and so does its digest unless ``same_digest``."""

    def deploy(same_digest: bool = False) -> None:
        old = judgements.code_digest()
        real = fleet_serving.advise
        monkeypatch.setattr(
            fleet_serving, "advise", lambda *a: dataclasses.replace(real(*a), text="Reworded.")
        )
        monkeypatch.setattr(judgements, "code_digest", lambda: old if same_digest else old[::-1])

    return deploy


def test_a_deploy_of_other_judging_code_judges_every_node_anew_when_read(
    client: Client, reworded: Any
) -> None:
    registered_setup(client)
    before = stored(False)
    reworded()
    assert stored(False) == before and not agrees()  # nothing judged it yet ...
    judgements.fresh()  # ... the next read does: its rows rest on other code
    assert agrees() and {text for *_, text in stored(False).values()} == {"Reworded."}


def test_control_without_the_code_in_the_basis_other_judging_code_leaves_the_rows_stale(
    client: Client, reworded: Any
) -> None:
    registered_setup(client)
    reworded(same_digest=True)
    judgements.fresh()
    assert not agrees()


def test_the_window_moving_past_a_nodes_reports_judges_it_anew_when_read() -> None:
    now = timezone.now()
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=now - timedelta(hours=1))
    later = now + timedelta(days=judgements.WINDOW_DAYS)  # the report left the window an hour ago
    assert needing() == {"n1"}
    judgements.fresh(now + timedelta(days=judgements.WINDOW_DAYS, hours=-2))  # still inside: kept
    assert needing() == {"n1"}
    judgements.fresh(later)
    assert needing() == set() and agrees(later)


def test_control_without_valid_until_the_window_moving_leaves_the_row_stale() -> None:
    now = timezone.now()
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=now - timedelta(hours=1))
    NodeJudgement.objects.update(valid_until=judgements.FOREVER)
    later = now + timedelta(days=judgements.WINDOW_DAYS)
    judgements.fresh(later)
    assert needing() == {"n1"} and not agrees(later)


def test_a_node_created_is_listed_once_read_and_a_rename_follows() -> None:
    node = f.make_node("n1")
    assert NodeJudgement.objects.filter(node=node, valid_until=judgements.EXPIRED).count() == 2
    judgements.fresh()
    assert stored(False) == {"n1": (False, "", None, "")}
    node.name = "n2"
    node.save()
    judgements.fresh()
    assert stored(False) == {"n2": (False, "", None, "")}


def test_the_gauge_counts_the_kept_rows_by_cause() -> None:
    f.qwen35_fleet(timezone.now())
    counts = judgements.needing_action_by_cause()
    causes = [cause for needs, cause, *_ in computed(timezone.now(), True).values() if needs]
    assert sum(counts.values()) == len(causes) and all(counts[c] >= 1 for c in causes)


# --- random events ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_after_random_events_the_kept_rows_are_the_computed_and_the_rebuilt_ones(seed: int) -> None:
    rng = random.Random(seed)
    now = timezone.now()
    packages = [f.make_package(f"meshllm/Random-{seed}-{i}-layers") for i in range(2)]
    revisions = [f.make_revision(p, rng.choice(["undeclared-mtp", "consistent-mtp"])) for p in packages]
    nodes = [f.make_node(f"r{seed}-{i}") for i in range(4)]
    strategies = [("auto", "native-mtp"), ("auto", "disabled"), ("disabled", "disabled")]
    for _ in range(24):
        assert agrees(), "after each event, before any read judges anew"
        event = rng.random()
        if event < 0.65:
            requested, effective = rng.choice(strategies)
            f.make_report(
                rng.choice(nodes),
                rng.choice(revisions),
                rng.uniform(2, 6),
                at=now - timedelta(hours=rng.randint(1, 24 * 12)),
                mtp_used=effective == "native-mtp",
                requested_strategy=requested,
                effective_strategy=effective,
            )
        elif event < 0.85:
            package = rng.choice(packages)
            verdict = rng.choice(["undeclared-mtp", "consistent-mtp", "consistent-no-mtp"])
            revisions.append(
                f.make_revision(package, verdict, committed_at=now - timedelta(days=rng.randint(0, 3)))
            )
        else:
            tracking.record_privacy(rng.choice(packages), SimpleNamespace(private=rng.random() < 0.5))
    for clock in (now, now + timedelta(days=rng.randint(1, 6)), now + timedelta(days=rng.randint(7, 13))):
        judgements.fresh(clock)
        assert agrees(clock), clock
        kept = snapshot()
        judgements.rebuild(clock)
        assert snapshot() == kept


def test_a_node_whose_reports_ran_several_strategies_on_a_known_release_is_kept_for_the_hour_only(
    client: Client,
) -> None:
    """Its advice reads its cells' strategies, which the window reads by the hour
    (fleet.window.window_terms): its row expires when the window's first hour moves on, not when its first
    report leaves."""
    older = registered_setup(client)
    node = Node.objects.get(name="demo-glm")
    now = timezone.now()
    for strategy in ("disabled", "native-mtp"):
        f.make_report(node, older, 4.0, at=now - timedelta(hours=1), effective_strategy=strategy)
    (row,) = NodeJudgement.objects.filter(node=node, private=False)
    since = fleet_window.window_start(now=row.judged_at)
    hour = since.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    assert row.valid_until == hour + timedelta(days=judgements.WINDOW_DAYS)


def test_the_needing_action_page_reads_as_many_queries_at_three_nodes_as_at_twelve(client: Client) -> None:
    broken = broken_revision()
    now = timezone.now()

    def queries() -> int:
        client.get("/nodes/?action=1")  # judges none anew: the rows are fresh
        with CaptureQueriesContext(connection) as seen:
            assert client.get("/nodes/?action=1").status_code == 200
        return len(seen)

    for i in range(3):
        f.make_report(f.make_node(f"q{i}"), broken, 3.0, at=now - timedelta(hours=1))
    few = queries()
    for i in range(3, 12):
        f.make_report(f.make_node(f"q{i}"), broken, 3.0, at=now - timedelta(hours=1))
    assert queries() == few and len(needing()) == 12


def test_the_fleet_seed_keeps_every_nodes_judgement_as_computed_and_never_contradicts_its_audits() -> None:
    """``seed_synthetic --shape fleet --nodes N``: about 0.4 topologies a node, the kept rows as the
    computed judgement at the newest report (the benchmark's clock), no node contradicting its audit."""
    call_command(
        "seed_synthetic",
        shape="fleet",
        nodes=60,
        packages=30,
        revisions=3,
        reports=900,
        owner="judged-fleet",
        stdout=io.StringIO(),
    )
    topologies = Serving.objects.filter(node_key=0).values("topology_id").distinct().count()
    assert 0.25 * 60 <= topologies <= 0.6 * 60
    newest = Report.objects.aggregate(at=Max("received_at"))["at"]
    assert NodeJudgement.objects.count() == 2 * 60
    assert agrees(newest)
    causes = set(NodeJudgement.objects.values_list("cause", flat=True))
    assert Cause.CONTRADICTION.value not in causes and Cause.REFUSED.value not in causes
    assert NodeJudgement.objects.filter(needs_action=True).exists()
    assert judgements.fresh(newest) == 0  # judged at that clock: nothing to judge anew


KNOWN_VERSION = "0.78.0"  # a release the matrix knows: the strategies a node ran can change its cause


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """The nodes each call of judgements.judge judged."""
    calls: list[set[int]] = []
    real = judgements.judge

    def spy(node_ids: Any = None, now: Any = None) -> int:
        calls.append(set(node_ids) if node_ids is not None else {-1})
        return real(node_ids, now)

    monkeypatch.setattr(judgements, "judge", spy)
    return calls


def test_a_report_that_changes_nothing_the_judgement_reads_judges_no_node(judged: list[set[int]]) -> None:
    """Another report on a row in the window, with the strategy all its reports ran, MTP unused already
    in the window, of the node's one revision: nothing its judgement reads changes."""
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 3.1, at=timezone.now() - timedelta(hours=2))
    assert judged == [{node.pk}]
    f.make_report(node, broken, 3.2, at=timezone.now() - timedelta(hours=1))
    assert judged == [{node.pk}] and needing() == {"n1"} and agrees()


def test_a_report_on_a_row_that_ran_several_strategies_without_a_known_release_judges_no_node(
    judged: list[set[int]],
) -> None:
    """The row ran two strategies already and the node names no release the matrix knows, so its cells'
    strategies are never read: a third report, of either strategy or another, changes nothing."""
    node, broken = f.make_node("n1"), broken_revision()
    now = timezone.now()
    f.make_report(node, broken, 3.1, at=now - timedelta(hours=3))
    f.make_report(node, broken, 5.0, at=now - timedelta(hours=2), mtp_used=True)
    assert Serving.objects.filter(node_key=node.pk, sole_strategy="").exists()  # ran several
    judged.clear()
    f.make_report(node, broken, 3.2, at=now - timedelta(hours=1))
    f.make_report(
        node,
        broken,
        4.0,
        at=now - timedelta(hours=1),
        requested_strategy="ngram-cache",
        effective_strategy="ngram-cache",
    )
    assert judged == [] and agrees()


@pytest.mark.parametrize(
    "change",
    [
        "another strategy",
        "MTP newly unused",
        "another revision",
        "a row left the window",
        "stale row",
        "several strategies on a known release",
    ],
)
def test_a_report_that_can_change_the_judgement_judges_its_node(judged: list[set[int]], change: str) -> None:
    node, broken = f.make_node("n1"), broken_revision()
    now = timezone.now()
    first: dict[str, Any] = {"at": now - timedelta(hours=2), "mtp_used": True}
    if change == "a row left the window":
        first["at"] = now - timedelta(days=judgements.WINDOW_DAYS, hours=1)
    if change == "several strategies on a known release":
        assert releases.release_for(KNOWN_VERSION) is not None
        NodeRun.objects.create(
            node=node,
            run_id="run-n1",
            repo_id=broken.package.repo_id,
            commit_sha=broken.commit_sha,
            revision=broken,
            version=KNOWN_VERSION,
        )
        f.make_report(node, broken, 3.0, at=now - timedelta(hours=3))  # the row runs two strategies
    f.make_report(node, broken, 5.0, **first)
    if change == "stale row":
        NodeJudgement.objects.update(valid_until=judgements.EXPIRED)
    judged.clear()
    second: dict[str, Any] = {"at": now - timedelta(hours=1), "mtp_used": True}
    if change == "another strategy":
        second.update(requested_strategy="ngram-cache", effective_strategy="ngram-cache", mtp_used=False)
    elif change == "MTP newly unused":
        second["mtp_used"] = False
    revision = broken
    if change == "another revision":
        revision = f.make_revision(
            broken.package, "consistent-mtp", committed_at=f.BASE_TIME + timedelta(days=1)
        )
        judged.clear()
    f.make_report(node, revision, 5.0, **second)
    assert judged == [{node.pk}] and agrees()


def test_control_a_skip_that_ignored_what_the_batch_adds_would_leave_the_row_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(judgements, "_keeps", lambda *args: True)
    node, broken = f.make_node("n1"), broken_revision()
    f.make_report(node, broken, 5.0, at=timezone.now() - timedelta(hours=2), mtp_used=True)
    f.make_report(node, broken, 3.0, at=timezone.now() - timedelta(hours=1))  # MTP newly unused
    assert needing() == set() and not agrees()
