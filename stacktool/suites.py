"""Running upstream's test commands in a checkout of the fork and counting their tests."""

import os
import re
import subprocess
import time
from dataclasses import dataclass

from stacktool.config import Layout

SUMMARY = re.compile(
    r"^=+ (.*\d+ (?:passed|failed|skipped|error|errors|deselected).*) in [\d.]+s.* =+$"
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


def suite_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without CI, with `extra` (e.g. PYTORCH_TEST_WITH_*) set.

    Without CI set, upstream's runners print their results instead of writing them to report
    files, and do not try to download CI's lists of slow and disabled tests.
    """
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(extra or {})
    return env


def run_suite(layout: Layout, name: str, command: list[str], log, env=None) -> Result:
    """Run an upstream test command in the layout's fork with the venv's Python; count tests.

    `env`: variables to set for it (upstream's test configurations are chosen by them).
    """
    started = time.monotonic()
    env = suite_env({**layout.python_env, **(env or {})})
    proc = subprocess.run(
        [str(layout.python), *command], cwd=layout.fork, env=env, capture_output=True, text=True
    )
    output = proc.stdout + proc.stderr
    passed, failed, skipped = pytest_counts(output)
    seconds = time.monotonic() - started
    if proc.returncode != 0 and failed == 0:
        failed = 1  # the runner failed without a test failing: count it, show why
    if passed == 0 and failed == 0:
        failed, note = 1, "ran no test"
    else:
        note = f"{seconds:.0f} s"
    result = Result(name, passed, failed, skipped, note)
    if failed:
        log_path = layout.build / "test-logs" / (re.sub(r"\W+", "_", name) + ".log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(output)
        print(output[-6000:])
        result.note += f"; log: {log_path}"
    log(f"{name}: {passed} passed, {failed} failed, {skipped} skipped ({result.note})")
    return result
