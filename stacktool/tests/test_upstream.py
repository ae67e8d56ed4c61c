import tempfile
import unittest
from pathlib import Path

from stacktool import upstream
from stacktool.errors import StackError


class DebianMirrorTest(unittest.TestCase):
    def sources(self, name: str, text: str) -> tuple[Path, ...]:
        d = Path(tempfile.mkdtemp())
        self.addCleanup(__import__("shutil").rmtree, d)
        (d / name).write_text(text)
        return (d / "sources.list", d)

    def test_deb822_skips_security_and_disabled(self):
        found = upstream.debian_mirror(self.sources("debian.sources", (
            "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: x\n\n"
            "Enabled: no\nTypes: deb\nURIs: http://off.invalid/debian\n\n"
            "Types: deb\nURIs: http://mirror.invalid/debian/\nSigned-By: /k.gpg\n"
        )))  # fmt: skip
        self.assertEqual(found, ("http://mirror.invalid/debian", "/k.gpg"))

    def test_one_line_format_with_options(self):
        found = upstream.debian_mirror(self.sources(
            "x.list", "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.invalid/debian bookworm main\n"
        ))  # fmt: skip
        self.assertEqual(found, ("http://m.invalid/debian", "/k.gpg"))

    def test_no_debian_archive_is_an_error(self):
        with self.assertRaisesRegex(StackError, "--upstream"):
            upstream.debian_mirror(
                self.sources("x.list", "deb http://other.invalid/ubuntu jammy main\n")
            )


class VerifyTest(unittest.TestCase):
    def test_mismatch_names_file_and_both_sums(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(b"not pytorch")
            f.flush()
            with self.assertRaisesRegex(StackError, "checksum mismatch.*\n.*expected sha256 0+\n"):
                upstream.verify(Path(f.name), "0" * 64)
            upstream.verify(Path(f.name), upstream.sha256_of(Path(f.name)))

    def test_wrong_version_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "version.txt").write_text("2.5.1\n")
            with self.assertRaisesRegex(StackError, "version.txt says 2.5.1, not PyTorch v2.6.0"):
                upstream.check_version(Path(d))


class ExtractTest(unittest.TestCase):
    def test_directory_and_tarball_give_the_same_tree(self):
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "src"
            src.mkdir()
            (src / "version.txt").write_text("2.6.0a0\n")
            (src / "setup.py").write_text("pass\n")
            tarball = Path(d) / "v.tar.gz"
            __import__("subprocess").run(["tar", "-czf", str(tarball), "-C", d, "src"], check=True)
            self.assertIn("directory", upstream.extract(src, Path(d) / "a"))
            self.assertIn("tarball v.tar.gz, sha256", upstream.extract(tarball, Path(d) / "b"))
            for tree in ("a", "b"):
                self.assertEqual((Path(d) / tree / "setup.py").read_text(), "pass\n")
            self.assertEqual(
                sorted(p.name for p in Path(d).iterdir()), ["a", "b", "src", "v.tar.gz"]
            )


class CheckSourceTest(unittest.TestCase):
    """--upstream PATH is refused before setup changes anything."""

    def tree(self, d: str, version: str) -> Path:
        src = Path(d) / "src"
        src.mkdir()
        (src / "version.txt").write_text(version)
        return src

    def tar(self, d: str) -> Path:
        tarball = Path(d) / "v.tar.xz"
        __import__("subprocess").run(["tar", "-cJf", str(tarball), "-C", d, "src"], check=True)
        return tarball

    def test_missing_path(self):
        with self.assertRaisesRegex(StackError, "/nonexistent: no such file or directory"):
            upstream.check_source(Path("/nonexistent"))

    def test_tarball_and_directory_of_another_release(self):
        with tempfile.TemporaryDirectory() as d:
            src = self.tree(d, "2.5.1\n")
            for path in (src, self.tar(d)):
                with self.assertRaisesRegex(
                    StackError, "version.txt says 2.5.1, not PyTorch v2.6.0"
                ):
                    upstream.check_source(path)

    def test_v2_6_0_tarball_and_directory(self):
        with tempfile.TemporaryDirectory() as d:
            src = self.tree(d, "2.6.0a0\n")
            for path in (src, self.tar(d)):
                self.assertEqual(upstream.check_source(path), path.resolve())

    def test_not_a_tarball(self):
        with tempfile.NamedTemporaryFile(suffix=".tar.xz") as f:
            f.write(b"not a tarball")
            f.flush()
            with self.assertRaisesRegex(StackError, "not a readable tarball"):
                upstream.check_source(Path(f.name))


if __name__ == "__main__":
    unittest.main()
