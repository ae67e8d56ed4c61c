"""Materialize, export and the never-lose-work rules, on a tiny synthetic upstream."""

import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from stacktool import config, fork, patches, undo, wheel
from stacktool.errors import StackError
from stacktool.git import git


class ForkTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.dir)
        src = self.dir / "src" / "pytorch-v2.6.0"
        src.mkdir(parents=True)
        (src / "version.txt").write_text("2.6.0a0\n")
        (src / "a.py").write_text("x = 1\n")
        self.tarball = self.dir / "upstream.tar.xz"
        subprocess.run(
            ["tar", "-cJf", str(self.tarball), "-C", str(src.parent), src.name], check=True
        )
        self.patch_dir = self.dir / "patches"
        self.patch_dir.mkdir()
        self.fork = self.dir / "pytorch"
        self.doc = self.dir / patches.GRADIENT_DOC

    def commit(self, repo, name, text, message):
        (repo / name).write_text(text)
        git(repo, "add", name)
        git(repo, "commit", "-q", "-m", message, env={
            "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@x.invalid",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
        })  # fmt: skip

    def make_stack(self):
        """A fork with two commits, exported to patches/."""
        fork.materialize(self.tarball, self.patch_dir, self.fork)
        self.commit(self.fork, patches.GRADIENT_DOC, "# d\n", "[lab] Add the derivation\n\nBody.")
        self.commit(self.fork, "a.py", "x = 2\n", "Change a")
        self.assertTrue(patches.export(self.fork, self.patch_dir, self.doc, check=False))

    def test_materialize_then_export_is_byte_identical(self):
        self.make_stack()
        exported = patches.read(self.patch_dir)
        self.assertEqual(
            sorted(exported), ["0001-lab-Add-the-derivation.patch", "0002-Change-a.patch"]
        )
        self.assertEqual(self.doc.read_text(), "# d\n")
        again = self.dir / "again"
        fork.materialize(self.tarball, self.patch_dir, again)
        self.assertEqual(patches.render(again), exported)
        self.assertEqual(patches.export(again, self.patch_dir, self.doc, check=True), [])
        twice = self.dir / "twice"  # commit ids are reproducible too
        fork.materialize(self.tarball, self.patch_dir, twice)
        self.assertEqual(git(again, "rev-parse", "attn/2"), git(twice, "rev-parse", "attn/2"))

    def test_setup_puts_a_fork_left_detached_by_an_interrupted_gate_back_on_its_branch(self):
        self.make_stack()
        self.assertIsNone(fork.on_branch(self.fork))
        git(self.fork, "checkout", "--quiet", "--detach", "attn/1")  # as the gate leaves it
        self.assertEqual(fork.state(self.fork, self.patch_dir), "current")
        self.assertIn("back on branch stack", fork.on_branch(self.fork))
        self.assertEqual(git(self.fork, "symbolic-ref", "HEAD").strip(), "refs/heads/stack")
        self.assertEqual((self.fork / "a.py").read_text(), "x = 2\n")

    def test_state_protects_work(self):
        self.assertEqual(fork.state(self.fork, self.patch_dir), "absent")
        fork.materialize(self.tarball, self.patch_dir, self.fork)
        self.assertEqual(fork.state(self.fork, self.patch_dir), "current")
        (self.fork / "a.py").write_text("edited\n")
        self.assertIn("uncommitted changes", fork.state(self.fork, self.patch_dir))
        git(self.fork, "checkout", "a.py")
        self.commit(self.fork, "b.py", "y\n", "New work")
        self.assertRegex(fork.state(self.fork, self.patch_dir),
                         "commits that patches/ lacks:\n(.*\n)*  branch stack: \\w+ New work")  # fmt: skip
        self.assertTrue(patches.export(self.fork, self.patch_dir, self.doc, check=True))
        patches.export(self.fork, self.patch_dir, self.doc, check=False)
        self.assertEqual(fork.state(self.fork, self.patch_dir), "current")

    def test_the_tools_worktrees_are_not_work_and_a_refusal_names_what_it_protects(self):
        self.make_stack()
        (self.fork / "a.py").write_text("x = 3\n")  # a fixup squashed in, not exported
        git(self.fork, "commit", "-q", "--amend", "--no-edit", "a.py")
        rewritten = git(self.fork, "rev-parse", "--short", "HEAD").strip()
        gate_tree = self.dir / "build" / "gate" / "level-2" / "pytorch"  # `./stack lint` made it
        git(self.fork, "worktree", "add", "--quiet", "--detach", str(gate_tree), "HEAD")
        git(self.fork, "reset", "-q", "--hard", "attn/2")  # back to what patches/ holds
        self.assertEqual(fork.state(self.fork, self.patch_dir), "current")
        mine = self.dir / "mine"  # a worktree the user made is the user's work
        git(self.fork, "worktree", "add", "--quiet", "--detach", str(mine), rewritten)
        git(self.fork, "branch", "keep", rewritten)
        state = fork.state(self.fork, self.patch_dir)
        self.assertIn("has commits that are not on branch 'stack':", state)
        self.assertIn(f"refs/heads/keep: {rewritten} Change a", state)
        self.assertRegex(state, f"HEAD of worktree {mine}\\)?: {rewritten} Change a")
        self.assertNotIn(str(gate_tree), state)
        git(self.fork, "worktree", "remove", str(mine))
        git(self.fork, "branch", "-D", "keep")
        (self.fork / "a.py").write_text("stashed\n")
        git(self.fork, "stash", "-q")
        self.assertRegex(
            fork.state(self.fork, self.patch_dir), r"^.*\n  stash@\{0\}: \w+ WIP on stack"
        )

    def landed_project(self):
        """The project root as a git repository whose HEAD holds the exported stack."""
        self.make_stack()
        git(self.dir, "init", "-q")
        git(self.dir, "add", "patches", patches.GRADIENT_DOC)
        git(self.dir, "commit", "-qm", "landed", env={"GIT_AUTHOR_NAME": "Dev",
                                                      "GIT_AUTHOR_EMAIL": "dev@x.invalid"})  # fmt: skip
        fresh = self.dir / "fresh"  # what setup makes of the landed series: its commit ids
        fork.materialize(self.tarball, self.patch_dir, fresh)
        return (
            config.Layout(self.dir),
            patches.read(self.patch_dir),
            git(fresh, "rev-parse", "HEAD"),
        )

    def test_undo_from_edits_local_commits_and_an_export_keeps_them_all(self):
        layout, series, landed_head = self.landed_project()
        self.assertFalse(undo.undo(layout, print))  # nothing to undo
        self.commit(self.fork, "b.py", "y\n", "New work")  # a local commit, exported
        (self.fork / "a.py").write_text("x = 3\n")
        git(self.fork, "commit", "-q", "--amend", "--no-edit", "-a")
        patches.export(self.fork, self.patch_dir, self.doc, check=False)
        (self.fork / "a.py").write_text("edited\n")  # uncommitted, and an untracked file
        (self.fork / "new.py").write_text("n\n")
        messages = []
        self.assertTrue(undo.undo(layout, messages.append))
        self.assertEqual(patches.read(self.patch_dir), series)
        self.assertEqual(git(self.fork, "rev-parse", "HEAD"), landed_head)  # the same commit ids
        self.assertEqual(git(self.fork, "symbolic-ref", "HEAD").strip(), "refs/heads/stack")
        self.assertEqual(git(self.fork, "status", "--porcelain"), "")
        self.assertEqual(git(self.fork, "rev-parse", "attn/2"), landed_head)
        self.assertEqual(patches.export(self.fork, self.patch_dir, self.doc, check=True), [])
        self.assertEqual(fork.state(self.fork, self.patch_dir).count("\n  "), 2)  # kept, named
        branch = git(self.fork, "branch", "--list", "undo/*", "--format=%(refname:short)").strip()
        self.assertEqual(git(self.fork, "show", f"{branch}:b.py"), "y\n")
        self.assertEqual(git(self.fork, "show", f"{branch}:a.py"), "x = 3\n")
        git(self.fork, "checkout", "-q", branch)  # the edits were made on that stack
        git(self.fork, "stash", "pop", "-q")
        self.assertEqual((self.fork / "a.py").read_text(), "edited\n")
        self.assertEqual((self.fork / "new.py").read_text(), "n\n")
        self.assertEqual(len(messages), 3, messages)

    def test_undo_says_where_the_stashed_edits_apply_again(self):
        layout, _, _ = self.landed_project()
        git(self.fork, "checkout", "-q", "--detach", "HEAD~1")
        self.commit(self.fork, "c.py", "z\n", "Detached work")
        (self.fork / "c.py").write_text("edited\n")
        messages = []
        self.assertTrue(undo.undo(layout, messages.append))
        back = re.search(r"; (git checkout (\S+); git stash pop)\)", messages[-2])
        self.assertTrue(back, messages)
        git(self.fork, "checkout", "-q", back.group(2))  # as the message says
        git(self.fork, "stash", "pop", "-q")
        self.assertEqual((self.fork / "c.py").read_text(), "edited\n")

    def test_undo_refuses_what_it_could_not_keep_and_changes_nothing(self):
        layout, series, _ = self.landed_project()
        name = sorted(series)[1]
        (self.patch_dir / name).write_bytes(series[name] + b"hand edit\n")
        with self.assertRaisesRegex(StackError, "neither landed nor pytorch/'s stack"):
            undo.undo(layout, print)
        self.assertEqual((self.patch_dir / name).read_bytes(), series[name] + b"hand edit\n")
        (self.patch_dir / name).write_bytes(series[name])
        (self.fork / ".git" / "rebase-merge").mkdir()
        with self.assertRaisesRegex(StackError, "middle of a rebase"):
            undo.undo(layout, print)
        (self.fork / ".git" / "rebase-merge").rmdir()
        (self.fork / ".git" / "REVERT_HEAD").write_text("x\n")  # a conflicted git revert
        with self.assertRaisesRegex(StackError, "revert"):
            undo.undo(layout, print)
        self.assertEqual(git(self.fork, "branch", "--list", "undo/*"), "")

    def test_stale_fork_is_replaceable_after_patches_change(self):
        self.make_stack()
        old = self.dir / "old"
        fork.materialize(self.tarball, self.patch_dir, old)
        (self.patch_dir / "0002-Change-a.patch").unlink()  # patches/ moved on, e.g. a pull
        self.assertEqual(fork.state(old, self.patch_dir), "stale")
        git(old, "checkout", "-q", "-b", "side")  # work kept off the stack branch
        self.commit(old, "c.py", "z\n", "Side work")
        git(old, "checkout", "-q", config.BRANCH)
        self.assertIn("not on branch", fork.state(old, self.patch_dir))
        git(old, "branch", "-q", "-D", "side")
        self.assertEqual(fork.state(old, self.patch_dir), "stale")

    def test_retire_keeps_an_old_tree_that_holds_work_made_while_setup_ran(self):
        self.make_stack()
        for edit in (None, "untracked", "commit"):
            old = self.dir / f"old-{edit}"
            fork.materialize(self.tarball, self.patch_dir, old)
            series = dict(patches.read(self.patch_dir))
            (self.patch_dir / "0002-Change-a.patch").unlink()  # stale: setup replaces it
            if edit == "untracked":
                (old / "notes.txt").write_text("mine\n")
            elif edit == "commit":
                self.commit(old, "c.py", "z\n", "Work after setup looked")
            self.assertEqual(fork.retire(old, self.patch_dir, keep=False), edit is not None)
            self.assertEqual(old.exists(), edit is not None)
            for name, data in series.items():
                (self.patch_dir / name).write_bytes(data)
        kept = self.dir / "kept"
        fork.materialize(self.tarball, self.patch_dir, kept)
        self.assertTrue(fork.retire(kept, self.patch_dir, keep=True))  # --move-aside
        self.assertTrue(kept.exists())

    def test_bad_patch_names_itself_and_leaves_no_tree(self):
        self.make_stack()
        bad = self.patch_dir / "0002-Change-a.patch"
        bad.write_text(bad.read_text().replace("-x = 1", "-x = 7"))
        dest = self.dir / "new"
        with self.assertRaisesRegex(
            StackError, "0002-Change-a.patch does not apply.*\n(.*\n)*.*a.py"
        ):
            fork.materialize(self.tarball, self.patch_dir, dest)
        self.assertFalse(dest.exists())

    def test_export_refuses_uncommitted_work(self):
        self.make_stack()
        (self.fork / "a.py").write_text("edited\n")
        before = patches.read(self.patch_dir)
        with self.assertRaisesRegex(StackError, "uncommitted changes"):
            patches.export(self.fork, self.patch_dir, self.doc, check=False)
        self.assertEqual(patches.read(self.patch_dir), before)

    def test_export_refuses_commits_that_only_head_has(self):
        self.make_stack()
        before = patches.read(self.patch_dir)
        git(self.fork, "checkout", "-q", "--detach", "HEAD~1")
        git(self.fork, "commit", "-q", "--amend", "-m", "Reworded")  # built, not on the branch
        for check in (True, False):
            with self.assertRaisesRegex(
                StackError, "HEAD has commits that branch 'stack'(.|\n)*Reworded"
            ):
                patches.export(self.fork, self.patch_dir, self.doc, check=check)
        self.assertEqual(patches.read(self.patch_dir), before)
        git(self.fork, "checkout", "-q", "-B", config.BRANCH)
        self.assertTrue(patches.export(self.fork, self.patch_dir, self.doc, check=False))
        git(self.fork, "branch", "-q", "-m", config.BRANCH, "mine")
        with self.assertRaisesRegex(StackError, "no branch 'stack'"):
            patches.export(self.fork, self.patch_dir, self.doc, check=True)

    def test_level_tags_follow_the_stack(self):
        self.make_stack()
        git(self.fork, "reset", "-q", "--hard", "HEAD~1")
        patches.export(self.fork, self.patch_dir, self.doc, check=False)
        self.assertEqual(git(self.fork, "tag", "--list", "attn/*").split(), ["attn/0", "attn/1"])
        self.assertEqual(len(patches.read(self.patch_dir)), 1)

    def test_export_keeps_files_that_are_not_patches_and_check_names_them(self):
        self.make_stack()
        notes = self.patch_dir / "NOTES.md"
        notes.write_text("x\n")
        found = patches.export(self.fork, self.patch_dir, self.doc, check=True)
        self.assertEqual(found, ["not a .patch file: NOTES.md"])
        (self.fork / "a.py").write_text("x = 3\n")
        git(self.fork, "commit", "-q", "--amend", "--no-edit", "a.py")
        before = patches.read(self.patch_dir)
        with self.assertRaisesRegex(StackError, "NOTES.md"):
            patches.export(self.fork, self.patch_dir, self.doc, check=False)
        self.assertEqual(notes.read_text(), "x\n")
        self.assertEqual(patches.read(self.patch_dir), before)
        notes.unlink()
        self.assertEqual(
            patches.export(self.fork, self.patch_dir, self.doc, check=False),
            ["differs: 0002-Change-a.patch"],
        )
        self.assertEqual(sorted(p.name for p in self.dir.iterdir() if p.name.startswith("patches")),
                         ["patches"])  # fmt: skip

    def test_stale_fork_with_ignored_work_is_not_replaced(self):
        self.make_stack()
        old = self.dir / "old"
        fork.materialize(self.tarball, self.patch_dir, old)
        unpacked = self.dir / "wheel"  # what setup links in and builds and tests leave: remade
        for name in ["torch/lib/libfake.so", "torch/include/a.h", "torch/version.py"]:
            (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
            (unpacked / name).write_text("w\n")
        self.assertEqual(wheel.link(unpacked, old), 3)
        for name in ["__pycache__/a.cpython-311.pyc", ".pytest_cache/v", "test/test-reports/r.xml",
                     ".lintbin/clang-format", "torch/include/added.h"]:  # fmt: skip
            (old / name).parent.mkdir(parents=True, exist_ok=True)
            (old / name).write_text("made\n")
        (self.patch_dir / "0002-Change-a.patch").unlink()
        self.assertEqual(fork.state(old, self.patch_dir), "stale")
        (old / "notes.log").write_text("n\n")  # ignored (*.log), but the user's
        (old / "mine").mkdir()
        (old / "mine" / "ext.so").write_text("so\n")
        state = fork.state(old, self.patch_dir)
        self.assertRegex(state, "files that git ignores.*\n  mine/ext.so\n  notes.log\n")
        (old / "notes.log").unlink()
        shutil.rmtree(old / "mine")
        self.assertEqual(fork.state(old, self.patch_dir), "stale")


if __name__ == "__main__":
    unittest.main()
