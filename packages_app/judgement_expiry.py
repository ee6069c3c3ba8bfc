"""Deletes that change a node's kept judgement (NodeJudgement) expire it in the delete's own transaction.

The services that write reports, runs and revisions judge the nodes they change (packages_app.judgements);
a delete made in the Django admin, or anywhere through the ORM (``obj.delete()``, a queryset's, a cascade),
goes through none of them. Django sends ``pre_delete`` for every row it deletes, cascaded ones included,
inside the delete's transaction, so these receivers expire (``valid_until`` in the past) the rows of the
nodes whose judgement reads what is going: the next read (judgements.fresh, which every page that reads
the rows calls first) judges them anew, as for a node just created (models.node_judgements).

- a revision: every node that served, or registered a run of, any revision of its package (the package's
  latest may change with it, and that changes what the older revisions' nodes are told), and the nodes
  whose kept advice names it;
- a registered run (NodeRun): its node;
- a node: its rows go with it (a cascade); no other node's judgement reads it;
- a report: nothing to do, since no judgement reads the reports: they read the rollups and Serving rows
  the reports were added to, which a report's delete leaves as they were (as retention does).

A release or a roster is no row: the release matrix and rosters are files, and a row judged against
others is judged anew when read (judgements.basis).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from packages_app.models import JUDGEMENT_EXPIRED, NodeJudgement, NodeRun, Revision, Serving


def expire_nodes(node_ids: Any) -> int:
    """Expire these nodes' kept judgements (ids, or a query selecting them): judged anew when next read."""
    return NodeJudgement.objects.filter(node_id__in=node_ids).update(valid_until=JUDGEMENT_EXPIRED)


@receiver(pre_delete, sender=Revision, dispatch_uid="packages_app.judgement_expiry.revision_deleted")
def revision_deleted(sender: type[Revision], instance: Revision, **kwargs: Any) -> None:
    package = Revision.objects.filter(package_id=instance.package_id).values("pk")
    served = Serving.objects.filter(revision_id__in=package).exclude(node_key=0).values("node_key")
    ran = NodeRun.objects.filter(Q(revision_id__in=package) | Q(served_revision_id__in=package))
    named = NodeJudgement.objects.filter(revision_id=instance.pk).values("node_id")
    nodes = set(served.values_list("node_key", flat=True).distinct())
    nodes |= set(ran.values_list("node_id", flat=True).distinct())
    nodes |= set(named.values_list("node_id", flat=True))
    if nodes:
        expire_nodes(nodes)


@receiver(pre_delete, sender=NodeRun, dispatch_uid="packages_app.judgement_expiry.run_deleted")
def run_deleted(sender: type[NodeRun], instance: NodeRun, **kwargs: Any) -> None:
    expire_nodes([instance.node_id])
