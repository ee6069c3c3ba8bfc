"""Lists of keys as SQL: the rows that a list of key tuples names, each looked up by whichever index serves
its keys, in one query on PostgreSQL (one array a column) and SQLite (a VALUES list); and subqueries
PostgreSQL keeps whole (``FENCE``), where flattening them let the planner read more.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Model, Subquery
from django.db.models.expressions import RawSQL

SqlPart = tuple[str, list[Any]]  # SQL text with %s placeholders, and its parameters


def rows_matching(model: type[Model], keys: Sequence[str], groups: Sequence[Sequence[Any]]) -> RawSQL:
    """The ids of ``model``'s rows whose ``keys`` columns equal one group's values, as a subquery for
    ``pk__in``: the groups as a list (``value_rows``), each row of it looked up on its own (``joined``)
    by whichever index serves its keys. (An OR of one term a group took PostgreSQL 175 ms to plan for
    2,600 groups; the ORM's Q objects cost a millisecond a term to build.)"""
    values, names, params = value_rows(groups)
    quote = connection.ops.quote_name
    where = " AND ".join(f"t.{quote(key)} = v.{name}" for key, name in zip(keys, names, strict=True))
    table = quote(model._meta.db_table)
    return RawSQL(joined(values, names, table, where, "t.id", "t.id"), params)  # noqa: S611


def value_rows(groups: Sequence[Sequence[Any]]) -> tuple[str, list[str], list[Any]]:
    """These rows of parameters (at least one) as a list to select from: its text, its columns' names
    (SQLite's own for a VALUES list's) and its parameters. PostgreSQL gets one array a column: with a
    VALUES list of 13,000 placeholders the needing-action page's cells query took 229 ms, most of it
    psycopg parsing them; with arrays 122 ms."""
    width = len(groups[0])
    names = [f"column{i}" for i in range(1, width + 1)]
    if connection.vendor == "postgresql":
        columns = [[group[i] for group in groups] for i in range(width)]
        arrays = ", ".join(f"%s::{_pg_array(column)}" for column in columns)
        return f"unnest({arrays})", names, columns
    adapt = connection.ops.adapt_datetimefield_value
    row = "(" + ", ".join(["%s"] * width) + ")"
    params = [adapt(v) if isinstance(v, datetime) else v for group in groups for v in group]
    return f"(VALUES {', '.join([row] * len(groups))})", names, params


_PG_ARRAYS = {bool: "boolean[]", int: "bigint[]", datetime: "timestamptz[]"}


def _pg_array(column: list[Any]) -> str:
    """The array type of one column of values (text unless its first value says otherwise)."""
    first = next((value for value in column if value is not None), "")
    return _PG_ARRAYS.get(type(first), "text[]")


FENCE = " OFFSET 0"  # keeps PostgreSQL from flattening a subquery into the query around it (``joined``)


class Fenced(Subquery):
    """A subquery PostgreSQL keeps whole (FENCE), so each of its rows' values is computed once: flattened,
    a correlated subquery in its SELECT list was run again wherever the plan used its value (three
    times a row for ``pk__in``: 154 ms against 72 for 10,000 nodes' newest runs). SQLite's as written."""

    template = f"(%(subquery)s{FENCE})"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="(%(subquery)s)", **extra)


def joined(
    values: str, names: list[str], table: str, where: str, picked: str, columns: str, also: str = ""
) -> str:
    """``columns`` of a ``value_rows`` list (``v``; each of its rows with every row of ``also``, another
    list as ``aliased`` names it) joined to the rows of ``table`` (``t``) that ``where`` matches to each
    of its rows. PostgreSQL reads them by a LATERAL subquery selecting ``picked`` from them: it keeps the
    planner from hashing the list against a scan of the whole table; SQLite reads a plain join that way.
    With ``also``, the subquery is fenced (OFFSET 0) so that each pair of rows is one read of the index
    with both rows' values: flattened into a join, the planner, expecting one cell a group, read every
    cell of each group and filtered them by ``also``'s after (the catalog seed's /nodes/: 18,128 cells
    for the 755 in the window, 83 ms; fenced, 4 ms). Only names and constant text are formatted in:
    values are the lists' parameters."""
    lists = aliased(values, names, "v") + (f" CROSS JOIN {also}" if also else "")
    if connection.vendor == "postgresql":
        fence = FENCE if also else ""
        lateral = f"SELECT {picked} FROM {table} AS t WHERE {where}{fence}"  # noqa: S608
        return f"SELECT {columns} FROM {lists} CROSS JOIN LATERAL ({lateral}) AS t"  # noqa: S608
    return f"SELECT {columns} FROM {lists} JOIN {table} AS t ON {where}"  # noqa: S608


def aliased(values: str, names: list[str], alias: str) -> str:
    """A ``value_rows`` list as a FROM item named ``alias``, its columns by ``names`` (SQLite's own)."""
    return (
        f"{values} AS {alias} ({', '.join(names)})"
        if connection.vendor == "postgresql"
        else f"{values} AS {alias}"
    )
