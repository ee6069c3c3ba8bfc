"""ASGI entry point; refuses to start without production's SECRET_KEY and ALLOWED_HOSTS."""

import os

from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

from meshdash import settings as config
from meshdash.startup import settle

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
if problems := config.serving_problems():
    raise ImproperlyConfigured("; ".join(problems))
application = get_asgi_application()
settle()  # start-up's objects out of every full garbage collection
