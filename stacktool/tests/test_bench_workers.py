"""The bench's worker processes (stacktool/bench/workers.py): the environment each gets."""

import os
import unittest
from pathlib import Path
from unittest import mock

from stacktool.bench import workers
from stacktool.config import Layout


class SpawnTest(unittest.TestCase):
    def spawned_env(self, layout: Layout, env=None) -> dict:
        seen = []
        run = lambda command, cwd, env: seen.append(env) or mock.Mock(returncode=0)  # noqa: E731
        with mock.patch.object(workers.subprocess, "run", run):
            self.assertTrue(workers.spawn(layout, "timing", env=env))
        return seen[0]

    def test_each_tree_and_capability_compiles_into_a_cache_of_its_own(self):
        """v2.6.0's inductor reuses a kernel compiled under another ATEN_CPU_CAPABILITY (a
        double free): each capability, and each tree, gets its folder under build/."""
        root, cache = Path("/x"), "TORCHINDUCTOR_CACHE_DIR"
        shell = {cache: "/tmp/shared", "ATEN_CPU_FLOAT_TANH": "vml"}
        with mock.patch.dict(os.environ, shell):
            os.environ.pop("ATEN_CPU_CAPABILITY", None)
            found = [
                self.spawned_env(Layout(root), {"ATEN_CPU_CAPABILITY": "avx2"})[cache],
                self.spawned_env(Layout(root), {"ATEN_CPU_CAPABILITY": "avx512"})[cache],
                self.spawned_env(Layout(root))[cache],
                self.spawned_env(Layout(root).gate_tree(4), {"ATEN_CPU_CAPABILITY": "avx2"})[cache],
            ]
            removed = self.spawned_env(Layout(root), {"ATEN_CPU_FLOAT_TANH": None})
        self.assertEqual(found, ["/x/build/inductor-cache/pytorch/avx2-wheel",
                                 "/x/build/inductor-cache/pytorch/avx512-wheel",
                                 "/x/build/inductor-cache/pytorch/native-wheel",
                                 "/x/build/inductor-cache/level-4/avx2-wheel"])  # fmt: skip
        self.assertNotIn("ATEN_CPU_FLOAT_TANH", removed)  # None still removes a variable


if __name__ == "__main__":
    unittest.main()
