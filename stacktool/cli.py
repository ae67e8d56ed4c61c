"""`./stack COMMAND`: setup, build, export, undo, lint, test, bench, sanitize (see README.md).

Ctrl-C and SIGTERM stop every process the command started, then end it with one line on
stderr (what was interrupted, what state is left, what to run) and exit 128 + the signal.
"""

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from stacktool import (
    bench,
    ccache,
    config,
    fork,
    gate,
    lint,
    lock,
    overlay,
    patches,
    sanitize,
    undo,
    upstream,
    venv,
    wheel,
)  # fmt: skip
from stacktool.errors import StackError

ROOT = Path(__file__).resolve().parent.parent
START = time.monotonic()


# What an interrupted command leaves, and what to run (each command keeps its state valid).
AFTER_INTERRUPT = {
    "setup": "pytorch/ is the previous tree or a complete new one; run ./stack setup to finish",
    "build": "build/overlay keeps what was compiled; run ./stack build to finish",
    "export": "patches/ holds the old series or the new one; run ./stack export again",
    "test": "pytorch/ and build/overlay are untouched (the gate uses build/gate); run it again",
    "lint": "pytorch/ is untouched (linters only read it); run ./stack lint again",
    "bench": "results are written only at the end; run ./stack bench again",
    "sanitize": "pytorch/ and build/overlay are untouched (it builds into build/sanitize); "
    "run it again",
    "undo": "what it undid is kept (stash, branches undo/*); run ./stack undo again to finish",
}


def log(message: str) -> None:
    print(f"[stack {time.monotonic() - START:6.1f}s] {message}", flush=True)


def descendants(pid: int) -> list[int]:
    """The processes below `pid`, from /proc: children, their children, and so on."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def interrupted(signum: int, frame) -> None:
    """Signal handler: SIGTERM every process below this one, then raise KeyboardInterrupt.

    Grandchildren (ninja's compilers, run_test.py's pytest) are stopped too: subprocess.run
    kills only its own child as the KeyboardInterrupt passes through it. A second signal is
    ignored, so the unwinding (lock release, branch restore, cleanup) runs to its end.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    raise KeyboardInterrupt(signum)


def setup(layout: config.Layout, upstream_path: str | None, move_aside: bool) -> None:
    """Download (cached, verified), venv, materialize pytorch/; never discards work in it."""
    source = upstream.check_source(Path(upstream_path)) if upstream_path else None
    state = fork.state(layout.fork, layout.patches)
    if state not in ("absent", "current", "stale") and not move_aside:
        raise StackError(
            f"{state}\nNothing was changed. `./stack setup --move-aside` keeps that tree as "
            "pytorch.old-<time>/ and makes a new one."
        )
    log(f"pytorch/: {state.splitlines()[0].rstrip(':')}")  # --move-aside: kept, see below
    if state == "current" and (moved := fork.on_branch(layout.fork)):
        log(moved)
    if source is None:
        source = upstream.fetch_tarball(layout.cache)
        log(f"upstream source: {source.name} (sha256 verified)")
    wheel_file = wheel.fetch(layout.cache)
    requirements = wheel.requirements(wheel_file) + list(config.TEST_REQUIREMENTS)
    for_build: Future = Future()

    def install() -> bool:  # the build's few packages, then the rest (one pip at a time)
        try:
            for_build.set_result(venv.ensure(layout.venv, list(config.BUILD_REQUIREMENTS)))
        except BaseException as e:
            for_build.set_exception(e)
            raise
        return venv.ensure(layout.venv, requirements)

    with ThreadPoolExecutor(1) as beside:  # pip while the wheel and fork are unpacked, built
        installed = beside.submit(install)
        unpacked, repaired = wheel.unpack(wheel_file, layout.cache)
        log(f"wheel: {unpacked.name} (sha256 verified; unpacked files checked against its RECORD)")
        if repaired:
            log(f"re-extracted from the wheel, missing or damaged: {', '.join(repaired)}")
        new = layout.fork.with_name("pytorch.new")
        if state != "current":
            if new.exists():  # only setup makes pytorch.new: a run that was killed left it
                shutil.rmtree(new)
            fork.materialize(source, layout.patches, new)
            log(f"materialized: {len(patches.stack_commits(new))} patch(es) applied")
            log(f"linked {wheel.link(unpacked, new)} files of the wheel")
        for_build.result()  # its failure ends setup here, pytorch/ as it was
        venv.write_pth(layout)
        if state != "current":
            aside = fork.replace(layout.fork, new)
            if aside is not None:
                lint.stop_daemon(layout, aside)  # ./stack lint's mypy daemon in the old tree
            if aside is not None and fork.retire(aside, layout.patches, keep=move_aside):
                why = "" if move_aside else "it changed while setup ran: "
                log(f"the previous tree is kept whole as {aside} ({why}its commits, edits and "
                    f"ignored files): take what you need, then rm -rf {aside.name}")  # fmt: skip
        log(f"compiler cache: {ccache.ensure()} "
            f"(cache in {layout.ccache.relative_to(layout.root)})")  # fmt: skip
        with ThreadPoolExecutor(1) as linting:  # the linters' pip install during the compiles
            linters = linting.submit(lint.ensure, layout)
            build(layout, ready=installed.result)  # torch's import waits for the venv
            linters.result()
        if installed.result():
            log("venv: requirements installed")
    log("lint venv: upstream's pinned linters ready")
    log(venv.prove_torch(layout, Path("/")))


