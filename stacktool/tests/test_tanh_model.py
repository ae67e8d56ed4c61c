"""The AVX512 tanh model: it reads the kernel's table and constants, and its verdict."""

import unittest

from stacktool import tanh_model

ROW = "{" + ", ".join(["0x1p+0f"] * 32) + "},"
SOURCE = (
    "alignas(64) static const float kTanhIntervals[8][32] = {\n"
    + "".join(f"    // r{i}\n    {ROW}\n" for i in range(8))
    + "};\n\nconstexpr float kTanhSaturation = 0x1.205968p+3f;\n"
    "constexpr int kTanhPartBits = 2;\n"
)


class ModelTest(unittest.TestCase):
    def test_header_takes_the_kernels_constants(self):
        header = tanh_model.header(SOURCE)
        self.assertIn("#define SATURATION 0x1.205968p+3f", header)
        self.assertIn("#define SHIFT 21", header)
        self.assertIn("#define FIRST_INDEX 491", header)
        self.assertEqual(header.count("0x1.0000000000000p+0f"), 8 * 32)

    def test_header_refuses_another_form(self):
        with self.assertRaises(ValueError):
            tanh_model.header(SOURCE.replace("kTanhPartBits = 2", "kParts = 4"))

    def test_verdict(self):
        found = {"max_ulp": 1, "not_rounded": 9, "nan_or_sign_broken": 0,
                 "not_one_from_saturation": 0}  # fmt: skip
        self.assertTrue(tanh_model.verdict(found))
        for key in ("nan_or_sign_broken", "not_one_from_saturation"):
            self.assertFalse(tanh_model.verdict({**found, key: 2}), key)
        self.assertFalse(tanh_model.verdict({**found, "max_ulp": 2}))


if __name__ == "__main__":
    unittest.main()
