"""`manage.py simulate_nodes`: post realistic node timing reports to a running server over HTTP.

Reports go through the real API (urllib, bearer tokens, the batch endpoint), so the dashboard
shows what real nodes would make it show: the motivating Qwen3.5 revision at ~3.17 tok/s with
mtp_source=Disabled and zero counters, and revisions that declare MTP running faster with it on.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from packages_app.models import Node, Revision
from packages_app.nodes import identity as nodes

NODE_NAMES = ("sim-rtx4090", "sim-m2-ultra", "sim-a100", "sim-rx7900")
DEVICES = {"sim-rtx4090": "CUDA0", "sim-m2-ultra": "Metal", "sim-a100": "CUDA0", "sim-rx7900": "ROCm0"}
MOTIVATING_REPO = "meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers"
MOTIVATING_SHA = "69cbd9fc1f928305e8e86e1148a1db6a6f1de8e9"
BATCH = 50


@dataclass(frozen=True)
class Target:
    """A revision to report against, and how MTP behaves on it."""

    repo: str
    sha: str
    manifest_sha256: str
    layers: int
    mtp: str  # "silent-off" (weights, no declaration), "on" (declared), "none" (no MTP weights)
    base_tps: float


class Command(BaseCommand):
    help = "Post realistic timing reports over HTTP as several simulated serving nodes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Base URL of the running server.")
        parser.add_argument("--count", type=int, default=200, help="Reports to post in all.")
        parser.add_argument("--repo", help="Report against this repo (with --revision) instead of the DB's.")
        parser.add_argument("--revision", help="40-hex commit for --repo.")
        parser.add_argument("--seed", type=int, default=None, help="Seed for repeatable reports.")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["url"].startswith(("http://", "https://")):
            raise CommandError("--url must be an http:// or https:// URL.")
        rng = random.Random(options["seed"])
        targets = self._targets(options["repo"], options["revision"])
        tokens = node_tokens()
        statuses = post_all(options["url"].rstrip("/"), tokens, targets, options["count"], rng)
        summary = ", ".join(f"{status}: {n}" for status, n in sorted(statuses.items()))
        self.stdout.write(f"Posted {options['count']} reports for {len(targets)} revision(s) ({summary}).")
        if set(statuses) - {200, 201}:
            raise CommandError("Some reports were not accepted; see the statuses above.")

    def _targets(self, repo: str | None, revision: str | None) -> list[Target]:
        if repo or revision:
            if not (repo and revision):
                raise CommandError("--repo and --revision go together.")
            return [target_for(repo, revision, None)]
        revisions = Revision.objects.select_related("package").order_by("package__repo_id", "committed_at")
        targets = [target_for(r.package.repo_id, r.commit_sha, r) for r in revisions[:50]]
        return targets or [target_for(MOTIVATING_REPO, MOTIVATING_SHA, None)]


def target_for(repo: str, sha: str, revision: Revision | None) -> Target:
    if revision is None:
        mtp = "silent-off" if sha == MOTIVATING_SHA else "none"
    elif revision.mtp_detected and revision.mtp_declared:
        mtp = "on"
    else:
        mtp = "silent-off" if revision.mtp_detected else "none"
    base = 3.17 if "35B" in repo or sha == MOTIVATING_SHA else 8.0 + (int(sha[:4], 16) % 300) / 10
    layers = (revision.block_count if revision else None) or 41
    manifest = revision.manifest_sha256 if revision else ""
    return Target(repo=repo, sha=sha, manifest_sha256=manifest, layers=layers, mtp=mtp, base_tps=base)


def node_tokens() -> dict[str, str]:
    """Tokens for the simulated nodes: created if missing, rotated otherwise (tokens are shown once)."""
    tokens = {}
    for name in NODE_NAMES:
        node = Node.objects.filter(name=name).first()
        issued = nodes.rotate_node_token(node) if node else nodes.create_node(name)
        tokens[name] = issued.token
    return tokens


def post_all(
    url: str, tokens: dict[str, str], targets: list[Target], count: int, rng: random.Random
) -> Counter[int]:
    statuses: Counter[int] = Counter()
    for name, token in tokens.items():  # as each node's agent does first: its reports count publicly then
        post_json(url, "/api/v1/runs", token, {"runs": [run(name, i, t) for i, t in enumerate(targets)]})
    by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in tokens}
    for _ in range(count):
        name = rng.choice(list(tokens))
        by_node[name].append(make_report(rng, name, rng.choice(targets)))
    for name, items in by_node.items():
        for start in range(0, len(items), BATCH):
            statuses.update(post_batch(url, tokens[name], items[start : start + BATCH]))
    return statuses


# A 503 (the server's database or cache briefly unavailable) is retried as a node's agent retries it: the
# batch's report ids make a replay a no-op, so nothing is stored twice.
RETRIES_ON_503 = 3
RETRY_PAUSE = 1.0  # seconds, doubled after each try


def post_batch(url: str, token: str, items: list[dict[str, Any]]) -> list[int]:
    answer = post_json(url, "/api/v1/reports/batch", token, {"reports": items})
    return [r["status"] for r in answer["results"]]


def post_json(url: str, path: str, token: str, body: dict[str, Any]) -> Any:
    pause = RETRY_PAUSE
    for attempt in range(RETRIES_ON_503 + 1):
        try:
            return _post(url, path, token, body)
        except urllib.error.HTTPError as exc:
            with exc:  # the answer's connection closes whether it is reported or retried
                if exc.code != 503 or attempt == RETRIES_ON_503:
                    raise CommandError(f"{url} answered {exc.code}: {exc.read()[:200]!r}") from None
            time.sleep(pause)
            pause *= 2
        except OSError as exc:
            raise CommandError(f"Cannot reach {url}: {exc}. Is the server running?") from None
    raise AssertionError("unreachable")


def _post(url: str, path: str, token: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(  # noqa: S310 - handle() allows only http(s) URLs
        f"{url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - http(s) only
        return json.load(response)


def run(node: str, index: int, target: Target) -> dict[str, Any]:
    """The run a node's agent registers for a package it serves (``POST /api/v1/runs``)."""
    return {"run_id": f"{node}-{index}", "package_ref": f"{target.repo}@main", "package": package_ref(target)}


