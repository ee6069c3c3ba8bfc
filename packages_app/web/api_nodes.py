"""The read-only JSON API of nodes: ``GET /api/v1/nodes/<name>`` (what a node ran, what it says about
itself, and the advice for each); every error is ``{"error": "<one sentence>"}``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from packages_app.fleet.nodes import node_rows
from packages_app.fleet.serving import NodeServing
from packages_app.fleet.window import DEFAULT_WINDOW_DAYS, window_start
from packages_app.web import access
from packages_app.web.api_read import advice_json, error, read_only
from packages_app.web.forms import WINDOW_DAYS


@read_only
def node_detail(request: HttpRequest, name: str) -> JsonResponse:
    """One node: what it served in the window (``days``, as on its page), the advice for each revision,
    and what it says about itself (its newest run's observations)."""
    raw = request.GET.get("days", "")
    days = int(raw) if raw.isdigit() and int(raw) in WINDOW_DAYS else DEFAULT_WINDOW_DAYS
    rows = node_rows(window_start(days), name=name, show_private=access.can_see_private(request.user))
    if not rows:
        return error(f"No node named {name} is registered.", 404)
    row = rows[0]
    return JsonResponse(
        {
            "name": row.node.name,
            "version": row.version or None,
            "devices": row.devices,
            "certification": row.certification or None,
            "needs_action": row.needs_action,
            "days": days,
            "observations": row.observations or {},
            "serving": [_serving_json(s) for s in row.serving],
        }
    )


def _serving_json(s: NodeServing) -> dict[str, Any]:
    return {
        "repo_id": s.repo_id,
        "commit_sha": s.commit_sha,
        "status": s.status.value,
        "is_latest": s.is_latest,
        "identity": s.identity or None,
        "identity_label": s.identity_label or "named in reports",
        "stage_splits": s.stage_splits,
        "topology_id": s.topology_id,
        "reports": s.reports,
        "tps": s.tps,
        "requested_strategy": s.requested,
        "effective_strategy": s.effective,
        "version": s.version or None,
        "advice": advice_json(s.advice),
    }
