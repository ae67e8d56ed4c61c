"""The working fork in pytorch/: pristine upstream, then one commit per patch.

A new fork is always made beside the old one and swapped in only when complete, so a failed
download, extraction or patch never leaves a half-made tree. An existing fork is replaced
only when it holds nothing that patches/ lacks: its stack must be exactly what was applied
when it was made, no commit may live outside that stack (the tool's own worktrees aside), its working tree must be clean, and
every file in it that git ignores must be one that setup, a build or a test run makes again
(REMADE, and the wheel's files listed under wheel.LINKED in .git/info/exclude).
"""

import shutil
import time
from pathlib import Path

from stacktool import config, patches, upstream, wheel
from stacktool.errors import StackError, uninterrupted
from stacktool.git import git

APPLIED = "stack-applied"  # in pytorch/.git: the fingerprint of the series it was made from

# What setup (.lintbin), lint (mypy's cache and daemon file), builds (write_if_changed's temporary files) and test runs leave in
# the fork, all made again on demand; the generated files a build refreshes are among the
# wheel's linked files.
REMADE = """\
__pycache__/
*.pyc
.pytest_cache/
.hypothesis/
.ruff_cache/
.mypy_cache/
/.dmypy.json
/.ci/docker/requirements-ci.txt
/.lintbin/
/test/test-reports/
*.stack-tmp
"""

# Also ignored, but possibly the user's (a stale fork holding such files is not replaced).
MAYBE_WORK = """\
*.so
*.so.*
/test/*.csv
*.log
"""

# upstream's .gitignore is not in the Debian tarball; these are the ignores the fork needs
# for what builds and test runs leave behind (wheel.link adds what it links in).
EXCLUDES = REMADE + MAYBE_WORK


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
    elsewhere = off_branch(fork)
    if elsewhere:
        return (
            f"{fork} has commits that are not on branch '{config.BRANCH}':\n  "
            + "\n  ".join(elsewhere)
            + "\nThey would be lost with the tree: delete those you do not need (git branch -D,"
            " git tag -d, git stash drop, git worktree remove), then run setup again"
        )  # fmt: skip
    series = patches.render(fork)
    if series == patches.read(patch_dir):
        return "current"
    applied_file = fork / ".git" / APPLIED
    if applied_file.exists() and applied_file.read_text().strip() == patches.digest(series):
        kept = ignored_work(fork)
        if not kept:
            return "stale"
        more = f"\n  ... and {len(kept) - 20} more" if len(kept) > 20 else ""
        return (
            f"{fork} holds files that git ignores and a new tree would not have:\n  "
            + "\n  ".join(kept[:20]) + more
            + f"\nMove them out of {fork} to keep them, or delete them; then run setup again"
        )  # fmt: skip
    commits = git(fork, "log", "--oneline", f"{config.BASE_REF}..{config.BRANCH}").splitlines()
    return (
        f"{fork} has commits that patches/ lacks:\n  "
        + "\n  ".join(patches.differences(series, patches.read(patch_dir)))
        + f"\n  branch {config.BRANCH}: " + "; ".join(commits)
        + "\nRun ./stack export and commit patches/ to keep them"
    )  # fmt: skip


def off_branch(fork: Path) -> list[str]:
    """One line per ref or worktree holding commits that are not on branch `stack`.

    Branches, tags, the stash (every entry), HEAD, and the HEAD of each other worktree except
    those the tool made below build/ (the gate's): the tool's own trees are never work.
    """
    sources = [
        r for r in git(fork, "for-each-ref", "--format=%(refname)").split() if r != "refs/stash"
    ]
    sources += [f"stash@{{{n}}}" for n in range(len(git(fork, "stash", "list").splitlines()))]
    sources.append("HEAD")
    tools = (fork.parent / "build").resolve()
    for entry in git(fork, "worktree", "list", "--porcelain").split("\n\n")[1:]:
        fields = dict(f.split(" ", 1) for f in entry.splitlines() if " " in f)
        tree = Path(fields.get("worktree", "/")).resolve()
        if "HEAD" in fields and not tree.is_relative_to(tools):
            sources.append(f"{fields['HEAD']} (HEAD of worktree {tree})")
    found = []
    for source in sources:
        rev = source.split(" ")[0]
        commits = git(fork, "rev-list", "--oneline", rev, "--not", f"refs/heads/{config.BRANCH}")
        lines = commits.splitlines()
        if lines:
            more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
            found.append(f"{source}: " + "; ".join(lines[:3]) + more)
    return found


def on_branch(fork: Path) -> str | None:
    """Put a fork whose HEAD is off branch `stack` back on it; say what was done, else None.

    For a fork `state` calls current (clean, every commit on the branch): an interrupted
    `./stack test` or `./stack lint` can leave it checked out, detached, at a level's commit.
    """
    ref = git(fork, "symbolic-ref", "--quiet", "HEAD", check=False).strip()
    if ref == f"refs/heads/{config.BRANCH}":
        return None
    head = git(fork, "rev-parse", "--short=12", "HEAD").strip()
    git(fork, "checkout", "--quiet", config.BRANCH)
    return f"{fork} was checked out at {head} ({ref or 'detached'}): back on branch {config.BRANCH}"


def ignored_work(fork: Path) -> list[str]:
    """Files in `fork` that git ignores and that are not made again (REMADE, the wheel's)."""
    exclude = (fork / ".git" / "info" / "exclude").read_text()
    remade = REMADE.splitlines() + exclude.partition(wheel.LINKED)[2].splitlines()
    ignored = git(fork, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
    made = git(fork, "ls-files", "-z", "--others", "--ignored", *(f"--exclude={p}" for p in remade))
    return sorted(set(ignored.split("\0")) - set(made.split("\0")) - {""})


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


def replace(fork: Path, new: Path) -> Path | None:
    """Swap `new` in as the fork; an old fork is moved aside, returned (see retire)."""
    aside = None
    with uninterrupted():  # Ctrl-C waits: pytorch/ is the old tree or the new one
        if fork.exists():
            aside = fork.with_name(f"{fork.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
            fork.rename(aside)
        new.rename(fork)
    return aside


def retire(old: Path, patch_dir: Path, keep: bool) -> bool:
    """Delete the old fork `replace` moved aside, unless `keep` or it is no longer stale
    (work made in it while setup ran: setup looked at it minutes before). Whether kept."""
    if keep or state(old, patch_dir) != "stale":
        return True
    shutil.rmtree(old)
    return False
