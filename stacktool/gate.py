"""`./stack test`: the gate .ci/run runs after setup.

It runs the tool's own tests, checks that patches/ is what pytorch/ holds and that it applies
to pristine upstream, then, in a worktree of the fork of its own per level
(build/gate/level-N/pytorch, with its own overlay build in build/gate/level-N/overlay),
checks out each PR level's commit and runs that level's tests with upstream's own runners,
proving first which torch they import; beside them, it lints the files the commit touches
(in one lint worktree at that commit with the level's stubs: one mypy daemon for all
levels) and, beside the last level's checks, runs the README's edit loop as written
(loop.py). pytorch/, build/overlay and the venv's `import torch` are never changed,
whatever happens to the run. It ends with a plain `N passed, M failed` line and exits
non-zero on any failure; however it ends, it stops the mypy daemons lint started in its trees.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stacktool import fork, levels, lint, loop, patches, venv, wheel
from stacktool.bench.cpu import cpu_facts, describe, simd_flags
from stacktool.config import BASE_REF, Layout
from stacktool.errors import StackError
from stacktool.git import git
from stacktool.overlay import load
from stacktool.overlay.generate import write_if_changed
from stacktool.suites import PCH_STORE, Result


def tool_tests(log) -> Result:
    """The tool's own unit tests (stacktool/tests), in a process of their own: they patch
    this package's functions (mock.patch), which warm_lint's thread would call meanwhile (a
    `wheel.link` patched by test_gate left the lint tree without the wheel's stubs)."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "stacktool/tests",
                           "-t", "."], cwd=root, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)  # fmt: skip
    print(proc.stdout, end="", flush=True)
    result = Result("stacktool unit tests", *unittest_counts(proc.stdout, proc.returncode))
    log(f"{result.name}: {result.passed} passed, {result.failed} failed, {result.skipped} skipped")
    return result


def unittest_counts(output: str, returncode: int) -> tuple[int, int, int]:
    """(passed, failed, skipped) from `python -m unittest`'s closing lines; a run that ends
    without them (or fails without a failed test) counts one failure more."""
    ran = re.search(r"^Ran (\d+) tests? in ", output, re.MULTILINE)
    verdict = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", output, re.MULTILINE)
    if not (ran and verdict):
        return 0, 1, 0
    counts = {k.strip(): int(v) for k, v in re.findall(r"([a-z ]+)=(\d+)", verdict.group(2) or "")}
    failed = counts.get("failures", 0) + counts.get("errors", 0)
    failed += counts.get("unexpected successes", 0)
    skipped = counts.get("skipped", 0)
    failed += int(returncode != 0 and failed == 0)
    return int(ran.group(1)) - failed - skipped, failed, skipped


def applies_to_pristine(layout: Layout) -> Result:
    """Apply patches/ in order to a fresh checkout of the pristine commit."""
    name = "patches/ apply to pristine upstream"
    series = sorted(layout.patches.glob("*.patch"))
    layout.build.mkdir(exist_ok=True)  # below build/: a tree left by a kill is the tool's
    with tempfile.TemporaryDirectory(dir=layout.build) as tmp:
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


def gate_tree(layout: Layout, level: int, log) -> Layout:
    """The gate's worktree of the fork for `level` (made, or re-made if broken)."""
    for old in ("pytorch", "overlay"):  # the single worktree and build of earlier versions
        shutil.rmtree(layout.build / "gate" / old, ignore_errors=True)
    return worktree(layout, layout.gate_tree(level), log)


def worktree(layout: Layout, gate: Layout, log) -> Layout:
    """`gate`'s worktree of the fork (made, or re-made if broken).

    It is the gate's alone: whatever a test or an interrupted run left in it is reset. The
    wheel's files are linked in once (`linked` marks it): linking again would undo the build's
    refreshed files, and ninja would then recompile what includes them.
    """
    with WORKTREES:
        return _worktree(layout, gate, log)


# each_level's builder thread makes the next level's worktree while the caller makes the
# lint tree's: `git worktree prune` beside `git worktree add` could drop a half-made one.
WORKTREES = threading.Lock()


