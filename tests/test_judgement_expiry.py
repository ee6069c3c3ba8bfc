"""Nothing stale from a delete (packages_app.judgement_expiry, issue 43): deleting a revision, a package, a
registered run, a node or a report, in the admin or through the ORM, leaves no kept judgement that
disagrees with a fresh computation once read (judgements.fresh, as every page calls it); each hook with
its control (the receiver disconnected: the row is stale)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.signals import pre_delete
from django.test import Client
from django.utils import timezone

from packages_app import judgement_expiry, judgements
from packages_app.models import Node, NodeJudgement, NodeRun, Report, Revision
from tests import dashboard_factories as f
from tests.test_judgements import agrees, broken_revision, needing, registered_setup

pytestmark = pytest.mark.django_db


@pytest.fixture
def unhooked() -> Iterator[None]:
    """The control: the delete receivers disconnected, as if the deletes went unnoticed."""
    hooks = [(judgement_expiry.revision_deleted, Revision), (judgement_expiry.run_deleted, NodeRun)]
    for hook, model in hooks:
        assert pre_delete.disconnect(hook, sender=model, dispatch_uid=_uid(hook))
    yield
    for hook, model in hooks:
        pre_delete.connect(hook, sender=model, dispatch_uid=_uid(hook))


def _uid(hook: Any) -> str:
    return f"packages_app.judgement_expiry.{hook.__name__}"


def served_broken() -> Revision:
    """A node serving a revision whose MTP weights it leaves unused: it needs action."""
    broken = broken_revision()
    f.make_report(f.make_node("n1"), broken, 3.1, at=timezone.now() - timedelta(hours=1))
    assert needing() == {"n1"} and agrees()
    return broken


def delete_in_the_admin(admin_client: Client, model: str, pk: int) -> None:
    response = admin_client.post(f"/admin/packages_app/{model}/{pk}/delete/", {"post": "yes"})
    assert response.status_code == 302


def test_a_revision_deleted_in_the_admin_leaves_no_stale_judgement(admin_client: Client) -> None:
    broken = served_broken()
    delete_in_the_admin(admin_client, "revision", broken.pk)
    judgements.fresh()
    assert needing() == set() and agrees()


def test_control_without_the_hook_a_deleted_revision_leaves_the_row_stale(
    admin_client: Client, unhooked: None
) -> None:
    broken = served_broken()
    delete_in_the_admin(admin_client, "revision", broken.pk)
    judgements.fresh()
    assert needing() == {"n1"} and not agrees()


def test_a_package_deleted_through_a_queryset_expires_its_revisions_nodes() -> None:
    broken = served_broken()
    type(broken.package).objects.filter(pk=broken.package_id).delete()  # its revisions go by cascade
    judgements.fresh()
    assert needing() == set() and agrees()


def test_control_without_the_hook_a_deleted_package_leaves_the_row_stale(unhooked: None) -> None:
    broken = served_broken()
    type(broken.package).objects.filter(pk=broken.package_id).delete()
    judgements.fresh()
    assert needing() == {"n1"} and not agrees()


def test_a_registered_run_deleted_in_the_admin_leaves_no_stale_judgement(
    client: Client, admin_client: Client
) -> None:
    registered_setup(client)
    assert needing() == {"demo-glm"}
    delete_in_the_admin(admin_client, "noderun", NodeRun.objects.get().pk)
    judgements.fresh()
    assert needing() == set() and agrees()


def test_control_without_the_hook_a_deleted_run_leaves_the_row_stale(client: Client, unhooked: None) -> None:
    registered_setup(client)
    NodeRun.objects.all().delete()
    judgements.fresh()
    assert needing() == {"demo-glm"} and not agrees()


def test_a_node_deleted_in_the_admin_takes_its_rows_and_leaves_the_others_as_computed(
    admin_client: Client,
) -> None:
    broken = served_broken()
    f.make_report(f.make_node("n2"), broken, 3.0, at=timezone.now() - timedelta(hours=2))
    assert needing() == {"n1", "n2"}
    delete_in_the_admin(admin_client, "node", Node.objects.get(name="n1").pk)
    judgements.fresh()
    assert needing() == {"n2"} and agrees()
    assert not NodeJudgement.objects.filter(node_name="n1").exists()


def test_a_report_deleted_in_the_admin_changes_no_judgement_and_none_is_stale(admin_client: Client) -> None:
    """No hook: a judgement reads the Serving rows and rollups, which a report's delete leaves as they were
    (the pages keep counting it, as after retention), so the kept row and a fresh computation still agree."""
    served_broken()
    delete_in_the_admin(admin_client, "report", Report.objects.get().pk)
    assert needing() == {"n1"} and agrees()
    judgements.fresh()
    assert needing() == {"n1"} and agrees()
