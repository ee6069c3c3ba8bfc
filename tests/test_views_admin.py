"""The admin pages for packages, revisions and files render for staff with realistic rows."""

from __future__ import annotations

import pytest
from django.test import Client

from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["package", "revision", "packagefile"])
def test_the_changelist_and_a_change_page_render(admin_client: Client, model: str) -> None:
    package = f.qwen35_package(with_history=False)
    revision = package.latest_revision
    assert revision is not None
    pk = {"package": package.pk, "revision": revision.pk, "packagefile": revision.files.first().pk}[model]
    assert admin_client.get(f"/admin/packages_app/{model}/").status_code == 200
    assert admin_client.get(f"/admin/packages_app/{model}/{pk}/change/").status_code == 200
