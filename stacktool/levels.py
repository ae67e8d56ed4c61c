"""What each PR level is tested with, at its own commit (the gate checks the commit out)."""

from stacktool.config import Layout
from stacktool.patches import GRADIENT_DOC
from stacktool.suites import Result, run_suite


def level_1(layout: Layout, log):
    """PR 1 adds the derivation; the project root shows the same file."""
    doc = layout.fork / GRADIENT_DOC
    if not doc.exists():
        return [Result(f"{GRADIENT_DOC} present", failed=1, note="PR 1 must add it")]
    same = layout.gradient_doc.exists() and layout.gradient_doc.read_bytes() == doc.read_bytes()
    return [Result(f"{GRADIENT_DOC} at the root equals PR 1's", int(same), int(not same))]


def level_2(layout: Layout, log):
    """PR 2's gradcheck test, through upstream's runner."""
    command = ["test/run_test.py", "-i", "test_attn_gradcheck"]
    return [run_suite(layout, "run_test.py -i test_attn_gradcheck", command, log)]


LEVELS = {1: level_1, 2: level_2}


def run(level: int, layout: Layout, log):
    """The results of `level`'s checks (each level also runs the checks of lower levels' files)."""
    if level not in LEVELS:
        return [Result(f"tests for level {level}", failed=1, note="no tests defined for it")]
    return LEVELS[level](layout, log)
