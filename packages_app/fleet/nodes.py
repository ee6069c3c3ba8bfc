"""/nodes/ (paged, or only the nodes needing action) and a node's page: every node (or the one named) with
what it served since the window's start, the rows needing action first.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Exists

from packages_app.audit.advice import Advice
from packages_app.fleet.figures import Figures
from packages_app.fleet.ranking import (
    NODE_PAGE_ROWS,
    NODES_PAGE_ROWS,
    NODES_PER_PAGE,
    few_window_rows,
    flagged_servings,
    servings_in_window,
    top_revisions,
    tops_of_window,
)
from packages_app.fleet.runs import LatestRun, NodeIds, Observations, RunFacts, facts_of_runs, latest_runs
from packages_app.fleet.serving import (
    NOTHING_SERVED,
    NodeServed,
    NodeServing,
    group_figures,
    last_topologies,
    placement,
    ran_in_window,
    registered_layout,
    served_by_nodes,
    shown_revisions,
    unless_moved_on,
)
from packages_app.fleet.stages import mark_registered, node_devices, with_registration
from packages_app.models import Node


@dataclass(frozen=True)
class NodeRow:
    node: Node
    version: str
    devices: list[str]
    serving: list[NodeServing] = field(default_factory=list)
    hidden: int = 0  # what it served beyond the rows shown
    certification: str = ""  # its newest run's split certification: certified | uncertified_override | ""
    at_least: bool = False  # ``hidden`` is a floor: the count stopped at SERVED_COUNT_CAP
    observations: Any = None  # what it said about itself at its newest run (NodeRun.observations)

    @property
    def said(self) -> Observations:
        return Observations.of(self.observations)

    @property
    def tps(self) -> float | None:
        rates = [s.tps for s in self.serving if s.tps is not None]
        return max(rates) if rates else None

    @property
    def alerts(self) -> int:
        return sum(1 for s in self.serving if s.alert)

    @functools.cached_property  # ranking and filtering a thousand rows ask it several times each
    def advice(self) -> Advice | None:
        """The most urgent advice among the rows shown, when one needs action."""
        urgent = [s.advice for s in self.serving if s.advice.needs_action]
        return min(urgent, key=lambda a: a.cause.rank) if urgent else None

    @property
    def needs_action(self) -> bool:
        return self.advice is not None


@dataclass(frozen=True)
class NodePage:
    """One page of /nodes/: the nodes likeliest to need action first, then by name."""

    rows: list[NodeRow]
    page: Page[Any]


def node_page(
    since: datetime, number: Any = 1, needs_action: bool = False, show_private: bool = False
) -> NodePage:
    """A page of NODES_PER_PAGE nodes with what each served since ``since`` (node_rows' queries and the
    count). Ranked in SQL by whether the node served, since ``since``, a revision whose headline or
    whose package's newer latest calls for action, or one whose MTP went unused; the advice of the rows
    shown is then judged in Python, against each node's release.

    ``needs_action`` keeps the nodes whose advice calls for action, judged in Python for every node: the
    SQL flag only ranks, it cannot see what a node's own release refuses (an upgrade to make), so filtering
    on it would hide such a node from the answer to "which of my nodes need action". Every node is judged
    without what advice never reads (where each report's topology placed the node, the decode-rate
    sketches, the reports in the window), and without its cells' strategies where its reports all ran
    one or its release is unknown (``_read_to_judge``); then the page's rows get them (``_placed``)."""
    if needs_action:
        judged = node_rows(since, needs_action=True, show_private=show_private, placed=False)
        page_of_rows = Paginator(judged, NODES_PER_PAGE).get_page(number)
        return NodePage(_placed(list(page_of_rows.object_list), since, show_private), page_of_rows)
    nodes = Node.objects.annotate(
        attention=Exists(flagged_servings(servings_in_window(since, show_private), since))
    )
    page = Paginator(nodes.order_by("-attention", "name"), NODES_PER_PAGE).get_page(number)
    return NodePage(_rows_of(list(page.object_list), since, show_private, NODES_PAGE_ROWS), page)


def node_rows(
    since: datetime,
    name: str | None = None,
    needs_action: bool = False,
    show_private: bool = False,
    limit: int | None = None,
    placed: bool = True,
) -> list[NodeRow]:
    """Every node (or the one named) with what it served since ``since`` (9 queries; 10 where the
    nodes' rows in the window outnumber those shown: ``few_window_rows``), at most
    ``limit`` rows a node (NODES_PAGE_ROWS, or NODE_PAGE_ROWS for one node), each with its advice;
    a run the node's agent registered without any report in the window is a row too.

    Private packages' revisions are left out unless ``show_private`` (the edge asks web/access.py).
    Without ``placed``, the rows are for their advice only (7 queries, or 8): no median decode rate, no
    layers, stages or topology, and the reports and strategies in the window read only where the
    advice's cause needs them (``_read_to_judge``; elsewhere its text may name the strategy otherwise);
    the nodes' names only, and neither their devices nor their registered-only rows' layers
    (``_placed``).
    """
    nodes = Node.objects.order_by("name")
    if name is not None:
        nodes = nodes.filter(name=name)
    if not placed:
        nodes = nodes.only("pk", "name")  # the page's rows read the rest (``_placed``)
    limit = limit or (NODE_PAGE_ROWS if name is not None else NODES_PAGE_ROWS)
    # One node's page reads by its id, as a list: its reads then are compiled once (with a query of ids,
    # built anew each time, the catalog seed's busiest node's rows took 36.3 ms against 25.4).
    among = None if name is not None else nodes.values_list("pk", flat=True)
    rows = _rows_of(list(nodes), since, show_private, limit, placed, among=among)
    return [r for r in rows if r.needs_action] if needs_action else rows


