"""Running upstream's test commands in a checkout of the fork and counting their tests.

A level's suites run two at a time (`run_all`), as upstream's run_test.py runs test files
on CI's 2-core CPU jobs: each one's output is kept and shown, with its own line of counts,
when it ends, so two suites' logs never interleave. Suites of a level that share their
variables run as one pytest process (`batch_task`): each file still gets its own line, its counts read
from pytest's JUnit report, and the process starts torch and upstream's test harness once.
"""

import os
import re
import subprocess
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from stacktool import inductor_pch
from stacktool.config import Layout

SUMMARY = re.compile(
    r"^=+ (.*\d+ (?:passed|failed|skipped|error|errors|deselected).*) in [\d.]+s.* =+$", re.M
)
COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")


@dataclass
class Result:
    """The outcome of one check or suite; `failed` counts failures and errors."""

    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    note: str = ""
    log: Path | None = None  # a failed check's whole output (see show)


def pytest_counts(output: str) -> tuple[int, int, int]:
    """(passed, failed, skipped + xfailed) summed over every pytest summary line in `output`."""
    passed = failed = skipped = 0
    for line in output.splitlines():
        m = SUMMARY.match(line.strip())
        if not m:
            continue
        for number, kind in COUNT.findall(m.group(1)):
            if kind == "passed":
                passed += int(number)
            elif kind in ("skipped", "xfailed"):  # xfailed: upstream's expected failures
                skipped += int(number)
            else:  # failed, errors, xpassed (an xfail that passes is a stale expectation)
                failed += int(number)
    return passed, failed, skipped


# Variables that pick which CPU kernels torch runs: the gate sets them where it means to
# (level 5) and never inherits them from the shell that started it.
KERNEL_CHOICE = ("ATEN_CPU_CAPABILITY", "ATEN_CPU_FLOAT_TANH")
# Variables (names and name prefixes) that pick upstream's test configuration (PYTORCH_TEST_
# WITH_DYNAMO, _INDUCTOR, _SLOW, ...), which tests run (PYTORCH_TEST_SKIP_FAST, the disabled
# and slow lists) or which samples (PYTORCH_OPINFO_SAMPLE_INPUT_INDEX): the gate's table sets
# them per suite, and never inherits them: a shell's PYTORCH_TEST_WITH_DYNAMO=1 would have
# every OpInfo test skip (upstream's policy) and the gate still pass.
TEST_CONFIG = ("PYTORCH_TEST", "PYTORCH_OPINFO_", "DISABLED_TESTS_FILE", "SLOW_TESTS_FILE",
               "SANDCASTLE", "TORCH_TEST_DEVICES")  # fmt: skip
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"  # set per tree and capability, see suite_env
PCH_STORE = "pch"  # in it: the precompiled headers (removed by the gate when it ends)
WORKERS = max(1, min(2, os.cpu_count() or 1))  # suites at a time: two, as on CI's 2-core jobs
# Two suites at a time, each torch with a thread per core: an OpenMP thread that waits for
# work sleeps instead of spinning, so that it does not hold the core the other process (or
# the next level's compile) needs. What the kernels compute, and on how many threads, is the
# same. Level 5's test_unary_ufuncs and test_ops tanh selections side by side took 109-119 s
# with it, 125-131 s without (Zen 3, 2 cores); each alone, 96-100 s either way.
QUIET_THREADS = {"OMP_WAIT_POLICY": "PASSIVE"}
# Every test process the gate starts imports the tree's torch, most upstream's test
# helpers too: 1,000 modules, which a shell's PYTHONDONTWRITEBYTECODE=1 (this sandbox sets
# it) has each process compile again from source. Their bytecode goes to one folder instead
# (Layout.pycache, nothing written into the trees), shared by the processes of every tree:
# inductor's OpInfo tests of tanh at avx2 (float32) took 18.1 s without it, 13.3 s with it
# warm, 20.8 s cold (Zen 4). `python -B` or the variable set in `extra` still writes none.
NO_BYTECODE, PYCACHE = "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"


