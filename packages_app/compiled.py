"""ORM querysets compiled once per process, each read binding its own values in the places of stand-ins.

Why: the ORM builds, resolves and compiles a queryset with subqueries in one to two milliseconds, on every
read, for SQL that differs from one read to the next only in its parameters. The hot reads of the
package and catalog pages (issue 43) build their queryset once per process for stand-in values that no row
has (``stand_ins``: negative ids; a fixed time), keep the SQL and parameters the ORM compiled
(``functools.cache`` on the caller's side, one entry per shape: how many ids, which options), and run
that SQL with the read's own values put where the stand-ins are (``bound``). The SQL is still the
ORM's: nothing is written by hand, and the values stay bound parameters.

``rows(build, *args)`` does it all for a ``values()`` or ``values_list()`` read: ``build`` makes the
queryset from its arguments; it is called once per shape of them, with stand-ins; each read binds its
arguments and converts its rows with the ORM's own converters of the columns (``get_converters``, which
the queryset's iteration applies: a time, a flag or JSON reads the same on SQLite and PostgreSQL). A
stand-in that does not reach the parameters as it is (a lookup that rewrites its value) is refused when
compiled. The package page makes about 15 reads: built and compiled each time they took about 0.5 ms each.

``instances(build, *args)`` does the same for a queryset of model instances (``only()``,
``select_related()`` and annotations allowed): each row is made an instance by ``Model.from_db``, its
annotations set as attributes and its related rows set by Django's own populators
(``get_related_populators``, which ``ModelIterable`` uses: Django offers no public way to make instances
from rows it did not fetch itself). A related manager's queryset is refused:
its instances would lose the object the manager holds; the caller filters by the id and sets it.

A queryset compiled this way must hold no constant equal to a stand-in (a negative id): ``bound`` would
take it for one. A stand-in id is negative, so a lookup on a positive field (which the ORM compiles as no
row for a value out of the field's range) cannot take one: such a value is passed as a text, part of the
shape. Each caller's tests compare the compiled read's rows with the queryset's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection, connections
from django.db.models import Model
from django.db.models.query import (
    ModelIterable,
    QuerySet,
    ValuesIterable,
    ValuesListIterable,
    get_related_populators,
)

ANY_TIME = datetime(2000, 1, 1, tzinfo=UTC)  # the stand-in of a time a read binds


def stand_ins(count: int) -> list[int]:
    """``count`` ids that no row has (-1, -2, ...), for a compiled queryset's list of ids."""
    return list(range(-1, -count - 1, -1))


def bound(params: Sequence[Any], values: Mapping[Any, Any]) -> list[Any]:
    """The compiled parameters with each stand-in (a key of ``values``) replaced by its value, in a list
    parameter too (an array: fleet.sql.value_rows)."""
    return [
        [values.get(item, item) for item in param] if isinstance(param, list) else values.get(param, param)
        for param in params
    ]


def ids_bound(ids: Sequence[int]) -> dict[int, int]:
    """The stand-ins of ``len(ids)`` ids, each mapped to its id (for ``bound``)."""
    return dict(zip(stand_ins(len(ids)), ids, strict=True))


def db_time(moment: datetime) -> Any:
    """A time as the ORM hands it to the database (SQLite's driver gets text): how ``ANY_TIME`` appears
    among compiled parameters, and how a read's time must go in its place."""
    return connection.ops.adapt_datetimefield_value(moment)


# --- a values() read compiled once per shape, its rows converted by the ORM's own converters ------------


@dataclass(frozen=True)
class Read:
    """A ``values()`` or ``values_list()`` queryset compiled for stand-ins: its SQL and parameters, the ORM's
    converters of its columns (``SQLCompiler.get_converters``), and how its rows are shaped."""

    alias: str  # the database
    sql: str
    params: tuple[Any, ...]
    width: int | None  # the columns a row keeps, when the SQL selects more (for its ordering)
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]  # column, its converters, its expression
    names: tuple[str, ...]  # a values() row's keys; a model read's fields, as ``Model.from_db`` takes them
    as_dicts: bool
    model: type[Model] | None = None  # a model read's (``instances``)
    fields_end: int = 0  # a model read's: its model's fields are the row's first ``fields_end`` values
    populators: tuple[Any, ...] = ()  # a model read's: what sets each related row it reads (select_related)
    annotations: tuple[tuple[str, int], ...] = ()  # a model read's: each annotation's name and column


