"""Top-level URL routes."""

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path(settings.MESHDASH_ADMIN_PATH, admin.site.urls),
    path("", include("packages_app.web.urls")),
]
