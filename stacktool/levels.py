"""What each PR level is tested with, at its own commit (the gate checks the commit out).

A level's checks (and the gate's `tasks` for it, its lint) run two at a time
(suites.run_all), its small suites in one pytest process (batches); level 4's bench smoke
run among them (its numbers are not judged).
"""

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from stacktool import reduced_bits, sanitize, tanh_accuracy, tanh_model
from stacktool.config import Layout
from stacktool.patches import GRADIENT_DOC
from stacktool.suites import (
    QUIET_THREADS,
    Processes,
    Result,
    Task,
    batch_task,
    run_all,
    suite_task,
)


def level_1(layout: Layout, log, tasks=()):
    """PR 1 adds the derivation; the project root shows the same file."""
    doc = layout.fork / GRADIENT_DOC
    results = run_all(layout, list(tasks), log)
    if not doc.exists():
        return [*results, Result(f"{GRADIENT_DOC} present", failed=1, note="PR 1 must add it")]
    same = layout.gradient_doc.exists() and layout.gradient_doc.read_bytes() == doc.read_bytes()
    return [*results, Result(f"{GRADIENT_DOC} at the root equals PR 1's", int(same), int(not same))]


# run_test.py starts a pool of three spawned workers (each importing torch) and runs a file
# that is on none of its serial lists twice, `-m serial` and then `-m "not serial"`, each pass
# a Python of its own: PR 2's 50 tests took 98 s of CPU through it, 28 s in pytest (Zen 3).
# PYTORCH_TEST_RUN_EVERYTHING_IN_SERIAL=1 (upstream's switch, run_test.py's must_serial) runs
# the file in one pass (84 s): the gate's two workers are its parallelism.
SERIAL = {"PYTORCH_TEST_RUN_EVERYTHING_IN_SERIAL": "1"}


def gradcheck(layout: Layout) -> Task:
    """PR 2's gradcheck test, through upstream's runner (one pass, SERIAL)."""
    command = ["test/run_test.py", "-i", "test_attn_gradcheck"]
    return suite_task(layout, "run_test.py -i test_attn_gradcheck", command, SERIAL)


def level_2(layout: Layout, log, tasks=()):
    """PR 2's gradcheck test, through upstream's runner, and under Dynamo (DYNAMO)."""
    return run_all(layout, [*tasks, gradcheck(layout), *suite_tasks(layout, 2)], log)


@dataclass
class Suite:
    """One upstream test file as the gate runs it with pytest, and the levels it runs at.

    `select` is pytest's `-k` ("" runs the whole file); `env` sets the variables that pick
    upstream's test configuration (as CI's jobs set them); `deselect` maps each test id left
    out to the one-line reason; `why` says in one line why this selection, and any skips;
    `per_capability` runs it once per distinct tanh kernel the CPU runs (tanh_accuracy.variants):
    under ATEN_CPU_CAPABILITY=default, and avx2 and avx512 with ATEN_CPU_FLOAT_TANH=vectorized
    (a CPU kernel's every compiled variant); `vml` also with =vml, at each of avx2 and avx512
    ("each") or at the highest ("highest"): the float branch that value takes, VML's code
    with DEFAULT's results, compiled in each build, restricted there to `vml_only` (the tests
    that =vml can change: every other runs the same code as under =vectorized);
    `not_default` says why a suite skips DEFAULT (on a CPU with nothing but DEFAULT it runs
    there).
    A level's suites with the same `env` run in one pytest process (see batches), each
    counted on its own line; `alone` says why a suite has a process of its own. `seconds`:
    about how long its tests take in the gate (Zen 3; 0: a few seconds), see suite_tasks.
    """

    name: str
    path: str
    select: str = ""
    levels: tuple[int, ...] = (3, 4)
    env: dict[str, str] = field(default_factory=dict)
    deselect: dict[str, str] = field(default_factory=dict)
    why: str = ""
    per_capability: bool = False  # once per tanh variant this CPU runs (tanh_accuracy.variants)
    vml: str = ""  # "each" or "highest": also with ATEN_CPU_FLOAT_TANH=vml (see variants)
    vml_only: str = ""  # pytest's -k added to `select` under ATEN_CPU_FLOAT_TANH=vml
    alone: str = ""
    not_default: str = ""  # why a per_capability suite skips DEFAULT where the CPU has AVX2
    seconds: int = 0

    def command(self) -> list[str]:
        """The arguments to the venv's Python, run in pytorch/."""
        return batch_command([self])


