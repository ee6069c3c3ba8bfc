"""The package page's per-node column: each node's plan on a revision, judged against its own release."""

from __future__ import annotations

from dataclasses import dataclass

from packages_app import throughput
from packages_app.audit.advice import Advice, advise
from packages_app.audit.assessment import Assessment
from packages_app.fleet.runs import RUN_COLUMNS, RunFacts
from packages_app.models import NodeRun


@dataclass(frozen=True)
class PlanAdvice:
    """One node's plan on a revision (throughput.NodePlan) with the node's release and what it predicts."""

    plan: throughput.NodePlan
    version: str
    advice: Advice


def plan_advice(
    revision_id: int, assessment: Assessment | None, plans: list[throughput.NodePlan]
) -> list[PlanAdvice]:
    """Each plan judged against its node's release: the package page's per-node column and its findings
    (contradictions name the node, its version, what was predicted and what it did). One query."""
    names = {p.node for p in plans}
    runs: dict[str, RunFacts] = {}
    rows = NodeRun.objects.filter(revision_id=revision_id, node__name__in=names).order_by("updated_at", "id")
    for name, *values in rows.values_list("node__name", *RUN_COLUMNS):
        runs[name] = RunFacts(*values)  # the newest wins
    return [_plan_advice(p, runs.get(p.node) or RunFacts(), assessment) for p in plans]


def _plan_advice(plan: throughput.NodePlan, run: RunFacts, assessment: Assessment | None) -> PlanAdvice:
    used = plan.effective_strategy.startswith("native-mtp")
    facts = run.facts(
        plan.node,
        requested=plan.requested_strategy,
        effective=plan.effective_strategy,
        mtp_used=used,
        unused=bool(plan.unused) and assessment is not None and bool(assessment.mtp.detected),
    )
    return PlanAdvice(plan, run.version, advise(assessment, facts))
