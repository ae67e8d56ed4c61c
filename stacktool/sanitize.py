"""`./stack sanitize`: the stack's C++ under AddressSanitizer and UndefinedBehaviorSanitizer.

1. Build: the overlay build (stacktool/overlay) of the tree, its sources and machinery,
   into a folder of its own (`build_dir`: build/sanitize/overlay for pytorch/), every
   translation unit compiled with CXXFLAGS (ASan and UBSan, UBSan's errors fatal, frame
   pointers, debug info for the reports' lines) and both libraries linked with LDFLAGS
   (overlay.compile.Variant). It writes nothing else: build/overlay and the tree stay as
   they are, also when it is interrupted (the tree's generated files are not refreshed; the
   headers it overlays are those build/overlay's record names).
2. Run, under the venv's Python with the sanitizers' runtimes preloaded (`preload`: gcc's
   libasan and libubsan, then libstdc++), their options (ASAN_OPTIONS, UBSAN_OPTIONS, below)
   and STACK_OVERLAY_BUILD naming the sanitized build (`environment`): sanitize_sweep.py
   (attn's kernel at every block and run edge, tanh's at its own), PR 2's test file
   (TestAttnCPUKernel and the rest) and tanh's tests of test_unary_ufuncs, each at every
   CPU capability this CPU runs, and attn's OpInfo samples in test_ops once (`checks`).
3. Collect: each process writes its report into a folder of its check's own (log_path), so
   a report from a subprocess is found too (`collect`); every one is printed whole at the
   end, then a pytest-style closing line of the tests' counts and `N sanitizer reports`.
   A report, a failed test or a missing runtime (`find_runtimes`) exits 1.

`task` is the gate's check (a subset, see GATE_TESTS, at gate_capability); INJECTIONS and
`inject_and_run` the sanitizers' own test: a build with a one-element overrun injected must
report it.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stacktool import overlay, tanh_accuracy
from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.overlay import vec_callers
from stacktool.overlay.compile import Variant
from stacktool.overlay.loader import ENV as OVERLAY_ENV
from stacktool.suites import WORKERS, Processes, Result, Task, pytest_counts, run_all, suite_env

# ----------------------------------------------------------------------------- compile and link

SANITIZERS = "-fsanitize=address,undefined"
CXXFLAGS = (
    f"{SANITIZERS} -fno-sanitize-recover=undefined"  # a UBSan error ends the process, as ASan's
    " -fno-omit-frame-pointer"  # ASan's fast unwinder (allocation stacks) walks frame pointers
    " -g"  # line tables and inlined frames: a report names the line of the access (-g1 lacks
    # the inlined frames: an overrun in vec::map names the header, not the kernel's line)
)  # fmt: skip
LDFLAGS = SANITIZERS  # gcc links libasan and libubsan into both libraries (--no-undefined)

# ----------------------------------------------------------------------------- runtime

# gcc's runtimes, found by `$CXX -print-file-name=NAME`, and Debian's package of each
# (libasan's soname follows gcc's major version: libasan6 for gcc 10 and 11, 8 from 12 on).
RUNTIMES = ("libasan.so", "libubsan.so")
ASAN_PACKAGES = {9: "libasan5", 10: "libasan6", 11: "libasan6"}  # 12, 13, 14: libasan8
# ASan intercepts __cxa_throw and resolves the real one when it starts: libstdc++ must be
# loaded by then (preloaded after libasan), or the first C++ exception aborts the process.
LIBSTDCXX = "libstdc++.so.6"

# Every option, in one place; `environment` adds log_path (the check's own folder).
ASAN_OPTIONS = {
    # CPython and torch keep objects until exit on purpose (interned strings, the
    # dispatcher's registrations, caches): leak reports would be theirs, not the stack's.
    "detect_leaks": "0",
    # The first error ends the process (ASan's default without -fsanitize-recover=address,
    # stated here): what follows a memory error is not to be trusted.
    "halt_on_error": "1",
    # A static initializer of the overlay (its registrations, the DispatchStub pointers it
    # re-points) that reads another instrumented module's global before that is made.
    "check_initialization_order": "1",
    # Not set, found not to be needed here (a CPU-only torch; no report, every test passing
    # without them): protect_shadow_gap=0 (for CUDA's driver, which maps memory in ASan's
    # shadow gap); allow_user_segv_handler (deprecated, without effect in gcc 12's runtime:
    # with handle_segv=1, its default, faulthandler's and torch's SIGSEGV handlers may be
    # installed over ASan's); detect_odr_violation=0, alloc_dealloc_mismatch=0 (the wheel's
    # uninstrumented code allocates through ASan's malloc and new too, and mixes none).
}
UBSAN_OPTIONS = {
    "print_stacktrace": "1",  # the calls that led to it, not only the line
    "halt_on_error": "1",  # with -fno-sanitize-recover=undefined: the first report ends it
    "report_error_type": "1",  # names the check: [-fsanitize=signed-integer-overflow]
}
ASAN_LOG, UBSAN_LOG = "asan", "ubsan"  # log_path prefixes: the runtime appends .PID


def compiler() -> str:
    """The C++ compiler the overlay build uses (compile.py: $CXX, else c++)."""
    return os.environ.get("CXX", "c++")


def package(runtime: str, gcc_major: int | None) -> str:
    """Debian's package that installs `runtime` for gcc `gcc_major`."""
    if runtime == "libubsan.so":
        return "libubsan1"
    return ASAN_PACKAGES.get(gcc_major or 12, "libasan8")