def judged_rows(
    nodes: list[Node], since: datetime, show_private: bool, among: NodeIds | None = None
) -> list[NodeRow]:
    """The nodes' rows for their judgement only, as ``node_rows(placed=False)`` judges every node for the
    needing-action list (packages_app.judgements keeps each node's)."""
    return _rows_of(nodes, since, show_private, NODES_PAGE_ROWS, placed=False, among=among)


def rows_of_nodes(node_ids: Sequence[int], since: datetime, show_private: bool) -> list[NodeRow]:
    """The whole rows of these nodes (a page of /nodes/), those needing action first, then by name."""
    found = Node.objects.in_bulk(list(node_ids))
    return _rows_of([found[i] for i in node_ids if i in found], since, show_private, NODES_PAGE_ROWS)


def _rows_of(
    nodes: list[Node],
    since: datetime,
    show_private: bool,
    limit: int,
    placed: bool = True,
    among: NodeIds | None = None,
) -> list[NodeRow]:
    """The rows of these nodes, those needing action first (by the urgency of their advice). ``among`` is
    the query the nodes came from, read as a subquery where a list of a thousand ids took psycopg and
    PostgreSQL a few milliseconds a query to format, split and parse."""
    ids = among if among is not None else [n.pk for n in nodes]
    runs = latest_runs(ids, show_private, stages=placed)
    window = few_window_rows(ids, since, show_private, len(nodes) * limit)
    tops = (
        top_revisions(ids, since, show_private, limit)
        if window is None
        else tops_of_window(window, since, limit)
    )
    serving = served_by_nodes(
        since, {n.pk: n.name for n in nodes}, show_private, tops, runs, limit, placed, window
    )
    rows = [_node_row(n, runs.get(n.pk), serving.get(n.pk, NOTHING_SERVED)) for n in nodes]
    rows.sort(key=lambda r: (not r.needs_action, r.advice.cause.rank if r.advice else 0, r.node.name))
    return rows


def _node_row(node: Node, run: LatestRun | None, served: NodeServed) -> NodeRow:
    devices = node_devices(run.stages, run.devices, node.name) if run else []
    version = run.version if run else ""
    certification = run.certification if run else ""
    observations = run.observations if run else None
    return NodeRow(
        node, version, devices, served.rows, served.hidden, certification, served.at_least, observations
    )


def _placed(rows: list[NodeRow], since: datetime, show_private: bool) -> list[NodeRow]:
    """Rows judged without their placement (``node_rows(placed=False)``) with it, as node_rows reads
    them: each reported row's ``placement``, its reports and strategy in the window, and its advice
    again with them (the same cause: ``_read_to_judge``); each node's devices and its registered-only
    row's layers from its newest run, the nodes whole, and which stages' nodes are registered
    (7 queries)."""
    groups: list[dict[str, Any]] = [
        {
            "node_key": r.node.pk,
            "revision_id": s.revision_id,
            "stage_splits": s.stage_splits,
            "last_at_max": s.last_at,
        }
        for r in rows
        for s in r.serving
        if s.reported
    ]
    figures = group_figures(since, groups)
    topologies = last_topologies(groups)
    run_facts = facts_of_runs(groups)
    revisions = shown_revisions(g["revision_id"] for g in groups)
    newest = latest_runs([row.node.pk for row in rows], show_private)
    whole = Node.objects.in_bulk([row.node.pk for row in rows])
    placed: list[NodeRow] = []
    for row in rows:
        serving = []
        latest = newest.get(row.node.pk)
        for s in row.serving:
            key = (row.node.pk, s.revision_id, s.stage_splits)
            if s.reported:
                run, found = run_facts.get(key[:2]) or RunFacts(), figures.get(key) or Figures()
                if s.revision_id in revisions:
                    ran = ran_in_window(revisions[s.revision_id], found, run, row.node.name, s.alert)
                    s = replace(s, **{**ran, "advice": unless_moved_on(s.advice, ran["advice"])})
                s = replace(s, identity=run.identity, observations=run.observations)
                s = replace(
                    s, **placement(s.stage_splits, topologies.get(key), run, row.node.name, found.tps)
                )
            elif latest is not None:
                s = replace(s, **registered_layout(latest, row.node.name))
            serving.append(s)
        devices = node_devices(latest.stages, latest.devices, row.node.name) if latest else []
        said = latest.observations if latest else None
        node = whole.get(row.node.pk, row.node)
        placed.append(replace(row, node=node, serving=serving, devices=devices, observations=said))
    known = with_registration(s.stages for row in placed for s in row.serving)
    return [
        replace(row, serving=[replace(s, stages=mark_registered(s.stages, known)) for s in row.serving])
        for row in placed
    ]
