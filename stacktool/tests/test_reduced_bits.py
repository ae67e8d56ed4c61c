"""The comparison of tanh's callers against v2.6.0 (stacktool/reduced_bits.py)."""

import json
import subprocess
import unittest
from pathlib import Path

from stacktool import reduced_bits
from stacktool.config import Layout
from stacktool.suites import Processes

NAN16, INF16 = 0x7E00, 0x7C00  # Half


class CompareTest(unittest.TestCase):
    def compare(self, name: str, ours: list[int], theirs: list[int]):
        return reduced_bits.compare({name: ours}, {name: theirs, "capability": "AVX2"})

    def test_tanh_must_give_every_bit(self):
        broken, _ = self.compare("torch.float16 tanh", [1, 2, 3], [1, 2, 4])
        self.assertEqual(broken, ["torch.float16 tanh: input 2: 0x3, v2.6.0 0x4"])

    def test_a_callers_nan_must_be_v260s_its_last_bits_may_differ(self):
        one, two = 32768 + 0x3C00, 32768 + 0x4000  # the inputs 1.0 and 2.0 (Half)
        theirs = [0] * 65536
        theirs[two] = NAN16
        ours = list(theirs)
        ours[one] = 0x3C01  # a result 1 ULP off: counted
        broken, differ = self.compare("torch.float16 mish", ours, theirs)
        self.assertEqual((broken, differ), ([], {"torch.float16 mish": 1}))
        ours[two] = 0x7E01  # another NaN's bits: broken
        broken, _ = self.compare("torch.float16 mish", ours, theirs)
        self.assertEqual(broken, [f"torch.float16 mish: input {two}: 0x7e01, v2.6.0 0x7e00"])
        self.assertTrue(reduced_bits.is_nan(0x7FFF - 0x10000, "torch.float16 mish"))
        self.assertFalse(reduced_bits.is_nan(INF16, "torch.float16 mish"))

    def test_a_callers_results_for_zero_inf_and_nan_inputs_are_exact(self):
        # every BFloat16 input, index k holding bits k - 32768: +0 at 32768, -0 at 0
        broken, differ = self.compare("torch.bfloat16 gelu", [1] * 65536, [0] * 65536)
        inputs = {b.split(": ")[1] for b in broken}
        self.assertLessEqual({"input 0", "input 32768", f"input {32768 + 0x7F80}"}, inputs)
        self.assertNotIn(f"input {32768 + 0x3F80}", inputs)  # 1.0: counted, not broken
        self.assertEqual(len(broken) + differ["torch.bfloat16 gelu"], 65536)

    def test_float32_special_inputs_nan_stays_nan_the_rest_exact(self):
        quiet, other = 0x7FC00000, -1  # -1: all bits set, also NaN
        broken, _ = self.compare("float32 gelu", [other, 0], [quiet, 0])
        self.assertEqual(broken, [])
        broken, _ = self.compare("float32 gelu", [0x3F800001], [0x3F800000])
        self.assertEqual(len(broken), 1)  # input 0 is +0
        # input 10 is the largest float: GELU's other formula may round it otherwise
        ours, theirs = [0] * 14, [0] * 14
        ours[10] = 0x3F800000
        self.assertEqual(self.compare("float32 gelu backward", ours, theirs)[0], [])
        self.assertEqual(len(self.compare("float32 tanh", ours, theirs)[0]), 1)
        ours[10], ours[8] = 0, 1  # input 8 is a denormal: exact
        self.assertEqual(len(self.compare("float32 gelu backward", ours, theirs)[0]), 1)

    def test_the_grid_counts_its_differences(self):
        _, differ = self.compare("float32 grid gelu", [1, 2, 3], [1, 5, 6])
        self.assertEqual(differ, {"float32 grid gelu": 2})


class WhichCodeRanTest(unittest.TestCase):
    """The check fails where the callers gave v2.6.0's results at avx2 (the wheel's kernels
    ran, not PR 5's tanh), and where anything differs at default (v2.6.0's code there)."""

    def run_check(self, capability: str, grid_differs: bool) -> str:
        def results(stack: bool) -> dict:
            found = {"capability": capability, "attn": stack, "torch.float16 tanh": [1]}
            for name in ("gelu", "mish"):
                found[f"float32 grid {name}"] = [2 if stack and grid_differs else 1]
            return found

        class Fake(Processes):
            def run(self, command, **kwargs):
                stack = "PYTHONPATH" not in kwargs["env"] or "cache" not in kwargs["env"][
                    "PYTHONPATH"]  # fmt: skip
                Path(command[-1]).write_text(json.dumps(results(stack)))
                return subprocess.CompletedProcess(command, 0, "", "")

        layout = Layout(Path("/x"))
        result, _ = reduced_bits.task(layout, capability).run(Fake())
        return "passed" if result.passed else "failed"

    def test_avx2_needs_the_new_kernels_results_default_v260s(self):
        self.assertEqual(self.run_check("avx2", grid_differs=True), "passed")
        self.assertEqual(self.run_check("avx2", grid_differs=False), "failed")
        self.assertEqual(self.run_check("default", grid_differs=False), "passed")
        self.assertEqual(self.run_check("default", grid_differs=True), "failed")


if __name__ == "__main__":
    unittest.main()
