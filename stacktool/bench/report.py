"""bench.md: how it was measured, the attn times and peak memory, the tanh table, tanh's
accuracy, the profile at the smallest size, and every target with its verdict; its Summary
gives the run in a few lines (what the README quotes)."""

from stacktool import tanh_accuracy
from stacktool.bench.callers import CALLER_CASES, ORDER, STACK, V260
from stacktool.bench.common import (
    FWD,
    FWD_BWD,
    LABELS,
    METHODS,
    Settings,
    fmt_ms,
    fmt_ratio,
    fmt_size,
    fmt_threads,
    ratio,
)
from stacktool.bench.contended import COMPETITOR_FACTOR, COMPETITOR_GRACE_S
from stacktool.bench.cpu import describe, simd_flags
from stacktool.bench.memory import MEMORY_WARM_SIZE, output_mb
from stacktool.bench.tanh import FLOAT_TANH, IN_CACHE, PER_ELEMENT, TANH_CASES, VECTORIZED
from stacktool.bench.targets import (
    CALLER_TARGETS,
    COPY_BOUND,
    MISH_BOUND,
    NOT_SLOWER,
    OUTPUT,
    PR4_TARGET,
    TIME_TARGETS,
    VML_BOUND,
    VML_CASES,
    Check,
    attn_checks,
    caller_checks,
    caller_where,
    checks,
    contended_checks,
    contended_where,
    tanh_checks,
    tanh_intel,
    tanh_row_checks,
)

# How to read the profile at n = 2 (its figures come from the run; this names the parts).
PROFILE_READING = (
    "At this size no arithmetic shows: every row is a fixed cost per call: dispatcher round "
    "trips, allocations, TensorIterator set-ups, BLAS's own set-up, and the engine's work per "
    "step, which every method pays alike (autograd::engine::evaluate_function, GraphRoot, one "
    "AccumulateGrad per input). Which aten ops appear depends on the build: PR 4's kernel "
    "makes eight ATen calls per step, PR 6's CPU kernel none for its GEMMs and tanh_backward."
)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def targets_table(found: list[Check]) -> str:
    return table(["target", "where", "measured", "verdict"],
                 [[c.text, c.where, c.shown, c.verdict] for c in found])  # fmt: skip


def tally(found: list[Check]) -> str:
    count = {v: sum(c.verdict == v for c in found) for v in ("met", "not met", "n/a")}
    return f"{count['met']} met, {count['not met']} not met, {count['n/a']} n/a"


def cpu_text(results: dict) -> str:
    """The CPU as bench.json records it (cpu.py): vendor, family, model, stepping, model name
    ("AMD EPYC" alone does not tell Zen 3 from Zen 4)."""
    return describe(results.get("cpu") or {"model name": results["timing"].get("cpu")})


def pr4_run(results: dict) -> dict:
    """Where PR 4's torch.attn was run (its tree) and a note, or why not (tree None)."""
    return results.get("pr4") or {"note": "not run", "tree": None}


def pr4_text(pr4: dict) -> str:
    """What the PR 4's torch.attn column is, and where it came from or why it is empty."""
    if pr4["tree"] is None:
        return f"{LABELS['pr4']}: {pr4['note']}."
    return (
        f"{LABELS['pr4']}: the op PR 6's CPU kernel replaces, as users call it (through "
        "autograd), forward and forward+backward as native's: torch.attn of PR 4's commit, "
        f"from the gate's worktree {pr4['tree']} with its own overlay build ({pr4['note']}), "
        "timed in a process of its own (another torch) right after this one, the same sizes, "
        "thread counts and rounds, so its ratios cross two processes (1-minute load average "
        f"{pr4['load'][0]:.1f} before, {pr4['load'][1]:.1f} after). native / PR 4's "
        "torch.attn: below 1.0, this build's op is faster than PR 4's."
    )


