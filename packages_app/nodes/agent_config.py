"""meshdash-agent's configuration: the config file's keys and flags, checked once at start-up.
Standard library only."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

try:
    from packages_app.nodes.agent_baseline import Baseline
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_baseline import Baseline  # type: ignore[no-redef]
try:
    from packages_app.nodes.agent_common import AgentError
except ModuleNotFoundError:  # run as a file (python3 packages_app/nodes/agent.py): its neighbour
    from agent_common import AgentError  # type: ignore[no-redef]

SPOOL_MAX_BYTES = 64 * 1024 * 1024  # ~20,000 reports of ~3 KiB
SPOOL_MAX_AGE = 7 * 24 * 3600.0  # a body meshdash has not taken in a week is not worth a backlog


@dataclass(frozen=True)
class Config:
    node_url: str = "http://127.0.0.1:3131"  # the node's console API
    meshdash_url: str = "http://127.0.0.1:8000"
    token: str = ""
    hub_url: str = "https://huggingface.co"
    spool_dir: str = ""
    interval: float = 30.0
    proxy_listen: str = ""  # host:port; empty = no proxy
    upstream_url: str = ""  # the node's OpenAI API; empty = node_url
    # A JSON-lines log of the node's openai.exchange.v1 events, as a plugin subscribed to that channel
    # keeps it (e.g. capsule-emit-mesh's lifecycle-events.jsonl): the exchanges' serving provenance.
    exchange_log: str = ""
    spool_max_bytes: int = SPOOL_MAX_BYTES
    spool_max_age: float = SPOOL_MAX_AGE  # seconds
    # At start-up, how long to wait quietly for the node's console API to answer before the first poll:
    # the agent usually starts with its node, which takes a while to listen (0 = poll at once).
    node_wait: float = 120.0
    # Baseline engines (a plain llama.cpp or vLLM server) whose Prometheus /metrics is scraped each cycle:
    # [{engine, metrics_url, source_model, served_model?, source_file?, quantization?, version?}]
    # (Baseline below). With baselines, node_url may be "" (no mesh-llm node beside this agent).
    baselines: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | None, overrides: dict[str, Any]) -> Config:
        data: dict[str, Any] = {}
        if path:
            try:
                data = json.loads(Path(path).read_text())
            except (OSError, ValueError) as exc:
                raise AgentError(f"Cannot read the config file {path}: {exc}") from None
            if not isinstance(data, dict):
                raise AgentError(f"The config file {path} must hold a JSON object of the agent's keys.")
            unknown = set(data) - set(cls.__dataclass_fields__)
            if unknown:
                raise AgentError(f"Unknown config keys in {path}: {', '.join(sorted(unknown))}")
        data.update({k: v for k, v in overrides.items() if v is not None})
        data.setdefault("token", os.environ.get("MESHDASH_TOKEN", ""))
        config = cls(**data)
        config.check()
        return config

    def check(self) -> None:
        for key in fields(self):  # the keys declared as text (a JSON number or list would fail later)
            if key.type == "str" and not isinstance(getattr(self, key.name), str):
                raise AgentError(f"{key.name} must be text.")
        if not isinstance(self.baselines, list):
            raise AgentError("baselines must be a list of objects.")
        for index, item in enumerate(self.baselines):
            Baseline.of(item, index)
        for name in ("node_url", "meshdash_url", "hub_url"):
            if name == "node_url" and self.baselines and not self.node_url:
                continue  # an agent that only scrapes baseline engines
            if not getattr(self, name).startswith(("http://", "https://")):
                raise AgentError(f"{name} must be an http:// or https:// URL.")
        if not self.token:
            raise AgentError("A node token is required: token in the config file or MESHDASH_TOKEN.")
        for name in ("interval", "spool_max_bytes", "spool_max_age"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise AgentError(f"{name} must be a positive number.")
        wait = self.node_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise AgentError("node_wait must be a number of seconds, 0 or more.")
        port = self.proxy_listen.rpartition(":")[2]
        if self.proxy_listen and not (port.isascii() and port.isdigit() and int(port) <= 65535):
            raise AgentError("proxy_listen must be HOST:PORT, like 127.0.0.1:9338.")

    @property
    def spool(self) -> Path:
        return Path(self.spool_dir or Path(tempfile.gettempdir()) / "meshdash-agent")

    def baseline_list(self) -> list[Baseline]:
        return [Baseline.of(item, index) for index, item in enumerate(self.baselines)]
