"""The README's edit loop, run as written: its `sh` blocks of "Working on the stack", in order,
with bash in a scratch copy of the project (build/loop) whose stack is PRs 1 and 2.

PR 2 adds no C++, so the scratch build compiles nothing (codegen only) and the check takes a
few minutes of the gate. The scratch project copies the real one's ./stack and stacktool, links its
caches and lint venv, and has a venv of its own that sees the real one's packages (its hook and .pth name the
scratch fork). It is deleted before each run and left after one for a look.
"""

import os
import re
import shutil
import subprocess
import time

from stacktool import config, fork, patches, venv, wheel
from stacktool.config import Layout
from stacktool.git import git
from stacktool.suites import NO_BYTECODE, PYCACHE, Processes, Result, Task

SECTION = "## Working on the stack"
LEVEL = 2  # the scratch stack: PRs 1 and 2
IDENTITY = {"GIT_AUTHOR_NAME": "Lab student", "GIT_AUTHOR_EMAIL": "student@x.invalid",
            "GIT_COMMITTER_NAME": "Lab student", "GIT_COMMITTER_EMAIL": "student@x.invalid"}  # fmt: skip


def blocks(readme: str) -> list[str]:
    """The ```sh blocks of the README's SECTION, in order."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def scratch_project(layout: Layout) -> Layout:
    """build/loop: a project whose patches/ and pytorch/ hold the stack up to LEVEL."""
    root = layout.build / "loop"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    scratch = Layout(root)
    # copies: ./stack finds its project root from where stacktool's files are
    shutil.copy2(layout.root / "stack", root / "stack")
    shutil.copytree(layout.root / "stacktool", root / "stacktool",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for name in (".cache", ".venv-lint"):
        (root / name).symlink_to(layout.root / name)
    scratch.patches.mkdir()
    for patch in sorted(layout.patches.glob("*.patch"))[:LEVEL]:
        shutil.copy2(patch, scratch.patches / patch.name)
    shutil.copy2(layout.gradient_doc, scratch.gradient_doc)
    git(root, "init", "--quiet")
    git(root, "add", "patches", patches.GRADIENT_DOC)
    git(root, "commit", "--quiet", "-m", "landed", env=IDENTITY)
    git(root, "clone", "--quiet", "--no-checkout", str(layout.fork), str(scratch.fork))
    git(scratch.fork, "remote", "remove", "origin")
    git(scratch.fork, "checkout", "--quiet", "-B", config.BRANCH, config.level_ref(LEVEL))
    for tag in git(scratch.fork, "tag", "--list", "attn/*").split():
        if int(tag.split("/")[1]) > LEVEL:
            git(scratch.fork, "tag", "-d", tag)
    (scratch.fork / ".git" / "info" / "exclude").write_text(fork.EXCLUDES)
    wheel.link(wheel.unpack(wheel.fetch(layout.cache), layout.cache)[0], scratch.fork)
    subprocess.run([venv.base_python(), "-m", "venv", "--without-pip", str(scratch.venv)],
                   check=True)  # fmt: skip
    (scratch.site_packages / "real_project.pth").write_text(f"{layout.site_packages}\n")
    venv.write_pth(scratch)
    seed = layout.gate_tree(LEVEL).overlay / "codegen"  # the gate's, of the same yaml files:
    if seed.is_dir():  # its stamp is a digest of their content, so the build skips codegen
        shutil.copytree(seed, scratch.overlay / "codegen")
    return scratch


NAME = "README's loop (scratch copy, PRs 1-2)"


def task(layout: Layout) -> Task:
    """`run` as a Task for suites.run_all, beside a level's checks (it needs level 2's gate
    build, whose codegen it takes): 83-101 s in the gate (Zen 3)."""
    return Task(NAME, lambda processes: run(layout, processes), seconds=100)


def run(layout: Layout, processes: Processes) -> tuple[Result, str]:
    """Each README block with `bash -e` in the scratch project; then what each should leave.
    Prints nothing: (the result, the blocks' output)."""
    started = time.monotonic()
    scratch = scratch_project(layout)
    landed = patches.read(scratch.patches)
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", NO_BYTECODE)
    }
    env.update({**IDENTITY, PYCACHE: str(layout.pycache)})  # as suites.suite_env
    output, problem = "", ""
    readme_blocks = blocks((layout.root / "README.md").read_text())
    for n, block in enumerate(readme_blocks, start=1):
        output += f"{NAME}: block {n}: {block.splitlines()[0]} ...\n"
        proc = processes.run(["bash", "-xeuo", "pipefail", "-c", block], cwd=scratch.root, env=env)
        output += proc.stdout + proc.stderr
        if proc.returncode != 0:
            problem = f"block {n} exited {proc.returncode}"
            break
        exported = patches.read(scratch.patches)
        if n == 1 and exported == landed:
            problem = "block 1 left patches/ as it was (no edit exported)"
            break
    else:
        kept = git(scratch.fork, "branch", "--list", "undo/*").split()
        if patches.read(scratch.patches) != landed or patches.render(scratch.fork) != landed:
            problem = "after the last block patches/ or pytorch/ is not the landed stack"
        elif not kept:
            problem = "the undone work was not kept on a branch undo/*"
    dmypy = layout.root / ".venv-lint" / "bin" / "dmypy"  # lint started it in the scratch fork
    subprocess.run([str(dmypy), "stop"], cwd=scratch.fork, capture_output=True)
    note = f"{len(readme_blocks)} blocks, {time.monotonic() - started:.0f} s"
    if problem:
        note = f"{problem}; {note}"
    return Result(NAME, int(not problem), int(bool(problem)), note=note), output
