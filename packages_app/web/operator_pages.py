"""The ingest page and what operators do from the pages: track a package, untrack, delete, re-ingest and
sync one, and propose its fix as a pull request on the Hub (each behind its permission).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from packages_app import background, fix_following, fix_plans, fix_proposals, queueing
from packages_app.catalog.errors import LookupFailed
from packages_app.catalog.ingest_status import ingest_overview
from packages_app.catalog.lookups import get_package, package_counts, resolve_revision
from packages_app.models import ActionLog, Package, Revision
from packages_app.web import access
from packages_app.web.forms import TrackPackageForm
from packages_app.web.package_pages import hub_pr_link
from packages_app.web.pages import lookup_errors

log = logging.getLogger(__name__)


@require_http_methods(["GET", "POST"])
def ingest_status(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _track_post(request)
    background.reconcile_soon()
    return _ingest_page(request, TrackPackageForm())


def _ingest_page(request: HttpRequest, form: TrackPackageForm, status: int = 200) -> HttpResponse:
    overview = ingest_overview(
        show_private=access.can_see_private(request.user),
        # A repo id an operator typed may name a private repo: only those who may track see the requests.
        show_track_requests=request.user.has_perm("packages_app.track_package"),
    )
    context = {"form": form, "overview": overview}
    return render(request, "packages_app/ingest.html", context, status=status)


@access.permission_required("packages_app.track_package")
def _track_post(request: HttpRequest) -> HttpResponse:
    form = TrackPackageForm(request.POST)
    if not form.is_valid():
        return _ingest_page(request, form, status=400)
    repo_id = form.cleaned_data["repo_id"]
    refusal, status = access.namespace_refusal(request.user, repo_id), 400
    if refusal is None:  # counted only for a track that is otherwise allowed
        refusal, status = access.track_rate_refusal(request.user), 429
    if refusal is None:
        return _track(request, repo_id)
    form.add_error("repo_id", refusal)
    return _ingest_page(request, form, status=status)


def _track(request: HttpRequest, repo_id: str) -> HttpResponse:
    # Imported here: tracking.py pulls in the Hub client, which the read-only pages never need.
    from packages_app import queueing
    from packages_app.tracking import request_track

    try:
        background.ensure_room()
    except background.PoolFull as exc:
        messages.error(request, f"{repo_id} is not tracked: {exc}")
        return redirect("packages_app:ingest")
    # No catalog row yet: a worker asks the Hub whether the repo exists, and tracks it only then.
    request_track(repo_id)
    background.hand_off(queueing.enqueue_track, repo_id)
    access.record(request.user, ActionLog.Action.TRACK, repo_id)
    messages.success(
        request,
        f"Checking {repo_id} on the Hub: once it confirms the repo exists, it is tracked and its "
        "revisions are queued for ingest.",
    )
    return redirect("packages_app:ingest")


@require_POST
@access.permission_required("packages_app.change_package")
@lookup_errors
def package_untrack(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = get_package(owner, name, access.can_see_private(request.user))
    Package.objects.filter(pk=package.pk).update(tracked=False)
    access.record(request.user, ActionLog.Action.UNTRACK, package.repo_id)
    messages.success(request, f"{package.repo_id} is no longer synced; what was ingested stays.")
    return redirect("packages_app:package", owner, name)


@require_http_methods(["GET", "POST"])
@access.permission_required("packages_app.delete_package")
@lookup_errors
def package_delete(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """GET: what would be deleted, with a confirm button; POST: delete it with its revisions and files."""
    package = get_package(owner, name, access.can_see_private(request.user))
    if request.method == "GET":
        context = {"package": package, "counts": package_counts(package)}
        return render(request, "packages_app/package_delete.html", context)
    counts = package_counts(package)
    package.delete()
    detail = f"{counts['revisions']} revisions, {counts['files']} files"
    access.record(request.user, ActionLog.Action.DELETE, package.repo_id, detail)
    messages.success(request, f"Deleted {package.repo_id} ({detail}).")
    return redirect("packages_app:catalog")


@require_POST
@access.permission_required("packages_app.reingest_package")
@lookup_errors
def package_reingest(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    package = get_package(owner, name, access.can_see_private(request.user))
    shas = list(
        package.revisions.exclude(status=Revision.Status.RUNNING).values_list("commit_sha", flat=True)
    )
    queued = f"{len(shas)} revisions of {package.repo_id} are queued for ingest again"
    try:
        with transaction.atomic():  # queued first: the work starts only once this commits
            # queued_at: their wait starts now (a re-queued revision kept its first one, issue 48)
            package.revisions.filter(commit_sha__in=shas).update(
                status=Revision.Status.QUEUED, queued_at=timezone.now()
            )
            queueing.enqueue_reingest(package.repo_id, shas)
    except background.PoolFull as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    except queueing.BROKER_DOWN as exc:  # committed: the revisions are queued, the reconciler sends them
        log.warning("reingest of %s: the task queue is unavailable: %s", package.repo_id, exc)
        messages.warning(
            request,
            f"{queued}; the task queue is unavailable right now, so they start once it is back "
            "(the reconciler sends queued revisions).",
        )
    else:
        messages.success(request, f"{queued}.")
    access.record(request.user, ActionLog.Action.REINGEST, package.repo_id, f"{len(shas)} revisions")
    return redirect("packages_app:package", owner, name)


@require_POST
@access.permission_required("packages_app.reingest_package")
@lookup_errors
def package_sync(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Read the Hub now: new commits (and so their ingest) and the states of meshdash's pull requests."""
    package = get_package(owner, name, access.can_see_private(request.user))
    refusal = access.sync_rate_refusal(request.user)
    if refusal:
        messages.error(request, refusal)
        return redirect("packages_app:package", owner, name)
    proposals = fix_following.followed_proposals(package.fix_proposals.all())
    try:
        background.hand_off(queueing.enqueue_sync_now, package.repo_id, proposals)
    except background.PoolFull as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    access.record(request.user, ActionLog.Action.SYNC, package.repo_id, f"{len(proposals)} pull requests")
    messages.success(
        request,
        f"Syncing {package.repo_id} from the Hub: new commits are ingested and the pull requests' states "
        "read back; reload in a few seconds.",
    )
    return redirect("packages_app:package", owner, name)


