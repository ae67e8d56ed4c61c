"""`./stack lint`: upstream's own linters, configs and pinned versions, over what a patch touches.

The linters are the fork's `.lintrunner.toml` entries run by lintrunner, in a venv of their
own (`.venv-lint`: mypy's pins, e.g. sympy, differ from torch's). Their versions are read from
each linter's `init_command` in that file; clang-format, which upstream downloads from its own
bucket, comes from PyPI at the version `tools/linter/adapters/s3_init_config.json` names.
"""

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

from stacktool import venv
from stacktool.config import Layout
from stacktool.git import git
from stacktool.suites import Result

LINTERS = (
    "FLAKE8", "RUFF", "MYPY", "CLANGFORMAT", "NATIVEFUNCTIONS",
    "NEWLINE", "SPACES", "TABS", "TEST_HAS_MAIN",
)  # fmt: skip
# TESTOWNERS downloads the list of valid labels at import, which cannot work offline; its
# rule is checked here instead against the labels upstream's own test files carry.
OWNERS = re.compile(r"^# Owner\(s\): (\[.*\])$", re.M)
LINTRUNNER = "lintrunner==0.12.5"


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
    """The lint venv with the pinned linters; `.lintbin/clang-format` linked in the fork."""
    lint_venv = layout.root / ".venv-lint"
    venv.ensure(lint_venv, requirements(layout.fork))
    lintbin = layout.fork / ".lintbin"
    lintbin.mkdir(exist_ok=True)
    (lintbin / "clang-format").unlink(missing_ok=True)
    (lintbin / "clang-format").symlink_to(lint_venv / "bin" / "clang-format")
    return lint_venv


def touched(fork: Path, commit: str) -> list[str]:
    """The files `commit` adds or changes (deleted files have nothing to lint)."""
    out = git(fork, "diff", "--name-only", "--diff-filter=d", f"{commit}~1", commit)
    return out.split()


def run(layout: Layout, commit: str, name: str, log) -> Result:
    """lintrunner over the files `commit` touches, in the fork at its current checkout."""
    lint_venv = ensure(layout)
    paths = touched(layout.fork, commit)
    env = {**os.environ, "PATH": f"{lint_venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(lint_venv / "bin" / "lintrunner"), "--take", ",".join(LINTERS),
         *paths],
        cwd=layout.fork, env=env, capture_output=True, text=True,
    )  # fmt: skip
    extra = test_owners(layout.fork, paths) + new_cpp_formatted(layout.fork, commit, lint_venv)
    output = proc.stdout + proc.stderr + "".join(extra)
    ok = proc.returncode == 0 and not extra
    if not ok:
        print(output[-6000:])
    log(f"{name}: {'no findings' if ok else 'findings'} in {len(paths)} files")
    return Result(name, int(ok), int(not ok), note=f"{len(paths)} files")


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


def new_cpp_formatted(fork: Path, commit: str, lint_venv: Path) -> list[str]:
    """clang-format findings in C++ files `commit` adds.

    Upstream's CLANGFORMAT entry covers only some folders (not aten/src/ATen/native), but a
    new file has no history to keep: it is held to the fork's .clang-format wherever it is.
    """
    added = git(fork, "diff", "--name-only", "--diff-filter=A", f"{commit}~1", commit).split()
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
