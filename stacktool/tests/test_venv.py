"""venv.ensure: what it installs, and what it skips (pip and `python -m venv` faked)."""

import json
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from stacktool import venv


class EnsureTest(unittest.TestCase):
    def setUp(self):
        self.path = Path(tempfile.mkdtemp()) / ".venv"
        self.ran: list[list[str]] = []

        def run(command, what):
            self.ran.append(command)
            if command[1:3] == ["-m", "venv"]:
                (self.path / "bin").mkdir(parents=True)
                (self.path / "bin" / "python").write_text("")

        patcher = mock.patch.object(venv, "run", run)
        patcher.start()
        self.addCleanup(patcher.stop)

    def installs(self, requirements: list[str]) -> list[str] | None:
        """What pip was asked to install (None: nothing ran)."""
        self.ran.clear()
        did = venv.ensure(self.path, requirements)
        self.assertEqual(did, bool(self.ran))
        return (
            self.ran[-1][self.ran[-1].index("--disable-pip-version-check") + 1 :] if did else None
        )

    def test_the_builds_few_then_the_rest_then_nothing(self):
        """setup's two steps: the second installs the whole list (pip skips what is there);
        a run after both, or a later call for the first list alone, installs nothing."""
        self.assertEqual(self.installs(["pyyaml", "ninja"]), ["pyyaml", "ninja"])
        self.assertEqual(self.ran[0][1:3], ["-m", "venv"])
        everything = ["pyyaml", "ninja", "numpy==1.26.2"]
        self.assertEqual(self.installs(everything), everything)
        self.assertFalse(any(command[1:3] == ["-m", "venv"] for command in self.ran))
        self.assertIsNone(self.installs(["ninja", "pyyaml"]))
        self.assertIsNone(self.installs(everything))
        recorded = json.loads((self.path / venv.INSTALLED).read_text())
        self.assertEqual(recorded, sorted(everything))

    def test_a_changed_pin_or_an_unreadable_record_installs_again(self):
        """Also a pin moved back: the record keeps one requirement per project."""
        self.installs(["numpy==1.26.2", "PyYAML"])
        self.assertEqual(self.installs(["numpy==2.0.0"]), ["numpy==2.0.0"])
        self.assertEqual(self.installs(["numpy==1.26.2"]), ["numpy==1.26.2"])
        self.assertIsNone(self.installs(["PyYAML", "numpy==1.26.2"]))
        self.assertEqual(self.installs(["pyyaml>=6"]), ["pyyaml>=6"])
        recorded = json.loads((self.path / venv.INSTALLED).read_text())
        self.assertEqual(recorded, ["numpy==1.26.2", "pyyaml>=6"])
        self.installs(["typing_extensions==4.12"])
        self.assertEqual(self.installs(["Typing.Extensions==4.9"]), ["Typing.Extensions==4.9"])
        recorded = json.loads((self.path / venv.INSTALLED).read_text())
        self.assertEqual(recorded, ["Typing.Extensions==4.9", "numpy==1.26.2", "pyyaml>=6"])
        (self.path / venv.INSTALLED).write_text("{not json")
        self.assertEqual(self.installs(["numpy==2.0.0"]), ["numpy==2.0.0"])


if __name__ == "__main__":
    unittest.main()
