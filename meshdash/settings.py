"""All of meshdash's settings, read from the environment (see docs/configuration.md).

With no variable set everything runs on one machine with no services: SQLite in the project
folder and Celery tasks executed eagerly in-process. Production (DEBUG=false) must name its
SECRET_KEY and ALLOWED_HOSTS; a missing or malformed value stops the process at start-up.
"""

import ipaddress
import os
import re
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false)")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None


def envlist(name: str) -> list[str]:
    return [item.strip() for item in envstr(name).split(",") if item.strip()]


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto,https`` -> ``("HTTP_X_FORWARDED_PROTO", "https")``; empty = no proxy."""
    if not value:
        return None
    name, sep, expected = (part.strip() for part in value.partition(","))
    if not sep or not name or not expected:
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER={value!r} must be 'Header-Name,value', e.g. X-Forwarded-Proto,https"
        )
    meta = name.upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}", expected)


def trusted_proxies(value: str) -> list[str]:
    """``127.0.0.1, 10.0.0.0/8`` -> the networks as text; a value that is not an address or CIDR stops."""
    networks = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"MESHDASH_TRUSTED_PROXIES: {item!r} is not an IP address or CIDR (e.g. 10.0.0.0/8)"
            ) from None
    return networks


# Off unless explicitly set: `make run`, the Dockerfile's build steps and the test suite set DEBUG=true.
DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "dev-only-insecure-key-never-use-in-production"  # noqa: S105
ALLOWED_HOSTS = [h for h in envstr("ALLOWED_HOSTS").split(",") if h]
if not ALLOWED_HOSTS and DEBUG:
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]


def serving_problems() -> list[str]:
    """What production must set before serving; the offline commands (audit_package, ...) need neither."""
    missing = [
        name for name, value in (("SECRET_KEY", SECRET_KEY), ("ALLOWED_HOSTS", ALLOWED_HOSTS)) if not value
    ]
    return [f"{name} must be set when DEBUG is false" for name in missing]


# Error pages and mails: Django's filter, plus no password inside any URL (meshdash/reporting.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "meshdash.reporting.UrlSecretsFilter"
DEFAULT_EXCEPTION_REPORTER = "meshdash.reporting.UrlSecretsReporter"

# --- HTTPS and cookies: secure by default in production, plain HTTP for local development ----
# Behind a TLS-terminating proxy set SECURE_PROXY_SSL_HEADER (e.g. X-Forwarded-Proto,https), or the
# SSL redirect below would loop: every request would look like plain HTTP.
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(envstr("SECURE_PROXY_SSL_HEADER"))
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")
X_FRAME_OPTIONS = "DENY"
# No inline scripts or styles anywhere (meshdash.middleware.ContentSecurityPolicyMiddleware).
MESHDASH_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; frame-ancestors 'none'; base-uri 'none'"
)
# The admin's URL prefix: a private path keeps it away from drive-by login guessing.
MESHDASH_ADMIN_PATH = envstr("MESHDASH_ADMIN_PATH", "admin/")
if not re.fullmatch(r"(?:[A-Za-z0-9][A-Za-z0-9._-]*/)+", MESHDASH_ADMIN_PATH):
    raise ImproperlyConfigured(f"MESHDASH_ADMIN_PATH={MESHDASH_ADMIN_PATH!r} must look like 'ops-admin/'")

# models.W040: SQLite cannot put non-key columns in an index, so Serving's covering index
# (serving_revision_recent, INCLUDE node_key, last_unused_at) is a plain index there. That INCLUDE is a
# PostgreSQL speed-up for the catalog's served-revision filters at fleet scale; on SQLite (the demo, the
# first test pass) the index still serves the same lookups, so the warning says nothing to act on.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "packages_app",
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before host validation and the HTTPS redirect (a container probe
    # speaks plain HTTP to 127.0.0.1); packages_app/web/health.py.
    "packages_app.web.health.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "meshdash.middleware.ContentSecurityPolicyMiddleware",
    # An address holding a NUL character: 400 (PostgreSQL refuses one in any text it is asked to find).
    "meshdash.middleware.NulInAddressMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # MESHDASH_PUBLIC_READ=false: every page and the read API need a signed-in user.
    "packages_app.web.access.LoginRequiredUnlessPublicMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Innermost, so its process_exception sees a view's database error first: 503, never 500.
    "meshdash.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "meshdash.urls"

# --- Who may act (packages_app/web/access.py) ------------------------------------------------------
# Reading is public by default; tracking, untracking, deleting, re-ingesting and node management need
# a signed-in user with the model permission (the "operators" group has them all).
MESHDASH_PUBLIC_READ = envbool("MESHDASH_PUBLIC_READ", True)
LOGIN_URL = "packages_app:login"
LOGIN_REDIRECT_URL = "packages_app:catalog"
LOGOUT_REDIRECT_URL = "packages_app:catalog"
# Tracks per user per hour (superusers too: a typo loop must not flood the Hub); 0 = off.
MESHDASH_TRACK_RATE_LIMIT = envint("MESHDASH_TRACK_RATE_LIMIT", 30)
# The proxies (addresses or CIDRs, comma-separated) whose X-Forwarded-For is believed: when the peer is
# one of them, rate limits and the login throttle key on the nearest address in the header that is not
# a trusted proxy. Off (empty) by default: REMOTE_ADDR only, since anyone can send the header.
MESHDASH_TRUSTED_PROXIES = trusted_proxies(envstr("MESHDASH_TRUSTED_PROXIES"))
# Failed logins per username and per client address before the login form refuses for LOGIN_LOCKOUT s.
MESHDASH_LOGIN_FAILURE_LIMIT = envint("MESHDASH_LOGIN_FAILURE_LIMIT", 5)
MESHDASH_LOGIN_LOCKOUT = envint("MESHDASH_LOGIN_LOCKOUT", 900)
# With eager tasks (no broker), web requests hand work to this many background threads, and refuse
# new work with a message while MESHDASH_BACKGROUND_QUEUE jobs already wait.
MESHDASH_BACKGROUND_THREADS = envint("MESHDASH_BACKGROUND_THREADS", 2)
MESHDASH_BACKGROUND_QUEUE = envint("MESHDASH_BACKGROUND_QUEUE", 8)
WSGI_APPLICATION = "meshdash.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_SQLITE_DEFAULT = f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(envstr("DATABASE_URL", _SQLITE_DEFAULT), conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL and IMMEDIATE transactions let the web process and a local worker share the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    # A database that stopped answering must fail a request fast (503), not hang a web worker.
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = envint("DATABASE_CONNECT_TIMEOUT", 5)
    # PostgreSQL's JIT compiles any query its planner prices over jit_above_cost; at 10M reports the
    # pages' rollup queries cross it and spent 250+ ms compiling to save a few (BENCHMARKS.md).
    # DATABASE_JIT=true keeps the server's setting (e.g. behind a pooler that refuses startup options).
    if not envbool("DATABASE_JIT", False):
        DATABASES["default"]["OPTIONS"]["options"] = "-c jit=off"
MESHDASH_DB_RETRY_AFTER = envint("MESHDASH_DB_RETRY_AFTER", 10)  # seconds, sent with 503 when the DB is down

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# collectstatic writes a gzipped copy of each file beside it, and whitenoise serves that to clients
# that accept gzip (the plotly bundle: 1.2 MB -> 0.4 MB on the wire).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js comes from the installed plotly package (never a CDN, never committed).
    "packages_app.staticfinders.PlotlyFinder",
]

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task killed by the hard time limit goes back to the queue (like one whose worker died), so the
# delivery counter in tasks.py sees a message that keeps hanging and quarantines it.
CELERY_TASK_ACKS_ON_TIMEOUT = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", 600)
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 660)
# The broker must not hand a late-acked task to a second worker while the first may still run it:
# Redis re-delivers an unacknowledged message only after this many seconds.
CELERY_VISIBILITY_TIMEOUT = envint("CELERY_VISIBILITY_TIMEOUT", CELERY_TASK_TIME_LIMIT * 2)
if not 0 < CELERY_TASK_SOFT_TIME_LIMIT < CELERY_TASK_TIME_LIMIT < CELERY_VISIBILITY_TIMEOUT:
    raise ImproperlyConfigured(
        "need 0 < CELERY_TASK_SOFT_TIME_LIMIT < CELERY_TASK_TIME_LIMIT < CELERY_VISIBILITY_TIMEOUT, got "
        f"{CELERY_TASK_SOFT_TIME_LIMIT} < {CELERY_TASK_TIME_LIMIT} < {CELERY_VISIBILITY_TIMEOUT}"
    )
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
# `filesystem://` is kombu's broker that needs no server: messages are files in one folder that the web
# process and the worker share. It is what `make run` uses on a machine without Redis; one machine only.
if CELERY_BROKER_URL.startswith("filesystem://"):
    _BROKER_FOLDER = Path(envstr("CELERY_BROKER_FOLDER") or BASE_DIR / "var" / "broker")
    (_BROKER_FOLDER / "processed").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "data_folder_in": str(_BROKER_FOLDER),
        "data_folder_out": str(_BROKER_FOLDER),
        "processed_folder": str(_BROKER_FOLDER / "processed"),
        "control_folder": str(_BROKER_FOLDER / "control"),
        "store_processed": False,
    }
# redis:// goes through kombu's Redis transport with the fix in meshdash/broker.py (a worker that
# exited on a Redis restart now reconnects); and the worker retries the broker for as long as it is
# down rather than giving up after 100 attempts.
if CELERY_BROKER_URL.startswith("redis://"):
    CELERY_BROKER_TRANSPORT = "meshdash.broker:Transport"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# On a broker connection loss, let running tasks finish: their ack may be lost and the message
# re-delivered, but the revision claim (ingest.claim_revision) turns that delivery into a no-op.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "sync-tracked-packages": {
        "task": "packages_app.tasks.sync_all_packages",
        "schedule": envint("MESHDASH_SYNC_INTERVAL", 900),
    },
    "reconcile-stuck-revisions": {
        "task": "packages_app.tasks.reconcile_stuck_revisions",
        "schedule": envint("MESHDASH_RECONCILE_INTERVAL", 300),
    },
    "discover-namespace-packages": {
        "task": "packages_app.tasks.discover_packages",
        "schedule": envint("MESHDASH_DISCOVER_INTERVAL", 3600),
    },
    "prune-hourly-rollups": {
        "task": "packages_app.tasks.prune_hourly_rollups",
        "schedule": 3600,
    },
    "notify-operations": {  # notifications of stuck ingests and silent nodes (packages_app/notifications.py)
        "task": "packages_app.tasks.notify_operations",
        "schedule": envint("MESHDASH_NOTIFY_INTERVAL", 300),
    },
    "maintain-report-partitions": {
        "task": "packages_app.tasks.maintain_report_partitions",
        "schedule": 24 * 3600,
    },
    "check-fix-proposals": {
        "task": "packages_app.tasks.check_fix_proposals",
        "schedule": envint("MESHDASH_FIX_CHECK_INTERVAL", 900),
    },
}

# --- Cache (the node rate limiter counts here, so it must be shared by all web workers) -------
# CACHE_URL or REDIS_URL (redis://...) selects Redis; a redis:// Celery broker is reused otherwise.
# With none, each process has its own local-memory cache: fine for one process, per-worker limits
# under gunicorn.
_CACHE_URL = envstr("CACHE_URL") or envstr("REDIS_URL") or envstr("CELERY_BROKER_URL")
if _CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES = {"default": {"BACKEND": "meshdash.cache.PooledRedisCache", "LOCATION": _CACHE_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Node reports ---------------------------------------------------------------------------
MESHDASH_NODE_RATE_LIMIT = envint("MESHDASH_NODE_RATE_LIMIT", 1200)  # requests/minute/node; 0 = off
# OTLP spans per minute per node, whatever the number of exports (0 = off): a span is what costs.
MESHDASH_NODE_SPAN_RATE_LIMIT = envint("MESHDASH_NODE_SPAN_RATE_LIMIT", 12000)
# The OTLP/gRPC receiver: calls handled at once; more are refused at once (RESOURCE_EXHAUSTED).
MESHDASH_OTLP_GRPC_MAX_CALLS = envint("MESHDASH_OTLP_GRPC_MAX_CALLS", 8)
# Of those, calls one node token may hold at once; more from that node are refused (UNAVAILABLE, retried
# by exporters), so one token cannot hold every slot. An exporter sends one batch at a time.
MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE = envint("MESHDASH_OTLP_GRPC_MAX_CALLS_PER_NODE", 2)
# Seconds from a call's start until its whole export message has arrived; past it the call is cancelled
# and its slot freed (a peer that sends the metadata and never the message holds nothing longer).
MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE = envint("MESHDASH_OTLP_GRPC_MESSAGE_DEADLINE", 15)
# Hourly report rollups are kept this many days; day and total rollups are kept for good.
MESHDASH_ROLLUP_HOURLY_DAYS = envint("MESHDASH_ROLLUP_HOURLY_DAYS", 14)
# Raw reports are kept this many months (whole months, dropped by beat; 0 = for good). The pages read
# the rollups, which stay; only "recent reports", CSV exports and rebuild_rollups need raw reports.
MESHDASH_REPORT_RETENTION_MONTHS = envint("MESHDASH_REPORT_RETENTION_MONTHS", 6)
# Off only to measure what the rollups cost (bench/bench_reports.py): pages then lag until
# `manage.py rebuild_rollups`.
MESHDASH_ROLLUP_ON_STORE = envbool("MESHDASH_ROLLUP_ON_STORE", True)
# A public figure counts at most this many of one node's reports of one revision a day (docs/fleet.md).
MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY = envint("MESHDASH_PUBLIC_REPORTS_PER_NODE_DAY", 1440)
# "Check a manifest" page and POST /api/v1/check-manifest: checks/minute per client address; 0 = off
MESHDASH_CHECK_RATE_LIMIT = envint("MESHDASH_CHECK_RATE_LIMIT", 30)
# Site-wide bytes of manifest checks in flight at once, across web workers (web/check_budget.py); past it a
# check answers 503 + Retry-After at once. 8 MiB: two anonymous checks of the largest size, or one 16 MiB
# check alone (0 = off).
MESHDASH_CHECK_BUDGET_BYTES = envint("MESHDASH_CHECK_BUDGET_BYTES", 8 * 1024 * 1024)
# The largest manifest an anonymous visitor may have checked (signed in: the format's 16 MiB).
MESHDASH_CHECK_ANON_MAX_BYTES = envint("MESHDASH_CHECK_ANON_MAX_BYTES", 4 * 1024 * 1024)

# --- The Hub --------------------------------------------------------------------------------
# HF_ENDPOINT and HF_TOKEN are read by huggingface_hub itself, from the environment, inside packages_app/hub/.
HF_ENDPOINT = envstr("HF_ENDPOINT", "https://huggingface.co")
MESHDASH_NAMESPACES = [n for n in envstr("MESHDASH_NAMESPACES", "meshllm").split(",") if n]
# Namespaces an operator may track from the UI (superusers may track any); default: the discovered ones.
MESHDASH_TRACK_NAMESPACES = envlist("MESHDASH_TRACK_NAMESPACES") or MESHDASH_NAMESPACES
MESHDASH_CATALOG_DATASET = envstr("MESHDASH_CATALOG_DATASET", "meshllm/catalog")
MESHDASH_FETCH_CONCURRENCY = envint("MESHDASH_FETCH_CONCURRENCY", 8)
MESHDASH_MAX_REVISIONS = envint("MESHDASH_MAX_REVISIONS", 50)
# Bounds on what the Hub (or a hostile imitation of it) can make meshdash do; see RELIABILITY.md.
# A development endpoint (devhub) may be plain http on a loopback or private address; nothing else may.
MESHDASH_HUB_DEV = envbool("MESHDASH_HUB_DEV", False)
# Origins file reads may be redirected to (the Hub's LFS/Xet CDN); empty = the Hub's own CDN hosts.
MESHDASH_HUB_CDN_ORIGINS = envlist("MESHDASH_HUB_CDN_ORIGINS")
MESHDASH_HUB_CONNECT_TIMEOUT = envint("MESHDASH_HUB_CONNECT_TIMEOUT", 10)  # seconds
MESHDASH_HUB_READ_TIMEOUT = envint("MESHDASH_HUB_READ_TIMEOUT", 30)  # seconds without a byte
MESHDASH_HUB_CALL_DEADLINE = envint("MESHDASH_HUB_CALL_DEADLINE", 90)  # one call, retries and pages included
MESHDASH_HUB_INGEST_DEADLINE = envint("MESHDASH_HUB_INGEST_DEADLINE", 480)  # all Hub calls of one ingest
MESHDASH_HUB_MAX_RETRY_AFTER = envint("MESHDASH_HUB_MAX_RETRY_AFTER", 600)  # a longer Retry-After is cut
MESHDASH_HUB_INLINE_RETRY_AFTER = envint("MESHDASH_HUB_INLINE_RETRY_AFTER", 5)  # longer: the task retries
MESHDASH_HUB_MAX_RESPONSE_BYTES = envint("MESHDASH_HUB_MAX_RESPONSE_BYTES", 32 * 1024 * 1024)
MESHDASH_HUB_MAX_PAGES = envint("MESHDASH_HUB_MAX_PAGES", 100)  # requests of one listing
MESHDASH_HUB_MAX_LISTING_BYTES = envint("MESHDASH_HUB_MAX_LISTING_BYTES", 64 * 1024 * 1024)
# Per revision: refused past these, with the reason recorded on the revision (or the file).
MESHDASH_MAX_FILES = envint("MESHDASH_MAX_FILES", 10_000)
MESHDASH_MAX_MANIFEST_ARTIFACTS = envint("MESHDASH_MAX_MANIFEST_ARTIFACTS", 4096)
MESHDASH_MAX_HEADER_BYTES = envint("MESHDASH_MAX_HEADER_BYTES", 1024 * 1024 * 1024)  # all ranged reads
MESHDASH_MAX_TENSORS_PER_FILE = envint("MESHDASH_MAX_TENSORS_PER_FILE", 8192)
# Pull requests with a patched manifest (issue 23): the organisation bot's Hub *write* token (HF_TOKEN stays
# read-only; this one is sent only to HF_ENDPOINT's origin), the name the page shows as the PR's author,
# proposals per user per hour, and the public address of this dashboard for the PR's link back.
MESHDASH_HUB_WRITE_TOKEN = envstr("MESHDASH_HUB_WRITE_TOKEN")
MESHDASH_HUB_WRITE_AUTHOR = envstr("MESHDASH_HUB_WRITE_AUTHOR")
MESHDASH_PROPOSE_RATE_LIMIT = envint("MESHDASH_PROPOSE_RATE_LIMIT", 10)
MESHDASH_SYNC_RATE_LIMIT = envint("MESHDASH_SYNC_RATE_LIMIT", 30)  # "Sync from the Hub" per user per hour
MESHDASH_PUBLIC_URL = envstr("MESHDASH_PUBLIC_URL")
# Hub webhooks (POST /api/v1/hooks/hub) carry this in X-Webhook-Secret; empty = endpoint disabled.
MESHDASH_WEBHOOK_SECRET = envstr("MESHDASH_WEBHOOK_SECRET")
if MESHDASH_WEBHOOK_SECRET and len(MESHDASH_WEBHOOK_SECRET) < 16:
    raise ImproperlyConfigured("MESHDASH_WEBHOOK_SECRET must be at least 16 characters (or empty: off)")

# --- Operating: /metrics (packages_app/web/metrics_view.py) and notifications ------------------------
# Who may scrape /metrics: a request with "Authorization: Bearer <MESHDASH_METRICS_TOKEN>" (16+ characters;
# empty = no token), or one from these addresses or networks (default: this machine only).
MESHDASH_METRICS_TOKEN = envstr("MESHDASH_METRICS_TOKEN")
if MESHDASH_METRICS_TOKEN and len(MESHDASH_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("MESHDASH_METRICS_TOKEN must be at least 16 characters (or empty: off)")
MESHDASH_METRICS_ALLOWED_ADDRESSES = envlist("MESHDASH_METRICS_ALLOWED_ADDRESSES") or ["127.0.0.1", "::1"]
for _network in MESHDASH_METRICS_ALLOWED_ADDRESSES:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"MESHDASH_METRICS_ALLOWED_ADDRESSES: {_network!r} is not an address or network (e.g. 10.0.0.0/8)"
        ) from None
# Multiprocess mode (gunicorn workers, Celery children): the folder every process writes its counters to.
# prometheus_client and packages_app/metrics.py read it from the environment before any setting is read.
PROMETHEUS_MULTIPROC_DIR = envstr("PROMETHEUS_MULTIPROC_DIR")
# The database figures of /metrics are read at most once per this many seconds (shared cache); 0 = always.
MESHDASH_METRICS_CACHE_SECONDS = envint("MESHDASH_METRICS_CACHE_SECONDS", 10)

# Links in notifications start with this (e.g. https://meshdash.example.org); empty = paths only.
MESHDASH_PUBLIC_URL = envstr("MESHDASH_PUBLIC_URL")
# Email notifications go through this SMTP server (Django's settings of the same names).
# One deadline over each whole SMTP exchange (the delivery's), EMAIL_TIMEOUT over each socket operation.
EMAIL_BACKEND = "packages_app.notifications.BoundedEmailBackend"
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10)  # seconds: a mail server that hangs cannot hold a worker
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "meshdash@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"httpx2": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