def report(results: dict, settings: Settings) -> str:
    """bench.md: how it was measured, times, peak memory, tanh's speed and accuracy, the
    profile at the smallest size, and the targets with their sources and verdicts."""
    timing, memory = results["timing"], results["memory"]
    columns = [*METHODS, "pr4", "floor", "gemms"]
    time_rows = [
        [fmt_size(row["size"]), str(row["threads"]), row["pass"],
         *(fmt_ms(row["ms"].get(m)) for m in columns), PR4_TARGET.check("", row["ms"]).shown]
        for row in timing["rows"]
    ]  # fmt: skip
    found, attn = checks(results), attn_checks(results)
    counts = timing["threads"]
    at = " and ".join([*map(str, counts[:-1]), fmt_threads(counts[-1])])  # "1 and 2 threads"
    composite, output = memory["mb"]["composite"], output_mb(memory["size"])
    native = memory["mb"].get("native")
    mem_rows = [[LABELS[m], f"{mb:.1f}", f"{mb / composite:.3f}", f"{mb / output:.3f}",
                 fmt_ratio(native and native / mb)] for m, mb in memory["mb"].items()]  # fmt: skip
    pr4 = pr4_run(results)
    return "\n".join([
        "# torch.attn benchmark",
        "",
        f"`./stack bench` (stacktool/bench/): torch {timing['torch']}, CPU {cpu_text(results)}, "
        f"float32, {at}. 1-minute load average {timing['load'][0]:.1f} "
        f"before timing, {timing['load'][1]:.1f} after (this run's own threads count): other "
        "processes on these cores make the times noisy, so compare ratios within one run only.",
        "",
        *summary(results),
        "How the times are taken: torch.utils.benchmark, upstream's tool for a PR's figures. "
        f"Each step is a `Timer` with its thread count (num_threads: {at}); "
        f"`blocked_autorange(min_run_time={settings.min_run_time:g})` picks a block size "
        "(calls per timed block) and times blocks; that is repeated "
        f"{settings.rounds} times per step, the steps interleaved round by round so that "
        "load from other processes hits them alike. The tables give ms per call, the median "
        "of the quietest round (the least disturbed by other processes; bench.json has "
        "every round's median, whose spread shows this run's noise). All attn times come "
        "from one process, inputs allocated once per size, every step timed at each thread "
        "count in the same rounds.",
        "",
        "The columns: native torch.attn (this build's kernel and derivative: PR 4's unfused "
        "ones, from PR 6 on its fused CPU kernel); composite (eager): "
        "`a = torch.tanh(q @ k.T); return a @ v, a`; PR 2 Function: the custom "
        "autograd.Function of PR 2's test; torch.compile(composite): default inductor but for "
        "`cpp.threads`, compiled per size (static shapes) and per thread count (its C++ "
        "kernels are built for the thread count they run at), warmed before timing; "
        "torch.compile(torch.attn): the same for the native op (inductor decomposes its "
        "forward; from PR 6 on its backward graph calls attn's kernel). forward: "
        "inputs without requires_grad; forward+backward: "
        "`torch.autograd.backward((o, a), (go, ga))`, so both outputs' gradients flow. floor "
        "(forward+backward): the ATen calls of PR 4's unfused kernel and attn_backward, with no "
        "autograd around them: mm(q, k.T) then tanh_ in place, mm(a, v); backward mm(a.T, go), "
        "addmm(ga, go, v.T) with tanh_backward written into it in place, mm(gx, k), mm(gx.T, q); "
        "from PR 6 on torch.attn no longer makes these calls. GEMMs alone: the six GEMMs of "
        "attn's shapes (two forward), each one at::mm into a preallocated output: q k^T, a v; "
        "backward a^T go, go v^T, gx k, gx^T q; what no implementation that calls BLAS for "
        "them can beat. " + pr4_text(pr4)
        + ("" if timing["has_native"] else " torch.attn does not exist in this build: n/a."),
        "",
        table(["n, d, dv", "threads", "pass", *(LABELS[c] for c in columns),
               f"native / {LABELS['pr4']}"], time_rows),  # fmt: skip
        "",
        "![composite's and torch.compile's time over native torch.attn's, per size, at "
        f"{fmt_threads(timing['threads'][-1])}](bench.png)",
        "",
        f"Peak memory of one forward+backward at n, d, dv = {fmt_size(memory['size'])}, "
        f"{fmt_threads(timing['threads'][-1])}: each method in a fresh process, after a "
        "warm-up at "
        f"{fmt_size(MEMORY_WARM_SIZE)} (torch.compile: dynamic shapes, so nothing compiles in "
        "the step), with glibc's mmap threshold fixed at 64 KiB so that freed tensors leave "
        "RSS; inputs and output grads allocated, then the peak RSS is reset "
        "(/proc/self/clear_refs) and the growth VmHWM - VmRSS is read after the step. "
        f"{LABELS['unfused']}: the floor's step (PR 4's kernel's and derivative's ATen calls: "
        "attn and the n x n gradient of q k^T alive together), which torch.attn no longer "
        "makes at any setting. "
        f"{LABELS['pr4']}: PR 4's op as users call it, through autograd (its kernel, what "
        "autograd saves, its derivative), in PR 4's tree as above"
        + (f" ({pr4['note']})" if pr4["tree"] is None else "")
        + ": native's figure is measured the same way, PR 4's unfused path without autograd. "
        f"{OUTPUT}: the n x n float32 output a alone, {output:.1f} MB, computed (n * n * 4 "
        "bytes), not measured: a peak near it means no n x n temporary beyond a.",
        "",
        table(["method", "peak RSS growth (MB)", "/ composite", f"/ {OUTPUT}", "native / it"],
              mem_rows),  # fmt: skip
        *contended_section(results.get("contended")),
        *tanh_section(results.get("tanh")),
        *callers_section(results.get("callers")),
        *accuracy_section(results.get("accuracy")),
        *profile_section(timing.get("profile")),
        "",
        "## Targets for torch.attn",
        "",
        "The goals this project set for the native op (README, section Benchmark), the times "
        "at each thread count: at least 1.5x the composite's speed at n <= 64 and 1.15x at "
        "n >= 512, forward+backward; never slower than torch.compile of the composite, forward "
        "and forward+backward; within 10 % of the floor at n >= 2048, forward+backward; "
        "within 5 % of the GEMMs alone at n >= 512, forward and forward+backward; at most "
        f"1.00x {LABELS['pr4']}'s time (the code PR 6 replaces) at every size, forward and "
        "forward+backward; in the "
        "contended case, at 2 threads, at most 1.00x the floor at n >= 2048, forward+backward, "
        "with one busy-loop process beside the run and without; peak memory "
        "at most 0.75x the composite's, at most 0.65x PR 4's unfused path's and at most "
        f"1.40x the {OUTPUT}'s own size (no n x n temporary beyond a). Each ratio is shown as "
        "measured, and a target is met only if that number meets it.",
        "",
        targets_table(attn),
        "",
        f"torch.attn: {tally(attn)}. All targets of this run, tanh's included: "
        f"{tally(found)}.",
    ]) + "\n"  # fmt: skip