def batch_command(suites: list[Suite]) -> list[str]:
    """pytest over the files of `suites` in one process: each file's own selection, scoped
    to it by its file name where the selections differ (pytest's -k also matches the names
    of a test's module)."""
    command = ["-m", "pytest", *(suite.path for suite in suites)]
    selects = {suite.select for suite in suites}
    if len(selects) == 1 and "" not in selects:
        command += ["-k", suites[0].select]
    elif len(selects) > 1:
        scoped = (Path(s.path).name + (f" and ({s.select})" if s.select else "") for s in suites)
        command += ["-k", " or ".join(f"({each})" for each in scoped)]
    for suite in suites:
        for test in suite.deselect:
            command += ["--deselect", f"{suite.path}::{test}"]
    return command


def joins(run: tuple[str, Suite, dict], group: list[tuple[str, Suite, dict]]) -> bool:
    """Whether `run` may share the process of `group` (see batches)."""
    _, suite, env = run
    first, name = group[0][1], Path(suite.path).name
    if suite.alone or first.alone or suite.per_capability or first.per_capability:
        return False
    others = [Path(other.path).name for _, other, _ in group]
    return group[0][2] == env and not any(name in o or o in name for o in others)


def batches(runs: list[tuple[str, Suite, dict[str, str]]]) -> list[list[tuple[str, Suite, dict]]]:
    """The (name, suite, env) runs of a level in the processes they run in, in order: each
    with the earlier runs of the same env, unless either is `alone` or per capability; never
    two files whose names contain one another in a process (pytest imports a test file by
    its name, and the name scopes its selection).

    A per-capability run keeps its process: level 5's three files of one variant in one
    process took as long as apart (145-149 s against 137-154 s, Zen 4): their tests, not
    the start, are most of it. Its five files (not inductor's OpInfo tests) in one process
    took 87-115 s of CPU per variant in two clean clones' gates, against 89-92 s as five
    processes (docs/ci-runs.md), although alone, one after another, 83-87 s against 107-109.
    """
    groups: list[list[tuple[str, Suite, dict]]] = []
    for run in runs:
        group = next((group for group in groups if joins(run, group)), None)
        if group:
            group.append(run)
        else:
            groups.append([run])
    return groups


LONG = "a minute or more of its own: beside the batch, it keeps the second core busy"
# PR 5 leaves DEFAULT's tanh v2.6.0's code (only its registration and the dispatch through
# tanh_kernel are new there, which test_unary_ufuncs [default] and the exhaustive check run):
# at DEFAULT these suites would rerun v2.6.0's code (126 s on a Zen 3).
V260 = "at DEFAULT the tanh they reach is v2.6.0's code, which test_unary_ufuncs [default] runs"
INDUCTOR = {"PYTORCH_TEST_WITH_INDUCTOR": "1"}  # CI's inductor config (run_test.py --inductor)
SLOW = {"PYTORCH_TEST_WITH_SLOW": "1"}  # CI's slow config: tests marked @slowTest run too
DYNAMO = {"PYTORCH_TEST_WITH_DYNAMO": "1"}  # CI's dynamo_wrapped config (run_test.py --dynamo)

