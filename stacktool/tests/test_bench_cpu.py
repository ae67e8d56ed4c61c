"""The CPU's facts (stacktool/bench/cpu.py) read off /proc/cpuinfo texts, and how bench.md
names them."""

import tempfile
import unittest
from pathlib import Path

from stacktool.bench import cpu
from stacktool.bench.tanh import INTEL

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 fma avx2 sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
"""


class CpuFactsTest(unittest.TestCase):
    def facts(self, text: str | None) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            cpuinfo = Path(tmp) / "cpuinfo"
            if text is not None:
                cpuinfo.write_text(text)
            return cpu.cpu_facts(cpuinfo)

    def test_the_first_processors_vendor_family_model_stepping_and_flags(self):
        # "AMD EPYC" alone: Zen 3 and Zen 4 both; family 25 model 1 is Zen 3's Milan
        self.assertEqual(self.facts(ZEN3), {
            "vendor": "AuthenticAMD", "family": 25, "model": 1, "model name": "AMD EPYC",
            "stepping": 1, "flags": ["fpu", "sse4_2", "fma", "avx2", "sha_ni"],
        })  # fmt: skip

    def test_the_vendor_an_intel_target_reads(self):
        text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
        found = self.facts(text + "\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n")
        self.assertEqual((found["vendor"], found["family"], found["model"]), (INTEL, 6, 207))
        self.assertIsNone(found["flags"])

    def test_fields_cpuinfo_lacks_are_none(self):
        self.assertEqual(self.facts(None), dict.fromkeys(cpu.FIELDS.values()))  # no file
        found = self.facts("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n")
        self.assertEqual(found, dict.fromkeys(cpu.FIELDS.values()))  # aarch64's: no vendor_id

    def test_how_bench_md_names_it(self):
        facts = self.facts(ZEN3)
        self.assertEqual(cpu.describe(facts),
                         "AuthenticAMD family 25 model 1 stepping 1 (AMD EPYC)")  # fmt: skip
        self.assertEqual(cpu.simd_flags(facts), "avx2 fma")
        self.assertEqual(cpu.describe(self.facts(None)), "unknown CPU")
        self.assertEqual(cpu.describe({"model name": "AMD EPYC"}), "AMD EPYC")  # an older record
        self.assertEqual(cpu.simd_flags({}), f"none of {' '.join(cpu.SIMD_FLAGS)}")


if __name__ == "__main__":
    unittest.main()
