"""patches/ <-> the stack commits in pytorch/: render, export, check.

A patch series is rendered with `git format-patch` under a fixed configuration, so the same
commits give byte-identical files on every machine (materialize then export is a no-op).
patches/ holds the series and nothing else: export replaces the directory whole, so it refuses
while anything else is there, and `export --check` names it.
"""

import hashlib
import shutil
import tempfile
from pathlib import Path

from stacktool import config
from stacktool.errors import StackError, uninterrupted
from stacktool.git import git

GRADIENT_DOC = "attn_gradient.md"  # PR 1 adds it at the fork root; the project root mirrors it


def stack_commits(fork: Path) -> list[str]:
    """The commits of the stack branch above the pristine base, oldest first."""
    return git(fork, "rev-list", "--reverse", f"{config.BASE_REF}..{config.BRANCH}").split()


def render(fork: Path) -> dict[str, bytes]:
    """The patch files (name -> bytes) for the stack branch of `fork`."""
    with tempfile.TemporaryDirectory() as out:
        git(
            fork, "format-patch", "--zero-commit", "--no-signature", "--no-renames",
            "--no-numbered", "--quiet", "-o", out, f"{config.BASE_REF}..{config.BRANCH}",
        )  # fmt: skip
        return {p.name: p.read_bytes() for p in sorted(Path(out).iterdir())}


def read(patches: Path) -> dict[str, bytes]:
    """The patch files in `patches/`."""
    if not patches.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(patches.glob("*.patch"))}


def foreign(patches: Path) -> list[str]:
    """What patches/ holds besides .patch files (export would drop it, so it refuses)."""
    if not patches.is_dir():
        return []
    return sorted(p.name for p in patches.iterdir() if p.suffix != ".patch" or not p.is_file())


def digest(series: dict[str, bytes]) -> str:
    """A fingerprint of a series, recorded when a fork is materialized."""
    h = hashlib.sha256()
    for name, data in sorted(series.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def differences(expected: dict[str, bytes], actual: dict[str, bytes]) -> list[str]:
    """Human-readable lines naming each file that differs between two series."""
    lines = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            lines.append(f"only in pytorch/: {name}")
        elif name not in expected:
            lines.append(f"only in patches/: {name}")
        elif expected[name] != actual[name]:
            lines.append(f"differs: {name}")
    return lines


def gradient_doc(fork: Path, level: int = 1) -> bytes | None:
    """attn_gradient.md as PR 1 adds it, or None when the stack has no such commit yet."""
    commits = stack_commits(fork)
    if len(commits) < level:
        return None
    text = git(fork, "show", f"{commits[level - 1]}:{GRADIENT_DOC}", check=False)
    return text.encode() if text else None


def export(fork: Path, patches: Path, doc: Path, check: bool) -> list[str]:
    """Write (or with `check`, compare) patches/ and the root copy of attn_gradient.md.

    Returns the differences found; with `check` nothing is written. Refuses while patches/
    holds anything but .patch files. The directory is swapped with SIGINT and SIGTERM held
    back, so an interrupted export leaves the old series or the new one, never a mix.
    """
    dirty = git(fork, "status", "--porcelain", "--untracked-files=normal")
    if dirty.strip():
        raise StackError(
            "pytorch/ has uncommitted changes; commit them (git add -A; git commit --fixup "
            "attn/N for PR N, then GIT_SEQUENCE_EDITOR=: git rebase -i --autosquash attn/0) "
            "before exporting:\n" + dirty
        )
    branch = f"refs/heads/{config.BRANCH}"
    if not git(fork, "rev-parse", "--verify", "--quiet", branch, check=False):
        raise StackError(f"pytorch/ has no branch '{config.BRANCH}', the stack export reads")
    elsewhere = git(fork, "rev-list", "--oneline", "HEAD", "--not", branch).splitlines()
    if elsewhere:
        raise StackError(
            f"pytorch/'s HEAD has commits that branch '{config.BRANCH}', the stack export "
            "reads, lacks:\n  " + "\n  ".join(elsewhere) + f"\nPut them on the branch (git "
            f"checkout -B {config.BRANCH} if HEAD holds the whole stack), then export again"
        )
    series = render(fork)
    found = differences(series, read(patches))
    wanted_doc = gradient_doc(fork)
    have_doc = doc.read_bytes() if doc.exists() else None
    if wanted_doc != have_doc:
        found.append(f"differs: {doc.name} (must equal the file PR 1 adds)")
    others = foreign(patches)
    found += [f"not a .patch file: {name}" for name in others]
    if check:
        return found
    if others:
        raise StackError(
            f"{patches} holds more than the stack's patches: {', '.join(others)}\n"
            "export rewrites the directory whole; move these out of it, then export again"
        )
    if found:
        staging = Path(tempfile.mkdtemp(prefix="patches.", dir=patches.parent))
        try:
            for name, data in series.items():
                (staging / name).write_bytes(data)
            with uninterrupted():
                shutil.rmtree(patches, ignore_errors=True)
                staging.rename(patches)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if wanted_doc is None:
            doc.unlink(missing_ok=True)
        else:
            doc.write_bytes(wanted_doc)
    retag(fork)  # also when nothing differs: an interrupted export may have left the tags
    return found


def retag(fork: Path) -> None:
    """Point the level tags attn/1..attn/N at the stack's commits (they move on rebase)."""
    commits = stack_commits(fork)
    for level, commit in enumerate(commits, start=1):
        git(fork, "tag", "-f", config.level_ref(level), commit)
    existing = git(fork, "tag", "--list", "attn/*").split()
    for tag in existing:
        level = tag.split("/", 1)[1]
        if level.isdigit() and int(level) > len(commits):
            git(fork, "tag", "-d", tag)
