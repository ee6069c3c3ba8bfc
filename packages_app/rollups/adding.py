"""The store paths' one door to the rollups: the reports a transaction stored or linked are added to every
rollup they count in (Rollup, NodeRollup, PlanRollup, SplitRollup, RevisionRollup, Serving, LastServed),
exactly once, inside that transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from packages_app.models import Report, Rollup
from packages_app.rollups.cells import SOURCE_FIELDS, Cell, PublicRoom, cells_of, hourly_since
from packages_app.rollups.public_weight import public_reports_per_node_day, public_room, registered_pairs
from packages_app.rollups.rebuild import REBUILD_CHUNK
from packages_app.rollups.serving import ServingKey, servings_of, upsert_last_served, upsert_serving
from packages_app.rollups.upsert import (
    node_rollups_of,
    plan_rollups_of,
    revision_rollups_of,
    split_rollups_of,
    upsert,
    upsert_node_rollups,
    upsert_plan_rollups,
    upsert_revision_rollups,
    upsert_split_rollups,
)


def add_reports(
    rows: Iterable[Report], *, using: str = "default", serving: ServingListener | None = None
) -> int:
    """Add stored reports to their rollups; call inside the transaction that stored them.

    Rows without a revision are skipped (``link_reports`` adds them once linked). Returns how many
    reports were added. ``serving`` sees what the batch adds to each Serving row before it is added, and
    returns what to do once it is, in the same transaction (judgements.serving_changing).
    """
    if not settings.MESHDASH_ROLLUP_ON_STORE:
        return 0
    # In id order, as the rebuilds read them: the daily cap then takes the same first reports of a
    # node's day whichever path counts them (a batch's rows may come in another order than their ids).
    rows = sorted((row for row in rows if row.revision_id is not None), key=lambda row: row.pk or 0)
    cells, added = cells_of(rows, hourly_since(), public_room(rows, using=using))
    if cells:
        # Inside the storing transaction, no savepoint of its own (two round trips a store): a
        # failure here fails the store.
        with transaction.atomic(using=using, savepoint=False):
            upsert(cells, using=using)
            upsert_node_rollups(node_rollups_of(cells), using=using)
            upsert_plan_rollups(plan_rollups_of(cells), using=using)
            upsert_split_rollups(split_rollups_of(cells), using=using)
            upsert_revision_rollups(revision_rollups_of(cells), using=using)
            servings = servings_of(cells)
            then = serving(servings) if serving is not None else None
            upsert_serving(servings, using=using)
            upsert_last_served(servings, using=using)
            if then is not None:
                then()
    return added


# Told what a batch adds to each Serving row before it is added; returns what to do once it is.
ServingListener = Callable[[Mapping["ServingKey", "Cell"]], Callable[[], object]]


def add_report_ids(
    ids: Sequence[int], *, using: str = "default", serving: ServingListener | None = None
) -> int:
    """Add reports by id (the link paths): one read of the columns a rollup needs."""
    if not ids:
        return 0
    rows = Report.objects.using(using).filter(pk__in=ids).values_list(*SOURCE_FIELDS)
    return add_reports([_report(row) for row in rows], using=using, serving=serving)


def _report(values: tuple[object, ...]) -> Report:
    return Report(**dict(zip(SOURCE_FIELDS, values, strict=True)))


def add_registered_reports(node_id: int, revision_id: int) -> int:
    """A node registered its first run of a revision: the reports it stored for it before go to the
    every-node cells now (the first of each day up to the cap; they are in its own cells already;
    rollups.public_weight). Call inside the registration's transaction, before the registration is saved."""
    if (node_id, revision_id) in registered_pairs([revision_id], [node_id]):
        return 0
    rows = Report.objects.filter(node_id=node_id, revision_id=revision_id).order_by("pk")
    reports = [_report(row) for row in rows.values_list(*SOURCE_FIELDS).iterator(REBUILD_CHUNK)]
    cells, _ = cells_of(
        reports,
        hourly_since(),
        PublicRoom({(node_id, revision_id)}, public_reports_per_node_day()),
        own=False,
    )
    if not cells:
        return 0
    upsert(cells)
    upsert_revision_rollups(revision_rollups_of(cells))
    servings = servings_of(cells)
    upsert_serving(servings)
    upsert_last_served(servings)
    return sum(cell.reports for key, cell in cells.items() if key[1] == Rollup.Grain.TOTAL)


def link_reports(unlinked: Q, changes: dict[str, object], serving: ServingListener | None = None) -> int:
    """Give the reports matching ``unlinked`` (a filter that excludes linked ones) ``changes`` and
    roll up the ones that gain a revision, exactly once: their rows are locked first, so a second
    linker waits, then finds them linked already and skips them."""
    with transaction.atomic():
        ids = list(Report.objects.select_for_update().filter(unlinked).values_list("pk", flat=True))
        if not ids:
            return 0
        Report.objects.filter(pk__in=ids).update(**changes)
        add_report_ids(ids, serving=serving)
    return len(ids)
