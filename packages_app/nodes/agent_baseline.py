"""meshdash-agent's baseline engines: a plain llama.cpp or vLLM server's Prometheus /metrics, scraped each
cycle into a report (nodes/exposition.py parses it). Standard library only."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

try:
    import packages_app.nodes.exposition as exposition
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    import exposition  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_common import REF, TIMEOUT, UNSTORABLE, AgentError
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import REF, TIMEOUT, UNSTORABLE, AgentError  # type: ignore[no-redef]

log = logging.getLogger("meshdash.agent")

BASELINE_TEXT = {"served_model": 300, "source_file": 300, "quantization": 64, "version": 100}
MAX_VERSION_BYTES = 64 * 1024


@dataclass(frozen=True)
class Baseline:
    """One engine to scrape: what it is, where its ``/metrics`` is, and which source model it serves (the
    Hub repo of the GGUF or weights: a layer package's ``source_model.repo`` / card ``base_model``)."""

    engine: str  # "llama.cpp" or "vllm"
    metrics_url: str
    source_model: str
    served_model: str = ""  # the model name the engine serves (vLLM labels its series with it)
    source_file: str = ""  # e.g. Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf
    quantization: str = ""  # e.g. UD-Q4_K_XL; else read from source_file's name by meshdash
    version: str = ""  # the engine's version; empty: asked of the engine (llama.cpp /props, vLLM /version)

    @classmethod
    def of(cls, item: Any, index: int) -> Baseline:
        where = f"baselines[{index}]"
        if not isinstance(item, dict):
            raise AgentError(f"{where} must be an object.")
        unknown = set(item) - set(cls.__dataclass_fields__)
        if unknown:
            raise AgentError(f"Unknown keys in {where}: {', '.join(sorted(map(str, unknown)))}")
        if item.get("engine") not in exposition.ENGINES:
            raise AgentError(f"{where}.engine must be one of {', '.join(exposition.ENGINES)}.")
        url = item.get("metrics_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise AgentError(f"{where}.metrics_url must be an http:// or https:// URL.")
        source = item.get("source_model")
        if not isinstance(source, str) or not REF.match(source) or "@" in source or source.startswith("hf:"):
            raise AgentError(f"{where}.source_model must be a Hub repo id, like owner/name.")
        for key, limit in BASELINE_TEXT.items():
            value = item.get(key, "")
            if not isinstance(value, str) or len(value) > limit:
                raise AgentError(f"{where}.{key} must be text of at most {limit} characters.")
        return cls(**item)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is answered as the 3xx it is, not followed


_NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)


def fetch_capped(url: str, cap: int) -> bytes:
    """GET ``url`` (no redirects, TIMEOUT): its body, refused when over ``cap`` bytes."""
    try:
        with _NO_REDIRECTS.open(urllib.request.Request(url), timeout=TIMEOUT) as response:  # noqa: S310
            body: bytes = response.read(cap + 1)
    except urllib.error.HTTPError as exc:
        raise AgentError(f"The engine answered {exc.code} for {url}.") from None
    except OSError as exc:
        raise AgentError(f"The engine does not answer at {url}: {exc}") from None
    if len(body) > cap:
        raise AgentError(f"The engine's {url} is over {cap // 1024} KiB; not read.")
    return body


class BaselineScraper:
    """Scrapes one engine each cycle; the counters' growth since the last scrape is one report."""

    def __init__(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.version = baseline.version
        self._before: dict[str, float] | None = None
        self._before_at = 0.0

    def scrape(self) -> dict[str, Any] | None:
        """The report of the window since the last scrape; None on the first scrape (no window yet) and
        when the engine decoded and drafted nothing in it. AgentError when the engine cannot be read."""
        b = self.baseline
        try:
            parsed = exposition.parse(
                fetch_capped(b.metrics_url, exposition.MAX_BODY_BYTES), exposition.wanted_names(b.engine)
            )
        except exposition.ExpositionError as exc:
            raise AgentError(f"{b.metrics_url}: {exc}") from None
        now, at = exposition.snapshot(parsed, b.engine, b.served_model), time.monotonic()
        if parsed.trimmed:
            log.warning("%s: left out %s", b.metrics_url, "; ".join(parsed.trimmed))
        before, before_at = self._before, self._before_at
        self._before, self._before_at = now, at
        if before is None:
            return None
        window, reset = exposition.deltas(before, now)
        figures = exposition.figures(window)
        if not figures["predicted_n"] and not figures["drafts"]:
            return None
        not_reported = figures.pop("not_reported")
        if not self.version:
            self.version = self._ask_version()
        if not self.version:
            not_reported.append("engine_version")
        return {
            "report_id": str(uuid.uuid4()),
            "observed_at": datetime.now(UTC).isoformat(),
            "window_seconds": round(at - before_at, 3),
            "engine": b.engine,
            "engine_version": self.version,
            "served_model": b.served_model,
            "source_model": b.source_model,
            "source_file": b.source_file,
            "quantization": b.quantization,
            "counter_reset": reset,
            "figures": figures,
            "not_reported": not_reported,
            "trimmed": [t[:200] for t in parsed.trimmed][:16],
        }

    def _ask_version(self) -> str:
        """llama.cpp: ``/props``'s ``build_info``; vLLM: ``/version``'s ``version``; "" when not told."""
        parts = urlsplit(self.baseline.metrics_url)
        llama = self.baseline.engine == "llama.cpp"
        path, key = ("/props", "build_info") if llama else ("/version", "version")
        try:
            answer = json.loads(fetch_capped(f"{parts.scheme}://{parts.netloc}{path}", MAX_VERSION_BYTES))
        except (AgentError, ValueError, RecursionError):
            return ""
        value = answer.get(key) if isinstance(answer, dict) else None
        return UNSTORABLE.sub("?", value[:100]) if isinstance(value, str) else ""
