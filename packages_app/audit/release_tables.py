"""Pure: an assessment's outcomes per release as the pages show them: releases that treat the package alike
merged into one table, and within a release the settings with the same outcome merged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from packages_app.audit.assessment import Assessment, Tristate, split_certified
from packages_app.audit.model import (
    Resolution,
)


@dataclass(frozen=True)
class OutcomeGroup:
    """Settings that do the same thing on a release (identical rows collapse into one)."""

    settings: tuple[str, ...]
    outcome: str
    why: str


@dataclass(frozen=True)
class ReleaseTable:
    """Releases that treat the package identically, with their admission and their settings' outcomes."""

    releases: tuple[str, ...]
    admitted: Tristate
    why: str
    groups: tuple[OutcomeGroup, ...]
    split: Tristate = None
    split_why: str = ""
    roster_inferred: bool = False  # the split answer rests on a roster inferred from the release's ABI

    @property
    def settings(self) -> int:
        return sum(len(g.settings) for g in self.groups)

    @property
    def split_certified(self) -> bool:
        """A gate's roster lists the architecture (not merely a release without the gate)."""
        return split_certified(self.split, self.split_why)

    @property
    def split_note(self) -> str:
        """What the split adds to the admission's reason (its gate, or that the release has none): the
        split's reason without the admission's, which it repeats."""
        return self.split_why.removeprefix(self.why).strip() if self.split_why != self.why else ""

    @property
    def by_outcome(self) -> tuple[OutcomeGroup, ...]:
        """The settings per outcome, for a one-line summary: a reason only where the settings share it."""
        merged: dict[str, list[OutcomeGroup]] = {}
        for group in self.groups:
            merged.setdefault(group.outcome, []).append(group)
        return tuple(
            OutcomeGroup(
                tuple(name for g in groups for name in g.settings),
                outcome,
                groups[0].why if len(groups) == 1 else "",
            )
            for outcome, groups in merged.items()
        )


def release_tables(assessment: Assessment) -> list[ReleaseTable]:
    """The outcomes per release, for pages: releases with the same admission and rows merged, and
    within a release the settings with the same outcome and reason merged, in their first order."""
    tables: list[ReleaseTable] = []
    for servable in assessment.servable:
        outcomes = next((o for o in assessment.outcomes if o.release == servable.release), None)
        groups = _grouped(outcomes.rows if outcomes else ())
        table = ReleaseTable(
            (servable.release,),
            servable.admitted,
            servable.why,
            groups,
            servable.split,
            servable.split_why,
            servable.roster_inferred and servable.admitted is not False,  # moot where it refuses to load
        )
        same = next((t for t in tables if replace(t, releases=()) == replace(table, releases=())), None)
        if same is not None:
            tables[tables.index(same)] = replace(same, releases=(*same.releases, servable.release))
        else:
            tables.append(table)
    return tables


def shared_outcomes(tables: Sequence[ReleaseTable]) -> tuple[OutcomeGroup, ...]:
    """The settings' outcomes when every release that may load the package agrees on them (shown once),
    else ``()``; releases that refuse the package have no outcomes and do not count."""
    loading = [t.by_outcome for t in tables if t.admitted is not False]
    if len(loading) < 2 or any(o != loading[0] for o in loading[1:]):
        return ()
    return loading[0]


def _grouped(rows: Sequence[Resolution]) -> tuple[OutcomeGroup, ...]:
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        groups.setdefault((row.outcome, row.why), []).append(row.setting)
    return tuple(OutcomeGroup(tuple(names), outcome, why) for (outcome, why), names in groups.items())
