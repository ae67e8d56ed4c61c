"""`./stack lint`: upstream's own linters, configs and pinned versions, over what a patch touches.

The linters are the fork's `.lintrunner.toml` entries run by lintrunner, in a venv of their
own (`.venv-lint`: mypy's pins, e.g. sympy, differ from torch's). Their versions are read from
each linter's `init_command` in that file; clang-format, which upstream downloads from its own
bucket, comes from PyPI at the version `tools/linter/adapters/s3_init_config.json` names.
"""

import difflib
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

from stacktool import venv, wheel
from stacktool.config import BASE_REF, Layout
from stacktool.git import git
from stacktool.suites import Processes, Result, Task

LINTERS = (
    "FLAKE8", "RUFF", "MYPY", "CLANGFORMAT", "NATIVEFUNCTIONS",
    "NEWLINE", "SPACES", "TABS", "TEST_HAS_MAIN",
)  # fmt: skip
# TESTOWNERS downloads the list of valid labels at import, which cannot work offline; its
# rule is checked here instead against the labels upstream's own test files carry.
OWNERS = re.compile(r"^# Owner\(s\): (\[.*\])$", re.M)
LINTRUNNER = "lintrunner==0.12.5"
# mypy_plugins/check_mypy_version.py reads mypy's pin from this file, which Debian's tarball
# lacks (no .ci/): without it the daemon crashes and upstream's adapter reports nothing.
MYPY_PIN = ".ci/docker/requirements-ci.txt"
DMYPY_IDLE_S = 3600  # mypy's daemon (about 1.3 GB per tree) ends after an hour unused
LINT_LEFTOVERS = (".mypy_cache/", "/.dmypy.json", f"/{MYPY_PIN}")  # also in fork.REMADE


def requirements(fork: Path) -> list[str]:
    """The pip pins of the taken linters' init commands, plus lintrunner and clang-format."""
    config = tomllib.loads((fork / ".lintrunner.toml").read_text())
    found = [LINTRUNNER]
    for linter in config["linter"]:
        command = linter.get("init_command", [])
        pip_init = [i for i, arg in enumerate(command) if arg.endswith("pip_init.py")]
        if linter["code"] in LINTERS and pip_init:
            found += [a for a in command[pip_init[0] + 1 :] if not a.startswith("--")]
    s3 = json.loads((fork / "tools/linter/adapters/s3_init_config.json").read_text())
    version = re.search(r"/(\d+\.\d+\.\d+)/", s3["clang-format"]["Linux"]["download_url"])
    found.append(f"clang-format=={version.group(1)}")
    return sorted(set(found))


def ensure(layout: Layout) -> Path:
    """The lint venv with the pinned linters; `.lintbin/clang-format` linked in the fork.

    What the linters leave in the fork (mypy's cache and daemon file, MYPY_PIN) is ignored
    there: a fork made before they were in fork.REMADE gets the lines too.
    """
    lint_venv = layout.root / ".venv-lint"
    pins = requirements(layout.fork)
    venv.ensure(lint_venv, pins)
    if not (layout.fork / MYPY_PIN).exists():
        (layout.fork / MYPY_PIN).parent.mkdir(parents=True, exist_ok=True)
        (layout.fork / MYPY_PIN).write_text(
            "".join(f"{p}\n" for p in pins if p.startswith("mypy=="))
        )
    lintbin, clang_format = layout.fork / ".lintbin", lint_venv / "bin" / "clang-format"
    lintbin.mkdir(exist_ok=True)
    if (
        not (lintbin / "clang-format").is_symlink()
        or (lintbin / "clang-format").readlink() != clang_format
    ):
        (lintbin / "clang-format").unlink(missing_ok=True)
        (lintbin / "clang-format").symlink_to(clang_format)
    common = git(layout.fork, "rev-parse", "--path-format=absolute", "--git-common-dir")
    exclude = Path(common.strip()) / "info" / "exclude"
    mine, linked, wheels = exclude.read_text().partition(wheel.LINKED)
    missing = "".join(f"{line}\n" for line in LINT_LEFTOVERS if line not in mine.splitlines())
    if missing:  # before the wheel's list (fork.ignored_work reads that one apart)
        exclude.write_text(mine + missing + linked + wheels)
    return lint_venv


def files(fork: Path, base: str, tip: str | None) -> list[str]:
    """Files changed from `base` to `tip`, not deleted (`git diff --diff-filter=d`).

    tip None: to the working tree, with untracked files (not ignored) counted as added.
    """
    found = git(fork, "diff", "--name-only", "--diff-filter=d", base, *([tip] if tip else []))
    if tip is None:
        found += git(fork, "ls-files", "--others", "--exclude-standard")
    return sorted(set(found.split()))