def series(
    results: dict, other: str, count: int, inverse: bool = False, name: str = FWD_BWD
) -> str:
    """One ratio per size at one thread count and pass, as measured: "1.335 at 2, 3, 4; ..."
    (other / native, or native / other when `inverse`), shown as its target's verdict reads it
    where one applies."""
    found = []
    for row in results["timing"]["rows"]:
        native, value = row["ms"].get("native"), row["ms"].get(other)
        if (row["pass"], row["threads"]) == (name, count) and native and value:
            held = [t.check("", row["ms"]).shown for t in TIME_TARGETS
                    if (t.other, t.at_least) == (other, not inverse) and name in t.passes
                    and t.applies(row["size"][0])]  # fmt: skip
            shown = held[0] if held else f"{native / value if inverse else value / native:.3f}"
            found.append(f"{shown} at {fmt_size(row['size'])}")
    return "; ".join(found) or "n/a"


def summary(results: dict) -> list[str]:
    """The run in a few lines (what the README quotes): the ratios the targets are about, per
    thread count."""
    attn = attn_checks(results)
    missed = [f"{c.text} at {c.where} ({c.shown})" for c in attn if c.verdict == "not met"]
    *_, by_composite, by_unfused, by_output = attn  # the memory targets come last
    cpu, pr4 = results.get("cpu") or {}, pr4_run(results)
    lines = ["## Summary", "", f"- CPU: {cpu_text(results)}; of its SIMD flags: {simd_flags(cpu)}"]
    if pr4["tree"] is None:
        lines.append(f"- {LABELS['pr4']}: {pr4['note']}")
    for count in results["timing"]["threads"]:
        at = fmt_threads(count)
        lines += [
            f"- {at}, forward+backward, composite / native: {series(results, 'composite', count)}",
            f"- {at}, forward+backward, torch.compile / native: "
            f"{series(results, 'compile', count)}",
            f"- {at}, forward+backward, torch.compile(torch.attn) / native: "
            f"{series(results, 'compile_attn', count)}",
            f"- {at}, forward+backward, native / floor: "
            f"{series(results, 'floor', count, inverse=True)}",
            f"- {at}, forward+backward, native / GEMMs alone: "
            f"{series(results, 'gemms', count, inverse=True)}",
            f"- {at}, forward, native / GEMMs alone: "
            f"{series(results, 'gemms', count, inverse=True, name=FWD)}",
            f"- {at}, forward+backward, native / {LABELS['pr4']}: "
            f"{series(results, 'pr4', count, inverse=True)}",
            f"- {at}, forward, native / {LABELS['pr4']}: "
            f"{series(results, 'pr4', count, inverse=True, name=FWD)}",
        ]
    for condition, text in CONDITION_TEXT.items() if "contended" in results else ():
        found = [f"{shown} at {fmt_size(r['size'])}" for r, shown
                 in contended_ratios(results["contended"]) if r["condition"] == condition]  # fmt: skip
        at = fmt_threads(results["contended"]["threads"])
        lines.append(f"- {at}, forward+backward, {condition} ({text}), native / floor: "
                     f"{'; '.join(found) or 'n/a'}")  # fmt: skip
    lines += [
        f"- peak memory, native / composite: {by_composite.shown}",
        f"- peak memory, native / PR 4's unfused path: {by_unfused.shown}",
        f"- peak memory, native / {OUTPUT}: {by_output.shown}",
        f"- peak memory, native / {LABELS['pr4']} (both through autograd): "
        + fmt_ratio(ratio(results["memory"]["mb"], "native", "pr4")),
        f"- torch.attn's targets: {tally(attn)}"
        + (f"; not met: {'; '.join(missed)}" * bool(missed)),
    ]
    tanh = tanh_checks(results.get("tanh"))
    if tanh:

        def at_one_thread(case: str, kind: str) -> str:
            """This target's ratio in this case at 1 thread, per capability."""
            return ", ".join(f"{c.shown} {c.where.rsplit(', ', 1)[1]}" for c in tanh
                             if c.where.startswith(f"tanh {case}, 1 thread,")
                             and c.text.startswith(f"{kind} "))  # fmt: skip

        missed = [f"{c.where.removeprefix('tanh ')} ({c.shown} for {c.text})"
                  for c in tanh if c.verdict == "not met"]  # fmt: skip
        unread = f" ({UNREAD})" * (not results["tanh"]["reads_float_tanh"])
        lines += [
            "- tanh contiguous 2048 x 2048, 1 thread, v2.6.0 / this stack: "
            + at_one_thread("contiguous", "v2.6.0 / this stack"),
            "- tanh contiguous 2048 x 2048, 1 thread, vectorized / copy: "
            + at_one_thread("contiguous", "vectorized / copy")
            + unread,
        ]
        in_cache = [r for r in results["tanh"]["rows"] if r["case"] == IN_CACHE]
        if in_cache:  # not in a run from before the row was added
            times = "; ".join(
                " / ".join(tanh_time(r, column) for column in IN_CACHE_TIMES)
                + f" {r['capability']}" for r in in_cache
            )  # fmt: skip
            lines += [
                f"- tanh in cache ({PER_ELEMENT[IN_CACHE]} floats), 1 thread, ns per element, "
                f"{' / '.join(IN_CACHE_TIMES)}: {times}",
                f"- tanh in cache ({PER_ELEMENT[IN_CACHE]} floats), 1 thread, v2.6.0 / this "
                "stack: " + at_one_thread(IN_CACHE, "v2.6.0 / this stack"),
            ]
        if tanh_intel(results["tanh"]):
            lines += [
                f"- tanh {case}, 1 thread, vectorized / v2.6.0 (an Intel CPU's VML): "
                + at_one_thread(case, "vectorized / v2.6.0")
                + unread
                for case in VML_CASES
            ]
        lines.append(f"- tanh's targets: {tally(tanh)}"
                     + (f"; not met: {'; '.join(missed)}" * bool(missed)))  # fmt: skip
    callers = caller_checks(results.get("callers"))
    if callers:
        missed = [f"{c.where} ({c.shown} for {c.text})" for c in callers if c.verdict == "not met"]
        lines.append(f"- tanh's callers' targets: {tally(callers)}"
                     + (f"; not met: {'; '.join(missed)}" * bool(missed)))  # fmt: skip
    return [*lines, ""]


