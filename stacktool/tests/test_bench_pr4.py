"""PR 4's torch.attn (stacktool/bench/pr4.py): which tree and build its workers run in, the
check of the torch they ran, and how its times join the timing rows."""

import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool.bench import pr4
from stacktool.bench.common import FWD, FWD_BWD
from stacktool.config import Layout
from stacktool.errors import StackError

COMMITS = ["c1", "c2", "c3", "c4", "c5", "c6"]  # the stack's commits, PR 1 to PR 6


class Pr4LayoutTest(unittest.TestCase):
    def test_with_build_level_4_is_made_as_the_gate_makes_it(self):
        layout, log, build = Layout(Path("/p")), mock.Mock(), mock.Mock()
        each_level = mock.Mock(return_value=iter([(4, "0123456789abcdef", "the gate's")]))
        with mock.patch.object(pr4.gate, "each_level", each_level):
            self.assertEqual(pr4.pr4_layout(layout, log, build),
                             ("the gate's", "built at 0123456789ab"))  # fmt: skip
        each_level.assert_called_once_with(layout, log, build, only=4)
        failed = mock.Mock(side_effect=StackError("no level 4: the stack has levels 1 to 3\n.."))
        with mock.patch.object(pr4.gate, "each_level", failed):
            self.assertEqual(pr4.pr4_layout(layout, log, build),
                             (None, "not run: no level 4: the stack has levels 1 to 3"))  # fmt: skip

    def test_without_build_only_a_build_at_pr_4s_commit_is_taken(self):
        with tempfile.TemporaryDirectory() as tmp:
            layout = Layout(Path(tmp))
            level_4 = layout.gate_tree(4)

            def pr4_layout(head="c4", commits=COMMITS):
                with (mock.patch.object(pr4, "stack_commits", return_value=commits),
                      mock.patch.object(pr4, "git", return_value=f"{head}\n")):  # fmt: skip
                    return pr4.pr4_layout(layout, mock.Mock())

            self.assertEqual(pr4_layout(), (None, pr4.NO_BUILD))  # no build there
            level_4.overlay.mkdir(parents=True)
            (level_4.overlay / "overlay.json").write_text(json.dumps({"commit": "c4"}))
            self.assertEqual(pr4_layout(), (level_4, "the gate's build"))
            self.assertEqual(pr4_layout(head="c6"), (None, pr4.NO_BUILD))  # checked out since
            self.assertEqual(pr4_layout(commits=COMMITS[:3]), (None, pr4.NO_BUILD))
            (level_4.overlay / "overlay.json").write_text(json.dumps({"commit": "c6"}))
            self.assertEqual(pr4_layout(head="c6"), (None, pr4.NO_BUILD))  # PR 6's build


class Pr4WorkersTest(unittest.TestCase):
    def test_a_worker_that_ran_another_torch_is_refused(self):
        layout, log = Layout(Path("/p")).gate_tree(4), []
        ours = {"torch_file": str(layout.fork / "torch" / "__init__.py"), "mb": 20.0}
        with mock.patch.object(pr4, "worker", return_value=ours) as worker:
            self.assertEqual(pr4.pr4_timing(layout, True, log.append), ours)
            self.assertEqual(pr4.pr4_memory(layout, {"M": "1"}, log.append), 20.0)
        self.assertEqual(worker.call_args_list, [
            mock.call(layout, "timing", str(layout.fork), "--native-only", "--quick"),
            mock.call(layout, "memory", str(layout.fork), "--method", "native", env={"M": "1"}),
        ])  # fmt: skip
        theirs = {"torch_file": "/p/pytorch/torch/__init__.py", "mb": 10.0}  # pytorch/'s torch
        with mock.patch.object(pr4, "worker", return_value=theirs):
            self.assertIsNone(pr4.pr4_timing(layout, False, log.append))
            self.assertIsNone(pr4.pr4_memory(layout, {}, log.append))
        self.assertEqual(log[0], "PR 4's torch.attn: the worker ran /p/pytorch/torch/__init__.py, "
                                 f"not {layout.fork / 'torch' / '__init__.py'}")  # fmt: skip
        with mock.patch.object(pr4, "worker", return_value=None):  # crashed
            self.assertIsNone(pr4.pr4_timing(layout, False, log.append))

    def test_pr_4s_times_join_the_rows_with_their_ratio(self):
        def timed(size, name, ms, threads=2):
            return {"size": list(size), "threads": threads, "pass": name, "ms": ms,
                    "rounds_ms": {m: [t] for m, t in ms.items()}}  # fmt: skip

        timing = {"rows": [timed((2, 3, 4), FWD, {"native": 1.0, "composite": 2.0}),
                           timed((2, 3, 4), FWD_BWD, {"native": 3.0}),
                           timed((2, 3, 4), FWD_BWD, {"native": 3.0}, threads=1)]}  # fmt: skip
        found = {"rows": [timed((2, 3, 4), FWD, {"native": 2.0}),
                          timed((2, 3, 4), FWD_BWD, {"native": 2.5})]}  # fmt: skip
        pr4.merge(timing, found)
        self.assertEqual([(r["ms"].get("pr4"), r["rounds_ms"].get("pr4"), r["ratios"])
                          for r in timing["rows"]], [
            (2.0, [2.0], {"native / pr4": 0.5}),
            (2.5, [2.5], {"native / pr4": 1.2}),
            (None, None, {"native / pr4": None}),  # not timed at 1 thread here
        ])  # fmt: skip


if __name__ == "__main__":
    unittest.main()
