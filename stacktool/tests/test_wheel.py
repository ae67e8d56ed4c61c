import tempfile
import unittest
from pathlib import Path

from stacktool import wheel


class RequirementsTest(unittest.TestCase):
    def test_metadata_to_pip_arguments_without_extras(self):
        with tempfile.TemporaryDirectory() as d:
            info = Path(d) / "torch-2.6.0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(
                "Name: torch\nRequires-Dist: filelock\n"
                "Requires-Dist: typing-extensions (>=4.10.0)\n"
                'Requires-Dist: triton (==3.2.0) ; platform_system == "Linux"\n'
                "Requires-Dist: optree (>=0.13.0) ; extra == 'optree'\n"
            )
            self.assertEqual(wheel.requirements(Path(d)), [
                "filelock", "typing-extensions >=4.10.0", 'triton ==3.2.0 ; platform_system == "Linux"'
            ])  # fmt: skip


if __name__ == "__main__":
    unittest.main()