CONDITION_TEXT = {"uncontended": "nothing beside the run",
                  "contended": "one busy-loop process beside the run"}  # fmt: skip


def contended_ratios(contended: dict | None) -> list[tuple[dict, str]]:
    """Each row of the contended case with its native / floor, shown as its target's verdict
    reads it where one applies."""
    held = {c.where: c for c in contended_checks(contended)}
    found = []
    for r in (contended or {}).get("rows", []):
        check = held.get(contended_where(r))
        found.append((r, check.shown if check else fmt_ratio(ratio(r["ms"], "native", "floor"))))
    return found


def contended_section(contended: dict | None) -> list[str]:
    """The contended case's table: native and the floor per size, alone and beside one
    busy-loop process, with the load average at the phase's start and end."""
    if not contended:
        return []
    rows = [[fmt_size(r["size"]), str(r["threads"]), r["condition"], fmt_ms(r["ms"]["native"]),
             fmt_ms(r["ms"]["floor"]), shown] for r, shown in contended_ratios(contended)]  # fmt: skip
    start, busy, end = contended["load"]
    header = [LABELS["native"], LABELS["floor"], "native / floor"]
    early = "" if contended["busy_loop_throughout"] else (
        " Note: the busy loop reached its deadline before the contended rounds ended: some of "
        "them ran uncontended."
    )  # fmt: skip
    return [
        "",
        "## Contended: one busy-loop process beside the run",
        "",
        f"Native torch.attn's forward+backward and the floor (as above) at "
        f"{fmt_threads(contended['threads'])}, in one process of their own, the steps "
        "interleaved round by round and timed as above: every round first with nothing beside "
        "the run (uncontended), then every round again while one busy-loop process runs "
        "beside it (contended): `python -c` of a `while` loop that does nothing else, started "
        "by this phase when the uncontended rounds end and killed when the contended ones do "
        f"(it would exit by itself after {contended['busy_loop_s']:.0f} s: "
        f"{COMPETITOR_GRACE_S:g} s plus {COMPETITOR_FACTOR}x the uncontended rounds' time). "
        f"1-minute load average {start:.1f} at the phase's start, {busy:.1f} when the busy "
        f"loop had started, {end:.1f} at the phase's end." + early,
        "",
        table(["n, d, dv", "threads", "condition", *header], rows),
    ]


