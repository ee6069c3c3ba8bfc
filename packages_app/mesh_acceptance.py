"""The counts behind mesh-llm's mean acceptance length on a package page: accepted tokens and drafts over a
revision's newest reports with MTP used (baselines.speedups; docs/node-report.md sections 1.1, 1.4, 4), of
the nodes that registered a run of the revision, as every public figure (docs/fleet.md, "Whose reports make
a public figure"; rollups/public_weight.py).

A draft is a speculative window (n-gram) or a native-MTP verification; a report counts when it holds both
an accepted count (``draft_n_accepted``, else ``speculative_accepted_n``, else the span's
``timings.native_mtp_accepted``) and a draft count (``speculative_windows``, else
``timings.native_mtp_verifications``), each a whole number in range (``is_count``).

Why SQL on PostgreSQL: reading the 2,000 newest reports' counters into Python, two of them from each
report's JSON body, took 8.3 ms for the catalog seed's busiest revision with MTP; adding them up where
they are stored, 4.8 ms (the same reports are read). The SQL reads the JSON values as their text, which is
what Python would parse (PostgreSQL prints a stored ``1e3`` as ``1000``): a whole number is one written
without a point or an exponent. Each count is the first of its sources a report holds, so the body is read
only for a report whose columns lack it. Measured side by side (medians of 60 reads, three rounds) against
reading every report's timings whatever its columns held: 1.8 to 2.4 ms against 2.3 to 2.7 on the seed, and
1.5 to 1.6 ms against 2.3 to 4.1 on a copy of the same reports with their bodies padded to 1.6 kB (a node's
report is larger than the seed's 63 bytes). Keeping the reports to the registered nodes adds 0.6 to 1.0 ms
on the seed (3.0 to 3.2 ms against 2.2 to 2.5, medians of 60 reads, two alternating rounds). SQLite adds
them up in Python (``_counts_in_python``); on PostgreSQL the tests check both give the same counts over
hostile values.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.db.models.fields.json import KeyTransform

from packages_app.models import Report
from packages_app.rollups.public_weight import registered_nodes, registered_nodes_sql

MAX_MESH_ROWS = 2000  # mesh-llm reports read for the mean acceptance length
MAX_COUNT = 10**15  # a count past this is not one (a hostile or broken report)


def is_count(value: Any, least: int = 1) -> bool:
    """A count a report can hold (a JSON value read from the body may be anything)."""
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= MAX_COUNT


def counts(revision_id: int) -> tuple[int, int]:
    """(accepted tokens, drafts) over the revision's MAX_MESH_ROWS newest reports with MTP used, of the
    nodes that registered a run of it."""
    if connection.vendor == "postgresql":
        return _counts_in_sql(revision_id)
    return _counts_in_python(revision_id)


def _counts_in_python(revision_id: int) -> tuple[int, int]:
    timings = KeyTransform("timings", "body")
    rows = (
        Report.objects.filter(
            registered_nodes(revision_id, "node_id"), revision_id=revision_id, mtp_used=True
        )
        .order_by("-received_at")
        .annotate(
            verifications=KeyTransform("native_mtp_verifications", timings),
            native_accepted=KeyTransform("native_mtp_accepted", timings),
        )
        .values_list(
            "draft_n_accepted",
            "speculative_accepted_n",
            "native_accepted",
            "speculative_windows",
            "verifications",
        )[:MAX_MESH_ROWS]
    )
    accepted = drafts = 0
    for took, spec_took, native_took, windows, verifications in rows:
        took = next((v for v in (took, spec_took, native_took) if is_count(v, least=0)), None)
        steps = windows if is_count(windows) else verifications if is_count(verifications) else None
        if took is not None and steps is not None:
            accepted += took
            drafts += steps
    return accepted, drafts


def _counts_in_sql(revision_id: int) -> tuple[int, int]:
    registered, params = registered_nodes_sql(revision_id, connection.ops.quote_name("node_id"))
    with connection.cursor() as cursor:
        cursor.execute(
            _counts_sql().replace("{registered}", registered, 1), [revision_id, *params, MAX_MESH_ROWS]
        )
        accepted, drafts = cursor.fetchone()
    return int(accepted or 0), int(drafts or 0)


def _json_count(key: str, least: int) -> str:
    """The body's ``timings.<key>`` as a number where ``is_count`` would take it, else NULL. CASE keeps
    the cast after the test (PostgreSQL may evaluate an AND's terms in any order)."""
    timings = f"{connection.ops.quote_name('body')} -> 'timings'"
    value = f"({timings} ->> '{key}')"
    whole = f"jsonb_typeof({timings} -> '{key}') = 'number' AND {value} ~ '^-?[0-9]+$'"
    in_range = f"{value}::numeric BETWEEN {least} AND {MAX_COUNT}"
    return f"CASE WHEN {whole} THEN CASE WHEN {in_range} THEN {value}::numeric END END"


def _column_count(column: str, least: int) -> str:
    column = connection.ops.quote_name(column)
    return f"CASE WHEN {column} BETWEEN {least} AND {MAX_COUNT} THEN {column} END"


@functools.cache
def _counts_sql() -> str:
    """``_counts_in_python`` as one query: only constant names and numbers are formatted in, and
    ``{registered}`` is where the caller puts the registered nodes' condition (the ORM's own SQL, its
    values parameters). Each count is the first of its sources a report holds (COALESCE stops there), so
    a report's JSON body is read only when its columns do not hold the count."""
    quote = connection.ops.quote_name
    took = ", ".join(
        (
            _column_count("draft_n_accepted", 0),
            _column_count("speculative_accepted_n", 0),
            _json_count("native_mtp_accepted", 0),
        )
    )
    steps = ", ".join((_column_count("speculative_windows", 1), _json_count("native_mtp_verifications", 1)))
    return f"""
        SELECT SUM(took), SUM(steps) FROM (
            SELECT COALESCE({took}) AS took, COALESCE({steps}) AS steps
            FROM {quote(Report._meta.db_table)}
            WHERE {quote("revision_id")} = %s AND {quote("mtp_used")} AND {{registered}}
            ORDER BY {quote("received_at")} DESC LIMIT %s
        ) newest WHERE took IS NOT NULL AND steps IS NOT NULL
    """  # noqa: S608