def run(
    layout: Layout, base: str, tip: str | None, name: str, log, say=print, start=subprocess.run,
    linters: tuple[str, ...] | None = None, runs: Path | None = None,
) -> Result:  # fmt: skip
    """Each of `linters` (LINTERS by default) over the files changed from `base` to `tip`
    (None: the working tree); with MYPY, TESTOWNERS and the added C++ files' clang-format.
    `runs`: lintrunner's data directory (XDG_DATA_HOME; see tasks), the user's if None.

    One lintrunner run per linter, each logged as it starts. MYPY (a dmypy daemon, as
    upstream runs it) reads the fork's generated .pyi stubs, so it needs the checkout's
    overlay build; the others read the files alone. The daemon is started here with an idle
    timeout (DMYPY_IDLE_S), so a tree's next lint re-checks in seconds and it ends itself.
    `say` prints the findings, `start` runs the linters (see `tasks`).
    """
    linters = linters or LINTERS
    lint_venv = ensure(layout)
    paths = files(layout.fork, base, tip)
    env = {**os.environ, "PATH": f"{lint_venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    if runs:
        env["XDG_DATA_HOME"] = str(runs)
    messages, failures, extra = [], [], []
    if "MYPY" in linters and any(path.endswith((".py", ".pyi")) for path in paths):
        start_daemon(layout.fork, lint_venv, env, start)
    for linter in linters if paths else ():
        log(f"{name}: {linter} over {len(paths)} file(s)")
        proc = start(
            [str(lint_venv / "bin" / "lintrunner"), "--take", linter, "--output", "json",
             *paths],
            cwd=layout.fork, env=env, capture_output=True, text=True,
        )  # fmt: skip
        found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        messages += found
        if proc.returncode != 0 and not found:  # lintrunner itself failed: say how, not "init"
            noise = ("lintrunner init", ".lintrunner.private.toml")
            why = [line for line in proc.stderr.splitlines() if not any(n in line for n in noise)]
            failures.append(f"{linter}: lintrunner failed: " + "\n".join(why[-20:]) + "\n")
    if "MYPY" in linters:
        added = not_upstream(layout.fork, paths)
        extra = test_owners(layout.fork, paths) + new_cpp_formatted(layout.fork, added, lint_venv)
    for m in messages:
        m["path"] = m.get("path") and str(Path(layout.fork, m["path"]).relative_to(layout.fork))
    elsewhere = [m for m in messages if m["path"] and m["path"] not in paths]
    if elsewhere:  # MYPY checks what the files import too: upstream's own, as in its CI here
        say("not counted, in files the stack does not change:\n"
              + "".join(show(m) for m in elsewhere))  # fmt: skip
    report = [show(m) for m in messages if m not in elsewhere] + extra + failures
    with_findings = {m["path"] for m in messages if m["path"] and m not in elsewhere}
    with_findings |= {line.split(" ", 2)[1].rstrip(":") for line in extra}
    if report:
        say("".join(report)[-8000:])
    ok = not report
    count = f"{len(with_findings)} of {len(paths)} files" if not ok else f"{len(paths)} files"
    log(f"{name}: {'no findings in' if ok else 'findings in'} {count}")
    return Result(name, int(ok), int(not ok), note=count)


def start_daemon(tree: Path, lint_venv: Path, env: dict, start=subprocess.run) -> str:
    """mypy's daemon in `tree`, with upstream's config, started unless it runs; its command."""
    dmypy = str(lint_venv / "bin" / "dmypy")
    if start([dmypy, "status"], cwd=tree, capture_output=True).returncode:
        start([dmypy, "start", "--timeout", str(DMYPY_IDLE_S), "--", "--config=mypy.ini"],
              cwd=tree, env=env, capture_output=True)  # fmt: skip
    return dmypy


def warm_daemon(layout: Layout) -> bool:
    """Start the mypy daemon in `layout`'s tree and have it check torch/__init__.py, which
    loads what every linted file imports: a level's first lint then checks its files in
    about 27 s, not 93 s cold (by hand, Zen 3). Whether the check ran to its end."""
    lint_venv = ensure(layout)
    env = {**os.environ, "PATH": f"{lint_venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    dmypy = start_daemon(layout.fork, lint_venv, env)
    proc = subprocess.run([dmypy, "check", "torch/__init__.py"], cwd=layout.fork, env=env,
                          capture_output=True, text=True)  # fmt: skip
    return proc.returncode in (0, 1)  # 1: mypy's findings, upstream's own (not counted)


def stop_daemon(layout: Layout, tree: Path) -> bool:
    """Stop the mypy daemon `run` started in `tree`, if it has one (its .dmypy.json):
    `dmypy stop` there. Whether one was asked to stop."""
    dmypy = layout.root / ".venv-lint" / "bin" / "dmypy"
    if not (tree / ".dmypy.json").exists() or not dmypy.exists():
        return False
    subprocess.run([str(dmypy), "stop"], cwd=tree, capture_output=True)
    return True


# The gate lints a level in two Tasks, FLAKE8 and the rest, so that its two workers share
# the lint: at level 3, FLAKE8 took 89 of the lint's 97 s alone (75 s for flake8 over
# common_methods_invocations.py, with upstream's plugins), and the other linters 73 s beside
# it, the mypy daemon warm; in clean-clone gate runs, 56-187 s (Zen 3). Their `seconds`,
# for suites.run_all's order.
APART = {("FLAKE8",): 60, tuple(linter for linter in LINTERS if linter != "FLAKE8"): 90}


def tasks(layout: Layout, base: str, tip: str | None, name: str) -> list[Task]:
    """`run` as Tasks for suites.run_all, a linter group (APART) each, named `name` and
    `name` (FLAKE8): what one would print is the output shown if it fails, and its
    processes are the run's (stopped with it).

    Each group keeps lintrunner's run records in a data directory of its own beside the
    tree: lintrunner prunes a config's records to 10 as it starts, so two started at once
    over one store both delete the oldest, and one fails "No such file or directory (os
    error 2)" (3 of 80 paired starts by hand)."""

    def task(linters: tuple[str, ...], seconds: int) -> Task:
        named = f"{name} (FLAKE8)" if linters == ("FLAKE8",) else name
        runs = layout.fork.parent / ("lintrunner-flake8" if "FLAKE8" in linters else "lintrunner")

        def lint(processes: Processes) -> tuple[Result, str]:
            lines: list[str] = []
            result = run(layout, base, tip, named, lines.append, lines.append, processes.run,
                         linters, runs)  # fmt: skip
            return result, "\n".join(lines)

        return Task(named, lint, seconds)

    return [task(linters, seconds) for linters, seconds in APART.items()]


def show(message: dict) -> str:
    """One lintrunner message as `CODE path:line: name: description`, with a fix's diff."""
    path = message["path"] or "-"
    head = f"{message['code']} {path}:{message.get('line') or 0}: {message['name']}: "
    text = head + message.get("description", "").splitlines()[0] + "\n"
    if message.get("original") is not None and message.get("replacement") is not None:
        diff = difflib.unified_diff(message["original"].splitlines(), message["replacement"]
                                    .splitlines(), "now", "formatted", n=0, lineterm="")  # fmt: skip
        text += "".join(f"    {line}\n" for line in list(diff)[2:22])
    return text


def test_owners(fork: Path, paths: list[str]) -> list[str]:
    """TESTOWNERS' findings: a new test file needs an `# Owner(s):` line of known labels."""
    known: set[str] = set()
    for test in (fork / "test").rglob("test_*.py"):
        for labels in OWNERS.findall(test.read_text(errors="replace")[:2000]):
            known.update(json.loads(labels))
    findings = []
    for path in paths:
        name = Path(path).name
        if not (path.startswith("test/") and name.startswith("test_") and name.endswith(".py")):
            continue
        found = OWNERS.findall((fork / path).read_text()[:2000])
        labels = json.loads(found[0]) if found else []
        unknown = [label for label in labels if label not in known]
        if not labels or unknown:
            findings.append(f"TESTOWNERS {path}: owner labels {labels} (unknown: {unknown})\n")
    return findings


def not_upstream(fork: Path, paths: list[str]) -> list[str]:
    """The paths pristine upstream (BASE_REF) lacks: files the stack adds, whichever commit
    added them (`--changed` lints them long after it, from the last export's tag)."""
    upstream = git(fork, "ls-tree", "-r", "--name-only", BASE_REF, "--", *paths) if paths else ""
    return [path for path in paths if path not in set(upstream.split())]


def new_cpp_formatted(fork: Path, added: list[str], lint_venv: Path) -> list[str]:
    """clang-format findings in the C++ files the stack adds (`added`, see `not_upstream`).

    Upstream's CLANGFORMAT entry covers only some folders (not aten/src/ATen/native), but a
    new file has no history to keep: it is held to the fork's .clang-format wherever it is.
    """
    findings = []
    for path in added:
        if path.endswith((".cpp", ".h", ".cu", ".cuh")):
            proc = subprocess.run(
                [str(lint_venv / "bin" / "clang-format"), "--dry-run", "--Werror", path],
                cwd=fork, capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                findings.append(
                    f"CLANGFORMAT {path}: not clang-formatted (clang-format -i {path})\n"
                )
    return findings


def tool(layout: Layout, log) -> Result:
    """The workbench's own code under ruff (check and format), with the root's ruff.toml."""
    ruff = str(ensure(layout) / "bin" / "ruff")
    findings = ""
    for command in (
        [ruff, "check", "stacktool", "stack"],
        [ruff, "format", "--check", "stacktool", "stack"],
    ):
        proc = subprocess.run(command, cwd=layout.root, capture_output=True, text=True)
        if proc.returncode != 0:
            findings += proc.stdout + proc.stderr
    if findings:
        print(findings[-6000:])
    log(f"stacktool lint (ruff): {'findings' if findings else 'no findings'}")
    return Result("stacktool lint (ruff)", int(not findings), int(bool(findings)))
