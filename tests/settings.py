"""The test suite's settings: meshdash's own, read as on a developer's machine (DEBUG=true unless set).

DEBUG is off unless explicitly set; the suite sets it here, before the settings are read, because
pytest-django reads them before any conftest runs. Processes the tests start inherit DEBUG and read
meshdash.settings itself.

Under pytest-xdist each worker process gets its own Redis database, here, before the settings read the
URLs (so the Celery workers and servers a test starts inherit it): the cache's clear() is FLUSHDB, which
would empty the other worker's Celery queue and rate-limit counters. Worker gwN takes the Nth number of
MESHDASH_TEST_REDIS_DBS (e.g. "3,9"), or else the URL's own database plus N. pytest-django gives each
worker its own test database (test_<name>_gwN) itself.
"""

import os
import re

from django.conf import global_settings  # a plain module: reading it configures nothing

os.environ.setdefault("DEBUG", "true")
os.environ["DJANGO_SETTINGS_MODULE"] = "meshdash.settings"


def worker_redis_url(url: str, worker: str, dbs: str) -> str:
    """The Redis URL of xdist worker `gwN`: the same server, the worker's own database."""
    match = re.fullmatch(r"(rediss?://[^/]*)(?:/(\d*))?", url)
    if not worker or match is None:
        return url
    index = int(worker.removeprefix("gw"))
    numbers = [int(n) for n in dbs.split(",") if n.strip()]
    if numbers and index >= len(numbers):
        raise RuntimeError(
            f"MESHDASH_TEST_REDIS_DBS={dbs!r} names no Redis database for xdist worker {worker}"
        )
    return f"{match[1]}/{numbers[index] if numbers else int(match[2] or 0) + index}"


for _name in ("CELERY_BROKER_URL", "REDIS_URL", "CACHE_URL"):
    if os.environ.get(_name):
        os.environ[_name] = worker_redis_url(
            os.environ[_name],
            os.environ.get("PYTEST_XDIST_WORKER", ""),
            os.environ.get("MESHDASH_TEST_REDIS_DBS", ""),
        )

from meshdash.settings import *  # noqa: E402, F403

# The suite signs in and creates users hundreds of times: Django's MD5 hasher takes microseconds where
# PBKDF2's 1,000,000 iterations take about half a second of CPU a password (the login-throttle tests guess 25
# times in a row). Only the suite's process: meshdash.settings, which the servers and workers it starts read,
# and production keep Django's hashers; passwords those hashed still check here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]

# On PostgreSQL the suite empties the tables after a test that commits with DELETE, not TRUNCATE
# (tests/postgresql_backend/base.py says why), and its own connections commit without waiting for the
# write-ahead log to reach the disk: a crash of the server would lose the last commits of a test database
# that is dropped at the end anyway. The processes a test starts read meshdash.settings and keep both.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.postgresql_backend"  # noqa: F405
    _options = DATABASES["default"].setdefault("OPTIONS", {})  # noqa: F405
    _options["options"] = f"{_options.get('options', '')} -c synchronous_commit=off".strip()