# The upstream suites the gate runs for attn: the OpInfo-driven ones and the ones upstream CI
# runs that see a new operator (its schema, bindings, docs, overrides, dynamo/fx rules).
# Level 3 is torch.attn as CompositeImplicitAutograd; what exists only from PR 4 (the explicit
# kernel, AttnBackward0, autocast, the flop formula, the inductor decomposition) is level 4.
# Suites that check only the public surface PR 3 adds and PR 4 keeps unchanged (names, docs,
# fx/dynamo rules, schema parsing) run at level 4 alone, to keep the gate within CI's time.
SUITES = (
    Suite("test_attn_gradcheck", "test/test_attn_gradcheck.py", seconds=35,
          why="PR 2's file at the level's commit, its tests in the batch: its runner is level 2's "
          "(see SERIAL)"),
    # CI's dynamo_wrapped shards run every test file (all but inductor's, distributed's,
    # export's and a few more) with each test under Dynamo, and ask for @skipIfTorchDynamo
    # on a test that cannot run there: PR 2's file at each level that changes it or the op.
    # seconds: not run on a Zen 3 yet; on a Zen 4 41, 24, 33 and 77 s at levels 2, 3, 4, 6.
    Suite("test_attn_gradcheck (dynamo)", "test/test_attn_gradcheck.py", levels=(2, 3, 4, 6),
          env=DYNAMO, seconds=60,
          why="CI's dynamo_wrapped config; skips: the tests marked @skipIfTorchDynamo (4 at PR 6)"),
    Suite("test_ops", "test/test_ops.py", "attn", levels=(3, 4, 6), seconds=25),
    Suite("test_ops_gradients", "test/test_ops_gradients.py", "attn", levels=(3, 4, 6)),
    Suite("test_ops_fwd_gradients", "test/test_ops_fwd_gradients.py", "attn", levels=(3, 4, 6)),
    Suite("test_ops_jit", "test/test_ops_jit.py", "attn"),
    Suite("test_meta", "test/test_meta.py", "attn"),
    Suite("test_proxy_tensor", "test/test_proxy_tensor.py", "attn"),
    Suite("test_schema_check", "test/test_schema_check.py", "attn"),
    Suite("test_decomp", "test/test_decomp.py", "attn or HasDecompTest", levels=(3, 4, 6),
          seconds=40, why="HasDecompTest checks every op at once: `-k attn` misses it"),
    Suite("functorch/test_ops", "test/functorch/test_ops.py", "attn", levels=(3, 4, 6),
          alone=LONG, seconds=175),
    Suite("functorch/test_vmap", "test/functorch/test_vmap.py", "attn", levels=(3, 4, 6)),
    Suite("functorch/test_aotdispatch", "test/functorch/test_aotdispatch.py", "attn",
          levels=(3, 4, 6), seconds=15),
    Suite("functorch/test_vmap_registrations", "test/functorch/test_vmap_registrations.py",
          seconds=15, why="whole file: at PR 4 attn leaves the decomposition list; `-k attn` selects nothing",
          alone="its tests are made from the ops registered when it is collected: files "
          "collected before it register more"),
    Suite("test_overrides", "test/test_overrides.py", seconds=15,
          deselect={"TestTorchFunctionWarning::test_warn_on_invalid_torch_function_tensor_subclass":
                    "upstream, order-dependent: its C++ warning fires once per process, so it "
                    "fails after ..._standalone_class, as on the unmodified wheel"},
          alone="its C++ warnings fire once per process: other files could fire them first",
          why="whole file: get_testing_overrides and the dispatch checks cover every function"),
    Suite("test_namedtuple_return_api", "test/test_namedtuple_return_api.py",
          why="whole file: it checks every op's named-tuple returns at once"),
    Suite("test_public_bindings", "test/test_public_bindings.py", "test_correct_module_names",
          seconds=15, why="public names (torch.attn; PR 4's torch.utils.flop_counter functions)"),
    Suite("distributed/_tensor/test_dtensor_ops", "test/distributed/_tensor/test_dtensor_ops.py",
          "attn", why="DTensor's OpInfo test: at PR 4 attn needs a sharding strategy"),
    Suite("test_fx", "test/test_fx.py", "attn", levels=(4,)),
    Suite("test_fx_experimental", "test/test_fx_experimental.py", "attn", levels=(4,)),
    Suite("test_utils", "test/test_utils.py", "attn", levels=(4,)),
    Suite("test_testing", "test/test_testing.py", "attn", levels=(4,)),
    Suite("test_torch doc/dir", "test/test_torch.py", "test_doc or test_dir", levels=(4,),
          why="docstring coverage and dir(torch) of the new binding"),
    Suite("test_fake_tensor", "test/test_fake_tensor.py", "FakeTensorOperatorInvariants",
          levels=(3, 4, 6),
          why="every op's schema invariants; skips: 4 need CUDA or SDPA, 2 upstream xfails"),
    Suite("test_function_schema", "test/test_function_schema.py", levels=(4, 6),
          why="whole file: it parses and round-trips every registered schema at once"),
    Suite("test_dispatch", "test/test_dispatch.py", "test_all_invariants", levels=(3, 4, 6),
          why="every op's dispatch table; the file's other tests use made-up ops (32 passed whole)"),
    Suite("test_jit_fuser_te (slow)", "test/test_jit_fuser_te.py", "attn", levels=(4,), env=SLOW,
          why="test_nnc_correctness is @slowTest (CI's slow config); skip: test_unsupported "
          "needs LLVM, which the wheel lacks"),
    Suite("dynamo/test_trace_rules", "test/dynamo/test_trace_rules.py", levels=(4,),
          why="whole file: torch.attn in dynamo's rules; skip: one test upstream disabled"),
    Suite("test_ops (inductor)", "test/test_ops.py", "attn", levels=(4,), env=INDUCTOR,
          seconds=60, why="CI's inductor config; skips: 3 CUDA-only, test_numpy_ref (PR 2's file checks it)"),
    Suite("test_ops_gradients (inductor)", "test/test_ops_gradients.py", "attn", levels=(4,),
          env=INDUCTOR, why="CI's inductor config; skips: no in-place variant, gradgrad works"),
    Suite("inductor/test_torchinductor_opinfo", "test/inductor/test_torchinductor_opinfo.py",
          "attn", levels=(4, 6), alone=LONG, seconds=155),
    Suite("distributed/_tensor/test_matrix_ops", "test/distributed/_tensor/test_matrix_ops.py",
          "attn", levels=(4, 6), seconds=5,
          why="PR 4's DTensor strategies, forward and backward, on upstream's multi-threaded "
          "process group (DTensorOpTestBase); at PR 6 its eager backward, which keeps PR 4's "
          "path for subclasses",
          alone="its ranks are threads, whose CommDebugMode races on v2.6.0's module-global "
          "dispatch-mode flags: one left set stops torch.compile in later files of its process"),
    Suite("test_flop_counter", "test/test_flop_counter.py", "attn", levels=(4, 6)),
    Suite("test_autocast", "test/test_autocast.py", "TestAutocastCPU", levels=(4,),
          why="list-driven (autocast_test_lists.py): `-k attn` selects nothing; PR 4's autocast"),
    # The whole file (514 tests, every one an inductor compile) takes hours on 2 cores and
    # names no attn test: PR 2's file checks AttnBackward0 under compiled autograd; these
    # three check the machinery it goes through (generated nodes, their cache key, origins).
    Suite("inductor/test_compiled_autograd", "test/inductor/test_compiled_autograd.py",
          "TestCompiledAutograd and (test_basic or test_cache_hit or test_verbose_logs_graph)",
          levels=(4,), seconds=35,
          why="a sample: generated C++ nodes, their cache key, their origins"),
    # PR 5 changes the CPU tanh kernel (tanh_stub): the tests that reach it, once per distinct
    # kernel (tanh_accuracy.variants): the DEFAULT build (v2.6.0's code), the AVX2 and AVX512
    # builds with PR 5's float kernel (ATEN_CPU_FLOAT_TANH=vectorized; BFloat16 and Half take
    # it either way, double and complex VML), as CI's default and avx2 configs run every
    # capability; and the float branch =vml takes in those builds, in each (an AVX-512 CPU
    # runs the AVX2 build's too): its results are VML's, DEFAULT's bit for bit
    # (tanh_accuracy.switched checks every input, at the highest).
    # Not atanh nor hardtanh, which `-k tanh` matched: they never reach tanh_stub (their 412,
    # 156 and 4 tests in these files all pass with ATEN_CPU_FLOAT_TANH=fast, which tanh_kernel
    # rejects at every call, whatever the dtype; Tanh's own tests fail with it).
    Suite("test_unary_ufuncs", "test/test_unary_ufuncs.py", "tanh and not atanh and not hardtanh",
          levels=(5,), per_capability=True, vml="each", vml_only="float32", seconds=90,
          why="tanh, tanhshrink, tanh_, out=, the reference, PR 5's tests (both float kernels, in "
          "subprocesses); also =vml in each AVX build, its float32 tests (48 of 534): the "
          "variable changes float's branch only, the other dtypes run the same code as at "
          "=vectorized"),
    # The kernel is at::vec's Vectorized<float>::tanh, which GELU's tanh approximation and mish
    # (Activation.cpp) and the quantized gelu and tanh call too (stacktool/overlay/vec_callers.py).
    Suite("test_ops", "test/test_ops.py",
          "(tanh or gelu or mish or attn) and not atanh and not hardtanh",
          levels=(5,), per_capability=True, seconds=75,
          why="OpInfo tests of tanh, tanhshrink, gelu, mish and attn (its tanh is tanh_stub); not "
          "=vml: it changes only float tanh's results, to DEFAULT's", not_default=V260),
    Suite("test_nn", "test/test_nn.py",
          "(tanh or gelu or GELU or mish or Mish or RNN or LSTM or GRU) and not hardtanh",
          levels=(5,), per_capability=True,
          why="Tanh, GELU and Mish modules and the recurrent layers (tanh inside); not =vml: it "
          "changes only float tanh's results, to DEFAULT's", not_default=V260),
    Suite("inductor/test_cpu_repro", "test/inductor/test_cpu_repro.py", "tanh", levels=(5,),
          per_capability=True, seconds=10,
          why="compiled tanhshrink then atan2 as eager's (PR 5's test_tanh_atan2, from #148241); "
          "not =vml: eager's float tanh is then VML's",
          not_default="inductor vectorizes no kernel at DEFAULT"),
    Suite("inductor/test_torchinductor_opinfo", "test/inductor/test_torchinductor_opinfo.py",
          "(tanh or gelu or mish) and not atanh and not hardtanh", levels=(5,),
          per_capability=True, alone=LONG, seconds=170,
          why="tanh, tanhshrink, gelu and mish compiled against eager, each dtype (inductor's "
          "vector code calls x.tanh()); skips: uint8, which upstream tests for resampling only; "
          "not =vml: eager's float tanh is then VML's",
          not_default="inductor vectorizes no kernel at DEFAULT"),
    Suite("test_quantized_op", "test/quantization/core/test_quantized_op.py", "qgelu or qtanh",
          levels=(5,), per_capability=True,
          why="the quantized gelu (test_qtanh is skipped upstream: hypothesis); not =vml: it "
          "changes only float tanh's results", not_default=V260),
    # PR 6 adds attn's CPU kernel (native/cpu/AttnKernel.cpp, compiled per CPU capability,
    # its tanh through tanh_stub): PR 2's file, whose TestAttnCPUKernel checks it against the
    # composite, under every capability (with PR 5's float tanh kernel); and, once (rows above with
    # level 6), attn's OpInfo suites, whose outputs, gradients (gradcheck's backward runs with
    # grad mode off, so through the kernel), decomposition and inductor graphs it now computes;
    # and, for the op _attn_backward PR 6 adds (what attn's derivative and torch.compile's
    # backward graphs call), the suites that check every op (schema, dispatch table, fake
    # tensor invariants) and the paths that must keep PR 4's code (vmap, flop count; eager
    # DTensor takes the same code as they, and as create_graph in PR 2's file) or now call it
    # (AOTAutograd's joint graph, DTensor's compiled too).
    Suite("test_attn_gradcheck", "test/test_attn_gradcheck.py", levels=(6,),
          per_capability=True, seconds=35,
          why="TestAttnCPUKernel and every other attn test, per capability; not =vml: it "
          "changes only float tanh's results, to DEFAULT's"),
    Suite("distributed/_tensor/test_dtensor_compile",
          "test/distributed/_tensor/test_dtensor_compile.py", "attn", levels=(6,),
          why="compiled DTensor attn: its backward graph calls _attn_backward (PR 6's "
          "replicate strategy); a fake process group, one process"),
)  # fmt: skip


