"""`./stack bench [--quick] [--out DIR]`: every phase in order (PR 4's tree, attn timing and
PR 4's op's, the contended case, peak memory, and in the full run the tanh table, the table
of tanh's other callers, tanh's accuracy), each in worker processes, then bench.md, bench.json and bench.png."""

import json
import time
from dataclasses import asdict
from pathlib import Path

from stacktool import tanh_accuracy
from stacktool.bench.attn import PROFILE_ENV
from stacktool.bench.callers import callers_speed
from stacktool.bench.common import FULL, LABELS, QUICK, fmt_size, fmt_threads, ratio, say
from stacktool.bench.contended import CONTENDED_QUICK_SIZES, CONTENDED_SIZES, CONTENDED_THREADS
from stacktool.bench.cpu import cpu_facts
from stacktool.bench.memory import MEMORY_ENV, MEMORY_METHODS, MEMORY_SIZE
from stacktool.bench.pr4 import PR4, RATIO, merge, pr4_layout, pr4_memory, pr4_timing
from stacktool.bench.report import report
from stacktool.bench.tanh import tanh_speed
from stacktool.bench.workers import spawn, worker
from stacktool.config import Layout

QUICK_MEMORY_METHODS = ("native", "composite", "unfused")  # what the memory targets compare


def run(layout: Layout, out_dir: Path, quick: bool, build=None) -> int:
    """Time every method and PR 4's op, time the contended case, measure peak memory, and
    (full run) time and check tanh, profile the native op; write bench.md, bench.json and
    bench.png. `build` (cli's) makes PR 4's tree and build as the gate does; without it (the
    gate's smoke run) the gate's are taken as they are."""
    started = time.monotonic()
    settings = QUICK if quick else FULL

    def log(line: str) -> None:
        say(f"[{time.monotonic() - started:5.0f} s] {line}")

    out_dir.mkdir(parents=True, exist_ok=True)
    cpu = cpu_facts()
    log("PR 4's torch.attn: the gate's worktree and build of PR 4 (build/gate/level-4)")
    pr4, note = pr4_layout(layout, log, build)
    tree = pr4 and str(pr4.fork.relative_to(layout.root))
    log(f"PR 4's torch.attn: {note}")
    results = {"cpu": cpu, "pr4": {"note": note, "tree": tree}}
    sizes = "; ".join(fmt_size(s) for s in settings.sizes)
    log(f"timing torch.attn's methods at n, d, dv = {sizes} (one process)")
    timing = worker(layout, "timing", str(layout.fork), *(["--quick"] if quick else []),
                    env=PROFILE_ENV)  # fmt: skip
    if timing is None:
        return 1
    results["timing"] = timing
    if pr4 is not None:
        log(f"timing PR 4's torch.attn at n, d, dv = {sizes} (a process of its own, {tree})")
        found = pr4_timing(pr4, quick, log)
        if found is None:
            return 1
        merge(timing, found)
        results["pr4"]["load"] = found["load"]
    if timing["has_native"]:
        sizes = CONTENDED_QUICK_SIZES if quick else CONTENDED_SIZES
        log(f"contended: native torch.attn and the floor, forward+backward at n, d, dv = "
            f"{'; '.join(map(fmt_size, sizes))}, {fmt_threads(CONTENDED_THREADS)}: alone, then "
            "beside one busy-loop process (one process)")  # fmt: skip
        results["contended"] = worker(layout, "contended", str(layout.fork),
                                      *(["--quick"] if quick else []))  # fmt: skip
        if results["contended"] is None:
            return 1
    mb = {}
    for method in QUICK_MEMORY_METHODS if quick else MEMORY_METHODS:
        if method in ("native", "unfused") and not timing["has_native"]:
            continue
        log(f"peak memory: {LABELS[method]} (a fresh process)")
        found = worker(layout, "memory", str(layout.fork), "--method", method, env=MEMORY_ENV)
        if found is None:
            return 1
        mb[method] = found["mb"]
    if pr4 is not None:
        log(f"peak memory: {LABELS[PR4]} (a fresh process, {tree})")
        mb[PR4] = pr4_memory(pr4, MEMORY_ENV, log)
        if mb[PR4] is None:
            return 1
    results["memory"] = {"size": MEMORY_SIZE, "mb": mb, "ratios": {RATIO: ratio(mb, "native", PR4)}}
    if not quick:
        results["tanh"] = tanh_speed(layout, log, cpu["vendor"])
        if results["tanh"] is None:
            return 1
        results["callers"] = callers_speed(layout, log)
        if results["callers"] is None:
            return 1
        log("tanh accuracy: all 2^32 float32 inputs per capability (about a minute each)")
        results["accuracy"] = [asdict(r) for r in tanh_accuracy.run(layout, log)]
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    text = report(results, settings)
    (out_dir / "bench.md").write_text(text)
    print(text, flush=True)
    png = out_dir / "bench.png"
    png.unlink(missing_ok=True)
    log("plotting")
    if not spawn(layout, "plot", str(out_dir / "bench.json"), str(png)):
        log("no plot (is matplotlib installed in .venv?)")
    written = "bench.md, bench.json" + (", bench.png" if png.exists() else "")
    log(f"wrote {written} to {out_dir}")
    return 0
