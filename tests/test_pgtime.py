"""Timestamps read through psycopg's C parser (packages_app.pgtime) are the values Django's loader reads."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

POSTGRES = connection.vendor == "postgresql"
pytestmark = [pytest.mark.django_db, pytest.mark.skipif(not POSTGRES, reason="a psycopg loader")]

# Offsets of whole and part hours, microseconds, the first year, a leap day: each read into UTC.
TIMES = (
    "2026-12-03 10:00:00.5+00",
    "2026-12-03 10:00:00-07:30",
    "1999-01-01 00:00:00.000001+14",
    "0001-01-01 00:00:00+00",
    "2028-02-29 23:59:59.999999+05:45",
)
SELECT = "SELECT " + ", ".join(["%s::timestamptz"] * len(TIMES))


def _read(loader: Any = None) -> tuple[Any, ...]:
    """TIMES read by ``loader`` (else the connection's), through psycopg's own cursor."""
    connection.ensure_connection()
    adapters = connection.connection.adapters
    previous = adapters.get_loader(1184, 0)
    if loader is not None:
        adapters.register_loader("timestamptz", loader)
    try:
        with connection.connection.cursor() as cursor:
            cursor.execute(SELECT, TIMES)
            return tuple(cursor.fetchone())
    finally:
        adapters.register_loader("timestamptz", previous)


def test_a_connection_reads_timestamps_with_the_c_parser() -> None:
    connection.ensure_connection()
    loader = connection.connection.adapters.get_loader(1184, 0)
    assert loader.__name__ == "FastTzLoader"
    # Django keeps it on its cursors: it registers its own on a cursor only where the zones differ.
    assert loader.timezone == connection.timezone
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(1184, 0) is loader


def test_the_values_are_djangos() -> None:
    from django.db.backends.postgresql.psycopg_any import BaseTzLoader

    class DjangoLoader(BaseTzLoader):
        timezone = connection.timezone

    fast, django = _read(), _read(DjangoLoader)
    assert fast == django
    assert [value.tzinfo for value in fast] == [value.tzinfo for value in django] == [connection.timezone] * 5
    assert fast[1].hour == 17 and fast[1].minute == 30  # -07:30 read into UTC


def test_a_naive_setting_reads_naive_values_as_django_does() -> None:
    from packages_app.pgtime import fast_tz_loader

    values = _read(fast_tz_loader(None))
    assert all(value.tzinfo is None for value in values)
    assert values[1].hour == 17
