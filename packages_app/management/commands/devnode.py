"""`manage.py devnode`: a local imitation of a mesh-llm node (console API, OpenAI API, OTLP span export)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.devnode.baseline import BaselineEngine
from packages_app.devnode.payloads import NEW_FIELDS, SERVING_STRATEGIES, VERSION, RunPlan, StagePlan
from packages_app.devnode.server import DevNode, OtlpTarget


class Command(BaseCommand):
    help = "Run devnode, an imitation mesh-llm node serving one run of a package."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=3131)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--repo", required=True, help="the package repo id")
        parser.add_argument("--ref", default="main", help="branch, tag or 40-hex commit in package_ref")
        parser.add_argument("--run-id", default="run-0001")
        parser.add_argument("--node-id", default="devnode-a")
        parser.add_argument("--layers", type=int, default=41, help="block count, split over two stages")
        parser.add_argument(
            "--requested",
            default=None,
            help="the operator's speculative.strategy, llama_stage.spec.requested_strategy (default: unset, "
            "which runs as auto unless --serving-strategy sets one)",
        )
        parser.add_argument("--effective", default="native-mtp", help="llama_stage.spec.effective_strategy")
        parser.add_argument("--tps", type=float, default=40.0, help="mean decode tokens/s")
        parser.add_argument(
            "--certification",
            choices=("certified", "uncertified_override", "none"),
            default="certified",
            help="each stage's split certification (uncertified_override: served with "
            "--allow-uncertified-split; none: the stages do not say)",
        )
        parser.add_argument("--otlp", help="grpc://HOST:PORT or http://HOST:PORT (meshdash's /v1/traces)")
        parser.add_argument("--token", default="", help="node token sent as Authorization: Bearer")
        parser.add_argument("--gzip", action="store_true", help="gzip OTLP/HTTP bodies")
        parser.add_argument("--requests", type=int, default=0, help="serve this many completions itself")
        parser.add_argument("--every", type=float, default=0.05, help="seconds between those completions")
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument(
            "--mesh-version", default=VERSION, help="the mesh-llm version /api/status reports"
        )
        parser.add_argument("--error", help="the stages failed to load with this error (mesh-llm's text)")
        parser.add_argument(
            "--serving-strategy",
            choices=SERVING_STRATEGIES,
            help="mesh-llm --strategy: interactive and throughput set speculative.strategy where "
            "--requested is unset",
        )
        parser.add_argument("--draft-name", help="/api/status draft_name (a draft model beside the package)")
        parser.add_argument("--package-id", help="each stage's admission.package_id (default: none reported)")
        parser.add_argument(
            "--model-revision", help="the exchanges' model_revision (default: a 40-hex --ref)"
        )
        parser.add_argument("--weights-digest", help="the exchanges' weights_digest")
        parser.add_argument("--excluded-peer", help="a peer split readiness excludes (old stage protocol)")
        parser.add_argument("--exchange-log", help="append each completion's openai.exchange.v1 event here")
        parser.add_argument(
            "--without",
            action="append",
            default=[],
            choices=(*NEW_FIELDS, "all"),
            help="a field of docs/node-report.md section 5 this node's version does not report (repeatable)",
        )
        parser.add_argument(
            "--exit-after-requests", action="store_true", help="exit once --requests completions are served"
        )
        parser.add_argument(
            "--baseline",
            choices=("llama.cpp",),
            help="baseline mode: serve a plain llama.cpp server's /metrics and /props (decoding at --tps), "
            "not a mesh-llm node; the other node options are ignored",
        )
        parser.add_argument(
            "--acceptance",
            type=float,
            help="baseline mode: speculate with a draft model, accepting this share at position 0 (its "
            "square at 1, ...); default: no speculation",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["baseline"]:
            return self._baseline(options)
        if options["otlp"] and not options["otlp"].startswith(("grpc://", "http://", "https://")):
            raise CommandError("--otlp must start with grpc://, http:// or https://")
        node = self._node(options)
        try:
            node.start()
        except OSError as exc:
            raise CommandError(f"cannot listen on {options['host']}:{options['port']}: {exc}") from exc
        self.stdout.write(
            f"devnode: {options['repo']}@{options['ref']} run {options['run_id']} on {node.url}"
        )
        if options["requests"] and options["exit_after_requests"]:
            _drive(node, options["requests"], options["every"])
            node.stop()
            return
        if options["requests"]:
            threading.Thread(
                target=_drive, args=(node, options["requests"], options["every"]), daemon=True
            ).start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            node.stop()

    def _baseline(self, options: dict[str, Any]) -> None:
        acceptance = options["acceptance"]
        if acceptance is not None and not 0 < acceptance < 1:
            raise CommandError("--acceptance must be between 0 and 1")
        engine = BaselineEngine(
            options["tps"],
            acceptance=acceptance,
            host=options["host"],
            port=options["port"],
            seed=options["seed"],
        )
        engine.start()
        self.stdout.write(
            f"devnode: baseline {options['baseline']} for {options['repo']} on {engine.url}/metrics"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            engine.stop()

    def _node(self, options: dict[str, Any]) -> DevNode:
        half = options["layers"] // 2
        certification = None if options["certification"] == "none" else options["certification"]
        plan = RunPlan(
            repo=options["repo"],
            ref=options["ref"],
            run_id=options["run_id"],
            topology_id=f"topo-{options['run_id']}",
            node_id=options["node_id"],
            stages=(
                StagePlan("stage-0", options["node_id"], 0, half, "CUDA0", certification),
                StagePlan(
                    "stage-1", f"{options['node_id']}-peer", half, options["layers"], "Metal", certification
                ),
            ),
            requested_strategy=options["requested"] or "auto",
            operator_strategy=options["requested"] is not None,
            serving_strategy=options["serving_strategy"],
            draft_name=options["draft_name"],
            package_id=options["package_id"],
            model_revision=options["model_revision"],
            weights_digest=options["weights_digest"],
            excluded_peer=options["excluded_peer"],
            reports=_reports(options["mesh_version"], options["without"]),
            effective_strategy=options["effective"],
            decode_tps=options["tps"],
            version=options["mesh_version"],
            error=options["error"],
        )
        otlp = OtlpTarget(options["otlp"], options["token"], options["gzip"]) if options["otlp"] else None
        node = DevNode(
            plan,
            host=options["host"],
            port=options["port"],
            otlp=otlp,
            seed=options["seed"],
            exchange_log=options["exchange_log"],
        )
        return node


def _drive(node: DevNode, requests: int, every: float) -> None:
    for _ in range(requests):
        node.complete({"messages": [{"role": "user", "content": "demo"}], "max_tokens": 256})
        time.sleep(every)


def _reports(version: str, without: list[str]) -> tuple[str, ...]:
    """Which docs/node-report.md section-5 fields the node emits: none before 0.78.0 (which release first
    carried each is not pinned down; devnode's imitation puts them all at 0.78.0), less ``--without``."""
    if "all" in without or _older(version, (0, 78, 0)):
        return ()
    return tuple(field for field in NEW_FIELDS if field not in without)


def _older(version: str, than: tuple[int, ...]) -> bool:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    return bool(parts) and tuple(parts) < than