# --- a pull request with the patched manifest ----------------------------------------------------------


@require_http_methods(["GET", "POST"])
@access.permission_required("packages_app.propose_fix")
@lookup_errors
def package_propose_fix(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """GET: what the PR would carry (diff, title, description, author); POST: record it, a worker sends it."""
    package = get_package(owner, name, access.can_see_private(request.user))
    ref = request.POST.get("revision") if request.method == "POST" else request.GET.get("revision")
    revision = resolve_revision(package, ref)
    if revision is None:
        raise LookupFailed(f"{package.repo_id} has no ingested revision yet.")
    existing = fix_proposals.active_proposal(package, revision.commit_sha)
    link = hub_pr_link(existing.pr_url if existing else "")
    context: dict[str, Any] = {
        "package": package,
        "revision": revision,
        "existing": existing,
        "existing_link": link,
    }
    if existing is None:
        try:
            context["plan"] = fix_plans.plan(package, revision)
        except fix_plans.FixRefused as exc:
            context["refusal"] = str(exc)
    context |= {"author": fix_proposals.author_label(), "token": bool(fix_proposals.write_token())}
    if request.method == "POST" and existing is not None:
        messages.info(request, f"A pull request for this revision is already proposed: {existing.summary}.")
        return redirect("packages_app:package", owner, name)
    if request.method == "GET" or "refusal" in context:
        status = 409 if request.method == "POST" else 200
        return render(request, "packages_app/propose_fix.html", context, status=status)
    refusal = access.propose_rate_refusal(request.user)
    if refusal:
        messages.error(request, refusal)
        return redirect("packages_app:package", owner, name)
    try:
        with transaction.atomic():
            proposal, created = fix_proposals.request_fix(package, revision, request.user)
            if created:
                background.hand_off(queueing.enqueue_open_fix, proposal.pk)
    except fix_plans.FixRefused as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    except background.PoolFull as exc:
        messages.error(request, str(exc))
        return redirect("packages_app:package", owner, name)
    if created:
        detail = f"{revision.short_sha}: {proposal.promised_headline} promised"
        access.record(request.user, ActionLog.Action.PROPOSE_FIX, package.repo_id, detail)
        messages.success(request, f"The pull request for {revision.short_sha} is being opened on the Hub.")
    else:
        messages.info(request, f"A pull request for this revision is already proposed: {proposal.summary}.")
    return redirect(
        f"{reverse('packages_app:package', args=[owner, name])}?revision={revision.commit_sha}#fix"
    )