def find_runtimes(run=subprocess.run) -> list[Path]:
    """[libasan, libubsan] of the compiler, resolved; StackError naming the Debian package
    to install for a missing one (a missing runtime is an error, never a skip)."""
    cxx = compiler()
    try:
        version = run([cxx, "-dumpversion"], capture_output=True, text=True).stdout.strip()
    except OSError as e:
        raise StackError(f"no C++ compiler ({cxx}): {e}; ./stack sanitize builds with it") from e
    major = version.split(".")[0]
    found, missing = [], []
    for name in RUNTIMES:
        printed = run([cxx, f"-print-file-name={name}"], capture_output=True, text=True)
        path = Path(printed.stdout.strip())
        # gcc prints the bare name when it has no such file; a dangling link: not installed
        if path.is_absolute() and path.exists():
            found.append(path.resolve())
        else:
            missing.append(name)
    if missing:
        names = " ".join(package(name, int(major) if major.isdigit() else None) for name in missing)
        raise StackError(
            f"the sanitizers' runtime is not installed: {' and '.join(missing)} not found by "
            f"`{cxx} -print-file-name` ({cxx} {version or 'of unknown version'}); install "
            f"Debian's {names} (apt-get install {names}), then run ./stack sanitize again"
        )
    return found


def preload(runtimes: list[Path], inherited: str = "") -> str:
    """LD_PRELOAD: libasan first (it must come first in the process), libubsan, libstdc++
    (see LIBSTDCXX), then what the environment preloaded already."""
    return ":".join([*map(str, runtimes), LIBSTDCXX, *filter(None, inherited.split(":"))])


def options(settings: dict[str, str], log_path: Path) -> str:
    return ":".join(f"{key}={value}" for key, value in {**settings, "log_path": log_path}.items())


