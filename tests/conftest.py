"""Shared fixtures: the generated demo catalog, a devhub server on loopback, and Hub sources pointed at it.

The catalog is generated once into var/devhub-test (keyed on the generator's version) and reused by
later runs, so a test session pays for generation at most once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from packages_app import hub
    from packages_app.devhub import DevHub

ROOT = Path(__file__).resolve().parent.parent
CATALOG_ROOT = ROOT / "var" / "devhub-test"

pytest_plugins = ["tests.passes"]  # make test's passes: which tests touch a store, and the counts


def pytest_configure(config: pytest.Config) -> None:
    # huggingface_hub reads HF_ENDPOINT at import; tests always pass the endpoint explicitly instead.
    os.environ.pop("HF_TOKEN", None)
    # devhub is plain http on loopback: a development endpoint, for this process and the ones it starts.
    os.environ["MESHDASH_HUB_DEV"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session")
def demo_catalog() -> Path:
    from packages_app.devhub import ensure_catalog

    return ensure_catalog(CATALOG_ROOT)


@pytest.fixture(scope="session")
def devhub(demo_catalog: Path) -> Iterator[DevHub]:
    from django.conf import settings

    from packages_app.devhub import DevHub

    settings.MESHDASH_HUB_DEV = True  # in case the settings were loaded before pytest_configure ran
    server = DevHub(demo_catalog).start()
    yield server
    server.stop()


@pytest.fixture
def hub_settings(settings: pytest.FixtureRequest, devhub: DevHub) -> DevHub:
    """Point the app at devhub for one test."""
    settings.HF_ENDPOINT = devhub.url  # type: ignore[attr-defined]
    return devhub


@pytest.fixture
def hub_source(devhub: DevHub) -> type[hub.HubSource]:
    """HubSource bound to devhub: ``hub_source(repo_id)``."""
    from packages_app import hub

    class DevHubSource(hub.HubSource):
        def __init__(self, repo_id: str, **kwargs: object) -> None:
            kwargs.setdefault("endpoint", devhub.url)
            kwargs.setdefault("max_retries", 1)
            super().__init__(repo_id, **kwargs)  # type: ignore[arg-type]

    return DevHubSource


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Run enqueued tasks in-process, whatever broker the suite was started with."""
    from meshdash.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


@pytest.fixture
def operator(db: None) -> Any:
    """A signed-in user of the "operators" group (created by migration 0006), not a superuser."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("olga", password="correct horse battery staple")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def operator_client(operator: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(operator)
    return client
