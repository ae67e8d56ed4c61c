import base64
import hashlib
import os
import tempfile
import unittest
import zipfile
from pathlib import Path

from stacktool import wheel
from stacktool.errors import StackError


class RequirementsTest(unittest.TestCase):
    def test_metadata_to_pip_arguments_without_extras(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl"
            with zipfile.ZipFile(path, "w") as z:
                z.writestr("torch/__init__.py", "")
                z.writestr("torch-2.6.0.dist-info/METADATA", (
                    "Name: torch\nRequires-Dist: filelock\n"
                    "Requires-Dist: typing-extensions (>=4.10.0)\n"
                    'Requires-Dist: triton (==3.2.0) ; platform_system == "Linux"\n'
                    "Requires-Dist: optree (>=0.13.0) ; extra == 'optree'\n"))  # fmt: skip
            self.assertEqual(wheel.requirements(path), [
                "filelock", "typing-extensions >=4.10.0", 'triton ==3.2.0 ; platform_system == "Linux"'
            ])  # fmt: skip


FILES = {"torch/lib/libfake.so": b"\x7fELF" * 100, "torch/__init__.py": b"x = 1\n"}


def make_wheel(path: Path, files: dict[str, bytes], record: dict[str, bytes]) -> None:
    """A tiny wheel whose RECORD lists `record` (name -> the bytes it claims)."""
    lines = []
    for name, data in record.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append("torch-2.6.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16
            z.writestr(info, data)
        z.writestr("torch-2.6.0.dist-info/RECORD", "\n".join(lines) + "\n")


class UnpackTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.cache = Path(self.dir.name)
        self.wheel = self.cache / "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl"

    def test_unpacked_files_are_checked_against_record_and_repaired(self):
        make_wheel(self.wheel, FILES, FILES)
        dest, repaired = wheel.unpack(self.wheel, self.cache)
        self.assertEqual(repaired, [])
        lib = dest / "torch/lib/libfake.so"
        self.assertEqual(lib.read_bytes(), FILES["torch/lib/libfake.so"])
        self.assertEqual(lib.stat().st_mode & 0o777, 0o755)
        linked = self.cache / "fork.so"  # the fork's hardlink shares the cache's file
        os.link(lib, linked)
        lib.write_bytes(b"damaged")
        (dest / "torch/__init__.py").unlink()
        self.assertEqual(wheel.unpack(self.wheel, self.cache),
                         (dest, ["torch/__init__.py", "torch/lib/libfake.so"]))  # fmt: skip
        self.assertEqual(lib.read_bytes(), FILES["torch/lib/libfake.so"])
        self.assertEqual(linked.read_bytes(), FILES["torch/lib/libfake.so"])
        self.assertEqual((dest / "torch/__init__.py").read_bytes(), b"x = 1\n")
        self.assertEqual(wheel.unpack(self.wheel, self.cache), (dest, []))

    def test_a_file_that_does_not_match_record_is_refused(self):
        make_wheel(self.wheel, {**FILES, "torch/__init__.py": b"x = 2\n"}, FILES)
        with self.assertRaisesRegex(StackError, "torch/__init__.py.*RECORD"):
            wheel.unpack(self.wheel, self.cache)
        self.assertEqual(sorted(p.name for p in self.cache.iterdir()), [self.wheel.name])


if __name__ == "__main__":
    unittest.main()
