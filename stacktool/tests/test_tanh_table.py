"""PR 5's AVX512 tanh table is stacktool/tanh_table.py's output, bit for bit (the generator
runs under the venv's Python, which has mpmath; about 30 s)."""

import subprocess
import unittest
from fractions import Fraction
from pathlib import Path

from stacktool import tanh_table

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv" / "bin" / "python"
PR_5 = next(ROOT.glob("patches/0005-*.patch"), None)


class RoundingTest(unittest.TestCase):
    def test_round_f32_matches_float32(self):
        for value in (1 / 3, -2.5e-40, 1 - 2**-25, 1 - 2**-25 - 2**-60, 3.4e38, 0.1):
            self.assertEqual(tanh_table.round_f32(Fraction(value)), tanh_table.f32(value))

    def test_fma_rounds_once(self):
        # (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly; a rounded product would give 0
        a, b = 1 + 2**-23, 1 - 2**-23
        self.assertEqual(tanh_table.fma(a, b, -1.0), -(2.0**-46))


@unittest.skipUnless(PYTHON.exists() and PR_5, "needs ./stack setup's venv and patches/")
class TableTest(unittest.TestCase):
    def test_patch_holds_the_generated_table(self):
        made = subprocess.run(
            [str(PYTHON), "-m", "stacktool.tanh_table"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        generated = tanh_table.in_source(f"kTanhIntervals[8][32] = {{\n{made}}};")
        in_patch = tanh_table.in_source(PR_5.read_text())
        self.assertEqual(len(in_patch), 8)
        self.assertEqual(
            [[v.hex() for v in row] for row in generated],
            [[v.hex() for v in row] for row in in_patch],
        )
        # interval 29 gives exactly 1 at the clamp, so every |x| from there on does
        column = [row[29] for row in in_patch]
        self.assertEqual(tanh_table.evaluate(column, tanh_table.SATURATION), 1.0)
        # interval 0 adds d exactly: tiny x give x
        column = [row[0] for row in in_patch]
        self.assertEqual(tanh_table.evaluate(column, 2.0**-100, first=True), 2.0**-100)


if __name__ == "__main__":
    unittest.main()
