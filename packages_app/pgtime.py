"""PostgreSQL timestamps read by psycopg's C parser, as Django reads them (its time zone put on each).

Django 5.2's psycopg 3 backend registers its own ``timestamptz`` loader on every connection, a subclass
of psycopg's pure-Python loader (``psycopg_any.BaseTzLoader``): psycopg's C loader from psycopg-binary
is final and cannot be subclassed, so Django's parses every timestamp in Python, about 6 µs each. The
needing-action list reads some 4,000 of them at 1,000 nodes. Django ticket #36960 and psycopg issue
#1273 record it (Django declined to use psycopg's private ``_get_optimised``); Django 5.2.x and psycopg
3.3.9, the versions locked here, still do it. Measured on 20,000 values: 49 ms read here, 205 ms read
by Django's loader (query included; a seed ran beside both, so read the ratio).

So on each new connection, where psycopg-binary is installed, this registers a loader that holds the C
loader (taken from psycopg's public default adapters map, ``psycopg.adapters.get_loader``, never a
private name) and does what Django's does with its result: the same value, with the connection's time
zone set as Django's ``register_tzloader`` sets it (both refuse alike a DateStyle other than ISO, and
``infinity``). Its ``timezone`` attribute is Django's, so Django's cursors keep it instead of registering
theirs per cursor. Without psycopg-binary, or on another database, nothing changes.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from django.db.backends.signals import connection_created
from django.dispatch import receiver


def _c_loader() -> Any:
    """psycopg-binary's text ``timestamptz`` loader class, or None (pure-Python psycopg, or psycopg 2)."""
    try:
        import psycopg
        from psycopg.pq import Format
    except ImportError:  # pragma: no cover - psycopg 3 is a dependency
        return None
    if psycopg.pq.__impl__ == "python":
        return None
    oid = psycopg.adapters.types["timestamptz"].oid
    found = psycopg.adapters.get_loader(oid, Format.TEXT)
    return found if found is not None and found.__module__.startswith("psycopg_binary") else None


def fast_tz_loader(zone: tzinfo | None) -> Any:
    """A loader class parsing with the C loader and setting ``zone`` (None: naive, as Django's)."""
    from psycopg.adapt import Loader

    parser = _c_loader()
    if parser is None:
        return None

    class FastTzLoader(Loader):
        timezone = zone

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._parse = parser(oid, context).load

        def load(self, data: Any) -> datetime:
            return self._parse(data).replace(tzinfo=zone)  # type: ignore[no-any-return]

    return FastTzLoader


@receiver(connection_created, dispatch_uid="packages_app.pgtime")
def register_fast_timestamps(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On a new PostgreSQL connection through psycopg 3, the C-parsing loader in place of Django's."""
    if connection.vendor != "postgresql" or not hasattr(connection.connection, "adapters"):
        return
    loader = fast_tz_loader(connection.timezone)
    if loader is not None:
        connection.connection.adapters.register_loader("timestamptz", loader)