def suite_env(layout: Layout, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without CI, KERNEL_CHOICE or TEST_CONFIG, with
    QUIET_THREADS, what the venv's Python needs to import `layout`'s torch and `extra` set,
    bytecode written to Layout.pycache (PYCACHE, whatever the shell's NO_BYTECODE says), and
    torch.compile's cache of its own for the tree and ATEN_CPU_CAPABILITY
    (Layout.inductor_cache), never the shell's, its kernels compiled with their prefix header
    precompiled into PCH_STORE there (stacktool/inductor_pch.py).

    Without CI set, upstream's runners print their results instead of writing them to report
    files, and do not try to download CI's lists of slow and disabled tests.
    """
    dropped = ("CI", NO_BYTECODE, *KERNEL_CHOICE)
    env = {
        k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(TEST_CONFIG)
    }
    env.update(
        {**QUIET_THREADS, PYCACHE: str(layout.pycache), **layout.python_env, **(extra or {})}
    )
    cache = layout.inductor_cache(env.get("ATEN_CPU_CAPABILITY"))
    return {**env, INDUCTOR_CACHE: str(cache), **inductor_pch.environment(cache / PCH_STORE, env)}


class Stopped(Exception):
    """Raised in a worker asked to start a process after the run was interrupted."""


class Processes:
    """The processes a run of suites started: none starts once `stop` was called.

    A signal reaches the main thread only (cli stops every process below it then); `stop`
    ends the ones the workers started since, and keeps them from starting more.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopped = False

    def run(
        self, command: list[str], capture_output=True, text=True, **kwargs
    ) -> subprocess.CompletedProcess:
        """subprocess.run(command, capture_output=True, text=True, **kwargs), unless the run
        was stopped (Stopped)."""
        with self.lock:
            if self.stopped:
                raise Stopped(command[0])
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, **kwargs)  # fmt: skip
            self.running.add(proc)
        try:
            stdout, stderr = proc.communicate()
        finally:
            with self.lock:
                self.running.discard(proc)
        return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for proc in self.running:
                proc.terminate()


@dataclass
class Task:
    """A check run_all runs in a worker thread: `run` starts its processes through the given
    Processes and returns (its result, or a list of them, and the output to show if one
    failed). It prints nothing: `show` does, in the main thread, when it ends. `seconds`:
    about how long it takes in the gate (0: short), for run_all to start the longest first.
    """

    name: str
    run: Callable[[Processes], tuple[Result | list[Result], str]]
    seconds: float = 0


def execute(
    layout: Layout, name: str, command: list[str], env=None, processes: Processes | None = None
) -> tuple[Result, str]:
    """Run an upstream test command in the layout's fork with the venv's Python; count tests.

    `env`: variables to set for it (upstream's test configurations are chosen by them).
    Prints nothing: (the result, the command's output).
    """
    started = time.monotonic()
    env = suite_env(layout, env)
    proc = (processes or Processes()).run([str(layout.python), *command], cwd=layout.fork, env=env)
    output = proc.stdout + proc.stderr
    passed, failed, skipped = pytest_counts(output)
    seconds = time.monotonic() - started
    if proc.returncode != 0 and failed == 0:
        failed = 1  # the runner failed without a test failing: count it, show why
    if passed == 0 and failed == 0:
        failed, note = 1, "ran no test"
    else:
        note = f"{seconds:.0f} s"
    return Result(name, passed, failed, skipped, note), output


def show(layout: Layout, result: Result | list[Result], output: str, log) -> Result | list[Result]:
    """Print a finished check (or a batch's checks): the output if one failed, then a line of
    counts for each. The output of a failed check is kept in build/test-logs, named after
    the first one."""
    results = result if isinstance(result, list) else [result]
    failed = [r for r in results if r.failed]
    if failed:
        log_path = layout.build / "test-logs" / (re.sub(r"\W+", "_", failed[0].name) + ".log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(output)
        print(output[-6000:])
        for r in failed:
            r.note += f"; log: {log_path}"
            r.log = log_path
    for r in results:
        log(f"{r.name}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped ({r.note})")
    return result


def run_suite(layout: Layout, name: str, command: list[str], log, env=None) -> Result:
    """One suite, alone (see execute), shown when it ends."""
    return show(layout, *execute(layout, name, command, env), log)


def suite_task(layout: Layout, name: str, command: list[str], env=None, seconds=0) -> Task:
    """The Task of one suite (see execute), for run_all."""
    return Task(name, lambda processes: execute(layout, name, command, env, processes), seconds)


def junit_counts(report: str, paths: list[str]) -> dict[str, tuple[int, int, int, float]]:
    """(passed, failed, skipped + xfailed, seconds) per test file of `paths`, from pytest's
    JUnit XML `report`: a test case belongs to the file its class name starts from (pytest
    names it after the collected file's path, as test.functorch.test_ops.TestX)."""
    counts = {path: [0, 0, 0, 0.0] for path in paths}
    modules = {path.removesuffix(".py").replace("/", "."): path for path in paths}
    for case in ET.fromstring(report).iter("testcase"):
        name = case.get("classname", "")
        path = next((p for m, p in modules.items() if name == m or name.startswith(m + ".")), None)
        if path is None:
            continue
        kinds = {child.tag for child in case}
        kind = 1 if kinds & {"failure", "error"} else 2 if "skipped" in kinds else 0
        counts[path][kind] += 1
        counts[path][3] += float(case.get("time") or 0)
    return {path: tuple(c) for path, c in counts.items()}


def execute_batch(
    layout: Layout, names: list[str], paths: list[str], command: list[str], env=None,
    processes: Processes | None = None,
) -> tuple[list[Result], str]:  # fmt: skip
    """Run one pytest `command` over the test files `paths` (the suites `names`); a Result
    per file from its JUnit report. A file with no test there, when the process failed
    (a crash, a collection error), counts as failed."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        junit = [f"--junitxml={report}", "-o", "junit_family=xunit1"]
        whole, output = execute(layout, " + ".join(names), [*command, *junit], env, processes)
        text = report.read_text() if report.exists() else "<testsuites/>"
    results = []
    counts = junit_counts(text, paths)
    for name, path in zip(names, paths, strict=True):
        passed, failed, skipped, seconds = counts[path]
        note = f"{seconds:.0f} s of tests; one process with {len(names) - 1} more, {whole.note}"
        if whole.failed and not failed and not passed + skipped:
            failed, note = 1, f"no result: the batch's process failed; {note}"
        elif passed + failed + skipped == 0:
            failed, note = 1, "ran no test"
        results.append(Result(name, passed, failed, skipped, note))
    if whole.failed and not any(r.failed for r in results):
        results[0].failed, results[0].note = 1, f"the batch's process failed; {results[0].note}"
    return results, output


def batch_task(
    layout: Layout, names: list[str], paths: list[str], command: list[str], env=None, seconds=0
) -> Task:
    """The Task of several suites in one process (see execute_batch), for run_all."""
    return Task(" + ".join(names),
                lambda processes: execute_batch(layout, names, paths, command, env, processes),
                seconds)  # fmt: skip


def run_all(layout: Layout, tasks: list[Task], log, workers: int = WORKERS) -> list[Result]:
    """Run `tasks` `workers` at a time, the longest first (Task.seconds; as given where
    equal), so that the workers end close together; each shown (see show) as it ends; their
    results in the order of `tasks` (a batch's in its order). A task that raises is a failed
    check with its traceback."""
    processes = Processes()
    results: list[Result | list[Result] | None] = [None] * len(tasks)
    pool = ThreadPoolExecutor(max_workers=workers)
    longest_first = sorted(range(len(tasks)), key=lambda n: -tasks[n].seconds)
    try:
        futures = {pool.submit(tasks[n].run, processes): n for n in longest_first}
        for future in as_completed(futures):
            n = futures[future]
            try:
                result, output = future.result()
            except Exception:  # a bug of the task itself: shown, counted, the rest go on
                result, output = Result(tasks[n].name, failed=1), traceback.format_exc()
            results[n] = show(layout, result, output, log)
    except BaseException:  # KeyboardInterrupt: nothing more starts, what runs is stopped
        processes.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return [r for result in results for r in (result if isinstance(result, list) else [result])]
