"""Random events on a fleet, for the property tests of the rows kept on write (tests/test_node_plans.py,
tests/test_speedup_cells.py): a node's report (registered or not, as the caller makes it), a run registered
after its node's reports, a node deleted."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from packages_app.models import Node, Revision
from packages_app.rollups.adding import add_registered_reports
from tests import dashboard_factories as f


class FleetEvents:
    """Each ``step`` draws one event from ``rng``; ``report(node, revision, at)`` stores a report, drawing
    its own fields from the same ``rng``."""

    def __init__(self, rng: random.Random, fleet: list[Node]) -> None:
        self.rng, self.fleet, self.at = rng, fleet, f.BASE_TIME

    def step(
        self, step: int, revisions: Sequence[Revision], report: Callable[[Node, Revision, datetime], Any]
    ) -> None:
        rng = self.rng
        revision = rng.choice(revisions)
        kind = rng.random()
        live = [node for node in self.fleet if Node.objects.filter(pk=node.pk).exists()]
        if kind < 0.8 or not live:
            node = rng.choice(live or [f.make_node(f"late-{step}")])
            self.at += timedelta(minutes=rng.randint(1, 300))
            report(node, revision, self.at)
        elif kind < 0.93:
            node = rng.choice(live)  # a run registered after the node's reports: they go public now
            with transaction.atomic():
                add_registered_reports(node.pk, revision.pk)
                f.register_run(node, revision)
        else:
            rng.choice(live).delete()  # its runs go with it: its cells are no longer public
