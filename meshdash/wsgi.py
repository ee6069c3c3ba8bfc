"""WSGI entry point (gunicorn meshdash.wsgi); it refuses to start without production's secrets and hosts."""

import os

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

from meshdash import settings as config
from meshdash.startup import settle

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
if problems := config.serving_problems():
    raise ImproperlyConfigured("; ".join(problems))
application = get_wsgi_application()
settle()  # start-up's objects out of every full garbage collection
