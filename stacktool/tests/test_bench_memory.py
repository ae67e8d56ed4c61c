"""The peak-memory worker (stacktool/bench/memory.py) on fakes: which function each method
steps."""

import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool.bench import __main__ as bench_main
from stacktool.bench import memory


class MemoryWorkerTest(unittest.TestCase):
    def steps(self, method: str) -> tuple[list[str], dict]:
        """What memory_worker(method) did, in order, and what it returned."""
        log = []
        torch = self.torch = mock.Mock(__file__="/t/torch/__init__.py")
        torch.set_float32_matmul_precision.side_effect = lambda p: log.append(f"precision {p}")
        methods = {"native": "torch.attn", "composite": "composite"}

        def train_step(torch, fn, *args):
            return lambda: log.append(f"step {fn}")

        def floor_step(torch, *args):
            return lambda: log.append("step floor")

        with (mock.patch.object(memory, "load_torch", return_value=(torch, methods)),
              mock.patch.object(memory, "inputs", return_value=()),
              mock.patch.object(memory, "train_step", train_step),
              mock.patch.object(memory, "floor_step", floor_step)):  # fmt: skip
            found = memory.memory_worker(Path("/nonexistent"), method)
        return log, found

    def test_unfused_is_the_floors_step(self):
        # PR 4's ATen calls: torch.attn takes PR 6's kernel at every matmul precision
        log, found = self.steps("unfused")
        self.assertEqual(log, ["step floor", "step floor"])
        self.torch.set_float32_matmul_precision.assert_not_called()
        self.assertEqual(found["method"], "unfused")

    def test_native_keeps_the_default_precision(self):
        log, found = self.steps("native")
        self.assertEqual(log, ["step torch.attn", "step torch.attn"])
        self.assertEqual(found["method"], "native")
        self.assertEqual(found["torch_file"], "/t/torch/__init__.py")  # what pr4.py checks

    def test_the_workers_entry_point_takes_unfused(self):
        worker = mock.Mock(return_value={"method": "unfused", "mb": 1.0})
        with (tempfile.TemporaryDirectory() as tmp,
              mock.patch.object(bench_main, "memory_worker", worker)):  # fmt: skip
            out = Path(tmp) / "out.json"
            bench_main.main(["memory", str(out), "/fork", "--method", "unfused"])
            self.assertEqual(json.loads(out.read_text()), {"method": "unfused", "mb": 1.0})
        worker.assert_called_once_with(Path("/fork"), "unfused")


if __name__ == "__main__":
    unittest.main()
