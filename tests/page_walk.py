"""A walk over every page a running meshdash serves, in Chromium, measuring horizontal overflow.

The page list is not written down: the walk starts from a few seeds (the top bar's pages and the admin's
sign-in), follows every same-origin link, and keeps up to ``PER_ROUTE`` paths of each URL pattern. Then
``unwalked_routes`` names every GET route of the URL conf (Django's resolver, so a page added later is in
it) that the walk did not reach, so a new page is walked as soon as something links to it, and a test
fails until it is. Routes that are not pages (POST-only actions, the node and Hub endpoints) are listed in
``NOT_PAGES`` with the reason.

"Overflow" is what a visitor sees as a page wider than the window or a box whose content is cut or has to
be scrolled sideways: the document wider than the viewport, or any element (a table's wrapper, a cell)
whose content is wider than its box. Code blocks (``pre``) scroll by design and say so with a scrollbar;
text cut on purpose with an ellipsis is not content lost; plotly's own layers are sized by plotly.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PER_ROUTE = 12  # paths walked per URL pattern: every demo package's page, a dozen of its file pages
MAX_PAGES = 400
SEEDS = (
    "/",
    "/?headline=needs-action",
    "/nodes/",
    "/nodes/?action=1",
    "/check/",
    "/ingest/",
    "/glossary/",
    "/accounts/login/",
)
ADMIN_SEED = "admin/login/"  # under MESHDASH_ADMIN_PATH

# URL names that are not pages a visitor opens, and why. Anything else the URL conf routes is walked.
NOT_PAGES = {
    "api_reports": "node endpoint: POST only",
    "api_reports_batch": "node endpoint: POST only",
    "api_runs": "node endpoint: POST only",
    "api_baselines": "node endpoint: POST only",
    "otlp_traces": "OTLP/HTTP endpoint: POST only",
    "api_hook_hub": "the Hub's webhook: POST only",
    "api_check_manifest": "JSON API: POST only (the check page is walked)",
    "api_packages": "JSON: nothing laid out (tests/test_views_api.py)",
    "api_package": "JSON: nothing laid out (tests/test_views_api.py)",
    "api_openapi": "JSON: nothing laid out (tests/test_views_api.py)",
    "api_node": "JSON: nothing laid out (tests/test_fleet_observed.py)",
    "api_certify_reports": "JSON API: a node's POST, a reader's list (tests/test_certify_reports.py)",
    "api_ping": "JSON: nothing laid out",
    "logout": "POST only",
    "package_untrack": "operator action: POST only, behind sign-in",
    "package_delete": "operator action, behind sign-in",
    "package_reingest": "operator action: POST only, behind sign-in",
    "package_sync": "operator action: POST only, behind sign-in",
    "package_propose_fix": "operator action, behind sign-in",
}

# Every element whose content is wider than its box, except the kinds above; and the document's width.
OVERFLOW_JS = """() => {
  const clipped = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('pre, .js-plotly-plot, svg')) continue;
    const style = getComputedStyle(el);
    // Text cut on purpose, inline boxes (no width of their own), visually hidden labels (1 px boxes).
    if (style.textOverflow === 'ellipsis' || style.display === 'inline' || el.clientWidth <= 1) continue;
    if (el.scrollWidth > el.clientWidth + 1 && style.overflowX !== 'visible') {
      const name = `${el.tagName.toLowerCase()}.${[...el.classList].join('.')}`;
      clipped.push(`${name}: ${el.scrollWidth} in ${el.clientWidth}`);
    }
  }
  return {width: document.documentElement.scrollWidth, clipped: clipped.slice(0, 5)};
}"""


@dataclass
class Overflow:
    path: str
    viewport: int
    width: int
    clipped: list[str]

    def __str__(self) -> str:
        return f"{self.path} at {self.viewport} px: page {self.width} px wide, clipped {self.clipped}"


@dataclass
class Walk:
    """What a walk visited (path -> URL name) and what overflowed."""

    visited: dict[str, str] = field(default_factory=dict)
    overflows: list[Overflow] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)


@functools.cache
def route_name(path: str) -> str | None:
    """The URL name Django routes a path to (``admin:...`` for the admin), None when nothing does."""
    from django.urls import Resolver404, resolve

    try:
        match = resolve(urllib.parse.unquote(path))
    except Resolver404:
        return None
    return match.view_name.removeprefix("packages_app:")


def page_routes() -> set[str]:
    """Every named route of the URL conf that is a page: the app's routes and the admin's sign-in."""
    from django.urls import URLPattern, URLResolver, get_resolver

    names: set[str] = set()
    for pattern in get_resolver().url_patterns:
        if isinstance(pattern, URLResolver) and pattern.namespace == "packages_app":
            names |= {p.name for p in pattern.url_patterns if isinstance(p, URLPattern) and p.name}
        elif isinstance(pattern, URLResolver) and pattern.namespace == "admin":
            names.add("admin:login")
    return names - set(NOT_PAGES)


def unwalked_routes(walk: Walk) -> list[str]:
    return sorted(page_routes() - set(walk.visited.values()))


def broken_links(walk: Walk) -> dict[str, int]:
    """Walked paths (all reached by a link or a seed) that answered an error: a link to nowhere."""
    return {path: status for path, status in walk.statuses.items() if status >= 400}


def same_origin_links(page: Any, base: str) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
    paths = []
    for href in hrefs:
        parsed = urllib.parse.urlsplit(href)
        if f"{parsed.scheme}://{parsed.netloc}" == base:
            paths.append(parsed.path)
    return paths


def _next_index(queue: list[str], per_route: dict[str, int]) -> int:
    """The first queued path of a route not walked yet, else the first: every kind of page is reached
    before MAX_PAGES runs out on a dozen of each of the others."""
    for index, path in enumerate(queue):
        name = route_name(path.split("?")[0])
        if name is not None and name not in per_route and name not in NOT_PAGES:
            return index
    return 0


def walk_pages(browser: Any, base: str, admin_path: str, viewports: Sequence[dict[str, int]]) -> Walk:
    """Open every page reachable from the seeds (up to PER_ROUTE per pattern) at each viewport."""
    walk = Walk()
    per_route: dict[str, int] = {}
    queue = [*SEEDS, "/" + admin_path.strip("/") + "/" + ADMIN_SEED.removeprefix("admin/")]
    contexts = [browser.new_context(viewport=v) for v in viewports]
    pages = [context.new_page() for context in contexts]
    try:
        while queue and len(walk.visited) < MAX_PAGES:
            path = queue.pop(_next_index(queue, per_route))
            name = route_name(path.split("?")[0])
            if path in walk.visited or name is None or name in NOT_PAGES:
                continue
            if per_route.get(name, 0) >= PER_ROUTE and path not in SEEDS:
                continue
            per_route[name] = per_route.get(name, 0) + 1
            walk.visited[path] = name
            fetched = pages[0].request.get(base + path, max_redirects=0)
            walk.statuses[path] = fetched.status
            if "text/html" not in fetched.headers.get("content-type", ""):
                continue  # a CSV or JSON document, or a redirect: reached, nothing laid out
            for index, page in enumerate(pages):
                page.goto(base + path)
                page.wait_for_load_state("load")
                measured = page.evaluate(OVERFLOW_JS)
                width = viewports[index]["width"]
                if measured["width"] > width or measured["clipped"]:
                    walk.overflows.append(Overflow(path, width, measured["width"], measured["clipped"]))
                if index == 0:
                    queue += [p for p in same_origin_links(page, base) if p not in walk.visited]
    finally:
        for context in contexts:
            context.close()
    return walk
