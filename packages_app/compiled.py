"""ORM querysets compiled once per process, each read binding its own values in the places of stand-ins.

Why: the ORM builds, resolves and compiles a queryset with subqueries in one to two milliseconds, on every
read, for SQL that differs from one read to the next only in its parameters. The hot reads of the
package and catalog pages (issue 43) build their queryset once per process for stand-in values that no row
has (``stand_ins``: negative ids; a fixed time), keep the SQL and parameters the ORM compiled
(``functools.cache`` on the caller's side, one entry per shape: how many ids, which options), and run
that SQL with the read's own values put where the stand-ins are (``bound``). The SQL is still the
ORM's: nothing is written by hand, and the values stay bound parameters.

A queryset compiled this way must hold no constant equal to a stand-in (a negative id): ``bound`` would
take it for one. Each caller's tests compare the compiled read's rows with the queryset's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection

ANY_TIME = datetime(2000, 1, 1, tzinfo=UTC)  # the stand-in of a time a read binds


def stand_ins(count: int) -> list[int]:
    """``count`` ids that no row has (-1, -2, ...), for a compiled queryset's list of ids."""
    return list(range(-1, -count - 1, -1))


def bound(params: Sequence[Any], values: Mapping[Any, Any]) -> list[Any]:
    """The compiled parameters with each stand-in (a key of ``values``) replaced by its value."""
    return [values.get(param, param) for param in params]


def ids_bound(ids: Sequence[int]) -> dict[int, int]:
    """The stand-ins of ``len(ids)`` ids, each mapped to its id (for ``bound``)."""
    return dict(zip(stand_ins(len(ids)), ids, strict=True))


def db_time(moment: datetime) -> Any:
    """A time as the ORM hands it to the database (SQLite's driver gets text): how ``ANY_TIME`` appears
    among compiled parameters, and how a read's time must go in its place."""
    return connection.ops.adapt_datetimefield_value(moment)