# A pytest process's start (torch, upstream's harness) and each file's collection in it,
# about (Zen 3): with Suite.seconds, a Task's `seconds`, which suites.run_all starts longest
# first (level 3's batch of 16 files, 161 s of tests, took 286 s).
START, PER_FILE = 30, 5


def suite_tasks(layout: Layout, level: int, runnable: list[str] = ()) -> list[Task]:
    """A Task per pytest process of `level`'s upstream suites (see batches; a per_capability
    suite once per tanh variant, see tanh_accuracy.variants, of the `runnable` capabilities).
    Upstream's runner is proven at level 2 by PR 2's file (gradcheck), and by the README's
    loop; run_test.py -i test_ops -k attn ran the batch's 16 tests again (110 s, Zen 3): no
    longer run."""
    runs = []
    for suite in [suite for suite in SUITES if level in suite.levels]:
        if not suite.per_capability:
            runs.append((suite.name, suite, suite.env))
            continue
        for cap, kernel in tanh_accuracy.variants(runnable, vml=suite.vml):
            if cap == "default" and suite.not_default and len(runnable) > 1:
                continue
            env = {**suite.env, **tanh_accuracy.variant_env(cap, kernel)}
            ran = suite
            if kernel == "vml" and suite.vml_only:
                ran = replace(suite, select=f"({suite.select}) and ({suite.vml_only})")
            runs.append((f"{suite.name} {tanh_accuracy.label(cap, kernel)}", ran, env))
    tasks = []
    for group in batches(runs):
        names, group_suites, env = [n for n, _, _ in group], [s for _, s, _ in group], group[0][2]
        seconds = START + sum(PER_FILE + suite.seconds for suite in group_suites)
        if len(group) == 1:
            tasks.append(suite_task(layout, names[0], group_suites[0].command(), env, seconds))
        else:
            paths = [suite.path for suite in group_suites]
            tasks.append(batch_task(layout, names, paths, batch_command(group_suites), env,
                                    seconds))  # fmt: skip
    return tasks