def _worktree(layout: Layout, gate: Layout, log) -> Layout:
    linked = gate.fork.parent / "linked"
    tree, common = gate.fork, (layout.fork / ".git").resolve()
    if tree.exists():
        found = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
        if Path(found.strip() or "/nonexistent").resolve() != common:
            shutil.rmtree(tree)  # left by an interrupted run, or made from an older pytorch/
    git(layout.fork, "worktree", "prune")
    if not tree.exists():
        linked.unlink(missing_ok=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        git(layout.fork, "worktree", "add", "--quiet", "--detach", str(tree), BASE_REF)
        log(f"made the gate's worktree {tree}")
    if not linked.exists():
        unpacked, _ = wheel.unpack(wheel.fetch(layout.cache), layout.cache)
        wheel.link(unpacked, tree)
        linked.write_text("")
    return gate


def lint_checkout(layout: Layout, gate: Layout, commit: str, log) -> Layout:
    """The gate's lint tree (Layout.lint_tree) at `commit`, with the Python files that the
    level's build (`gate`) generated, the stubs MYPY reads: its daemon keeps running there
    from level to level and checks what changed (a cold start is about 145 s on a Zen 3;
    after a level's checkout 3-35 s, measured)."""
    lint_layout = worktree(layout, layout.lint_tree(), log)
    check_out(lint_layout.fork, commit)
    for path in load.python_outputs():
        if (gate.fork / path).exists():
            write_if_changed(lint_layout.fork / path, (gate.fork / path).read_bytes())
    return lint_layout


def check_out(tree: Path, commit: str) -> None:
    """Check out `commit` in the gate's worktree, dropping what a previous run left there."""
    git(tree, "checkout", "--quiet", "--force", "--detach", commit)
    git(tree, "clean", "--quiet", "--force", "-d")


def each_level(layout: Layout, log, build, only: int | None = None):
    """(level, commit, gate layout) for each PR (or PR `only`), checked out and built in its
    own worktree of the gate; the next level's build runs while the caller checks this one,
    at a lower priority (yield_to_checks): its compiles fill the cores the checks leave idle."""
    commits = patches.stack_commits(layout.fork)
    if only is not None and not 1 <= only <= len(commits):
        raise StackError(f"no level {only}: the stack has levels 1 to {len(commits)}")
    chosen = [(n, commit) for n, commit in enumerate(commits, start=1) if only in (None, n)]

    def prepare(level: int, commit: str) -> Layout:
        yield_to_checks()
        gate = gate_tree(layout, level, log)
        check_out(gate.fork, commit)
        build(gate)
        return gate

    with ThreadPoolExecutor(1) as builder:
        built = [builder.submit(prepare, *chosen[0])] if chosen else []
        for index, (level, commit) in enumerate(chosen):
            gate = built[index].result()
            if index + 1 < len(chosen):
                built.append(builder.submit(prepare, *chosen[index + 1]))
            yield level, commit, gate


# The next level's build runs at this niceness beside a level's checks: its compiles take
# what the checks leave, and the checks keep their cores. A check whose two OpenMP threads
# must run at once suffers most from a neighbour as busy: level 3's functorch/test_ops
# test_vmapjvpvjp_attn took 107 s alone, 220-233 s beside two busy processes, 120 s beside
# the same at nice 10 (Zen 3, 2 cores); in the gate, 426 s beside level 4's build once.
BUILD_NICENESS = 10


def yield_to_checks() -> None:
    """Lower the calling thread's priority to BUILD_NICENESS (never raise it), and so that of
    the processes it starts (Linux: the nice value is a thread's, and a child takes its
    parent thread's)."""
    if sys.platform == "linux":
        thread = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, max(now, BUILD_NICENESS))


def run(layout: Layout, log, build) -> int:
    """The gate's checks, with the lint tree's mypy daemon loaded beside their first steps
    (warm_lint); however they end, then the mypy daemons in its trees are stopped."""
    with ThreadPoolExecutor(1) as beside:
        warming = beside.submit(warm_lint, layout, log)
        try:
            return checks(layout, log, build)
        finally:
            warming.result()  # before the stop: a daemon it started after would outlive the run
            stop_daemons(layout, log)
            remove_precompiled_headers(layout, log)


def warm_lint(layout: Layout, log) -> None:
    """Load mypy's daemon in the gate's lint tree (lint.warm_daemon) while the tool's tests
    and the first levels run, which leave a core idle: its cold start (93-145 s on a
    Zen 3) was level 3's longest check. A failure here only leaves level 3 to start it."""
    started = time.monotonic()
    try:
        ran = lint.warm_daemon(worktree(layout, layout.lint_tree(), log))
    except (StackError, OSError) as e:  # e.g. the lint venv's dmypy missing
        ran = False
        log(f"mypy's daemon in the lint tree not loaded ahead: {e}")
    if ran:
        log(f"mypy's daemon in the lint tree loaded ({time.monotonic() - started:.0f} s)")


def machine() -> str:
    """The CPU the gate runs on, as bench.md names it, with its CPU count and SIMD flags:
    a run's times mean little without them (docs/ci-runs.md)."""
    facts = cpu_facts()
    return f"{describe(facts)}, {os.cpu_count()} CPUs, {simd_flags(facts)}"


