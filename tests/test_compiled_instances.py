"""The package page's model reads compiled once per process (packages_app.compiled.instances) make the
instances their querysets make: the same rows, fields, deferred fields and related package; a queryset
that reads related rows or annotations, or that a related manager made, is refused."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Count, F, Model, QuerySet

from packages_app import certify_reports, compiled, fix_plans
from packages_app.catalog import files, lookups
from packages_app.models import CertifyReport, FixProposal, Package, Revision
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


def history() -> tuple[Package, list[Revision]]:
    """A package of four revisions (one not yet committed), with files, fixes and certify reports."""
    package = f.make_package("meshllm/Instances-layers")
    revisions = [
        f.make_revision(
            package,
            verdict,
            commit_sha=f.sha(f"instances-{i}"),
            committed_at=f.BASE_TIME + timedelta(days=i),
            latest=i == 2,
            files=i < 2,
            manifest_sha256=f.sha256(f"instances-manifest-{i}"),
            schema_version=2,
        )
        for i, verdict in enumerate(("undeclared-mtp", "consistent-mtp", "undeclared-mtp", "consistent-mtp"))
    ]
    Revision.objects.filter(pk=revisions[3].pk).update(committed_at=None)  # its commit time not read yet
    revisions[3].refresh_from_db()
    for i, status in enumerate((FixProposal.Status.STALE, FixProposal.Status.OPEN)):
        FixProposal.objects.create(
            package=package,
            revision=revisions[0],
            base_sha=f.sha(f"base-{i}"),
            status=status,
            title="t",
            description="d",
            diff="",
            manifest="",
        )
    for i in range(45):  # more than the page lists (20) for each of two manifests, out of order
        CertifyReport.objects.create(
            digest=f.sha256(f"certify-{i}"),
            manifest_sha256=revisions[i % 2].manifest_sha256,
            status="passed",
            summary="passed",
            certified_by=f"node-{i}",
            via=CertifyReport.Via.API,
            received_at=f.BASE_TIME + timedelta(minutes=(i * 7) % 45),
            body={},
        )
    return package, revisions


def state(instance: Model | None) -> tuple[Any, ...]:
    """What an instance holds: its class, its loaded fields' values, which fields are deferred, and the
    related rows read with it (select_related), each as a state."""
    if instance is None:
        return (None,)
    values = {k: v for k, v in vars(instance).items() if not k.startswith("_")}
    related = {name: state(row) for name, row in instance._state.fields_cache.items()}
    return (
        type(instance),
        values,
        instance.get_deferred_fields(),
        instance._state.db,
        instance._state.adding,
        related,
    )


def same(build: Any, *args: Any) -> list[Any]:
    """compiled.instances(build, *args), checked against the queryset's own instances, in order."""
    made = compiled.instances(build, *args)
    assert [state(i) for i in made] == [state(i) for i in build(*args)]
    return made


def test_each_compiled_model_read_makes_the_instances_its_queryset_does() -> None:
    package, revisions = history()
    assert len(same(lookups._history_of, package.pk)) == 4
    assert [r.pk for r in same(lookups._newest_fix_of, package.pk)] == [FixProposal.objects.latest("id").pk]
    for revision in revisions:
        if revision.committed_at is not None:
            same(fix_plans._newer_of, package.pk, revision.committed_at)
        reports = same(certify_reports._reports_of, [revision.manifest_sha256])
        assert len(reports) == (20 if revision.pk in (revisions[0].pk, revisions[1].pk) else 0)
        overview = same(files._first_files_of, revision.pk)
        assert bool(overview) == (revision.pk in (revisions[0].pk, revisions[1].pk))
        assert overview == sorted(overview, key=lambda file: file.path)
    hidden = f.make_package("meshllm/Hidden-layers")
    Package.objects.filter(pk=hidden.pk).update(private=True)
    f.make_revision(hidden, "undeclared-mtp")
    for repo_id in (package.repo_id, hidden.repo_id, "meshllm/Unknown-layers"):
        for show_private in (False, True):
            for with_latest in (False, True):
                found = same(lookups._package_of, [repo_id], show_private, with_latest)
                assert len(found) == (
                    repo_id == package.repo_id or (show_private and repo_id == hidden.repo_id)
                )
                if found and with_latest:
                    assert found[0].latest_revision.audit is not None  # read with it, every field
    # The loaded fields are only()'s (the audit JSON stays in the database).
    assert {"audit", "manifest_json"} <= same(lookups._history_of, package.pk)[0].get_deferred_fields()


