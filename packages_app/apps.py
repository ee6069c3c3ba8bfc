"""App configuration."""

from django.apps import AppConfig


class PackagesAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "packages_app"
    verbose_name = "Layer packages"
