"""PR 4's torch.attn, the code PR 6's CPU kernel replaces, as users call it (through autograd):
its workers run in the gate's worktree of the fork at PR 4's commit with that tree's own
overlay build (build/gate/level-4, made and built as `./stack test` makes them), so they
import PR 4's torch; each one's torch file is checked to be that tree's."""

import json
from pathlib import Path

from stacktool import gate
from stacktool.bench.common import ratio
from stacktool.bench.workers import worker
from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.git import git
from stacktool.overlay.loader import MANIFEST
from stacktool.patches import stack_commits

LEVEL = 4
PR4 = "pr4"  # its column in the timing rows and its row in peak memory
RATIO = "native / pr4"  # the ratio bench.json keeps per timing row and for peak memory
NO_BUILD = "not run: no level-4 build (run ./stack test first)"


def built(layout: Layout) -> bool:
    """Whether the gate's level-4 tree is at PR 4's commit and its build is that commit's."""
    tree = layout.gate_tree(LEVEL)
    try:
        commit = json.loads((tree.overlay / MANIFEST).read_text())["commit"]
        commits = stack_commits(layout.fork)
        head = git(tree.fork, "rev-parse", "HEAD").strip()
    except (OSError, ValueError, KeyError, StackError):
        return False
    return len(commits) >= LEVEL and commit == head == commits[LEVEL - 1]


def pr4_layout(layout: Layout, log, build=None) -> tuple[Layout | None, str]:
    """The gate's level-4 layout and a note on it, or (None, why not). With `build` (cli's),
    checked out and built as the gate does (gate.each_level; a no-op where the gate built it);
    without (the gate's own smoke run, beside suites in that tree), as it is, if it is built
    at PR 4's commit."""
    if build is None:
        found = layout.gate_tree(LEVEL)
        return (found, "the gate's build") if built(layout) else (None, NO_BUILD)
    try:
        _, commit, found = next(gate.each_level(layout, log, build, only=LEVEL))
    except StackError as e:
        return None, f"not run: {str(e).splitlines()[0]}"
    return found, f"built at {commit[:12]}"


def proven(found: dict, layout: Layout, log) -> bool:
    """Whether a worker ran the level-4 tree's torch (said when it did not)."""
    expected = layout.fork / "torch" / "__init__.py"
    if Path(found["torch_file"]).resolve() == expected.resolve():
        return True
    log(f"PR 4's torch.attn: the worker ran {found['torch_file']}, not {expected}")
    return False


def pr4_timing(layout: Layout, quick: bool, log) -> dict | None:
    """The timing worker, native torch.attn alone, in the level-4 tree; None if it failed."""
    args = ["--native-only", *(["--quick"] if quick else [])]
    found = worker(layout, "timing", str(layout.fork), *args)
    return found if found is not None and proven(found, layout, log) else None


def pr4_memory(layout: Layout, env: dict, log) -> float | None:
    """MB of peak memory of PR 4's torch.attn (the memory worker's native in the level-4
    tree); None if it failed."""
    found = worker(layout, "memory", str(layout.fork), "--method", "native", env=env)
    return found["mb"] if found is not None and proven(found, layout, log) else None


def merge(timing: dict, found: dict) -> None:
    """PR 4's times into the timing rows (as PR4, by size, thread count and pass), each row
    with its ratio native / PR 4's op."""
    times = {(tuple(r["size"]), r["threads"], r["pass"]): r for r in found["rows"]}
    for row in timing["rows"]:
        theirs = times.get((tuple(row["size"]), row["threads"], row["pass"]))
        if theirs and "native" in theirs["ms"]:
            row["ms"][PR4] = theirs["ms"]["native"]
            row["rounds_ms"][PR4] = theirs["rounds_ms"]["native"]
        row["ratios"] = {RATIO: ratio(row["ms"], "native", PR4)}
