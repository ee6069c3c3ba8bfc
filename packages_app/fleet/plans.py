"""The package page's per-node column: each node's plan on a revision, judged against its own release; and
its headline box's notes, one per advice that reads the same, naming the nodes it came from."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from packages_app import compiled, node_plans
from packages_app.audit.advice import Advice, advise
from packages_app.audit.assessment import Assessment
from packages_app.fleet.runs import RUN_COLUMNS, RunFacts
from packages_app.models import NodeRun
from packages_app.verdicts import Cause


@dataclass(frozen=True)
class PlanAdvice:
    """One node's plan on a revision (node_plans.NodePlan) with the node's release and what it predicts."""

    plan: node_plans.NodePlan
    version: str
    advice: Advice


def plan_advice(
    revision_id: int, assessment: Assessment | None, plans: list[node_plans.NodePlan]
) -> list[PlanAdvice]:
    """Each plan judged against its node's release: the package page's per-node column and its findings
    (contradictions name the node, its version, what was predicted and what it did). One query."""
    names = sorted({p.node for p in plans})
    runs: dict[str, RunFacts] = {}
    for name, *values in compiled.rows(_runs_of, revision_id, names) if names else ():
        runs[name] = RunFacts(*values)  # the newest wins
    return [_plan_advice(p, runs.get(p.node) or RunFacts(), assessment) for p in plans]


def _runs_of(revision_id: int, names: Sequence[str]) -> QuerySet[NodeRun, tuple[Any, ...]]:
    rows = NodeRun.objects.filter(revision_id=revision_id, node__name__in=names).order_by("updated_at", "id")
    return rows.values_list("node__name", *RUN_COLUMNS)


def _plan_advice(plan: node_plans.NodePlan, run: RunFacts, assessment: Assessment | None) -> PlanAdvice:
    used = plan.effective_strategy.startswith("native-mtp")
    facts = run.facts(
        plan.node,
        requested=plan.requested_strategy,
        effective=plan.effective_strategy,
        mtp_used=used,
        unused=bool(plan.unused) and assessment is not None and bool(assessment.mtp.detected),
    )
    return PlanAdvice(plan, run.version, advise(assessment, facts))


NOTE_NAMES = 10  # the nodes one note names (the busiest plans' first); the others are counted


@dataclass(frozen=True)
class NodeNote:
    """Advice that reads the same (cause, text and a contradiction's two sides) on several plans: one line
    of the headline box for all of them, not one per node (up to 50 at a fleet's scale, most alike)."""

    advice: Advice
    nodes: tuple[str, ...]  # the first NOTE_NAMES nodes it came from, in the plans' order
    unnamed: int = 0  # the other nodes it came from (one whose node was deleted has no name)


def node_notes(plans: list[PlanAdvice], causes: Collection[Cause]) -> list[NodeNote]:
    """The plans' advice of these causes, one note per advice that reads the same, in the order the first
    plan of each comes (the busiest first)."""
    groups: dict[tuple[str, str, str, str], tuple[Advice, list[str]]] = {}
    for plan in plans:
        advice = plan.advice
        if advice.cause not in causes:
            continue
        _, nodes = groups.setdefault(
            (advice.cause, advice.text, advice.prediction, advice.observation), (advice, [])
        )
        if plan.plan.node not in nodes:
            nodes.append(plan.plan.node)
    notes = []
    for advice, nodes in groups.values():
        named = tuple(node for node in nodes if node)[:NOTE_NAMES]
        notes.append(NodeNote(advice, named, len(nodes) - len(named)))
    return notes
