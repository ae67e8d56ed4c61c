"""`./stack test`: the gate .ci/run runs after setup.

It runs the tool's own tests, checks that patches/ is what pytorch/ holds and that it applies
to pristine upstream, then, in a worktree of the fork of its own (build/gate/pytorch, with
its own overlay build in build/gate/overlay), checks out each PR level's commit, lints the
files it touches and runs that level's tests with upstream's own runners, proving first which
torch they import. pytorch/, build/overlay and the venv's `import torch` are never changed,
whatever happens to the run. It ends with a plain `N passed, M failed` line and exits
non-zero on any failure.
"""

import shutil
import sys
import tempfile
import unittest
from pathlib import Path

from stacktool import fork, levels, lint, patches, venv, wheel
from stacktool.config import BASE_REF, Layout
from stacktool.errors import StackError
from stacktool.git import git
from stacktool.suites import Result


def tool_tests(log) -> Result:
    """The tool's own unit tests (stacktool/tests), run in this process."""
    here = Path(__file__).parent
    suite = unittest.defaultTestLoader.discover(str(here / "tests"), top_level_dir=str(here.parent))
    outcome = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(suite)
    failed = len(outcome.failures) + len(outcome.errors) + len(outcome.unexpectedSuccesses)
    skipped = len(outcome.skipped)
    result = Result("stacktool unit tests", outcome.testsRun - failed - skipped, failed, skipped)
    log(f"{result.name}: {result.passed} passed, {failed} failed, {skipped} skipped")
    return result


def applies_to_pristine(layout: Layout) -> Result:
    """Apply patches/ in order to a fresh checkout of the pristine commit."""
    name = "patches/ apply to pristine upstream"
    series = sorted(layout.patches.glob("*.patch"))
    with tempfile.TemporaryDirectory(dir=layout.root) as tmp:
        tree = Path(tmp) / "pristine"
        git(layout.fork, "worktree", "add", "--quiet", "--detach", str(tree), BASE_REF)
        try:
            for patch in series:
                fork.apply(tree, patch)
        except StackError as e:
            return Result(name, failed=1, note=str(e).splitlines()[-1])
        finally:
            git(layout.fork, "worktree", "remove", "--force", str(tree), check=False)
    return Result(name, passed=1, note=f"{len(series)} patches")


def gate_tree(layout: Layout, log) -> Layout:
    """The gate's worktree of the fork (made, or re-made if broken), with the wheel's files.

    It is the gate's alone: whatever a test or an interrupted run left in it is reset.
    """
    gate = layout.gate_tree()
    tree, common = gate.fork, (layout.fork / ".git").resolve()
    if tree.exists():
        found = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
        if Path(found.strip() or "/nonexistent").resolve() != common:
            shutil.rmtree(tree)  # left by an interrupted run, or made from an older pytorch/
    git(layout.fork, "worktree", "prune")
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        git(layout.fork, "worktree", "add", "--quiet", "--detach", str(tree), BASE_REF)
        log(f"made the gate's worktree {tree}")
    return gate


def check_out(tree: Path, commit: str) -> None:
    """Check out `commit` in the gate's worktree, dropping what a previous run left there."""
    git(tree, "checkout", "--quiet", "--force", "--detach", commit)
    git(tree, "clean", "--quiet", "--force", "-d")


def each_level(layout: Layout, log, build):
    """(level, commit, gate layout) for each PR, checked out and built in the gate's worktree."""
    gate = gate_tree(layout, log)
    unpacked, _ = wheel.unpack(wheel.fetch(layout.cache), layout.cache)
    wheel.link(unpacked, gate.fork)
    for level, commit in enumerate(patches.stack_commits(layout.fork), start=1):
        check_out(gate.fork, commit)
        build(gate)
        yield level, commit, gate


def run(layout: Layout, log, build) -> int:
    results = [tool_tests(log), lint.tool(layout, log)]
    found = patches.export(layout.fork, layout.patches, layout.gradient_doc, check=True)
    results.append(Result("patches/ match pytorch/", int(not found), int(bool(found)),
                          note="; ".join(found)))  # fmt: skip
    results.append(applies_to_pristine(layout))
    for level, commit, gate in each_level(layout, log, build):
        proof = venv.prove_torch(gate, gate.fork / "test")
        log(f"level {level} ({commit[:12]}): {proof}")
        for result in [lint.run(gate, commit, "lint", log), *levels.run(level, gate, log)]:
            result.name = f"level {level}: {result.name}"
            results.append(result)
    return report(results)


def lint_all(layout: Layout, log, build) -> int:
    """`./stack lint`: each level's touched files, at that level's commit, built (mypy reads
    the level's generated stubs)."""
    results = []
    for level, commit, gate in each_level(layout, log, build):
        results.append(lint.run(gate, commit, f"level {level}: lint", log))
    return report(results)


def report(results: list[Result]) -> int:
    width = max(len(r.name) for r in results)
    print(f"\n{'check':<{width}}  passed  failed  skipped  note")
    for r in results:
        print(f"{r.name:<{width}}  {r.passed:>6}  {r.failed:>6}  {r.skipped:>7}  {r.note}")
    failing = sorted({r.name.split(":")[0] for r in results if r.failed})
    if failing:
        print("failing: " + ", ".join(failing))
    passed, failed = sum(r.passed for r in results), sum(r.failed for r in results)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
