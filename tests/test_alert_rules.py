"""deploy/prometheus/alerts.yml: every rule parses, names only metrics /metrics exports and label values
meshdash can emit; and, where promtool is installed (Debian's prometheus package, or PROMTOOL=path),
``promtool check rules`` and the rule unit tests in alerts.test.yml pass."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from packages_app import metrics
from packages_app.verdicts import Cause, Status, Tone

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMTOOL = next(
    (p for p in (os.environ.get("PROMTOOL"), shutil.which("promtool")) if p and os.access(p, os.X_OK)), None
)  # make test unpacks it under var/promtool when Debian's package index answers
NOT_OURS = {"up"}  # Prometheus's own series about the scrape
METRIC = re.compile(r"\b(meshdash_[a-z0-9_]+|up)\b")
MATCHER = re.compile(r'\b([a-z_]+)\s*(=~|=|!=|!~)\s*"([^"]*)"')
LABEL_VALUES: dict[str, set[str]] = {
    "outcome": {*metrics.INGEST_OUTCOMES, *metrics.REPORT_OUTCOMES, *metrics.NOTIFICATION_OUTCOMES},
    "kind": set(metrics.HUB_KINDS),
    "reason": set(metrics.REFUSAL_REASONS),
    "source": set(metrics.REPORT_SOURCES),
    "status": {"1xx", "2xx", "3xx", "4xx", "429", "5xx", *(s.value for s in Status)},
    "cause": {c.value for c in Cause},
    "job": {"meshdash"},
}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def exported(django_db_setup: None, django_db_blocker: Any) -> set[str]:
    """Every series name /metrics can show: families, and their _total/_bucket/_count/_sum samples."""
    with django_db_blocker.unblock():
        text = Client().get("/metrics").content.decode()
    assert "meshdash_database_up 1.0" in text
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(family.type, [])
        names.update(family.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in family.samples)
    return names


def problems(rule: dict[str, Any], exported: set[str]) -> list[str]:
    found = []
    named = set(METRIC.findall(rule["expr"]))
    if not named:
        found.append(f"{rule['alert']}: its expression names no metric")
    found += [f"{rule['alert']}: {m} is not a metric meshdash exports" for m in named - exported - NOT_OURS]
    for label, _, pattern in MATCHER.findall(rule["expr"]):
        allowed = LABEL_VALUES.get(label)
        if allowed is None:
            found.append(f"{rule['alert']}: no meshdash metric has a label {label!r}")
            continue
        found += [
            f"{rule['alert']}: {label}={v!r} never occurs" for v in pattern.split("|") if v not in allowed
        ]
    return found


@pytest.mark.django_db
def test_every_rule_names_metrics_and_label_values_meshdash_exports(exported: set[str]) -> None:
    assert [p for rule in rules() for p in problems(rule, exported)] == []


@pytest.mark.django_db
def test_the_check_catches_a_misspelt_metric_and_a_label_value_that_never_occurs(exported: set[str]) -> None:
    misspelt = {"alert": "A", "expr": "meshdash_ingest_queue_depth > 1"}
    wrong_value = {"alert": "B", "expr": 'meshdash_ingests_total{outcome="error"} > 1'}
    assert problems(misspelt, exported) == ["A: meshdash_ingest_queue_depth is not a metric meshdash exports"]
    assert problems(wrong_value, exported) == ["B: outcome='error' never occurs"]


def test_every_rule_has_a_severity_and_a_summary() -> None:
    found = rules()
    assert len(found) >= 10 and len({r["alert"] for r in found}) == len(found)
    for rule in found:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt: prometheus)")


@needs_promtool
@pytest.mark.parametrize("command", [["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]])
def test_promtool_accepts_the_rules_and_their_unit_tests_pass(command: list[str]) -> None:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, *command], cwd=RULES.parent, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


BROKEN_ALERT = "MeshdashServedRevisionBroken"
FAILING = frozenset(s.value for s in Status if s.term.tone is Tone.BAD)  # the headlines that say it fails


def statuses_it_misses(rule: dict[str, Any], failing: frozenset[str] = FAILING) -> list[str]:
    """How the statuses the broken-revision alert matches differ from the statuses whose headline says the
    revision fails, as sentences; [] when they agree."""
    matched = {
        v
        for label, _, values in MATCHER.findall(rule["expr"])
        if label == "status"
        for v in values.split("|")
    }
    missed = [f"{rule['alert']} misses status {s!r}" for s in sorted(failing - matched)]
    return missed + [
        f"{rule['alert']} matches status {s!r}, which does not fail" for s in sorted(matched - failing)
    ]


def broken_alert() -> dict[str, Any]:
    (rule,) = [r for r in rules() if r["alert"] == BROKEN_ALERT]
    return rule


def test_the_broken_revision_alert_matches_exactly_the_statuses_that_fail() -> None:
    assert len(FAILING) >= 4
    assert statuses_it_misses(broken_alert()) == []


def test_a_failing_status_the_alert_does_not_spell_makes_the_check_fail() -> None:
    planted = FAILING | {"oom-at-load"}  # a new Tone.BAD status added to verdicts.Status
    assert statuses_it_misses(broken_alert(), planted) == [f"{BROKEN_ALERT} misses status 'oom-at-load'"]
    rule = broken_alert()
    widened = {**rule, "expr": rule["expr"].replace("not-servable", "not-servable|serves-mtp")}
    assert statuses_it_misses(widened) == [f"{BROKEN_ALERT} matches status 'serves-mtp', which does not fail"]
