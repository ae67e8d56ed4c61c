"""Running git with a fixed configuration, so results do not depend on the user's settings."""

import os
import subprocess
from pathlib import Path

from stacktool.errors import StackError

# The user's and the system's git configuration are ignored: output (patches, commit ids)
# must be byte-identical on every machine.
CLEAN_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_COMMITTER_NAME": "attn stack",
    "GIT_COMMITTER_EMAIL": "stack@pytorch.invalid",
    "LC_ALL": "C",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None,
        check: bool = True) -> str:  # fmt: skip
    """Run `git -C repo args` and return its stdout; raise StackError with git's words on failure."""
    result = subprocess.run(
        ["git", "-c", f"safe.directory={repo}", "-C", str(repo), *args],
        env={**os.environ, **CLEAN_ENV, **(env or {})},
        input=input,
        capture_output=True,
    )
    if check and result.returncode != 0:
        message = (result.stderr or result.stdout).decode(errors="replace").strip()
        raise StackError(f"git {' '.join(args)} failed in {repo}:\n{message}")
    return result.stdout.decode(errors="replace")