def level_3(layout: Layout, log, tasks=()):
    """PR 3: torch.attn as a CompositeImplicitAutograd op, through upstream's suites."""
    return run_all(layout, [*tasks, *suite_tasks(layout, 3)], log)


def level_4(layout: Layout, log, tasks=()):
    """PR 4: the explicit kernel and joint formula; level 3's suites, PR 4's, a bench smoke."""
    checks = [*tasks, bench_smoke(layout), *suite_tasks(layout, 4)]
    return run_all(layout, checks, log)


SMOKE = """import sys
from pathlib import Path
from stacktool import bench
from stacktool.config import Layout
root, tree, overlay, out = (Path(arg) if arg else None for arg in sys.argv[1:])
sys.exit(bench.run(Layout(root, tree, overlay), out, quick=True))
"""


def bench_smoke(layout: Layout) -> Task:
    """`./stack bench --quick` (bench.run, in a process of its own, under this Python) as a
    Task: the benchmark runs. Its numbers are not judged here, so it runs beside the suites,
    its workers' idle OpenMP threads asleep as theirs (suites.QUIET_THREADS)."""
    paths = [layout.root, layout.tree or "", layout.overlay_dir or "", layout.build / "bench-smoke"]

    def run(processes: Processes) -> tuple[Result, str]:
        command = [sys.executable, "-c", SMOKE, *map(str, paths)]
        proc = processes.run(command, cwd=layout.root, env={**os.environ, **QUIET_THREADS})
        ok = proc.returncode == 0
        note = "ran" if ok else f"crashed (exit {proc.returncode})"
        return Result("./stack bench --quick runs", int(ok), int(not ok), note=note), (
            proc.stdout + proc.stderr
        )

    return Task("./stack bench --quick runs", run, seconds=70)  # 51-70 s in the gate


