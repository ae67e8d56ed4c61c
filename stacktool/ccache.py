"""The overlay build's compiler cache: Debian's ccache, one cache for every build of a project.

`./stack setup`, `./stack build` and each gate level build the stack's C++ in a different
tree (pytorch/ into build/overlay, build/gate/level-N/pytorch into build/gate/level-N/overlay),
and PRs 4 and 5 compile largely the same generated code. The compile commands go through
ccache with one cache in build/ccache, so a translation unit any of them compiled is taken
from there. For a hit from another tree the command line must be the same: compile.py writes
paths relative to the build folder (its `fork` link names the tree), so nothing on it names
the tree, and no -g is passed, so the working directory is not hashed (NOHASHDIR says so too).
CCACHE_BASEDIR is not set: it would rewrite the venv's absolute include path relative to
each build folder, which lie at different depths (build/overlay, build/gate/level-N/overlay).
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from stacktool.errors import StackError

PACKAGE = "ccache"  # Debian's package and its command
MAX_SIZE = "2G"  # a cold build of PR 5 stores about 40 MB (compressed)
# What `ccache --print-stats` counts as hits and as misses (ccache 4.x).
HITS = ("direct_cache_hit", "preprocessed_cache_hit")
MISSES = ("cache_miss",)


def find() -> str | None:
    return shutil.which(PACKAGE)


def ensure(run=subprocess.run) -> str:
    """ccache's path; installed with apt-get (as root, or `sudo -n`) when it is missing.

    StackError saying what to do when it cannot be installed.
    """
    found = find()
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise StackError("ccache is required (the overlay build's compiler cache) and apt-get "
                         "is not available to install it: install ccache, then run "
                         "./stack setup again")  # fmt: skip
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if prefix and shutil.which("sudo") is None:
        raise StackError("ccache is required (the overlay build's compiler cache); installing "
                         "it needs root: run `apt-get install ccache` as root, then ./stack "
                         "setup again")  # fmt: skip
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q",
               "--no-install-recommends", PACKAGE]  # fmt: skip
    proc = run(install, env=env, capture_output=True, text=True)
    if proc.returncode != 0:  # perhaps the package lists are missing or stale
        run([*prefix, "apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"], env=env,
            capture_output=True, text=True)  # fmt: skip
        proc = run(install, env=env, capture_output=True, text=True)
    found = find()
    if proc.returncode != 0 or not found:
        raise StackError(f"ccache is required (the overlay build's compiler cache) and "
                         f"`{shlex.join(install)}` failed (exit {proc.returncode}): "
                         f"{(proc.stderr or proc.stdout).strip()[-2000:]}\nInstall ccache, "
                         "then run ./stack setup again")  # fmt: skip
    return found


def launcher(ccache: str, cache_dir: Path) -> str:
    """What build.ninja puts before the compiler: ccache with this project's cache."""
    settings = {"CCACHE_DIR": str(cache_dir), "CCACHE_NOHASHDIR": "1", "CCACHE_MAXSIZE": MAX_SIZE}
    return shlex.join(["env", *(f"{k}={v}" for k, v in settings.items()), ccache])


def stats(ccache: str, cache_dir: Path) -> tuple[int, int]:
    """(hits, misses) counted so far in `cache_dir` (0, 0 for a cache not made yet)."""
    proc = subprocess.run([ccache, "--print-stats"], env={**os.environ, "CCACHE_DIR": str(cache_dir)},
                          capture_output=True, text=True)  # fmt: skip
    counts = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            counts[key] = int(value)
    return sum(counts.get(k, 0) for k in HITS), sum(counts.get(k, 0) for k in MISSES)