# The tanh table's times (by column) and ratios (column: numerator, denominator).
TANH_TIMES = ("v2.6.0", "Sleef u10", "this stack", VECTORIZED, "copy")
TANH_RATIOS = {
    "v2.6.0 / this stack": ("v2.6.0", "this stack"),
    "Sleef / this stack": ("Sleef u10", "this stack"),
    "this stack / copy": ("this stack", "copy"),
    "vectorized / copy": (VECTORIZED, "copy"),
    "vectorized / v2.6.0": (VECTORIZED, "v2.6.0"),
}
UNREAD = f"this stack's build does not read {FLOAT_TANH}: its vectorized column is what users get"
IN_CACHE_TIMES = ("v2.6.0", "this stack", "copy")  # the in-cache times the Summary gives


def tanh_time(row: dict, column: str) -> str:
    """One time of the tanh table: ms per call, or ns per element in PER_ELEMENT's cases."""
    ms, elements = row["ms"].get(column), PER_ELEMENT.get(row["case"])
    return fmt_ms(ms * 1e6 / elements if ms is not None and elements else ms)


def tanh_case(case: str) -> str:
    """A case's name in the table, which says where its times are per element."""
    return f"{case} (ns per element)" if case in PER_ELEMENT else case


def tanh_section(tanh: dict | None) -> list[str]:
    if not tanh:
        return []
    rows = []
    intel = tanh_intel(tanh)
    for r in tanh["rows"]:
        held = tanh_row_checks(r, intel)  # a ratio with a target is shown as its verdict reads it
        ratios = [held[name].shown if name in held else fmt_ratio(ratio(r["ms"], *pair))
                  for name, pair in TANH_RATIOS.items()]  # fmt: skip
        rows.append([r["capability"], tanh_case(r["case"]), str(r["threads"]),
                     *(tanh_time(r, column) for column in TANH_TIMES), *ratios])  # fmt: skip
    skipped = [c for c in tanh_accuracy.CAPABILITIES if c not in tanh["capabilities"]]
    cases = "; ".join(f"{name}: {text}" for name, text in TANH_CASES.items())
    per_element = "; ".join(f"the {name} case's times in ns per element (ms per call x 10^6 / "
                            f"{count})" for name, count in PER_ELEMENT.items())  # fmt: skip
    vendor = tanh.get("cpu_vendor") or "not known"
    found = tanh_checks(tanh)
    return [
        "",
        "## CPU tanh: PR 5 against v2.6.0, Sleef and a copy",
        "",
        f"`torch.tanh(x, out=y)`, y contiguous, ms per call (median, timed as above) at 1 "
        f"thread, and the contiguous case at {max(r['threads'] for r in tanh['rows'])} too; "
        f"{per_element}, its row's name says so (bench.json keeps ms per call for every case). "
        f"The cases (standard normal values, float32 unless said): {cases}. v2.6.0: the "
        "wheel's own torch (MKL VML's tanh for float, Sleef for bfloat16 and float16); Sleef "
        "u10: Vectorized<float>::tanh in v2.6.0's own iterator loop, what v2.6.0's builds "
        "without MKL (aarch64) run, compiled here per capability against the wheel's headers "
        "(none at default, whose Vectorized<float>::tanh is std::tanh); this stack: PR 5's "
        f"kernel through the overlay as users get it, {FLOAT_TANH} unset (float: PR 5's "
        "vectorized kernel at avx2 and avx512 on every x86 CPU, Intel's included; VML only "
        f"with {FLOAT_TANH}=vml); {VECTORIZED}: the same with {FLOAT_TANH}=vectorized, so the "
        "same kernel as this stack's column, which is the one users get (avx2 and avx512 only: "
        "the default build keeps v2.6.0's code); copy: `y.copy_(x)`, the same input into the "
        "same output at 1 thread, what moving the data alone takes, timed in the vectorized "
        "column's process where there is one (so that the copy target's ratio comes from one "
        "process), else in this stack's. Each build, setting and ATEN_CPU_CAPABILITY runs in a "
        "process of its own (Sleef in v2.6.0's), capabilities as this CPU reports them"
        + (f"; {', '.join(skipped)}: skipped, this CPU lacks it" if skipped else "")
        + ". Ratios are one column's time over another's: v2.6.0 / this stack above 1, this "
        "stack is faster; kernel / copy, how many copies' time the kernel takes; vectorized / "
        "v2.6.0 below 1, the vectorized kernel is faster than v2.6.0's."
        + ("" if tanh["reads_float_tanh"] else f" Note: {UNREAD}."),
        "",
        table(["capability", "case", "threads", *TANH_TIMES, *TANH_RATIOS], rows),
        "",
        f"Targets (README, Benchmark): this stack as users get it not slower than v2.6.0, "
        f"v2.6.0 / this stack >= {NOT_SLOWER:.2f} for every case at every capability ("
        f"{NOT_SLOWER} for the noise of these machines); contiguous float32 at 1 thread with "
        f"{FLOAT_TANH}=vectorized at most {COPY_BOUND:.2f}x the copy's time, with AVX2 and "
        f"with AVX512; on Intel CPUs only (informational), with {FLOAT_TANH}=vectorized at "
        f"most {VML_BOUND:.2f}x v2.6.0's time (its VML) at 1 thread, {' and '.join(VML_CASES)}, "
        "with AVX2 and with AVX512, in place of the in-cache issue's \"at most 0.6x today's "
        "kernel\", which one run cannot compute (no column runs the old kernel). This CPU's "
        f"vendor: {vendor}, so that target is "
        + ("applied here." if intel else "not applied here."),
        "",
        targets_table(found),
        "",
        f"tanh: {tally(found)}.",
    ]


