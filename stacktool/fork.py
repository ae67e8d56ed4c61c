"""The working fork in pytorch/: pristine upstream, then one commit per patch.

A new fork is always made beside the old one and swapped in only when complete, so a failed
download, extraction or patch never leaves a half-made tree. An existing fork is replaced
only when it holds nothing that patches/ lacks: its stack must be exactly what was applied
when it was made, no commit may live outside that stack, and its working tree must be clean.
"""

import shutil
import time
from pathlib import Path

from stacktool import config, patches, upstream
from stacktool.errors import StackError
from stacktool.git import git

APPLIED = "stack-applied"  # in pytorch/.git: the fingerprint of the series it was made from

# upstream's .gitignore is not in the Debian tarball; these are the ignores the fork needs
# for what builds and test runs leave behind (wheel.link adds what it links in).
EXCLUDES = """\
__pycache__/
*.pyc
*.so
*.so.*
.pytest_cache/
.hypothesis/
/.lintbin/
/test/test-reports/
/test/.pytest_cache/
/test/*.csv
*.log
"""


def state(fork: Path, patch_dir: Path) -> str:
    """One of: absent, current, stale (safe to replace), or a message saying what holds work."""
    if not fork.exists():
        return "absent"
    if not (fork / ".git").is_dir():
        return f"{fork} exists but is not a git repository"
    dirty = git(fork, "status", "--porcelain", "--untracked-files=normal")
    if dirty.strip():
        return f"{fork} has uncommitted changes:\n{dirty.rstrip()}"
    if not git(
        fork, "rev-parse", "--verify", "--quiet", f"refs/heads/{config.BRANCH}", check=False
    ):
        return f"{fork} has no branch '{config.BRANCH}'"
    # other branches, tags, a stash or a detached HEAD may hold commits the stack does not
    elsewhere = git(fork, "rev-list", "--all", "--not", f"refs/heads/{config.BRANCH}")
    if elsewhere.strip():
        return (
            f"{fork} has commits that are not on branch '{config.BRANCH}' (another branch, "
            "a tag, a stash or a detached HEAD)"
        )
    series = patches.render(fork)
    if series == patches.read(patch_dir):
        return "current"
    applied_file = fork / ".git" / APPLIED
    if applied_file.exists() and applied_file.read_text().strip() == patches.digest(series):
        return "stale"
    return (
        f"{fork} has commits that patches/ lacks:\n  "
        + "\n  ".join(patches.differences(series, patches.read(patch_dir)))
        + "\nRun ./stack export and commit patches/ to keep them"
    )


def materialize(source: Path, patch_dir: Path, dest: Path) -> None:
    """Make a new fork at `dest` from an upstream tarball or tree and the series in patch_dir."""
    description = upstream.extract(source, dest)
    try:
        (dest / ".git").mkdir()
        git(dest, "init", "--quiet", "--initial-branch", config.BRANCH)
        (dest / ".git" / "info").mkdir(exist_ok=True)
        (dest / ".git" / "info" / "exclude").write_text(EXCLUDES)
        git(dest, "add", "--all", "--force")
        git(
            dest, "commit", "--quiet", "--no-verify", "-m",
            f"PyTorch v{config.UPSTREAM_VERSION}, pristine\n\nFrom {description}.",
            env=config.PRISTINE_IDENTITY,
        )  # fmt: skip
        git(dest, "tag", config.BASE_REF)
        series = sorted(patch_dir.glob("*.patch"))
        for level, patch in enumerate(series, start=1):
            apply(dest, patch)
            git(dest, "tag", config.level_ref(level))
        (dest / ".git" / APPLIED).write_text(patches.digest(patches.read(patch_dir)) + "\n")
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def apply(repo: Path, patch: Path) -> None:
    """`git am` one patch, keeping its author date as the commit date (stable commit ids)."""
    try:
        git(repo, "am", "--quiet", "--keep-non-patch", "--committer-date-is-author-date",
            str(patch))  # fmt: skip
    except StackError as e:
        git(repo, "am", "--abort", check=False)
        raise StackError(f"{patch} does not apply:\n{e}") from None


def replace(fork: Path, new: Path, move_aside: bool) -> Path | None:
    """Swap `new` in as the fork; an old fork is moved aside (returned) or deleted if stale."""
    aside = None
    if fork.exists():
        aside = fork.with_name(f"{fork.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        fork.rename(aside)
    new.rename(fork)
    if aside is not None and not move_aside:
        shutil.rmtree(aside)
        return None
    return aside
