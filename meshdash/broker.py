"""The Redis broker transport Celery uses for ``redis://`` URLs: kombu's own, with one fix.

When Redis goes away, the worker closes its broker connection and kombu's channel, closing, tries
to put the unacknowledged messages back; the connection has already dropped its parameters by then,
so kombu (5.7) raises ``AttributeError`` instead of a connection error, which the worker does not
catch: it exits instead of reconnecting (seen in 1 of 4 restarts, and reproduced by
``tests/test_faults.py``). Here a channel of a closed connection raises redis-py's ``ConnectionError``,
one of the errors the worker expects on a connection loss: it logs, reconnects and keeps consuming.
The messages that were not put back return after the visibility timeout, like those of a dead worker.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise RedisConnectionError("The broker connection is closed (Redis went away).")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel
