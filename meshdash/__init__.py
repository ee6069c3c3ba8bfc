"""meshdash: audits mesh-llm layer packages and shows what serving nodes measure."""

from meshdash.celery import app as celery_app

__all__ = ["celery_app"]
