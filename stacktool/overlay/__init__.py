"""The overlay build: what a full PyTorch build does, for the stack's new operators (and
the CPU kernels it replaces) only.

A from-source build of PyTorch takes hours on 2 cores. Everything in `torch` except what
the stack adds is already in the PyPI wheel of the same commit (linked into the fork the
way tools/nightly.py does), so `build` only:

1. runs upstream's codegen (`torchgen.gen`, `tools/setup_helpers/generate_code.py`, with
   per-operator headers) over the complete patched yaml files: this validates them
   exactly as a full build would, and gives the headers and Python-side files;
2. runs the same generators again restricted to the new ops (codegen_main.py);
3. compiles only the new ops' generated code, the C++ files the stack adds, the lines it
   adds to upstream C++ files, and the upstream expansions of the macro lists it adds
   entries to, with those entries alone (added_lines.py), against the wheel's headers and
   libraries with the wheel's ABI flags, with ninja, into two libraries:
   `libstack_overlay.so` (kernels, schemas, registrations; links libtorch_cpu) and the
   extension `_stack_overlay_bindings` (the Python functions and Node classes);
4. refreshes the generated files of the tree that the wheel ships stale for the new ops
   (annotated_fn_args.py, the .pyi stubs, the headers in torch/include).

`install_loader` puts into the venv the .pth + module (loader.py) that load the
two libraries during `import torch`. `new_ops` says which ops are new, and refuses a
stack that changes an existing op: an overlay cannot change what the wheel has compiled.

Incremental: codegen is skipped when its inputs did not change (content digest), files
are written only when their content changes, and ninja rebuilds what depends on what
changed; a no-op rebuild takes about a second, a kernel edit one compile and a link.

The modules, in the order the data flows through `build`:

- changes.py: what changed. The stack's changed files, the lines it adds to upstream
  files, its new ops (the native_functions.yaml diff) and the entries it adds to macro
  lists, read from git; what cannot be overlaid is refused there (changed code
  generators, a changed existing op or derivative, removed upstream code other than a
  re-registered CPU kernel, any other change to an existing macro).
- generate.py: what to generate. The codegen runs (steps 1 and 2), the headers laid over
  the wheel's, and the sources to compile: the new ops' generated code, the stack's new
  C++ files, and a translation unit per upstream file it adds lines to or that expands a
  macro list it adds entries to;
  - codegen_main.py: the script for step 2, run with the venv's Python in the fork:
    PyTorch's own generators, restricted to the stack's new ops;
  - added_lines.py: the C++ scanner that writes those translation units: the lines the
    stack adds, in their namespaces and registration blocks, and the expansions of the
    macro lists it adds entries to, with the added entries alone.
- compile.py: what to compile (step 3). The wheel's ABI flags and upstream's warnings,
  the private support sources, build.ninja, ninja; the C++ of this package goes into the
  libraries too: overlay_unpack.cpp, overlay_cpublas.cpp (where the stack calls
  cpublas::gemm) and overlay_dispatch_refresh.cpp into the core one,
  overlay_bindings_glue.cpp (the Python glue) into the extension.
- load.py: how it loads. The manifest the loader reads, the import check of a new build,
  `install_loader`, and the refresh of the tree's generated files (step 4);
  - loader.py: the hook itself, installed in the venv as `_stack_overlay.py`: it puts
    the overlay-built ops into torch while `import torch` runs. Standard library only,
    no stacktool import: it is loaded without this package.
"""

import json
import time
from collections.abc import Callable
from pathlib import Path

from stacktool import ccache
from stacktool.errors import StackError
from stacktool.overlay import changes, compile, generate, load, vec_callers
from stacktool.overlay.changes import BASE, new_ops
from stacktool.overlay.load import install_loader
from stacktool.overlay.loader import MANIFEST

__all__ = ["build", "install_loader", "new_ops"]


def codegen_needed(ops: list[str], changed: dict[str, str]) -> bool:
    """Whether the codegen has anything to do: a checkout that adds no op and changes nothing
    the generators read (v2.6.0's yaml, gen_pyi's docs and templates) would get v2.6.0's
    generated files, the wheel's own: PRs 1 and 2, 32 s of codegen saved each build."""
    reads = (*generate.CODEGEN_INPUTS, *load.PYI_INPUTS)
    return bool(ops) or any(path.startswith(reads) for path in changed)