def rows(build: Callable[..., QuerySet[Any, Any]], *args: Any) -> list[Any]:
    """``list(build(*args))`` for a ``values()`` or ``values_list()`` queryset, its SQL compiled once per
    process for each shape of the arguments (``_compiled``): ints, times and lists of ints (ids), of texts
    (names) or of times are bound in their stand-ins' places. The rows are converted by the ORM's
    converters of the columns, as the queryset's iteration would. A str, a bool or None is part of the
    shape, compiled as it is (``build`` may branch on it): only a value of a few (a grain, an option)."""
    stand, values = _stand_ins(args)
    read = _compiled(build, stand)
    if read is None:  # nothing can match (an empty list of ids), as the queryset's iteration answers
        return []
    fetched = _fetched(read, values)
    if read.as_dicts:
        return [dict(zip(read.names, row, strict=True)) for row in fetched]
    return [tuple(row) for row in fetched] if read.converters else fetched


def instances(build: Callable[..., QuerySet[Any, Any]], *args: Any) -> list[Any]:
    """``list(build(*args))`` for a queryset of one model's instances, compiled once per shape of the
    arguments as ``rows`` is; each row made an instance by ``Model.from_db`` with the fields the queryset
    selects (``only()``'s, the others deferred), its select_related() rows set by Django's own
    populators and its annotations as attributes, as its iteration does. Refused when compiled: a
    queryset that a related manager made (its instances get the related object the manager holds,
    ``_known_related_objects``: the caller sets it instead) or that prefetches."""
    stand, values = _stand_ins(args)
    read = _compiled_model(build, stand)
    if read is None:
        return []
    model = read.model
    assert model is not None  # (a model read's)
    made: list[Any] = []
    for row in _fetched(read, values):
        instance = model.from_db(read.alias, read.names, row[: read.fields_end])
        for populator in read.populators:  # as ModelIterable sets a select_related() row
            populator.populate(row, instance)
        for name, column in read.annotations:  # and an annotation
            setattr(instance, name, row[column])
        made.append(instance)
    return made


def _fetched(read: Read, values: Mapping[Any, Any]) -> list[Any]:
    """The read's rows, its stand-ins bound to ``values``, cut to its width and converted."""
    database = connections[read.alias]
    with database.cursor() as cursor:
        cursor.execute(read.sql, bound(read.params, values))
        fetched: list[Any] = cursor.fetchall()
    if read.width is not None:
        fetched = [row[: read.width] for row in fetched]
    if read.converters:
        fetched = [_converted(row, read.converters, database) for row in fetched]
    return fetched


def _converted(
    row: Sequence[Any], converters: Sequence[tuple[int, tuple[Any, ...], Any]], database: Any
) -> list[Any]:
    """As ``SQLCompiler.apply_converters``, with this thread's connection (a compiled Read is shared)."""
    values = list(row)
    for position, functions, expression in converters:
        value = values[position]
        for function in functions:
            value = function(value, expression, database)
        values[position] = value
    return values


def _stand_ins(args: Sequence[Any]) -> tuple[tuple[Any, ...], dict[Any, Any]]:
    """The stand-ins ``build`` is called with, and each stand-in's value as bound. The stand-ins are the
    arguments' shape: arguments of one shape (kinds, lists' lengths, the values of a str, bool or None)
    always get the same ones."""
    stand: list[Any] = []
    values: dict[Any, Any] = {}
    next_id = -1
    for arg in args:
        if isinstance(arg, (bool, str)) or arg is None:  # part of the shape
            stand.append(arg)
        elif isinstance(arg, int):
            stand.append(next_id)
            values[next_id] = arg
            next_id -= 1
        elif isinstance(arg, datetime):
            at = ANY_TIME + timedelta(microseconds=-next_id)  # a time of its own per argument
            stand.append(at)
            values[db_time(at)] = db_time(arg)
            next_id -= 1
        elif isinstance(arg, (list, tuple)) and all(type(i) is int for i in arg):
            ids = tuple(range(next_id, next_id - len(arg), -1))
            stand.append(ids)
            values.update(zip(ids, arg, strict=True))
            next_id -= len(arg)
        elif isinstance(arg, (list, tuple)) and all(isinstance(i, datetime) for i in arg):
            times = tuple(ANY_TIME + timedelta(microseconds=-(next_id - i)) for i in range(len(arg)))
            stand.append(times)
            values.update({db_time(at): db_time(value) for at, value in zip(times, arg, strict=True)})
            next_id -= len(arg)
        elif isinstance(arg, (list, tuple)) and all(type(i) is str for i in arg):
            # Texts no row holds: a NUL, which PostgreSQL refuses in a text parameter (never sent unbound).
            texts = tuple(f"\x00stand-in {next_id - i}" for i in range(len(arg)))
            stand.append(texts)
            values.update(zip(texts, arg, strict=True))
            next_id -= len(arg)
        else:
            raise TypeError(
                f"compiled.rows binds ints, times and lists of ints, texts or times, not {type(arg).__name__}"
            )
    return tuple(stand), values


