"""The README's loop as loop.py reads it: the blocks, and the commands a student needs."""

import unittest
from pathlib import Path

from stacktool import loop

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


class ReadmeLoopTest(unittest.TestCase):
    def test_the_loop_then_the_undo_each_command_in_order(self):
        edit, back = loop.blocks(README)
        order = ["git -C pytorch log --oneline attn/0..stack -- ", ">> pytorch/", "./stack lint --changed",
                 "git -C pytorch commit -a --fixup attn/2", "GIT_SEQUENCE_EDITOR=: git -C pytorch rebase -i "
                 "--autosquash attn/0", "./stack build", "../.venv/bin/python test/run_test.py -i "
                 "test_attn_gradcheck", "./stack export"]  # fmt: skip
        found = [edit.find(command) for command in order]
        self.assertNotIn(-1, found, list(zip(order, found, strict=True)))
        self.assertEqual(found, sorted(found))
        self.assertEqual(back.strip(), "./stack undo")

    def test_no_block_runs_the_gate_itself(self):
        self.assertFalse([b for b in loop.blocks(README) if "./stack test" in b or "setup" in b])


if __name__ == "__main__":
    unittest.main()
