"""The stored state: packages, their pinned revisions and files, serving nodes and their reports.

Cut by concern: ``catalog`` (packages, revisions, files, track requests, certify reports), ``nodes``
(nodes, reports, runs, baseline reports, judgements), ``aggregates`` (rollups, Serving, LastServed) and
``operations`` (the action log, notifications, fix proposals). This file imports each model so that Django
finds them all in ``packages_app.models``, where callers and migrations (``packages_app.Model``) name them.
Never imports: a service, selector, task or edge (models sit below them all), nor the Hub.

Every table has a natural key under a unique constraint, so a re-run, a retry or two racing
workers write the same rows (docs/design.md).
"""

from packages_app.models.aggregates import (
    PLAN_ROLLUP_KEY,
    REVISION_ROLLUP_KEY,
    ROLLUP_KEY,
    SPLIT_ROLLUP_KEY,
    LastServed,
    NodeRollup,
    PlanRollup,
    RevisionRollup,
    Rollup,
    Serving,
    SplitRollup,
)
from packages_app.models.catalog import (
    FILE_ROLES,
    CertifyReport,
    Package,
    PackageFile,
    PackageQuerySet,
    Revision,
    RevisionQuerySet,
    TrackRequest,
)
from packages_app.models.nodes import (
    JUDGEMENT_EXPIRED,
    BaselineReport,
    Node,
    NodeJudgement,
    NodeRun,
    Report,
    ReportKey,
    RunClaim,
    node_judgements,
)
from packages_app.models.operations import (
    ActionLog,
    FixProposal,
    Notification,
    NotificationChannel,
    NotificationDelivery,
)

__all__ = [
    "FILE_ROLES",
    "JUDGEMENT_EXPIRED",
    "PLAN_ROLLUP_KEY",
    "REVISION_ROLLUP_KEY",
    "ROLLUP_KEY",
    "SPLIT_ROLLUP_KEY",
    "ActionLog",
    "BaselineReport",
    "CertifyReport",
    "FixProposal",
    "LastServed",
    "Node",
    "NodeJudgement",
    "NodeRollup",
    "NodeRun",
    "Notification",
    "NotificationChannel",
    "NotificationDelivery",
    "Package",
    "PackageFile",
    "PackageQuerySet",
    "PlanRollup",
    "Report",
    "ReportKey",
    "Revision",
    "RevisionQuerySet",
    "RevisionRollup",
    "Rollup",
    "RunClaim",
    "Serving",
    "SplitRollup",
    "TrackRequest",
    "node_judgements",
]