@functools.lru_cache(maxsize=256)
def _compiled(build: Callable[..., QuerySet[Any, Any]], stand: tuple[Any, ...]) -> Read | None:
    """``build(*stand)`` compiled by the ORM (once per build and shape of the arguments, which the stand-ins
    are); None when the ORM finds that no row can match (``EmptyResultSet``)."""
    queryset = build(*stand)
    iterable = queryset._iterable_class
    if iterable not in (ValuesIterable, ValuesListIterable):
        raise TypeError(f"{build.__qualname__}: compiled.rows reads values() and values_list() querysets")
    compiled = _sql(build, stand, queryset)
    if compiled is None:
        return None
    compiler, sql, params, converters = compiled
    query = queryset.query
    # As ValuesIterable names a row's values (Django 5.2: in the order values() was given them);
    # values_list()'s rows are the select's, in the order it was given.
    names = list(query.selected) if query.selected else [*query.extra_select, *query.values_select]
    names += [] if query.selected else list(query.annotation_select)
    width = compiler.col_count if compiler.has_extra_select else None
    return Read(queryset.db, sql, tuple(params), width, converters, tuple(names), iterable is ValuesIterable)


@functools.lru_cache(maxsize=256)
def _compiled_model(build: Callable[..., QuerySet[Any, Any]], stand: tuple[Any, ...]) -> Read | None:
    """``build(*stand)``, a queryset of model instances, compiled as ``_compiled`` compiles a values()
    one; the fields its rows hold named as ``ModelIterable`` names them for ``Model.from_db``."""
    queryset = build(*stand)
    # (Private to QuerySet, not in the stubs: what a related manager and prefetch_related() set.)
    manager_made = getattr(queryset, "_known_related_objects", None) or getattr(
        queryset, "_prefetch_related_lookups", None
    )
    if queryset._iterable_class is not ModelIterable or manager_made:
        raise TypeError(f"{build.__qualname__}: compiled.instances reads plain querysets of model instances")
    compiled = _sql(build, stand, queryset)
    if compiled is None:
        return None
    compiler, sql, params, converters = compiled
    klass_info = compiler.klass_info
    start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    if start != 0:
        raise TypeError(f"{build.__qualname__}: compiled.instances reads the model's fields first")
    fields = tuple(column[0].target.attname for column in compiler.select[start:end])
    width = compiler.col_count if compiler.has_extra_select else None
    # Django's own setters of select_related() rows, as ModelIterable makes them (each sets its model's
    # columns of a row on the instance: they hold positions only, so one serves every read).
    # (The stubs name a fetch_mode argument of a later Django; Django 5.2's takes these three.)
    populators = tuple(get_related_populators(klass_info, compiler.select, queryset.db))  # type: ignore[call-arg]
    annotations = tuple(compiler.annotation_col_map.items())
    return Read(
        queryset.db,
        sql,
        tuple(params),
        width,
        converters,
        fields,
        False,
        queryset.model,
        end,
        populators,
        annotations,
    )


def _sql(
    build: Callable[..., Any], stand: tuple[Any, ...], queryset: QuerySet[Any, Any]
) -> tuple[Any, str, list[Any], tuple[tuple[int, tuple[Any, ...], Any], ...]] | None:
    """The queryset's compiler, SQL and parameters, and the converters of the columns its rows keep; None
    when no row can match. The stand-ins must each be a parameter."""
    compiler = queryset.query.get_compiler(queryset.db)
    try:
        sql, params = compiler.as_sql()
    except EmptyResultSet:
        return None
    missing = _stand_in_values(stand) - _flattened(params)
    if missing:  # a lookup changed the value (e.g. startswith): binding would search for the stand-in
        raise ValueError(f"{build.__qualname__}: stand-ins {sorted(missing, key=str)} are not parameters")
    fields = [column[0] for column in compiler.select[0 : compiler.col_count]]
    converters = tuple(
        (position, tuple(functions), expression)
        for position, (functions, expression) in compiler.get_converters(fields).items()
    )
    return compiler, sql, list(params), converters


def _flattened(params: Sequence[Any]) -> set[Any]:
    """The parameters, each list's (an array's) items among them."""
    found: set[Any] = set()
    for param in params:
        if isinstance(param, list):
            found.update(param)
        else:
            found.add(param)
    return found


def _stand_in_values(stand: Sequence[Any]) -> set[Any]:
    found: set[Any] = set()
    for value in stand:
        if isinstance(value, tuple):
            found.update(db_time(item) if isinstance(item, datetime) else item for item in value)
        elif isinstance(value, datetime):
            found.add(db_time(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            found.add(value)
    return found
