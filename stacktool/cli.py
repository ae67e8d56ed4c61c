"""`./stack COMMAND`: setup, build, export, test, lint, bench (see README.md)."""

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from stacktool import bench, config, fork, gate, lint, lock, overlay, patches, upstream, venv, wheel
from stacktool.errors import StackError

ROOT = Path(__file__).resolve().parent.parent
START = time.monotonic()


def log(message: str) -> None:
    print(f"[stack {time.monotonic() - START:6.1f}s] {message}", flush=True)


def setup(layout: config.Layout, upstream_path: str | None, move_aside: bool) -> None:
    """Download (cached, verified), venv, materialize pytorch/; never discards work in it."""
    state = fork.state(layout.fork, layout.patches)
    if state not in ("absent", "current", "stale") and not move_aside:
        raise StackError(
            f"{state}\nNothing was changed. `./stack setup --move-aside` keeps that tree as "
            "pytorch.old-<time>/ and makes a new one."
        )
    log(f"pytorch/: {state.splitlines()[0]}")
    source = Path(upstream_path).resolve() if upstream_path else None
    if source is None:
        source = upstream.fetch_tarball(layout.cache)
        log(f"upstream source: {source.name} (sha256 verified)")
    unpacked = wheel.unpack(wheel.fetch(layout.cache), layout.cache)
    log(f"wheel: {unpacked.name} (sha256 verified)")
    if venv.ensure(layout.venv, wheel.requirements(unpacked) + list(config.TEST_REQUIREMENTS)):
        log("venv: requirements installed")
    venv.write_pth(layout)
    if state != "current":
        new = layout.fork.with_name("pytorch.new")
        if new.exists():  # only setup makes pytorch.new: a run that was killed left it
            shutil.rmtree(new)
        fork.materialize(source, layout.patches, new)
        log(f"materialized: {len(patches.stack_commits(new))} patch(es) applied")
        log(f"linked {wheel.link(unpacked, new)} files of the wheel")
        aside = fork.replace(layout.fork, new, move_aside)
        if aside is not None:
            log(f"the previous tree is kept as {aside}")
    lint.ensure(layout)
    log("lint venv: upstream's pinned linters ready")
    build(layout)
    log(venv.prove_torch(layout, Path("/")))


def build(layout: config.Layout) -> None:
    """The overlay build of what pytorch/ has checked out, and the venv's hook that loads it."""
    overlay.install_loader(layout.site_packages, layout.overlay)
    overlay.build(layout.fork, layout.python, layout.overlay, jobs=os.cpu_count() or 1)


def export(layout: config.Layout, check: bool) -> int:
    found = patches.export(layout.fork, layout.patches, layout.gradient_doc, check)
    if check:
        for line in found:
            print(f"pytorch/ and patches/ disagree: {line}")
        return 1 if found else 0
    print("\n".join(f"wrote: {line}" for line in found) or "patches/ already up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
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
    commands.add_parser("test", help="the gate .ci/run runs: tool tests and every PR level")
    commands.add_parser("lint", help="upstream's linters over the files each patch touches")
    p = commands.add_parser("bench", help="native vs composite vs Function vs compile (no test)")
    p.add_argument("--quick", action="store_true", help="the three small sizes, few repeats")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "bench", help="where to write")
    args = parser.parse_args(argv)
    layout = config.Layout(ROOT)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        with lock.held(layout.lock, args.command, log):
            return run(args, layout)
    except StackError as e:
        print(f"stack {args.command}: error: {e}", file=sys.stderr)
        return 1


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
    if args.command == "lint":
        return gate.lint_all(layout, log)
    if args.command == "bench":
        return bench.run(layout, args.out.resolve(), args.quick)
    return gate.run(layout, log, build)
