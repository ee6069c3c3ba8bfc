"""The Hub webhook endpoint: a verified repo-update event for a package we follow enqueues its sync at once.

The Hub POSTs JSON such as ``{"event": {"action": "update", "scope": "repo.content"}, "repo": {"type":
"model", "name": "meshllm/...-layers", "headSha": "..."}}`` with the webhook's secret in
``X-Webhook-Secret``. Only the secret is trusted; every field of the body is validated here, and the
sync itself reads the Hub again, so a forged event can at most cause one extra sync.

Discussion events (``"scope": "discussion"``, with ``"discussion": {"num": N, "isPullRequest": true}``)
about a pull request meshdash opened (``fix_proposals``) enqueue a check of that PR: its status is read back
from the Hub, never taken from the payload. A ``repo.content`` event whose ``updatedRefs`` name only
pull-request refs (``refs/pr/N``: a PR opened or pushed to) changed no branch of the package, so it queues no
sync.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from packages_app import input_budget, repo_ids
from packages_app.input_budget import InputBudget, OverBudget

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024  # discussion events carry comment text; repo events are far smaller
SECRET_HEADER = "X-Webhook-Secret"  # noqa: S105 - a header name, not a secret
SYNC_EVENTS = {("repo", "create"), ("repo", "update"), ("repo.content", "update")}
DISCUSSION_SCOPES = ("discussion", "discussion.comment")
RETRY_AFTER_SECONDS = 30
MAX_REFS = 100
MAX_DEPTH = 16  # a Hub payload nests 4 deep
# The input budget every parser of untrusted input shares: bytes, values (array items too), depth.
# A Hub payload is mostly text (a comment): a value per 32 bytes is far more than a real one holds.
BUDGET = InputBudget.for_bytes("The body", MAX_BODY_BYTES, MAX_DEPTH, bytes_per_value=32)


class WebhookRejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class RepoEvent:
    scope: str
    action: str
    repo_type: str
    repo_id: str
    head_sha: str | None
    pull_request: int | None = None  # a discussion event's PR number
    refs: tuple[str, ...] = ()  # the refs ``updatedRefs`` names (at most MAX_REFS, each a string)


def _error(status: int, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@csrf_exempt
def hub_webhook(request: HttpRequest) -> JsonResponse:
    """POST /api/v1/hooks/hub: 202 when a sync was queued, 200 when the event is not for us."""
    secret: str = settings.MESHDASH_WEBHOOK_SECRET
    if not secret:
        return _error(404, "Webhooks are disabled on this server (MESHDASH_WEBHOOK_SECRET is not set).")
    if request.method != "POST":
        return _error(405, "Only POST is allowed here.", Allow="POST")
    if not hmac.compare_digest(request.headers.get(SECRET_HEADER, "").encode(), secret.encode()):
        return _error(403, f"The {SECRET_HEADER} header does not match this server's webhook secret.")
    try:
        event = parse_event(_read_body(request))
    except WebhookRejected as exc:
        return _error(exc.status, exc.message)
    return _dispatch(event)


def _read_body(request: HttpRequest) -> Any:
    if request.content_type != "application/json":
        raise WebhookRejected(415, "The body must be sent as Content-Type: application/json.")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    raw = b"" if declared > MAX_BODY_BYTES else request.read(MAX_BODY_BYTES + 1)
    if declared > MAX_BODY_BYTES or len(raw) > MAX_BODY_BYTES:
        raise WebhookRejected(413, f"The body must be at most {MAX_BODY_BYTES // 1024} KiB.")
    try:
        return input_budget.load_json(raw, BUDGET)
    except OverBudget as exc:
        raise WebhookRejected(400 if exc.limit == "depth" else 413, exc.message) from None
    except ValueError:
        raise WebhookRejected(400, "The body is not valid JSON.") from None


def parse_event(data: Any) -> RepoEvent:
    """The fields of a Hub webhook payload that matter here, validated; WebhookRejected otherwise."""
    body = _object(data, "body")
    event = _object(body.get("event"), "event")
    repo = _object(body.get("repo"), "repo")
    repo_id = _string(repo.get("name"), "repo.name")
    try:
        repo_ids.validate_repo_id(repo_id)  # the track form's rule: no URL, path, '..', '--'
    except repo_ids.InvalidRepoId as exc:
        raise WebhookRejected(400, f"repo.name: {exc}") from None
    head = repo.get("headSha")
    discussion = body.get("discussion")
    number = (
        discussion.get("num") if isinstance(discussion, dict) and discussion.get("isPullRequest") else None
    )
    return RepoEvent(
        scope=_string(event.get("scope"), "event.scope"),
        action=_string(event.get("action"), "event.action"),
        repo_type=_string(repo.get("type"), "repo.type"),
        repo_id=repo_id,
        head_sha=head if repo_ids.is_commit_sha(head) else None,
        pull_request=number if isinstance(number, int) and 0 < number < 10**9 else None,
        refs=_updated_refs(body.get("updatedRefs")),
    )


def _updated_refs(value: Any) -> tuple[str, ...]:
    items = value[:MAX_REFS] if isinstance(value, list) else []
    refs = (item.get("ref") for item in items if isinstance(item, dict))
    return tuple(ref[:200] for ref in refs if isinstance(ref, str))


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WebhookRejected(400, f"{where} must be a JSON object.")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise WebhookRejected(400, f"{where} must be a non-empty string of at most 200 characters.")
    return value


def _ignored_because(event: RepoEvent) -> str | None:
    if (event.scope, event.action) not in SYNC_EVENTS:
        return f"{event.scope}/{event.action} events do not change a package's files"
    if event.repo_type != "model":
        return f"{event.repo_type} repos are not layer packages"
    if event.refs and all(ref.startswith("refs/pr/") for ref in event.refs):
        return "only pull-request refs moved (refs/pr/N): no branch of the package changed"
    if event.repo_id.split("/", 1)[0] not in settings.MESHDASH_NAMESPACES:
        return "the repo is outside the namespaces this server follows (MESHDASH_NAMESPACES)"
    if not event.repo_id.endswith("-layers") and not _is_tracked(event.repo_id):
        return "the repo is not a layer package (no -layers suffix) and is not tracked"
    return None


def _is_tracked(repo_id: str) -> bool:
    from packages_app.models import Package

    return Package.objects.filter(repo_id=repo_id, tracked=True).exists()


def _dispatch(event: RepoEvent) -> JsonResponse:
    if event.scope in DISCUSSION_SCOPES:
        return _dispatch_discussion(event)
    reason = _ignored_because(event)
    if reason is not None:
        return JsonResponse({"queued": False, "repo": event.repo_id, "reason": reason}, status=200)
    from packages_app import background, queueing  # Celery is only needed once an event is accepted

    try:
        background.hand_off(queueing.enqueue_sync, event.repo_id)  # never the sync itself, even eagerly
    except background.PoolFull as exc:
        return _error(503, str(exc), **{"Retry-After": str(RETRY_AFTER_SECONDS)})
    except Exception:  # the broker is down: the Hub may deliver again later; the periodic sync covers it
        log.warning("could not enqueue the sync of %s", event.repo_id, exc_info=True)
        retry_after = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return _error(503, "The task queue is unavailable; try again later.", **retry_after)
    log.info("webhook: sync of %s queued (head %s)", event.repo_id, event.head_sha)
    return JsonResponse({"queued": True, "repo": event.repo_id, "head_sha": event.head_sha}, status=202)


def _dispatch_discussion(event: RepoEvent) -> JsonResponse:
    """A PR meshdash opened changed (merged, closed, commented): check its status on the Hub."""
    from packages_app.models import FixProposal

    ids: list[int] = []
    if event.pull_request is not None and event.repo_type == "model":
        ids = list(
            FixProposal.objects.filter(
                package__repo_id=event.repo_id, pr_number=event.pull_request
            ).values_list("pk", flat=True)
        )
    if not ids:
        reason = f"{event.scope}/{event.action} events matter only for a pull request meshdash opened"
        return JsonResponse({"queued": False, "repo": event.repo_id, "reason": reason}, status=200)
    from packages_app import background, queueing

    try:
        for proposal_id in ids:
            background.hand_off(queueing.enqueue_check_fix, proposal_id)
    except background.PoolFull as exc:
        return _error(503, str(exc), **{"Retry-After": str(RETRY_AFTER_SECONDS)})
    except Exception:
        log.warning(
            "could not enqueue the check of PR #%s of %s", event.pull_request, event.repo_id, exc_info=True
        )
        return _error(
            503,
            "The task queue is unavailable; try again later.",
            **{"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    return JsonResponse(
        {"queued": True, "repo": event.repo_id, "pull_request": event.pull_request}, status=202
    )
