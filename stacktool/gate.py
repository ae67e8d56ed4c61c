"""`./stack test`: the gate .ci/run runs after setup.

It runs the tool's own tests, checks that patches/ is what pytorch/ holds and that it applies
to pristine upstream, then checks out each PR level's commit, lints the files it touches and
runs that level's tests with upstream's own runners inside pytorch/, proving first which torch
they import. It ends with a plain `N passed, M failed` line and exits non-zero on any failure.
"""

import sys
import tempfile
import unittest
from contextlib import contextmanager
from pathlib import Path

from stacktool import fork, levels, lint, patches, venv
from stacktool.config import BASE_REF, BRANCH, Layout
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


@contextmanager
def checked_out(repo: Path, commit: str):
    """Check out `commit` (detached) in the fork for a level's tests; restore the branch after."""
    git(repo, "checkout", "--quiet", "--detach", commit)
    try:
        yield
    finally:
        git(repo, "checkout", "--quiet", BRANCH)


def run(layout: Layout, log, build) -> int:
    results = [tool_tests(log), lint.tool(layout, log)]
    found = patches.export(layout.fork, layout.patches, layout.gradient_doc, check=True)
    results.append(Result("patches/ match pytorch/", int(not found), int(bool(found)),
                          note="; ".join(found)))  # fmt: skip
    results.append(applies_to_pristine(layout))
    for level, commit in enumerate(patches.stack_commits(layout.fork), start=1):
        with checked_out(layout.fork, commit):
            build(layout)
            proof = venv.prove_torch(layout, layout.fork / "test")
            log(f"level {level} ({commit[:12]}): {proof}")
            for result in [lint.run(layout, commit, "lint", log), *levels.run(level, layout, log)]:
                result.name = f"level {level}: {result.name}"
                results.append(result)
    return report(results)


def lint_all(layout: Layout, log) -> int:
    """`./stack lint`: each level's touched files, at that level's commit."""
    results = []
    for level, commit in enumerate(patches.stack_commits(layout.fork), start=1):
        with checked_out(layout.fork, commit):
            results.append(lint.run(layout, commit, f"level {level}: lint", log))
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
