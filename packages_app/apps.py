"""App configuration."""

from django.apps import AppConfig


class PackagesAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "packages_app"
    verbose_name = "Layer packages"

    def ready(self) -> None:
        from packages_app import (
            judgement_expiry,  # noqa: F401 - connects its pre_delete receivers
            pgtime,  # noqa: F401 - connects its connection_created receiver
        )
