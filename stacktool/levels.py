"""What each PR level is tested with, at its own commit (the gate checks the commit out)."""

from stacktool import bench
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


# Upstream's suites that an OpInfo drives, filtered to attn, each with the tests that a
# `-k attn` filter misses named explicitly (HasDecompTest checks every op at once).
OPINFO_SUITES = (
    ("test_ops", "test/test_ops.py", "attn"),
    ("test_ops_gradients", "test/test_ops_gradients.py", "attn"),
    ("test_ops_fwd_gradients", "test/test_ops_fwd_gradients.py", "attn"),
    ("test_ops_jit", "test/test_ops_jit.py", "attn"),
    ("test_meta", "test/test_meta.py", "attn"),
    ("test_proxy_tensor", "test/test_proxy_tensor.py", "attn"),
    ("test_schema_check", "test/test_schema_check.py", "attn"),
    ("test_decomp", "test/test_decomp.py", "attn or HasDecompTest"),
    ("functorch/test_ops", "test/functorch/test_ops.py", "attn"),
    ("functorch/test_vmap", "test/functorch/test_vmap.py", "attn"),
    ("functorch/test_aotdispatch", "test/functorch/test_aotdispatch.py", "attn"),
    # whole file: at PR 4 attn leaves the decomposition list, and `-k attn` selects nothing
    ("functorch/test_vmap_registrations", "test/functorch/test_vmap_registrations.py", ""),
    ("test_overrides", "test/test_overrides.py", "attn"),
    ("test_namedtuple_return_api", "test/test_namedtuple_return_api.py", ""),
)


def opinfo_suites(layout: Layout, log, extra=()):
    """Every OpInfo suite for attn with pytest, then upstream's runner over test_ops."""
    results = []
    for name, path, selection in (*OPINFO_SUITES, *extra):
        command = ["-m", "pytest", path, *(["-k", selection] if selection else [])]
        results.append(run_suite(layout, name, command, log))
    command = ["test/run_test.py", "-i", "test_ops", "--", "-k", "attn"]
    results.append(run_suite(layout, "run_test.py -i test_ops -- -k attn", command, log))
    return results


def level_3(layout: Layout, log):
    """PR 3: torch.attn as a CompositeImplicitAutograd op, through upstream's suites."""
    return [*level_2(layout, log), *opinfo_suites(layout, log)]


def level_4(layout: Layout, log):
    """PR 4: the explicit kernel and joint formula; inductor's OpInfo test and a bench smoke."""
    inductor = (("inductor/test_torchinductor_opinfo", "test/inductor/test_torchinductor_opinfo.py",
                 "attn"),)  # fmt: skip
    return [*level_2(layout, log), *opinfo_suites(layout, log, inductor), bench_smoke(layout, log)]


def bench_smoke(layout: Layout, log):
    """`./stack bench --quick`: the benchmark runs (its numbers are not judged here)."""
    ok = bench.run(layout, layout.build / "bench-smoke", quick=True) == 0
    log(f"bench smoke run: {'ran' if ok else 'crashed'}")
    return Result("./stack bench --quick runs", int(ok), int(not ok))


LEVELS = {1: level_1, 2: level_2, 3: level_3, 4: level_4}


def run(level: int, layout: Layout, log):
    """The results of `level`'s checks; levels 3 and 4 also rerun PR 2's test at their commit."""
    if level not in LEVELS:
        return [Result(f"tests for level {level}", failed=1, note="no tests defined for it")]
    return LEVELS[level](layout, log)