def build(layout: config.Layout, ready: Callable[[], object] = lambda: None) -> None:
    """The overlay build of what the layout's fork has checked out, and the venv's hook.

    The hook loads build/overlay (pytorch/'s build); the gate's worktree build is named to it
    by the environment (`Layout.python_env`), never installed. Every build compiles through
    the project's one ccache (build/ccache) and takes another build's codegen output when
    that was made from the same inputs (`Layout.builds`). `ready` is called before torch
    is imported (setup's: the venv's pip install finished).
    """
    own = config.Layout(layout.root)
    overlay.install_loader(layout.site_packages, own.overlay, own.fork)
    overlay.build(layout.fork, layout.python, layout.overlay, jobs=os.cpu_count() or 1,
                  cache_dir=layout.ccache, seeds=tuple(layout.builds()),
                  wheel=layout.wheel_tree, ready=ready)  # fmt: skip


def export(layout: config.Layout, check: bool) -> int:
    found = patches.export(layout.fork, layout.patches, layout.gradient_doc, check)
    if check:
        for line in found:
            print(f"pytorch/ and patches/ disagree: {line}")
        return 1 if found else 0
    print("\n".join(f"wrote: {line}" for line in found) or "patches/ already up to date")
    return 0


# Commands that hold .stack.lock for their build step only, not while their tests run:
# those read the tree and their own build folder (build/sanitize) only.
LOCKED_TO_BUILD = ("sanitize",)


def level_arg(text: str) -> int | str:
    """--level's value: a level number, or "all"."""
    if text == "all" or (text.isdigit() and int(text) > 0):
        return text if text == "all" else int(text)
    raise argparse.ArgumentTypeError(f"not a level number or 'all': {text!r}")


def main(argv: list[str] | None = None) -> int:
    # no abbreviated options (`--move` for `--move-aside`): a name given is the name meant
    parser = argparse.ArgumentParser(prog="stack", description=__doc__, allow_abbrev=False)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        parser_class=partial(argparse.ArgumentParser, allow_abbrev=False),
    )
    p = commands.add_parser("setup", help="materialize pytorch/, the venv and the build")
    p.add_argument("--upstream", metavar="PATH", help="a v2.6.0 tarball or checkout to use")
    p.add_argument(
        "--move-aside",
        action="store_true",
        help="keep an existing pytorch/ that holds other work as pytorch.old-<time>/",
    )
    p = commands.add_parser("export", help="write patches/ from the stack commits in pytorch/")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    commands.add_parser("build", help="overlay-build the new ops of pytorch/'s checkout")
    commands.add_parser("undo", help="back to the landed stack (patches/ in git HEAD), "
                        "keeping what it undoes in pytorch/ (stash, branch undo/<time>)")  # fmt: skip
    commands.add_parser("test", help="the gate .ci/run runs: tool tests and every PR level")
    p = commands.add_parser("lint", help="upstream's linters over pytorch/'s working tree")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--changed", action="store_true", help="only the files changed since "
                       "the last export (its tag attn/N), committed or not")  # fmt: skip
    scope.add_argument("--level", metavar="N|all", type=level_arg,
                       help="level N's commit (or every level's) in the gate's worktree, built")  # fmt: skip
    p = commands.add_parser("bench", help="native vs composite vs Function vs compile (no test)")
    p.add_argument("--quick", action="store_true", help="one size (512, 64, 64), few repeats")
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "build" / "bench",
        help="where to write bench.md, bench.json and bench.png (default: build/bench)",
    )
    p = commands.add_parser("sanitize", help="the stack's C++ built with ASan and UBSan into "
                            "build/sanitize; its tests and an edge sweep of attn's kernel")  # fmt: skip
    p.add_argument("--gate", action="store_true",
                   help="the gate's subset: the kernel files alone instrumented, the sweep at "
                   "its edges and TestAttnCPUKernel, at the highest CPU capability")  # fmt: skip
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not the top level's
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    layout = config.Layout(ROOT)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # e.g. SIGINT of a background job
            signal.signal(sig, interrupted)
    waiting = True
    try:
        if args.command in LOCKED_TO_BUILD:  # it takes the lock for its build step only
            waiting = False
            return run(args, layout)
        with lock.held(layout.lock, args.command, log):
            waiting = False
            return run(args, layout)
    except StackError as e:
        print(f"stack {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        signum = e.args[0] if e.args else signal.SIGINT
        after = AFTER_INTERRUPT[args.command]
        if waiting or getattr(args, "check", False):  # export --check writes nothing
            after = f"nothing was written; run ./stack {args.command} again"
        if waiting:
            after = f"it was waiting for {layout.lock.name}: {after}"
        print(f"stack {args.command}: interrupted by {signal.Signals(signum).name}; child "
              f"processes stopped; {after}", file=sys.stderr)  # fmt: skip
        return 128 + signum


def run(args: argparse.Namespace, layout: config.Layout) -> int:
    """Run one command (under the lock)."""
    if args.command == "setup":
        setup(layout, args.upstream, args.move_aside)
        return 0
    if args.command == "build":
        build(layout)
        return 0
    if args.command == "export":
        return export(layout, args.check)
    if args.command == "undo":
        if not undo.undo(layout, log):
            log("pytorch/, patches/ and attn_gradient.md are the landed stack: nothing to undo")
        build(layout)  # also then: an interrupted undo's build is finished by running it again
        return 0
    if args.command == "lint" and args.level:
        return gate.lint_levels(layout, log, build, None if args.level == "all" else args.level)
    if args.command == "lint":
        return gate.lint_tree(layout, log, args.changed)
    if args.command == "bench":
        return bench.run(layout, args.out.resolve(), args.quick, build)
    if args.command == "sanitize":
        return sanitize.run(layout, log, lambda: lock.held(layout.lock, args.command, log),
                            gate=args.gate)  # fmt: skip
    return gate.run(layout, log, build)
