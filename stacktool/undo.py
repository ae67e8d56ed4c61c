"""`./stack undo`: back to the landed stack, the series patches/ holds in the project's HEAD.

Nothing is discarded: uncommitted edits in pytorch/ go to a stash, a stack branch that
differs from the landed one to a branch `undo/<time>` (an exported patches/ change is that
branch's export). Then patches/ and attn_gradient.md are restored from HEAD and branch
`stack` is made again from them (same commit ids as setup makes), in place: no second tree.
"""

import time
from pathlib import Path

from stacktool import config, fork, patches
from stacktool.config import Layout
from stacktool.errors import StackError, uninterrupted
from stacktool.git import git


def landed(root: Path) -> dict[str, bytes]:
    """The patch files of patches/ in the project's HEAD."""
    names = git(root, "ls-tree", "--name-only", "HEAD", "patches/").split()
    return {Path(n).name: git(root, "show", f"HEAD:{n}").encode() for n in names
            if n.endswith(".patch")}  # fmt: skip


def undo(layout: Layout, log) -> bool:
    """Save what differs from the landed stack, then restore it; False if nothing differed."""
    root, tree = layout.root, layout.fork
    busy_with = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
                 "sequencer")  # fmt: skip
    for busy in busy_with:
        if (tree / ".git" / busy).exists():
            raise StackError(f"{tree} is in the middle of a rebase, am, merge, cherry-pick or "
                             f"revert (.git/{busy}): finish or abort it first")  # fmt: skip
    want, have, stack = landed(root), patches.read(layout.patches), patches.render(tree)
    doc = layout.gradient_doc
    doc_want = git(root, "show", f"HEAD:{patches.GRADIENT_DOC}").encode()
    doc_have = doc.read_bytes() if doc.exists() else None
    if have not in (want, stack) or doc_have not in (doc_want, patches.gradient_doc(tree)):
        raise StackError(
            "patches/ or attn_gradient.md holds changes that are neither landed nor pytorch/'s "
            "stack (git diff shows them): keep them elsewhere, then undo again"
        )
    dirty = git(tree, "status", "--porcelain", "--untracked-files=normal").strip()
    head = git(tree, "rev-parse", "HEAD").strip()
    on = git(tree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip()
    tip = git(tree, "rev-parse", f"refs/heads/{config.BRANCH}").strip()
    if not dirty and head == tip and stack == want and have == want and doc_have == doc_want:
        return False
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if stack != want:
        git(tree, "branch", f"undo/{stamp}", tip)
        log(f"pytorch/'s stack kept as branch undo/{stamp} (git log attn/0..undo/{stamp})")
    # where the stash's edits apply again: the checkout they were made on
    if on == config.BRANCH:
        base = f"undo/{stamp}" if stack != want else ""  # else the same commits again
    elif on:
        base = on
        log(f"pytorch/ was on branch {on}, which is kept; it is on {config.BRANCH} again")
    else:
        base = head[:12]
    if git(tree, "rev-list", "--max-count=1", "HEAD", "--not", "--branches").strip():
        git(tree, "branch", f"undo/{stamp}-HEAD", head)  # a detached HEAD off every branch
        log(f"pytorch/'s HEAD {head[:12]} kept as branch undo/{stamp}-HEAD")
        base = f"undo/{stamp}-HEAD"
    if dirty:
        git(tree, "stash", "push", "--include-untracked", "--quiet", "-m", f"stack undo {stamp}")
        back = f"git checkout {base}; git stash pop" if base else "git stash pop"
        log(f"uncommitted edits in pytorch/ kept as stash@{{0}} ('stack undo {stamp}'; {back})")
    with uninterrupted():  # seconds: patches/, the doc and the branch move together
        git(root, "checkout", "HEAD", "--", "patches", patches.GRADIENT_DOC)
        for name in set(have) - set(want):  # exported files the landed series lacks
            (layout.patches / name).unlink()
        git(tree, "checkout", "--quiet", "--detach", config.BASE_REF)
        for patch in sorted(layout.patches.glob("*.patch")):
            fork.apply(tree, patch)
        git(tree, "branch", "--force", config.BRANCH, "HEAD")
        git(tree, "checkout", "--quiet", config.BRANCH)
        patches.retag(tree)
        (tree / ".git" / fork.APPLIED).write_text(patches.digest(want) + "\n")
    log(f"pytorch/ is the landed stack again: {len(want)} patch(es) from the project's HEAD")
    return True
