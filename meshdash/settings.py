"""All of meshdash's settings, read from the environment (see README, "Configuration").

With no variable set everything runs on one machine with no services: SQLite in the project
folder and Celery tasks executed eagerly in-process. Production (DEBUG=false) must name its
SECRET_KEY and ALLOWED_HOSTS; a missing or malformed value stops the process at start-up.
"""

import os
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


DEBUG = envbool("DEBUG", True)
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
    SECRET_KEY = "dev-only-insecure-key-never-use-in-production"  # noqa: S105
ALLOWED_HOSTS = [h for h in envstr("ALLOWED_HOSTS").split(",") if h]
if not ALLOWED_HOSTS:
    if not DEBUG:
        raise ImproperlyConfigured("ALLOWED_HOSTS must be set when DEBUG is false")
    ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]

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
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "meshdash.urls"
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

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
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
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", 600)
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 660)
# The broker must not hand a late-acked task to a second worker while the first may still run it.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_TASK_TIME_LIMIT * 2}
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

# --- The Hub --------------------------------------------------------------------------------
# HF_ENDPOINT and HF_TOKEN are read by huggingface_hub itself, from the environment, inside hub.py.
HF_ENDPOINT = envstr("HF_ENDPOINT", "https://huggingface.co")
MESHDASH_NAMESPACES = [n for n in envstr("MESHDASH_NAMESPACES", "meshllm").split(",") if n]
MESHDASH_CATALOG_DATASET = envstr("MESHDASH_CATALOG_DATASET", "meshllm/catalog")
MESHDASH_FETCH_CONCURRENCY = envint("MESHDASH_FETCH_CONCURRENCY", 8)
MESHDASH_MAX_REVISIONS = envint("MESHDASH_MAX_REVISIONS", 50)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"httpx2": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