def make_report(rng: random.Random, node: str, target: Target) -> dict[str, Any]:
    mtp_on = target.mtp == "on" and rng.random() < 0.8  # some operators still run with MTP off
    return {
        "report_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "observed_at": (datetime.now(UTC) - timedelta(seconds=rng.uniform(0, 5))).isoformat(),
        "package": package_ref(target),
        "topology": topology(rng, node, target.layers),
        "speculative": speculative(target, mtp_on),
        "hardware": {"device": DEVICES[node], "vram_gb": rng.choice([24, 48, 80, 192])},
        "timings": timings(rng, target, mtp_on),
    }


def package_ref(target: Target) -> dict[str, str]:
    ref = {"repo": target.repo, "revision": target.sha}
    if target.manifest_sha256:
        ref["manifest_sha256"] = target.manifest_sha256
    return ref


def topology(rng: random.Random, node: str, layers: int) -> dict[str, Any]:
    split = rng.choice([None, 27 * layers // 41])  # one node, or the 0..27|27..41 shape
    other = rng.choice([n for n in NODE_NAMES if n != node])
    if split is None or not 0 < split < layers:
        stages = [{"node": node, "layer_start": 0, "layer_end": layers, "device": DEVICES[node]}]
    else:
        stages = [
            {"node": node, "layer_start": 0, "layer_end": split, "device": DEVICES[node]},
            {"node": other, "layer_start": split, "layer_end": layers, "device": DEVICES[other]},
        ]
    return {"topology_id": f"sim-{len(stages)}-{node}", "stages": stages}


def speculative(target: Target, mtp_on: bool) -> dict[str, str]:
    if target.mtp == "on" and not mtp_on:
        return {"requested_strategy": "disabled", "effective_strategy": "disabled", "mtp_source": "Disabled"}
    if mtp_on:
        return {"requested_strategy": "auto", "effective_strategy": "native-mtp", "mtp_source": "Integrated"}
    # "auto" on a package without a declaration: the runtime silently stays off (docs/domain.md 4).
    return {"requested_strategy": "auto", "effective_strategy": "disabled", "mtp_source": "Disabled"}


def timings(rng: random.Random, target: Target, mtp_on: bool) -> dict[str, Any]:
    tps = target.base_tps * (1.65 if mtp_on else 1.0) * rng.uniform(0.93, 1.07)
    predicted_n, prompt_n = rng.randint(64, 512), rng.randint(32, 2048)
    prompt_tps = rng.uniform(150, 600)
    out: dict[str, Any] = {
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_n / prompt_tps * 1000, 3),
        "prompt_per_second": round(prompt_tps, 3),
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_n / tps * 1000, 3),
        "predicted_per_second": round(tps, 3),
    }
    return out | speculative_counters(rng, predicted_n if mtp_on else 0)


def speculative_counters(rng: random.Random, windows: int) -> dict[str, Any]:
    accepted = round(windows * rng.uniform(0.6, 0.8))
    return {
        "draft_n": windows,
        "draft_n_accepted": accepted,
        "speculative_windows": windows,
        "speculative_proposed_n": windows,
        "speculative_accepted_n": accepted,
        "speculative_rejected_n": windows - accepted,
        "speculative_accept_rate": round(accepted / windows, 4) if windows else 0.0,
        "native_mtp_verifications": windows,
        "native_mtp_proposal_compute_us": round(windows * rng.uniform(800, 1500), 1),
        "native_mtp_survival_accepted": [max(0, accepted - 40 * i) for i in range(8)],
        "native_mtp_hybrid_fallbacks": 0,  # a counter the schema does not know: kept as it comes
    }