def callers_section(callers: dict | None) -> list[str]:
    """The table of tanh's other callers (callers.py) and its targets."""
    if not callers:
        return []
    found = caller_checks(callers)
    by_where = {}
    for c in found:
        by_where.setdefault(c.where, []).append(c)
    rows = []
    for r in callers["rows"]:
        held = "; ".join(f"{c.text}: {c.shown}" for c in by_where.get(caller_where(r), []))
        rows.append([r["capability"], r["case"], r["condition"], fmt_ms(r["ms"].get(V260)),
                     fmt_ms(r["ms"].get(STACK)), fmt_ratio(ratio(r["ms"], V260, STACK)),
                     held])  # fmt: skip
    cases = "; ".join(f"{name}: `{text}`" for name, text in CALLER_CASES.items())
    targets = "; ".join(
        f"{case} at most {bound:.2f}x {over}" for case, over, bound in CALLER_TARGETS
    )
    return [
        "",
        "## tanh's other callers: PR 5's at::vec tanh against v2.6.0",
        "",
        "ms per call (median, timed as above), out of place, x = randn(2048, 2048) (float32 "
        "unless said); every case at 1 thread, the eager ones also at 2 threads alone and "
        "beside one busy-loop process; two processes per build and capability, in the order "
        f"{', '.join(ORDER)}, each case's faster one kept. The cases: {cases}. "
        f"{V260}: the wheel's own torch (Sleef's tanh inside GELU, mish and BFloat16; its "
        "inductor emits 2 / (1 + exp(-2x)) - 1, its compiled kernels cached apart); "
        f"{STACK}: at avx2 and avx512 every case's tanh is PR 5's kernel (Vectorized<float>::tanh"
        ", the upstream kernel files that call it compiled again by the overlay; inductor "
        "emits `.tanh()`) and GELU's tanh approximation PR 5's kernel x / (1 + exp(-2u)) "
        "(float, BFloat16, Half; every element through its vector code, strided operands "
        "gathered into a buffer), at default v2.6.0's code.",
        "",
        table(
            ["capability", "case", "threads", V260, STACK, "v2.6.0 / this stack", "targets"], rows
        ),
        "",
        f'Targets (the issue "One fast tanh for all of CPU PyTorch"), at avx2 and avx512, '
        f"this stack's column: {targets}; mish at most {MISH_BOUND:.2f}x v2.6.0's time; every "
        f"case but the copy not slower than v2.6.0, v2.6.0 / this stack >= {NOT_SLOWER:.2f}, at "
        "every capability and condition.",
        "",
        targets_table(found),
        "",
        f"tanh's callers: {tally(found)}.",
    ]


