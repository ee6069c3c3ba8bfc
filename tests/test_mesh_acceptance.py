"""The mean acceptance length's counts (packages_app.mesh_acceptance) add up the same reports in SQL as in
Python, over hostile counters: booleans, fractions, exponents, texts, negative and huge numbers, a body
whose timings are not an object, reports without MTP and past the newest MAX_MESH_ROWS."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from packages_app import mesh_acceptance
from packages_app.models import Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db

JSON_VALUES: tuple[Any, ...] = (
    None,
    0,
    1,
    7,
    150,
    -3,
    2.5,
    3.0,
    1e3,
    10**15,
    10**15 + 1,
    10**20,
    True,
    False,
    "12",
    [4],
    {"n": 4},
)
COLUMN_VALUES = (None, 0, 1, 70, 100, -5, 10**15, 10**15 + 1)


def hostile_reports(seed: int, count: int = 60) -> Revision:
    """A revision's reports with random counters in their columns and their bodies' timings."""
    rng = random.Random(seed)
    revision = f.make_revision(f.make_package(f"meshllm/Counted{seed}-layers"), "consistent-mtp")
    node = f.make_node(f"counter-{seed}")
    for i in range(count):
        timings: Any = {"predicted_per_second": 5.0}
        for key in ("native_mtp_accepted", "native_mtp_verifications"):
            value = rng.choice(JSON_VALUES)
            if value is not None:
                timings[key] = value
        body = {"timings": timings if rng.random() < 0.9 else rng.choice(([1, 2], "timings", 3))}
        f.make_report(
            node,
            revision,
            5.0,
            at=f.BASE_TIME + timedelta(minutes=i),
            registered=i == 0,
            mtp_used=rng.random() < 0.85,
            draft_n_accepted=rng.choice(COLUMN_VALUES),
            speculative_accepted_n=rng.choice(COLUMN_VALUES),
            speculative_windows=rng.choice(COLUMN_VALUES),
            body=body,
        )
    return revision


def postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the counts are added up in SQL on PostgreSQL only")


@pytest.mark.parametrize("seed", range(4))
def test_sql_adds_up_what_python_adds_up(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    postgresql_only()
    revision = hostile_reports(seed)
    python = mesh_acceptance._counts_in_python(revision.pk)
    assert python[1] > 0  # some reports count
    assert mesh_acceptance.counts(revision.pk) == python
    monkeypatch.setattr(mesh_acceptance, "MAX_MESH_ROWS", 17)  # only the newest 17 reports with MTP
    fewer = mesh_acceptance._counts_in_python(revision.pk)
    assert fewer != python
    mesh_acceptance._counts_sql.cache_clear()
    assert mesh_acceptance._counts_in_sql(revision.pk) == fewer


def test_control_without_the_whole_number_test_the_sql_counts_fractions_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the text test stops: 2.5 (or 3.0, which Python reads as a float) counted as a number of tokens.
    postgresql_only()
    revisions = [hostile_reports(seed) for seed in range(4)]
    mesh_acceptance._counts_sql.cache_clear()

    def any_number(key: str, least: int) -> str:
        value = f"(body -> 'timings' ->> '{key}')"
        in_range = f"{value}::numeric BETWEEN {least} AND {mesh_acceptance.MAX_COUNT}"
        typed = f"jsonb_typeof(body -> 'timings' -> '{key}') = 'number'"
        return f"CASE WHEN {typed} AND {in_range} THEN {value}::numeric END"

    monkeypatch.setattr(mesh_acceptance, "_json_count", any_number)
    differ = [
        r.pk
        for r in revisions
        if mesh_acceptance._counts_in_sql(r.pk) != mesh_acceptance._counts_in_python(r.pk)
    ]
    mesh_acceptance._counts_sql.cache_clear()
    assert differ


def test_a_revision_without_reports_counts_nothing() -> None:
    revision = f.make_revision(f.make_package("meshllm/Quiet-layers"), "consistent-mtp")
    assert mesh_acceptance.counts(revision.pk) == (0, 0)


@pytest.mark.parametrize("path", ["counts", "_counts_in_python"])
def test_a_node_that_never_registered_a_run_moves_no_acceptance_count(path: str) -> None:
    """A node that never registered a run of the revision posts reports with MTP counters that would pull
    the mean acceptance length to 1.0 (no token accepted in 1,000 drafts): they are not counted, as in
    every public figure (docs/fleet.md). Control: once it registers a run, its reports count."""
    counts = getattr(mesh_acceptance, path)
    revision = f.make_revision(f.make_package("meshllm/Registered-layers"), "consistent-mtp")
    steady, stranger = f.make_node("steady"), f.make_node("stranger")
    f.make_report(steady, revision, 6.0, mtp_used=True)  # 70 accepted in 100 windows (the factory's)
    for minute in range(1, 4):
        f.make_report(
            stranger,
            revision,
            6.0,
            at=f.BASE_TIME + timedelta(minutes=minute),
            registered=False,
            mtp_used=True,
            speculative_accepted_n=0,
            speculative_windows=1000,
        )
    assert counts(revision.pk) == (70, 100)
    f.register_run(stranger, revision)
    assert counts(revision.pk) == (70, 3100)
