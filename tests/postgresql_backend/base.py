"""The suite's PostgreSQL backend: Django's own, but for how it empties the tables after a test that commits.

pytest-django empties the database after each test that commits (``transaction=True``: every live-server
and browser test, and the serial tests whose workers and servers read what the test wrote) with Django's
flush, one ``TRUNCATE`` of every table. PostgreSQL gives each truncated relation new files (each table, its
indexes, its TOAST table, each monthly partition of the reports): 110 to 130 ms a flush of the empty tables
on a quiet machine, about a second under load, and a pass flushes a few hundred times. ``DELETE`` of the few
rows a test leaves takes 13 ms for the same tables. The foreign keys Django creates are ``DEFERRABLE
INITIALLY DEFERRED`` and the flush is one transaction, so the order of the deletes does not matter: they are
checked at its commit, when every table is empty.

A flush that resets the sequences or cascades (pytest-django's ``reset_sequences``, a test case's
``available_apps``) keeps Django's ``TRUNCATE``. Production never flushes: meshdash.settings names Django's
backend, and the processes a test starts read those settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self,
        style: Any,
        tables: Sequence[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade:
            return list(
                super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
            )
        # The names are Django's own table names (the flush command's list), quoted.
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]  # noqa: S608


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