def level_6(layout: Layout, log, tasks=()):
    """PR 6: attn's fused CPU kernel; PR 2's file per CPU capability, attn's OpInfo suites,
    and the stack's kernels under ASan and UBSan (sanitize.task, the gate's subset)."""
    runnable = tanh_accuracy.supported(layout)
    checks = [*tasks, sanitize.task(layout), *suite_tasks(layout, 6, runnable)]
    return run_all(layout, checks, log)


def level_5(layout: Layout, log, tasks=()):
    """PR 5: the CPU float tanh kernel; tanh's suites and attn's, the exhaustive check, each
    per distinct tanh kernel (tanh_accuracy.variants); that ATEN_CPU_FLOAT_TANH's two values
    ran two kernels, and that =vml's float results are DEFAULT's; on a CPU without AVX-512,
    the AVX512 body's model over every input (tanh_model); per capability, BFloat16/Half and
    special inputs through tanh, GELU and mish against v2.6.0's (reduced_bits)."""
    runnable, found = tanh_accuracy.supported(layout), {}
    exhaustive = tanh_accuracy.tasks(layout, runnable, found)
    exhaustive += [reduced_bits.task(layout, capability) for capability in runnable]
    if "avx512" not in runnable:  # the AVX512 body, modelled: this CPU cannot run it
        exhaustive.append(tanh_model.task(layout))
    results = run_all(layout, [*tasks, *exhaustive, *suite_tasks(layout, 5, runnable)], log)
    return [*results, *tanh_accuracy.skipped(runnable), *tanh_accuracy.switched(found)]


LEVELS = {1: level_1, 2: level_2, 3: level_3, 4: level_4, 5: level_5, 6: level_6}


def run(level: int, layout: Layout, log, tasks: list[Task] = ()):
    """The results of `level`'s checks, `tasks` (the gate's lint of the level) run among
    them; levels 3 and 4 also run PR 2's test at their commit (in their batch)."""
    if level not in LEVELS:
        return [*run_all(layout, list(tasks), log),
                Result(f"tests for level {level}", failed=1, note="no tests defined for it")]  # fmt: skip
    return LEVELS[level](layout, log, tasks)
