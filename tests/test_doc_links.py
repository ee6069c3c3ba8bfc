"""Every relative link in the README and the pages under docs/ leads somewhere (issue 44): the README is the
front door and the reference is split over docs/, so a page renamed or a heading reworded must not leave a
link dangling. A link's file must exist in the repository, and its `#anchor`, where one is given, must be a
heading of that file (GitHub's slug: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for
repeats) or an HTML anchor."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents(root: Path) -> list[Path]:
    """The README, every page under docs/, and the other documents the README links to."""
    names = ["README.md", "RELIABILITY.md", "BENCHMARKS.md", "packages_app/README.md"]
    found = [root / name for name in names if (root / name).is_file()]
    return found + sorted((root / "docs").glob("*.md"))


def prose(text: str) -> str:
    """The text outside code: fenced blocks and inline code hold examples, not links."""
    return INLINE_CODE.sub("code", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a markdown file offers: its headings (repeats numbered) and its HTML anchors."""
    seen: dict[str, int] = {}
    found = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(files: list[Path], root: Path) -> list[str]:
    """Each relative link whose file is missing, or whose anchor no heading of that file gives."""
    broken = []
    for path in files:
        name = path.relative_to(root).as_posix()
        for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
            if SCHEME.match(target) or target.startswith("//"):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path.resolve()
            if not linked.is_relative_to(root.resolve()) or not linked.exists():
                broken.append(f"{name}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text("utf-8")):
                broken.append(f"{name}: {target}: no such heading")
    return broken


def test_every_relative_link_in_the_readme_and_docs_leads_somewhere() -> None:
    files = documents(ROOT)
    assert {"README.md", "docs/README.md", "docs/api.md", "docs/configuration.md"} <= {
        f.relative_to(ROOT).as_posix() for f in files
    }
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(LINK.findall(prose(readme))) >= 10  # the front door links the pages it hands over to
    assert broken_links(files, ROOT) == []


def test_every_page_under_docs_is_linked_from_the_docs_index() -> None:
    text = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    index = {target.partition("#")[0] for target in LINK.findall(prose(text))}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - index == set()


def test_control_a_missing_file_a_missing_heading_and_a_link_outside_are_found(tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "api.md").write_text(
        "# The API\n\n## Real nodes, no code: OTLP spans\n\n## Notes\n\n## Notes\n\n"
        "```sh\n# not a heading\n```\n"
    )
    good = (
        "# meshdash\n\nSee [the API](guide/api.md), [OTLP](guide/api.md#real-nodes-no-code-otlp-spans),"
        " [notes](guide/api.md#notes-1), [up](#meshdash), [the Hub](https://huggingface.co/x.md)"
        " and `[code](guide/gone.md)`.\n\n```\n[in a fence](guide/gone.md)\n```\n"
    )
    readme = tmp_path / "README.md"
    readme.write_text(good)
    assert broken_links([readme], tmp_path) == []  # the control: the same checker passes good links
    readme.write_text(
        good + "\n[config](guide/configuration.md), [gone](guide/api.md#the-agent),"
        " [fenced](guide/api.md#not-a-heading), [out](../outside.md)\n"
    )
    assert broken_links([readme], tmp_path) == [
        "README.md: guide/configuration.md: no such file",
        "README.md: guide/api.md#the-agent: no such heading",
        "README.md: guide/api.md#not-a-heading: no such heading",
        "README.md: ../outside.md: no such file",
    ]
