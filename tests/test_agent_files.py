"""meshdash-agent is the files the Makefile's AGENT_MODULES lists, and only those: the zipapp `make install`
builds, and the files an operator copies to a node that has no meshdash (docs/api.md), both run it.

The agent is several modules of the standard library (agent.py and the agent_*.py and exposition.py it
imports); a module left out of the list would make both fail on the node, never in the checkout.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODES = "packages_app.nodes"


def agent_modules(makefile: str) -> list[str]:
    """The paths AGENT_MODULES names in the Makefile's text (its continued lines joined)."""
    joined = makefile.replace("\\\n", " ")
    match = re.search(r"^AGENT_MODULES :=(.*)$", joined, re.M)
    assert match, "the Makefile defines AGENT_MODULES"
    return match.group(1).split()


def missing_modules(listed: list[str], root: Path = ROOT) -> list[str]:
    """The modules of packages_app/nodes that a listed module imports and the list leaves out."""
    names = {Path(path).stem for path in listed}
    missing = set()
    for path in listed:
        for node in ast.walk(ast.parse((root / path).read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NODES + "."):
                wanted = [node.module.removeprefix(NODES + ".")]
            elif isinstance(node, ast.Import):
                wanted = [
                    a.name.removeprefix(NODES + ".") for a in node.names if a.name.startswith(NODES + ".")
                ]
            else:
                continue
            missing.update(name for name in wanted if name not in names)
    return sorted(missing)


def copy_flat(listed: list[str], into: Path) -> Path:
    """The agent's files side by side in one folder, as an operator copies them to a node."""
    into.mkdir()
    for path in listed:
        if Path(path).name != "__init__.py":
            shutil.copy(ROOT / path, into)
    return into / "agent.py"


def run_help(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-s", *command, "--help"], cwd=cwd, env=env, capture_output=True, text=True
    )


LISTED = agent_modules((ROOT / "Makefile").read_text(encoding="utf-8"))


def test_the_list_names_every_module_the_agent_imports() -> None:
    assert "packages_app/nodes/agent.py" in LISTED
    assert missing_modules(LISTED) == []


def test_control_a_module_left_out_of_the_list_is_found() -> None:
    assert missing_modules([p for p in LISTED if not p.endswith("/agent_spool.py")]) == ["agent_spool"]


def test_the_listed_files_copied_side_by_side_run_as_the_agent(tmp_path: Path) -> None:
    script = copy_flat(LISTED, tmp_path / "node")
    shown = run_help([str(script)], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "--node-url URL" in shown.stdout


def test_control_without_one_of_its_files_the_copied_agent_does_not_start(tmp_path: Path) -> None:
    script = copy_flat([p for p in LISTED if not p.endswith("/agent_spool.py")], tmp_path / "node")
    shown = run_help([str(script)], tmp_path)
    assert shown.returncode == 1 and "No module named 'agent_spool'" in shown.stderr


def test_a_zipapp_of_the_listed_files_runs_as_the_agent(tmp_path: Path) -> None:
    # What `make install` builds into .venv/bin/meshdash-agent, made here in a temporary folder.
    tree = tmp_path / "tree"
    (tree / "packages_app" / "nodes").mkdir(parents=True)
    (tree / "packages_app" / "__init__.py").touch()
    for path in LISTED:
        shutil.copy(ROOT / path, tree / "packages_app" / "nodes")
    (tree / "__main__.py").write_text(
        "import sys\nfrom packages_app.nodes.agent import main\nsys.exit(main())\n"
    )
    zipapp.create_archive(tree, tmp_path / "meshdash-agent")
    shown = run_help([str(tmp_path / "meshdash-agent")], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "--node-url URL" in shown.stdout