def accuracy_section(accuracy: list | None) -> list[str]:
    if not accuracy:
        return []
    rows = [[r["name"], "passed" if r["passed"] else "skipped" if r["skipped"] else "FAILED",
             r["note"]] for r in accuracy]  # fmt: skip
    return [
        "",
        "This stack's float32 tanh against the correctly rounded result, every one of the "
        "2^32 inputs (stacktool/tanh_accuracy.py; the bar: at most 1 ULP, NaN kept, "
        "tanh(-x) = -tanh(x) bit for bit, which covers -0 and -inf):",
        "",
        table(["check", "result", "found"], rows),
    ]


def profile_section(profile: dict | None) -> list[str]:
    if not profile:
        return []
    rows = [[r["name"], f"{r['calls']:g}", f"{r['self_us']:.2f}"] for r in profile["ops"]]
    return [
        "",
        "## Where the native op's time goes at the smallest size",
        "",
        f"Native torch.attn's forward+backward at n, d, dv = "
        f"{fmt_size(profile['size'])}: torch.profiler, the fastest of {profile['rounds']} "
        f"rounds of {profile['steps']} steps, per step (self CPU time, so nothing is counted "
        f"twice). Profiled, a step took {profile['step_us']:.1f} us; the ops' self times add up "
        f"to {profile['ops_us']:.1f} us, "
        "the rest is Python and the autograd engine between ops. The profiler's own cost per op "
        "is in these figures, so the unprofiled step above is shorter.",
        "",
        table(["op", "calls per step", "self us per step"], rows),
        "",
        PROFILE_READING,
    ]