def test_the_page_reads_keep_the_related_managers_answers(django_assert_num_queries: Any) -> None:
    package, revisions = history()
    read = lookups.revision_history(package)
    newest_first = package.revisions.order_by(F("committed_at").desc(nulls_last=True), "-id")
    assert [r.pk for r in read] == [r.pk for r in newest_first] and read[-1].pk == revisions[3].pk
    assert lookups.fix_proposal_for(package) == package.fix_proposals.order_by("-id").first()
    better = fix_plans.find_better_revision(package, revisions[0])
    assert better is not None and better.pk == revisions[1].pk
    assert fix_plans.find_better_revision(package, revisions[1]) is None  # the newer one is no better
    assert fix_plans.find_better_revision(package, revisions[3]) is None  # no commit time: none newer
    assert certify_reports.revision_certify_reports(revisions[0]) == list(
        CertifyReport.objects.filter(manifest_sha256=revisions[0].manifest_sha256)[:20]
    )
    fix = lookups.fix_proposal_for(package)
    with django_assert_num_queries(0):  # each instance's package is the one in hand, as the manager's
        assert {r.package.repo_id for r in read} == {package.repo_id}
        assert better.package.repo_id == package.repo_id and fix is not None and fix.package is package
    overview = files.revision_file_overview(revisions[0])
    assert overview.total == revisions[0].files.count() > 0
    with django_assert_num_queries(0):
        assert all(row.file.revision is revisions[0] for row in overview.items if hasattr(row, "file"))
    owner, name = package.repo_id.split("/")
    with django_assert_num_queries(1):  # the package and its latest revision in one read
        latest = lookups.get_package(owner, name, with_latest=True).latest_revision
    assert latest is not None and latest.pk == revisions[2].pk and latest.audit == revisions[2].audit
    with pytest.raises(lookups.LookupFailed, match="No package meshllm/Hidden-layers is tracked"):
        lookups.get_package("meshllm", "Hidden-layers")


def _counted(ids: Sequence[int]) -> QuerySet[Revision]:
    return Revision.objects.filter(pk__in=ids).annotate(n=Count("files"))


def _values(ids: Sequence[int]) -> QuerySet[Revision, dict[str, Any]]:
    return Revision.objects.filter(pk__in=ids).values("pk")


def test_only_model_reads_are_compiled() -> None:
    with pytest.raises(TypeError, match=r"compiled\.instances"):
        compiled.instances(_values, [1, 2])


def test_an_annotation_is_set_as_its_querysets_iteration_sets_it() -> None:
    _, revisions = history()
    counted = same(_counted, [r.pk for r in revisions])
    assert sorted(r.n for r in counted) == sorted(r.files.count() for r in revisions)


def test_a_related_managers_queryset_is_refused() -> None:
    """Its instances would lose the object the manager holds (each revision's package): refused, so the
    caller builds the queryset from the ids and sets it."""
    package, _ = history()
    with pytest.raises(TypeError, match=r"compiled\.instances"):
        compiled.instances(_by_manager, package.pk)


def _by_manager(package_id: int) -> QuerySet[Revision]:
    return Package(pk=package_id).revisions.order_by("id")


def test_control_without_the_refusal_the_instances_lose_the_managers_package(
    monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """What the refusal stops: compiled, the manager's queryset makes revisions that read their package
    again, a query each, where the manager's own hold it."""
    package, _ = history()
    real = getattr
    # The refusal reads the queryset's private attributes by getattr: without it, none is seen.
    monkeypatch.setattr(
        compiled, "getattr", lambda o, n, *d: None if n.startswith("_") else real(o, n, *d), False
    )
    made = compiled.instances(_by_manager, package.pk)
    own = list(Package.objects.get(pk=package.pk).revisions.order_by("id"))
    assert [r.pk for r in made] == [r.pk for r in own] and len(made) == 4
    with django_assert_num_queries(0):
        assert {r.package.repo_id for r in own} == {package.repo_id}
    with django_assert_num_queries(4):
        assert {r.package.repo_id for r in made} == {package.repo_id}
    compiled._compiled_model.cache_clear()
