"""The seeding's steps in order: nodes, packages, revisions, the latest links, files, then the reports (the
catalog shape's, or the fleet shape's registered runs and reports), the nodes' kept judgements and fresh
planner statistics; each step in one transaction, timed."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, OuterRef, Subquery, TextField
from django.db.models.functions import Cast

from packages_app import judgements, partitions
from packages_app.audit.assessment import parse_stored
from packages_app.audit.releases import known_releases, release_for
from packages_app.audit.synthetic import synthetic as synthetic_assessment
from packages_app.models import (
    LastServed,
    Node,
    NodeJudgement,
    NodeRollup,
    NodeRun,
    Package,
    PackageFile,
    PlanRollup,
    Report,
    ReportKey,
    Revision,
    RevisionRollup,
    Rollup,
    Serving,
    SplitRollup,
)
from packages_app.rollups.rebuild import rebuild
from packages_app.seeding.bulk import (
    BulkLoader,
    CopyLoader,
    add_report_keys,
    batched,
    register_reporting_runs,
    reserve_report_ids,
)
from packages_app.seeding.catalog import (
    MTP_VERDICTS,
    NO_MTP_VERDICTS,
    PROFILES,
    QUANTS,
    STRATEGIES_OFF,
    STRATEGIES_ON,
    ModelFamily,
    build_audit,
    file_rows,
    layer_path,
    mtp_declared,
)
from packages_app.seeding.fleet import FleetPlan, FleetTopology, admitting, resolved
from packages_app.seeding.rows import NOW, REPORT_SPAN, Latest, SyntheticReport, digest, zipf_counts
from packages_app.verdicts import Verdict


class Seeder:
    def __init__(self, options: dict[str, Any], say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say
        self.random = random.Random(options["seed"])
        self.prefix = options["owner"] + "/"
        self.batch = options["batch"]
        self.audits: dict[tuple[ModelFamily, str], dict[str, Any]] = {}
        self.assessments: dict[tuple[ModelFamily, str, int], dict[str, Any]] = {}
        self.node_names: dict[int, str] = {}
        # The fleet shape: its topologies, each node's mesh-llm release, its device and its operator's
        # speculative.strategy setting (from when, oldest first).
        self.fleet: list[FleetTopology] = []
        self.versions: dict[int, str] = {}
        self.devices: dict[int, tuple[str, int]] = {}
        self.settings: dict[int, list[tuple[datetime, str]]] = {}

    def timed(self, label: str, action: Callable[[], int]) -> None:
        start = time.perf_counter()
        with transaction.atomic():
            if connection.vendor == "postgresql":
                # Synthetic rows can be re-made: no need to wait for each commit to reach the disk.
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL synchronous_commit TO OFF")
            count = action()
        self.say(f"{label}: {count} rows in {time.perf_counter() - start:.1f}s")

    def reset(self) -> None:
        def delete() -> int:
            ids = Report.objects.filter(repo_id__startswith=self.prefix).values("id")
            NodeRun.objects.filter(repo_id__startswith=self.prefix).delete()
            ReportKey.objects.filter(id__in=ids).delete()
            reports, _ = Report.objects.filter(repo_id__startswith=self.prefix).delete()
            files, _ = PackageFile.objects.filter(revision__package__repo_id__startswith=self.prefix).delete()
            packages, _ = Package.objects.filter(repo_id__startswith=self.prefix).delete()
            return reports + files + packages

        self.timed("deleted earlier synthetic rows", delete)

    def run(self) -> None:
        self.timed("nodes", self.create_nodes)
        self.timed("packages", self.create_packages)
        self.timed("revisions", self.create_revisions)
        self.timed("latest revision links", self.link_latest)
        self.timed("files of latest revisions", self.create_files)
        if self.options["shape"] == "fleet":
            self.timed("registered runs", self.create_runs)
            self.timed("reports", self.create_fleet_reports)
        else:
            self.timed("reports", self.create_reports)
        self.timed("node judgements", self.judge_nodes)
        self.vacuum()

    def judge_nodes(self) -> int:
        """Every node's kept judgement (packages_app.judgements), as at the newest report (the benchmark's
        clock): the bulk loads above bypass the paths that keep them."""
        newest = Report.objects.aggregate(at=Max("received_at"))["at"]
        return judgements.rebuild(newest or NOW)

    def vacuum(self) -> None:
        if connection.vendor != "postgresql":
            return
        start = time.perf_counter()
        # Fresh statistics for the planner, and a visibility map so index-only scans work; VACUUM
        # cannot run inside a transaction (a caller's atomic block, or a test), ANALYZE can.
        command = "ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE"
        with connection.cursor() as cursor:
            filled = (Node, NodeRun, Package, Revision, PackageFile, Report, ReportKey)
            for model in (
                *filled,
                Rollup,
                RevisionRollup,
                NodeRollup,
                PlanRollup,
                SplitRollup,
                Serving,
                LastServed,
                NodeJudgement,
            ):
                cursor.execute(f"{command} {connection.ops.quote_name(model._meta.db_table)}")
        self.say(f"{command.lower()}: {time.perf_counter() - start:.1f}s")

    # --- nodes and packages -------------------------------------------------------------------

    def create_nodes(self) -> int:
        width = max(3, len(str(self.options["nodes"] - 1)))
        names = [f"{self.options['owner']}-node-{i:0{width}d}" for i in range(self.options["nodes"])]
        nodes = [Node(name=n, token_hash=digest(n), token_prefix=digest(n, 12)) for n in names]
        Node.objects.bulk_create(nodes, ignore_conflicts=True)
        found = dict(Node.objects.filter(name__in=names).values_list("name", "id"))
        self.nodes = [found[name] for name in names]
        self.node_names = {found[name]: name for name in names}
        return len(self.nodes)

    def create_packages(self) -> int:
        count = self.options["packages"]
        self.profiles = [PROFILES[i % len(PROFILES)] for i in range(count)]
        rows = (Package(repo_id=self.repo_id(i, p), private=False) for i, p in enumerate(self.profiles))
        for batch in batched(rows, self.batch):
            Package.objects.bulk_create(batch)
        self.packages = dict(
            Package.objects.filter(repo_id__startswith=self.prefix).values_list("repo_id", "id")
        )
        return len(self.packages)

    def repo_id(self, index: int, profile: ModelFamily) -> str:
        quant = QUANTS[index // len(PROFILES) % len(QUANTS)]
        return f"{self.prefix}{profile.name}-{quant}-v{index:05d}-layers"

    # --- revisions ----------------------------------------------------------------------------

    def create_revisions(self) -> int:
        total = 0
        for batch in batched(self.revision_rows(), max(1, self.batch // 5)):
            Revision.objects.bulk_create(batch)
            total += len(batch)
        return total

    def revision_rows(self) -> Iterator[Revision]:
        for index, profile in enumerate(self.profiles):
            package_id = self.packages[self.repo_id(index, profile)]
            count = self.random.randint(1, self.options["revisions"])
            for age in range(count):
                yield self.revision_row(package_id, index, profile, age, latest=age == 0)

    def revision_row(
        self, package_id: int, index: int, profile: ModelFamily, age: int, latest: bool
    ) -> Revision:
        sha = digest(f"{index}-{age}", 40)
        status = self.status(latest)
        verdict = self.verdict(profile) if status == Revision.Status.DONE else ""
        blocks = profile.trunk + (1 if profile.mtp else 0)
        schema = 2 if index % 3 == 0 else 1
        assessment = self.assessment(profile, verdict, schema) if verdict else None
        return Revision(
            package_id=package_id,
            commit_sha=sha,
            committed_at=NOW - timedelta(days=age * 20 + self.random.randint(0, 19), minutes=index),
            title="Upload layer package" if age else "Republish layer package",
            status=status,
            error="HubUnavailable: 503 Service Unavailable after 5 tries" if status == "failed" else "",
            files_total=blocks + 3,
            files_done=blocks + 3 if status == "done" else self.random.randint(0, blocks),
            schema_version=schema,
            architecture=profile.architecture if verdict else "",
            block_count=blocks if verdict else None,
            nextn_predict_layers=(1 if profile.mtp else 0) if verdict else None,
            total_bytes=blocks * profile.block_bytes if verdict else 0,
            manifest_sha256=digest(f"manifest-{index}-{age}"),
            verdict=verdict,
            mtp_detected=profile.mtp if verdict else None,
            mtp_declared=mtp_declared(verdict, profile) if verdict else None,
            audit=self.audit(profile, verdict, sha) if verdict else None,
            headline=assessment["headline"]["status"] if assessment else "",
            assessment=assessment,
            manifest_json=self.manifest(profile, verdict) if verdict else None,
        )

    def status(self, latest: bool) -> str:
        roll = self.random.random()
        if not latest or roll > 0.03:
            return Revision.Status.DONE
        return [Revision.Status.QUEUED, Revision.Status.RUNNING, Revision.Status.FAILED][int(roll * 100)]

    def verdict(self, profile: ModelFamily) -> str:
        choices = MTP_VERDICTS if profile.mtp else NO_MTP_VERDICTS
        names, weights = zip(*choices, strict=True)
        return str(self.random.choices(names, weights=weights, k=1)[0])

    def audit(self, profile: ModelFamily, verdict: str, sha: str) -> dict[str, Any]:
        template = self.audits.get((profile, verdict))
        if template is None:
            template = self.audits[(profile, verdict)] = build_audit(profile, verdict)
        # Shares the nested template; only the revision differs per row.
        return {**template, "provenance": {**template["provenance"], "revision": sha}}

    def assessment(self, profile: ModelFamily, verdict: str, schema: int) -> dict[str, Any]:
        """The real shape and size of an assessment (every release, every setting), shared per kind."""
        key = (profile, verdict, schema)
        if key not in self.assessments:
            blocks = (profile.trunk,) if profile.mtp else ()
            releases = [r.release for r in known_releases()]
            made = synthetic_assessment(Verdict(verdict), schema, releases, blocks)
            self.assessments[key] = made.to_json()
        return self.assessments[key]

    def manifest(self, profile: ModelFamily, verdict: str) -> dict[str, Any]:
        blocks = profile.trunk + (1 if profile.mtp else 0)
        manifest: dict[str, Any] = {
            "schema_version": 1,
            "model_id": f"unsloth/{profile.name}-GGUF:UD-Q4_K_XL",
            "format": "layer-package",
            "layer_count": blocks,
            "layers": [
                {"layer_index": i, "path": layer_path(i), "sha256": digest(f"l{i}")} for i in range(blocks)
            ],
        }
        if mtp_declared(verdict, profile):
            manifest["generation"] = {"speculative_decoding": {"default": "mtp"}}
        return manifest

    def link_latest(self) -> int:
        newest = (
            Revision.objects.filter(package=OuterRef("pk")).order_by("-committed_at", "-id").values("id")[:1]
        )
        packages = Package.objects.filter(repo_id__startswith=self.prefix)
        return packages.update(latest_revision=Subquery(newest))

    # --- files and reports --------------------------------------------------------------------

    def latest_revisions(self) -> list[Latest]:
        rows = Revision.objects.filter(
            package__repo_id__startswith=self.prefix, id__in=Package.objects.values("latest_revision_id")
        ).exclude(block_count=None)
        fields = ("id", "block_count", "mtp_detected", "package__repo_id", "commit_sha")
        return [Latest(*row) for row in rows.values_list(*fields).order_by("id")]

    def create_files(self) -> int:
        total = 0
        rows = (f for latest in self.latest_revisions() for f in file_rows(latest.id, latest.block_count))
        for batch in batched(rows, self.batch):
            PackageFile.objects.bulk_create(batch)
            total += len(batch)
        return total

    def create_reports(self) -> int:
        """Reports revision by revision (Zipf-like: a few packages get most of the traffic, as on a real
        mesh), streamed into the table by COPY on PostgreSQL, then their keys and rollups."""
        latest = self.latest_revisions()
        if not latest or not self.options["reports"]:
            return 0
        self.random.shuffle(latest)
        counts = zipf_counts(self.options["reports"], len(latest))
        if partitions.is_partitioned():
            partitions.create_months(NOW - REPORT_SPAN, NOW)
        self.next_id = reserve_report_ids(sum(counts))
        first_id = self.next_id
        loader = CopyLoader() if connection.vendor == "postgresql" else BulkLoader(self.batch)
        with loader:
            for revision, count in zip(latest, counts, strict=True):
                for _ in range(count):
                    loader.add(self.report_row(revision))
        add_report_keys(first_id, self.next_id)
        register_reporting_runs(first_id, self.next_id)
        # The rollups as rebuild_rollups makes them (in SQL on PostgreSQL): the cells the store paths
        # would have written report by report.
        rebuild([revision.id for revision, count in zip(latest, counts, strict=True) if count])
        return loader.total

    # --- the fleet shape: topologies, their runs and reports -------------------------------------

    def create_runs(self) -> int:
        """Plan the fleet (topologies, what each served when) and store the runs its agents registered."""
        self.fleet = FleetPlan.make(self, self.servable_revisions())
        runs = [run for topology in self.fleet for run in topology.runs(self)]
        # Registration times as the agents sent them, taken before bulk_create stamps the same objects'
        # auto_now fields with now; written back after.
        times = {(run.node_id, run.run_id): (run.first_seen_at, run.updated_at) for run in runs}
        for batch in batched(iter(runs), self.batch):
            NodeRun.objects.bulk_create(batch)
        stored = list(NodeRun.objects.filter(repo_id__startswith=self.prefix).only("id", "node_id", "run_id"))
        for run in stored:
            run.first_seen_at, run.updated_at = times[(run.node_id, run.run_id)]
        NodeRun.objects.bulk_update(stored, ["first_seen_at", "updated_at"], batch_size=self.batch)
        last_seen = [Node(pk=node, last_seen_at=at) for node, at in self.fleet_last_seen().items()]
        Node.objects.bulk_update(last_seen, ["last_seen_at"], batch_size=self.batch)
        return len(runs)

    def servable_revisions(self) -> dict[int, list[Latest]]:
        """Per package, its audited revisions that some release admits, oldest first (the latest last);
        packages without one are left out (no node can load them)."""
        rows = Revision.objects.filter(package__repo_id__startswith=self.prefix).exclude(block_count=None)
        fields = (
            *("id", "block_count", "mtp_detected", "package__repo_id", "commit_sha", "mtp_declared"),
            "package_id",
        )
        rows = rows.annotate(assessment_text=Cast("assessment", TextField()))
        by_package: dict[int, list[Latest]] = {}
        for *named, package_id, text in rows.order_by("committed_at", "id").values_list(
            *fields, "assessment_text"
        ):
            latest = replace(Latest(*named), assessment=parse_stored(text))
            if admitting(latest):
                by_package.setdefault(package_id, []).append(latest)
        return by_package

    def release_on(self, node: int, revision: Latest) -> tuple[str, str | None]:
        """The node's mesh-llm version while it serves ``revision``, and the release the matrix names it:
        its own when that admits the revision or the matrix does not know it (it predicts nothing
        there), else the newest release that admits it."""
        version = self.versions[node]
        release = release_for(version)
        admitted = admitting(revision)
        if release is None or release in admitted:
            return version, release
        return admitted[-1], admitted[-1]

    def fleet_last_seen(self) -> dict[int, datetime]:
        seen: dict[int, datetime] = {}
        for topology in self.fleet:
            for node in topology.nodes:
                seen[node] = max(seen.get(node, topology.segments[-1].end), topology.segments[-1].end)
        return seen

    def create_fleet_reports(self) -> int:
        """Reports of each topology, each from one of its nodes, on the revision it served at the time,
        with its split and id; then their keys and rollups. When the total allows, every node answers
        at least one request on each day of the span (``daily_reports``), so the fleet pages' windows
        hold the same nodes with 1M reports as with 10M; the rest go Zipf-like over the topologies."""
        total = self.options["reports"]
        if not total:
            return 0
        if partitions.is_partitioned():
            partitions.create_months(NOW - REPORT_SPAN, NOW)
        self.next_id = reserve_report_ids(total)
        first_id = self.next_id
        daily = self.daily_reports(total)
        loader = CopyLoader() if connection.vendor == "postgresql" else BulkLoader(self.batch)
        with loader:
            for topology, node, at in daily:
                loader.add(self.fleet_report_row(topology, node, at))
            rest = total - (self.next_id - first_id)
            for topology, count in zip(self.fleet, zipf_counts(rest, len(self.fleet)), strict=True):
                for _ in range(count):
                    loader.add(self.fleet_report_row(topology))
        add_report_keys(first_id, self.next_id)
        served = sorted({segment.revision.id for topology in self.fleet for segment in topology.segments})
        rebuild(served)
        return loader.total

    def daily_reports(self, total: int) -> Iterator[tuple[FleetTopology, int, datetime]]:
        """(topology, node, when) of one report by each node on each day of the span, at a random time
        of the day, or none when ``total`` cannot hold them all: a node serving a package answers a
        request a day, however many the busiest nodes answer."""
        days = REPORT_SPAN.days
        if total < days * sum(len(topology.nodes) for topology in self.fleet):
            return
        day = timedelta(days=1).total_seconds()
        for topology in self.fleet:
            for node in topology.nodes:
                for index in range(days):
                    yield (
                        topology,
                        node,
                        topology.segments[0].start + timedelta(seconds=day * (index + self.random.random())),
                    )

    def fleet_report_row(
        self, topology: FleetTopology, node: int | None = None, at: datetime | None = None
    ) -> SyntheticReport:
        """A report of ``topology`` by ``node`` at ``at``, each at random when not given."""
        if at is None:
            start, end = topology.segments[0].start, topology.segments[-1].end
            at = start + timedelta(seconds=self.random.uniform(0, (end - start).total_seconds()))
        segment = next(s for s in topology.segments if at <= s.end)
        node = self.random.choice(topology.nodes) if node is None else node
        requested = next(value for since, value in reversed(self.settings[node]) if since <= at)
        _version, release = self.release_on(node, segment.revision)
        row = self.report_row(segment.revision, at, ran=resolved(requested, segment.revision, release))
        row.node_id = node
        row.stage_splits = segment.splits
        row.topology_id = topology.topology_id
        return row

    def report_row(
        self, revision: Latest, at: datetime | None = None, ran: tuple[str, str, bool] | None = None
    ) -> SyntheticReport:
        """A report on ``revision``, with the (requested, effective strategy, MTP used) it ``ran``, or
        (the catalog shape) a strategy picked at random."""
        if ran is None:
            mtp_used = bool(revision.mtp_detected) and self.random.random() < 0.6
            requested, strategy = "auto", self.random.choice(STRATEGIES_ON if mtp_used else STRATEGIES_OFF)
        else:
            requested, strategy, mtp_used = ran
        tps = self.random.gauss(9.5 if mtp_used else 3.2, 0.6)
        proposed = self.random.randint(50, 200) if mtp_used else 0
        if at is None:
            at = NOW - timedelta(seconds=self.random.randint(0, int(REPORT_SPAN.total_seconds())))
        self.next_id += 1
        return SyntheticReport(
            id=self.next_id - 1,
            node_id=self.random.choice(self.nodes),
            report_id=uuid.UUID(int=self.random.getrandbits(128)),
            received_at=at,
            observed_at=at,
            repo_id=revision.repo_id,
            commit_sha=revision.commit_sha,
            revision_id=revision.id,
            stage_splits=self.random.choice(["0..27|27..41", "0..41", "0..20|20..41"]),
            requested_strategy=requested,
            effective_strategy=strategy,
            mtp_source="Integrated" if mtp_used else "Disabled",
            predicted_per_second=max(0.1, tps),
            prompt_per_second=self.random.uniform(200, 900),
            predicted_n=self.random.randint(64, 1024),
            speculative_proposed_n=proposed,
            speculative_accepted_n=int(proposed * self.random.uniform(0.5, 0.8)),
            speculative_windows=proposed,
            mtp_used=mtp_used,
            body=f'{{"timings": {{"predicted_per_second": {round(tps, 3)}}}}}',
        )