def environment(layout: Layout, build: Path, logs: Path, runtimes: list[Path],
                extra: dict[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """What a sanitized run's processes get: the gate's environment for the layout's torch
    (suites.suite_env: no inherited kernel choice, its own inductor cache; `extra`), the
    sanitized build named to the venv's hook, the runtimes preloaded, their options with
    reports written under `logs`, and no bytecode written into the tree."""
    env = suite_env(layout, extra)
    env.update({
        OVERLAY_ENV: str(build),
        "LD_PRELOAD": preload(runtimes, os.environ.get("LD_PRELOAD", "")),
        "ASAN_OPTIONS": options(ASAN_OPTIONS, logs / ASAN_LOG),
        "UBSAN_OPTIONS": options(UBSAN_OPTIONS, logs / UBSAN_LOG),
        "PYTHONDONTWRITEBYTECODE": "1",
    })  # fmt: skip
    return env


@dataclass
class Report:
    """One file a sanitizer wrote: the check that ran, the file's name (asan.PID), its text."""

    check: str
    name: str
    text: str

    def first_lines(self, count: int = 4) -> str:
        return "\n".join([line for line in self.text.splitlines() if line.strip()][:count])


def collect(check: str, logs: Path) -> list[Report]:
    """Every report written under `logs` (a file per process that had one), by name."""
    if not logs.is_dir():
        return []
    return [Report(check, path.name, path.read_text(errors="replace"))
            for path in sorted(logs.iterdir())
            if path.is_file() and path.stat().st_size > 0]  # fmt: skip


# ----------------------------------------------------------------------------- build


def build_dir(layout: Layout, gate: bool = False) -> Path:
    """The sanitized build of the layout's tree: build/sanitize/overlay for pytorch/ (with
    `gate`, the gate's partly instrumented one: build/sanitize/gate); beside a gate
    worktree's own build for the gate's (build/gate/level-N/sanitize)."""
    if layout.tree is None:
        return layout.build / "sanitize" / ("gate" if gate else "overlay")
    return layout.overlay.parent / "sanitize"


def gate_objects(capability: str) -> tuple[str, ...]:
    """What the gate instruments (Variant.only): the stack's CPU kernel files' objects (PR
    6's AttnKernel.cpp, PR 5's lines of UnaryOpsKernel.cpp) at the capability its checks
    run, and of the upstream kernel files compiled again whole (overlay/vec_callers.py) the
    one with the stack's own loops, Activation.cpp (PR 5's GELU; the sweep calls it)."""
    files = [f"{prefix}aten__src__ATen__native__cpu__*" for prefix in ("", "added__")]
    files.append(f"{vec_callers.PREFIX.replace('/', '__')}aten__src__ATen__native__cpu__Activation")
    return tuple(f"core/{name}.{capability.upper()}" for name in files)


def build(layout: Layout, target: Path, only: tuple[str, ...] = (),
          inject: tuple[tuple[str, str, str], ...] = ()) -> Path:  # fmt: skip
    """The sanitized overlay build of the layout's tree into `target` (see Variant for
    `only` and `inject`); its path.

    Codegen output is taken from the project's other builds where made from the same inputs;
    compiles go through the project's ccache: an instrumented TU's command differs from the
    overlay build's and is cached apart, the others (`only`) are the overlay build's own."""
    variant = Variant(CXXFLAGS, LDFLAGS, tree_build=layout.overlay, only=only, inject=inject)
    overlay.build(layout.fork, layout.python, target, jobs=os.cpu_count() or 1,
                  cache_dir=layout.ccache, seeds=(layout.overlay, *layout.builds()),
                  variant=variant, wheel=layout.wheel_tree)  # fmt: skip
    return target


# ----------------------------------------------------------------------------- checks

SWEEP = Path(__file__).resolve().parent / "sanitize_sweep.py"
TANH = "tanh and not atanh and not hardtanh"  # as level 5 selects tanh's tests
# The gate's subset (one of level 6's checks, beside its suites: CI's whole run must stay
# under 45 min, and the full run takes about 20 min on 2 cores, see the README): at one
# capability (gate_capability), instrumenting only the kernel files there (gate_objects: the
# rest is the level's own build, from ccache), the sweep with one row over or under each block
# edge and every vector tail (EDGES; its tanh test whole), and PR 6's TestAttnCPUKernel.
EDGES = {"STACK_SWEEP_SIZES": "edges"}
GATE_TESTS = ("test/test_attn_gradcheck.py", "-k", "TestAttnCPUKernel")


def gate_capability(capabilities: list[str]) -> str:
    """The capability of the gate's subset and of the injected overruns' run: AVX2 where the
    CPU runs it, on an AVX-512 CPU too. ASan sees a vector tail at AVX2, whose
    Vectorized::loadu(ptr, count) and store(ptr, count) copy through a buffer with memcpy
    (intercepted), not at AVX512, whose masked loads and stores gcc does not instrument: the
    tanh_tail overrun is reported at avx2 and not at avx512 (Zen 4). `./stack sanitize` runs
    every capability."""
    return "avx2" if "avx2" in capabilities else capabilities[-1]


@dataclass(frozen=True)
class Check:
    """One pytest process under the sanitizers: `args` to pytest, run in the tree (or, for
    the sweep, in the project root), with `env` (the CPU capability it forces)."""

    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    in_root: bool = False


def checks(capabilities: list[str], gate: bool = False) -> list[Check]:
    """What a run checks, per tanh_accuracy.variants (DEFAULT, then AVX2 and AVX512 with
    PR 5's float kernel) of the `capabilities` this CPU runs; `gate`: the gate's subset, at
    gate_capability."""
    found = []
    variants = tanh_accuracy.variants(capabilities, vml="")
    if gate:
        variants = [v for v in variants if v[0] == gate_capability(capabilities)]
    for capability, kernel in variants:
        label = tanh_accuracy.label(capability, kernel)
        env = tanh_accuracy.variant_env(capability, kernel)
        sweep = tuple(sorted({**env, **(EDGES if gate else {})}.items()))
        env = tuple(sorted(env.items()))
        if gate:
            found += [Check(f"sanitize_sweep, edges {label}", (str(SWEEP),), sweep, True),
                      Check(f"test_attn_gradcheck -k TestAttnCPUKernel {label}", GATE_TESTS,
                            env)]  # fmt: skip
        else:
            found += [Check(f"sanitize_sweep {label}", (str(SWEEP),), sweep, True),
                      Check(f"test_attn_gradcheck {label}", ("test/test_attn_gradcheck.py",), env),
                      Check(f"test_unary_ufuncs -k tanh {label}",
                            ("test/test_unary_ufuncs.py", "-k", TANH), env)]  # fmt: skip
    if not gate:
        found.append(Check("test_ops -k attn", ("test/test_ops.py", "-k", "attn")))
    return found


def run_check(layout: Layout, check: Check, build: Path, runtimes: list[Path],
              reports: list[Report], processes: Processes) -> tuple[Result, str]:  # fmt: skip
    """One check: its pytest counts, a failure per report (added to `reports`)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stack-sanitize-") as tmp:
        env = environment(layout, build, Path(tmp), runtimes, dict(check.env))
        command = [str(layout.python), "-m", "pytest", *check.args, "-p", "no:cacheprovider"]
        proc = processes.run(command, cwd=layout.root if check.in_root else layout.fork, env=env)
        found = collect(check.name, Path(tmp))
    reports += found
    output = proc.stdout + proc.stderr
    passed, failed, skipped = pytest_counts(output)
    if proc.returncode != 0 and failed == 0:
        failed = 1  # ended by a sanitizer (or pytest failed without a test failing)
    note = f"{time.monotonic() - started:.0f} s; {len(found)} sanitizer report(s)"
    if passed + failed == 0:
        failed, note = 1, f"ran no test; {note}"
    return Result(check.name, passed, failed + len(found), skipped, note), output


def run_checks(layout: Layout, log, build: Path, runtimes: list[Path], selected: list[Check],
               workers: int = WORKERS) -> tuple[list[Result], list[Report]]:  # fmt: skip
    """Run `selected`, `workers` at a time (suites.run_all: each shown as it ends)."""
    reports: list[Report] = []
    tasks = [Task(c.name, lambda processes, c=c: run_check(layout, c, build, runtimes,
                                                          reports, processes))
             for c in selected]  # fmt: skip
    return run_all(layout, tasks, log, workers), reports


def table(results: list[Result]) -> str:
    width = max(len(r.name) for r in results)
    rows = [f"{'check':<{width}}  passed  failed  skipped  note"]
    rows += [f"{r.name:<{width}}  {r.passed:>6}  {r.failed:>6}  {r.skipped:>7}  {r.note}"
             for r in results]  # fmt: skip
    return "\n".join(rows)


def summary(results: list[Result], reports: list[Report], seconds: float) -> str:
    """The closing lines: every report whole, then pytest's closing line of the checks'
    counts (their failures less the reports) and the number of reports."""
    lines = []
    for report in reports:
        lines += [f"----- sanitizer report {report.name} ({report.check}) -----",
                  report.text.rstrip()]  # fmt: skip
    failed = sum(r.failed for r in results) - len(reports)
    counts = [(failed, "failed"), (sum(r.passed for r in results), "passed"),
              (sum(r.skipped for r in results), "skipped")]  # fmt: skip
    said = ", ".join(f"{n} {kind}" for n, kind in counts if n) or "no tests ran"
    lines.append(f"{'=' * 20} {said} in {seconds:.2f}s {'=' * 20}")
    lines.append(f"{len(reports)} sanitizer report{'' if len(reports) == 1 else 's'}")
    return "\n".join(lines)


def sanitized(layout: Layout, log, target: Path, runtimes: list[Path], capabilities: list[str],
              gate: bool) -> tuple[list[Result], list[Report]]:  # fmt: skip
    """The checks, two at a time (the gate's one at a time: it runs beside the level's)."""
    selected = checks(capabilities, gate)
    others = [c for c in tanh_accuracy.CAPABILITIES if c not in capabilities]
    log(f"{len(selected)} checks; this CPU runs {', '.join(capabilities)}"
        + (f", not {', '.join(others)}" if others else ""))  # fmt: skip
    return run_checks(layout, log, target, runtimes, selected, 1 if gate else WORKERS)


def run(layout: Layout, log, locked, gate: bool = False) -> int:
    """`./stack sanitize [--gate]`: build (holding the project's lock: `locked()`), then the
    checks (without it: they read the tree and their build only). 0 if every test passed
    with no report, else 1."""
    started = time.monotonic()
    runtimes = find_runtimes()
    log(f"sanitizer runtimes: {', '.join(map(str, runtimes))}")
    with locked():
        capabilities = tanh_accuracy.supported(layout)
        only = gate_objects(gate_capability(capabilities)) if gate else ()
        target = build(layout, build_dir(layout, gate), only)
    results, reports = sanitized(layout, log, target, runtimes, capabilities, gate)
    print("\n" + table(results))
    print(summary(results, reports, time.monotonic() - started))
    return 1 if any(r.failed for r in results) else 0


# ----------------------------------------------------------------------------- the gate

GATE = """import sys
from pathlib import Path
from stacktool import sanitize
from stacktool.config import Layout
root, tree, overlay, out = (Path(arg) if arg else None for arg in sys.argv[1:])
sys.exit(sanitize.gate_run(Layout(root, tree, overlay), out))
"""
NAME = "sanitizers (ASan, UBSan)"


def gate_run(layout: Layout, out: Path) -> int:
    """The gate's check, in a process of its own (the gate holds the lock): build, run the
    gate's subset, print everything, write a row per check to `out` (JSON)."""
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[sanitize {time.monotonic() - started:6.1f}s] {message}", flush=True)

    runtimes = find_runtimes()
    capabilities = tanh_accuracy.supported(layout)
    only = gate_objects(gate_capability(capabilities))
    target = build(layout, build_dir(layout, gate=True), only)
    built = time.monotonic() - started
    results, reports = sanitized(layout, log, target, runtimes, capabilities, gate=True)
    print("\n" + table(results))
    print(summary(results, reports, time.monotonic() - started))
    rows = [{"name": f"{NAME}: {r.name}", "passed": r.passed, "failed": r.failed,
             "skipped": r.skipped, "note": r.note} for r in results]  # fmt: skip
    rows[0]["note"] += f"; the build before it {built:.0f} s"
    out.write_text(json.dumps(rows))
    return 1 if any(r.failed for r in results) else 0


def task(layout: Layout) -> Task:
    """The gate's check (one of level 6's): the sanitized build of the level's tree and the
    gate's subset, in a process of its own under this Python; a result per check."""
    paths = [layout.root, layout.tree or "", layout.overlay_dir or ""]

    def run_task(processes: Processes) -> tuple[list[Result], str]:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "results.json"
            proc = processes.run([sys.executable, "-c", GATE, *map(str, paths), str(out)],
                                 cwd=layout.root)  # fmt: skip
            rows = json.loads(out.read_text()) if out.exists() else []
        results = [Result(**row) for row in rows]
        if not results:  # no runtime, or the build failed: no check ran
            results = [Result(NAME, failed=1, note=f"failed (exit {proc.returncode})")]
        elif proc.returncode != 0 and not any(r.failed for r in results):
            results[0].failed, results[0].note = 1, f"exit {proc.returncode}; {results[0].note}"
        return results, proc.stdout + proc.stderr

    return Task(NAME, run_task, seconds=300)  # done 279 s into level 6 (bee8e82, Zen 3)


# ----------------------------------------------------------------------------- its own test


@dataclass(frozen=True)
class Injection:
    """A one-element overrun injected into a copy of a stack source (never into the tree):
    `text` replaced, and Python that runs it; a sanitized build must report it at the line
    of `path` that holds `reported` (the access)."""

    path: str
    text: str
    replacement: str
    reported: str
    trigger: str


INJECTIONS = {
    # copy_rows reads one column past n in each row of a transposed grad_attn (copied block
    # by block): its first read past the last column is one element past the tensor's end.
    # In double: its tanh is not PR 5's float kernel, so only this overrun runs.
    "copy_rows": Injection(
        "aten/src/ATen/native/cpu/AttnKernel.cpp",
        "const int64_t j1 = std::min(j0 + kColumns, n);",
        "const int64_t j1 = std::min(j0 + kColumns, n + 1);",
        "g[i * n + j] = a[(r0 + i) * s0 + j * s1];",
        "import torch\n"
        "n = 20\n"
        "q, k, v, go = (torch.randn(n, 3, dtype=torch.double) for _ in range(4))\n"
        "a = torch.tanh(q @ k.t())\n"
        "ga = torch.randn(n, n, dtype=torch.double).t()\n"
        "torch.ops.aten._attn_backward(go, ga, q, k, v, a, [True, True, True])\n",
    ),
    # tanh_float_loop's contiguous row one element longer: vec::map's tail reads past it
    "tanh_tail": Injection(
        "aten/src/ATen/native/cpu/UnaryOpsKernel.cpp",
        "vec::map(op, out, in, n);",
        "vec::map(op, out, in, n + 1);",
        "vec::map(op, out, in, n);",
        "import torch\ntorch.tanh(torch.randn(1001))\n",
    ),
}


def reported_line(layout: Layout, injection: Injection) -> int:
    """The line of the tree's file that the injection's report must name."""
    text = (layout.fork / injection.path).read_text()
    if text.count(injection.reported) != 1:
        raise StackError(f"{injection.path}: {injection.reported!r} is not there once")
    return text[: text.index(injection.reported)].count("\n") + 1


def inject_and_run(layout: Layout, names: list[str], target: Path) -> dict[str, list[Report]]:
    """Build the tree with INJECTIONS[names] into `target` (a scratch folder), instrumenting
    the kernel files at the gate's capability (gate_capability), then run each one's trigger
    there under the sanitizers: {name: its reports}."""
    runtimes = find_runtimes()
    capability = gate_capability(tanh_accuracy.supported(layout))
    chosen = [INJECTIONS[name] for name in names]
    edits = tuple((i.path, i.text, i.replacement) for i in chosen)
    build(layout, target, gate_objects(capability), edits)
    found = {}
    for name, injection in zip(names, chosen, strict=True):
        with tempfile.TemporaryDirectory(prefix="stack-sanitize-") as tmp:
            env = environment(layout, target, Path(tmp), runtimes,
                              {"ATEN_CPU_CAPABILITY": capability})  # fmt: skip
            subprocess.run([str(layout.python), "-c", injection.trigger], cwd=layout.root,
                           env=env, capture_output=True, text=True)  # fmt: skip
            found[name] = collect(name, Path(tmp))
    return found


LOCATION = re.compile(r"([\w.+-]+\.(?:cpp|h)):(\d+)")


def locations(report: Report) -> list[tuple[str, int]]:
    """(file name, line) of each source location a report names, in order."""
    return [(name, int(line)) for name, line in LOCATION.findall(report.text)]
