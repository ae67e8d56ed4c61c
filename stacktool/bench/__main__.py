"""The workers' entry point, under the venv's Python: `python -m stacktool.bench WORKER OUT.json
...` writes the worker's result to OUT.json (plot: the png)."""

import argparse
import json
from pathlib import Path

from stacktool.bench.attn import time_worker
from stacktool.bench.callers import callers_worker
from stacktool.bench.common import FULL, QUICK
from stacktool.bench.contended import CONTENDED_QUICK_SIZES, CONTENDED_SIZES, contended_worker
from stacktool.bench.memory import MEMORY_METHODS, memory_worker
from stacktool.bench.plot import plot
from stacktool.bench.tanh import tanh_worker


def main(argv: list[str] | None = None) -> None:
    """Parse the worker's arguments, run it, write its result."""
    parser = argparse.ArgumentParser(prog="python -m stacktool.bench")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("timing")
    p.add_argument("out", type=Path)
    p.add_argument("fork", type=Path)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--native-only", action="store_true", help="native torch.attn alone")
    p = commands.add_parser("contended")
    p.add_argument("out", type=Path)
    p.add_argument("fork", type=Path)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--size", type=int, nargs=3, action="append", metavar=("N", "D", "DV"),
                   help="time this size instead of the run's (repeatable)")  # fmt: skip
    p = commands.add_parser("memory")
    p.add_argument("out", type=Path)
    p.add_argument("fork", type=Path)
    p.add_argument("--method", choices=MEMORY_METHODS, required=True)
    p = commands.add_parser("tanh")
    p.add_argument("out", type=Path)
    p.add_argument("--sleef", type=Path, metavar="BUILD_DIR", help="also time Sleef u10")
    p.add_argument("--copy", action="store_true", help="also time y.copy_(x)")
    p = commands.add_parser("callers")
    p.add_argument("out", type=Path)
    p = commands.add_parser("plot")
    p.add_argument("results", type=Path)
    p.add_argument("png", type=Path)
    args = parser.parse_args(argv)
    if args.command == "plot":
        plot(json.loads(args.results.read_text())["timing"], args.png)
        return
    if args.command == "timing":
        result = time_worker(args.fork, QUICK if args.quick else FULL, args.native_only)
    elif args.command == "contended":
        sizes = CONTENDED_QUICK_SIZES if args.quick else CONTENDED_SIZES
        sizes = tuple(map(tuple, args.size or sizes))
        result = contended_worker(args.fork, QUICK if args.quick else FULL, sizes)
    elif args.command == "memory":
        result = memory_worker(args.fork, args.method)
    elif args.command == "callers":
        result = callers_worker(FULL)
    else:
        result = tanh_worker(FULL, args.sleef, args.copy)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