def checks(layout: Layout, log, build) -> int:
    """Every check, then the table (report) with, above its counts, the CPU and the time
    before level 1 and per level: level N from the end of level N-1's checks to the end of
    its own, a wait for its build (beside level N-1's checks) included."""
    cpu = machine()
    log(f"on {cpu}")
    laps, mark = [], time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        laps.append((name, now - mark))
        mark = now

    results = [tool_tests(log), lint.tool(layout, log)]
    found = patches.export(layout.fork, layout.patches, layout.gradient_doc, check=True)
    results.append(Result("patches/ match pytorch/", int(not found), int(bool(found)),
                          note="; ".join(found)))  # fmt: skip
    results.append(applies_to_pristine(layout))
    last = len(patches.stack_commits(layout.fork))
    lap("before level 1")
    for level, commit, gate in each_level(layout, log, build):
        proof = venv.prove_torch(gate, gate.fork / "test")
        log(f"level {level} ({commit[:12]}): {proof}")
        tree = lint_checkout(layout, gate, commit, log)
        tasks = lint.tasks(tree, f"{commit}~1", commit, f"level {level}: lint")
        if level == last:  # the README's loop beside the last level's checks
            tasks.append(loop.task(layout))
        for result in levels.run(level, gate, log, tasks):
            if result.name != loop.NAME:
                result.name = f"level {level}: {result.name.removeprefix(f'level {level}: ')}"
            results.append(result)
        lap(f"level {level}")
    took = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in laps)
    return report(results, f"on {cpu}: {took}; {sum(s for _, s in laps):.0f} s in all")


def stop_daemons(layout: Layout, log) -> None:
    """Stop the mypy daemons in the gate's worktrees and the loop's scratch fork (about
    1.3 GB each, left to end themselves after an hour idle otherwise; the level trees have
    one only from versions that linted there); the one in pytorch/, the edit loop's, keeps
    running."""
    trees = [*sorted(layout.build.glob("gate/level-*/pytorch")), layout.lint_tree().fork,
             layout.build / "loop" / "pytorch"]  # fmt: skip
    for tree in trees:
        if lint.stop_daemon(layout, tree):
            log(f"stopped mypy's daemon in {tree.relative_to(layout.root)}")


def remove_precompiled_headers(layout: Layout, log) -> None:
    """The precompiled headers of inductor's kernels the run's tests made (suites.PCH_STORE,
    about 120 MB each, stacktool/inductor_pch.py), and those of `./stack sanitize` runs
    since the last: the next run makes them again, in seconds."""
    made = []
    for store in layout.inductor_caches.glob(f"*/*/{PCH_STORE}"):
        made += [path.stat().st_size for path in store.glob("*.gch")]
        shutil.rmtree(store, ignore_errors=True)
    if made:
        log(f"removed the {len(made)} precompiled header(s) inductor's kernels took "
            f"({sum(made) / 1e6:.0f} MB)")  # fmt: skip


def lint_levels(layout: Layout, log, build, only: int | None) -> int:
    """`./stack lint --level N|all`: the files each level's commit touches, at that commit,
    in the gate's lint tree with the stubs of the level's build (see lint_checkout).

    A level lints a commit, so uncommitted work in pytorch/ would go unseen: refused, named.
    """
    dirty = git(layout.fork, "status", "--porcelain", "--untracked-files=normal").splitlines()
    if dirty:
        raise StackError(f"pytorch/ has uncommitted changes a level's commit lacks "
                         f"({', '.join(line[3:] for line in dirty)}): commit them, or run "
                         "./stack lint (the working tree)")  # fmt: skip
    results = []
    for level, commit, gate in each_level(layout, log, build, only):
        tree = lint_checkout(layout, gate, commit, log)
        results.append(lint.run(tree, f"{commit}~1", commit, f"level {level}: lint", log))
    return report(results)


def lint_tree(layout: Layout, log, changed: bool) -> int:
    """`./stack lint [--changed]`: pytorch/'s working tree, uncommitted changes included;
    the files the whole stack changes, or with `changed` those changed since the last export
    (the top level's tag, which export moves), committed or not.

    Nothing is built: MYPY reads the stubs of the last ./stack build.
    """
    base = BASE_REF
    if changed:
        tags = git(layout.fork, "tag", "--list", "attn/*").split()
        base = max(tags, key=lambda tag: int(tag.split("/")[1]), default=BASE_REF)
    return report([lint.run(layout, base, None, f"lint pytorch/ ({base} to working tree)", log)])


FAILED_TAIL = 12  # lines of each failed check's log repeated below the table


def report(results: list[Result], times: str = "") -> int:
    """The table of `results`, each failed check's last log lines, `times` (checks), then
    the failing levels and the closing `N passed, M failed` line; 1 if any check failed."""
    width = max(len(r.name) for r in results)
    print(f"\n{'check':<{width}}  passed  failed  skipped  note")
    for r in results:
        print(f"{r.name:<{width}}  {r.passed:>6}  {r.failed:>6}  {r.skipped:>7}  {r.note}")
    for r in results:  # below the table: where a page of the run's last lines shows it
        if r.failed and r.log and r.log.exists():
            tail = r.log.read_text(errors="replace").splitlines()[-FAILED_TAIL:]
            print(f"\n{r.name} failed; the end of its log:\n" + "\n".join(tail))
    if times:
        print(f"\n{times}")
    failing = sorted({r.name.split(":")[0] for r in results if r.failed})
    if failing:
        print("failing: " + ", ".join(failing))
    passed, failed = sum(r.passed for r in results), sum(r.failed for r in results)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