def build(
    fork: Path,
    python: Path,
    build_dir: Path,
    jobs: int,
    cache_dir: Path | None = None,
    seeds: tuple[Path, ...] = (),
    variant: compile.Variant | None = None,
    wheel: Path | None = None,
    ready: Callable[[], object] = lambda: None,
) -> None:
    """Overlay-build the stack checked out in `fork` into `build_dir` (see module doc).

    `python` is the venv's interpreter (it runs the fork's code generators); `jobs` is
    ninja's -j; `cache_dir`: ccache's cache for the compiles (stacktool/ccache.py), none
    without it; `seeds`: other build folders whose codegen output is taken when it was made
    from the same inputs (generate.codegen); `variant`: the same sources with other flags
    (compile.Variant, e.g. the sanitizers'), which writes nothing outside `build_dir`: the
    tree is not refreshed (step 4), and the import check is left to its user (an
    instrumented library loads only under its runtime); `wheel`: the unpacked wheel, whose
    torch/include holds the headers of the upstream helper files it compiles
    (compile.SUPPORT_SOURCES), and whose generated Python files a checkout that adds no op
    gets back instead of running the codegen (`codegen_needed`); `ready`: called before the
    import check (setup's pip install of the rest of the venv). Prints a one-line timing
    summary. StackError on anything to act on.
    """
    t0 = time.monotonic()
    fork, build_dir = fork.resolve(), build_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)

    # what changed; refused here if it cannot be overlaid
    changed = changes.changed_files(fork, BASE)
    changes.refuse_generator_changes(changed)
    ops = new_ops(fork, BASE)
    changes.check_new_ops_overlayable(fork, BASE, ops)
    lists = changes.list_additions(fork, BASE, changed)
    load.forget_other_ops(build_dir, ops)
    cg = build_dir / "codegen"

    # what to generate: codegen, headers, sources
    t = time.monotonic()
    needed = wheel is None or codegen_needed(ops, changed)
    ran_codegen = needed and generate.codegen(
        fork, python, cg, ops, [seed / "codegen" for seed in seeds]
    )
    t_codegen = time.monotonic() - t

    t = time.monotonic()
    headers = generate.Headers(fork, (variant and variant.tree_build) or build_dir)
    stack_headers = generate.stack_headers(fork, changed)
    overlay_headers = generate.headers_to_overlay(cg, headers, stack_headers, ops)
    generate.sync_dir(build_dir / "include", overlay_headers)
    refreshed_count = 0
    if variant is None:
        refreshed_count = load.refresh_headers(headers, overlay_headers, stack_headers)

    whole = vec_callers.whole_files(fork, BASE, changed)
    for path, stubs in sorted(whole.items()):
        if path in changed:
            vec_callers.check_own_changes(fork, BASE, path, sorted(stubs))
    new_files, added_tus, gpu_users = generate.stack_sources(
        fork, BASE, changed, lists, frozenset(whole)
    )
    summary = f"{len(ops)} new op(s)"
    skipped_gpu = generate.gpu_sources(changed) + gpu_users
    if not ops and not new_files and not added_tus:
        # no ops at this checkout: the loader then does nothing (and says nothing)
        generate.write_if_changed(build_dir / MANIFEST, json.dumps({"ops": [], "core": ""}) + "\n")
        compiled = "nothing to compile"
        t_compile = 0.0
    else:
        if not ops:
            raise StackError("the stack adds C++ but no operator; the overlay build only "
                             "builds new operators")  # fmt: skip
        texts = generate.sources(cg, ops, added_tus, new_files)
        recompiled = vec_callers.sources(fork, BASE, changed)
        texts.update(recompiled)
        if variant is not None and variant.inject:
            new_files = compile.inject(
                variant, fork, texts, new_files, added_tus, build_dir / "src"
            )
        skipped_gpu += generate.gpu_registrations(cg)
        generate.sync_dir(build_dir / "src", {k: v.encode() for k, v in texts.items()})

        # what to compile
        launcher, cached = "", ""
        if cache_dir is not None:
            found = ccache.find()
            if found is None:
                raise StackError("ccache not found: run ./stack setup, which installs it")
            launcher, before = ccache.launcher(found, cache_dir), ccache.stats(found, cache_dir)
        ext_suffix, steps, total = compile.compile_libraries(
            fork, python, build_dir, new_files, list(texts), list(added_tus), jobs, launcher,
            variant, wheel and wheel / "torch" / "include")  # fmt: skip
        if cache_dir is not None:
            hits, misses = (
                a - b for a, b in zip(ccache.stats(found, cache_dir), before, strict=True)
            )
            cached = f" ({hits} from ccache, {misses} compiled)"
        compiled = f"compiled {steps}/{total} TUs{cached}"
        if recompiled:
            compiled += (
                " (upstream kernel files whole, as they call at::vec code the stack "
                "changes: " + ", ".join(vec_callers.short_names(recompiled)) + ")"
            )
        t_compile = time.monotonic() - t

        # how it loads: the manifest, checked by importing torch
        changed_manifest = load.write_manifest(fork, build_dir, ops, ext_suffix)
        if variant is None and (steps or changed_manifest):
            ready()
            load.verify(python, fork, build_dir, ops)
            compiled += ", import checked"
        summary += f" ({', '.join(ops)})"

    t = time.monotonic()
    refreshed = "the tree not refreshed (a variant)"
    if variant is None:
        if needed:
            count = refreshed_count + load.refresh_tree(fork, python, build_dir, cg)
        else:
            count = refreshed_count + load.restore_wheel_python_files(fork, wheel)
        refreshed = f"{count} tree file(s) refreshed in {time.monotonic() - t:.1f}s"
    codegen = f"{t_codegen:.1f}s" if ran_codegen else "up to date" if needed else "not needed"
    print(
        f"overlay build: {summary}; codegen {codegen}"
        f", {compiled} in {t_compile:.1f}s (-j{jobs}), {refreshed}"
        f"; total {time.monotonic() - t0:.1f}s"
        + (
            f"; {len(skipped_gpu)} GPU source(s) NOT compiled (CPU-only overlay): "
            f"{', '.join(skipped_gpu)}"
            if skipped_gpu
            else ""
        ),
        flush=True,
    )
