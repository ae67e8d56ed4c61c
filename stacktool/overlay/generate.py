"""What to generate: codegen (the overlay build's steps 1 and 2), headers, sources to compile.

- upstream's codegen (`torchgen.gen`, `tools/setup_helpers/generate_code.py`, with
  per-operator headers) over the complete patched yaml files, which validates them exactly
  as a full build would and gives the headers and Python-side files; then the same
  generators restricted to the new ops (codegen_main.py); skipped when nothing they read
  changed (content digest);
- the headers laid over the wheel's (`Headers`, `headers_to_overlay`): the generated ones
  the new ops change, and those the stack adds or changes;
- the sources to compile (`stack_sources`, `sources`): the new ops' generated code, the C++
  files the stack adds, the lines it adds to upstream C++ files, and the upstream
  expansions of the macro lists it adds entries to, with those entries alone
  (added_lines.py); GPU sources and the generated registration files for GPU backends are
  left out, and `build` names them.

Files are written only when their content changes (`write_if_changed`), so ninja rebuilds
only what depends on what changed.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from stacktool.errors import StackError
from stacktool.overlay.added_lines import added_lines_tu, list_expansions
from stacktool.overlay.changes import (
    CPU_KERNELS,
    GENERATOR_INPUTS,
    HEADER_ROOTS,
    HEADERS,
    NATIVE_YAML,
    TAGS_YAML,
    YAML_INPUTS,
    added_lines,
    code_lines,
)

HERE = Path(__file__).resolve().parent
AOTI_SHIMS = "torch/csrc/inductor/aoti_torch/generated"  # checked by the full codegen run
# New-op headers would shift libtorch's interned-symbol enum values: never overlaid.
NEVER_OVERLAID = {"ATen/core/aten_interned_strings.h"}


# --------------------------------------------------------------------------- helpers


def write_if_changed(path: Path, data: str | bytes) -> bool:
    """Write `data` unless `path` already holds it; replace, never write through a link.

    Files linked from the wheel cache are hardlinks: writing into one would change the
    shared cache. os.replace swaps the directory entry instead.
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        if path.read_bytes() == raw:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".stack-tmp")
    tmp.write_bytes(raw)
    os.replace(tmp, path)
    return True


def digest(fork: Path, paths: list[str], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for rel in paths:
        p = fork / rel
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(fork)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def run(cmd: list[str], cwd: Path, what: str) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        out = (result.stdout + result.stderr).strip()
        raise StackError(f"{what} failed (in {cwd}):\n{out[-4000:]}")
    return result.stdout


def _run_parallel(jobs: list[tuple[list[str], str]], cwd: Path) -> None:
    procs = [(subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True), what) for cmd, what in jobs]  # fmt: skip
    failures = []
    for proc, what in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"{what} failed (in {cwd}):\n{out.strip()[-4000:]}")
    if failures:
        raise StackError("\n\n".join(failures))


# --------------------------------------------------------------------------- codegen


# everything steps 1 and 2 read in the tree
CODEGEN_INPUTS = (*GENERATOR_INPUTS, *YAML_INPUTS, "tools/autograd/deprecated.yaml", AOTI_SHIMS)


def codegen_key(fork: Path, ops: list[str]) -> str:
    """A digest of everything steps 1 and 2 read (file contents and paths in the tree)."""
    return digest(
        fork, list(CODEGEN_INPUTS), ",".join(ops) + (HERE / "codegen_main.py").read_text()
    )


def codegen(fork: Path, python: Path, cg: Path, ops: list[str], seeds: Iterable[Path] = ()) -> bool:
    """Steps 1 and 2; skipped when nothing they read changed. True if they ran.

    The stamp is a digest of what they read (never a path), and their output names no path:
    a `seeds` folder (another build's codegen) stamped with the same digest is copied instead
    (the gate's PR 5 takes PR 4's: PR 5 changes no yaml).
    """
    stamp, key = cg / "stamp", codegen_key(fork, ops)
    if stamp.exists() and stamp.read_text() == key:
        return False
    stamp.unlink(missing_ok=True)
    for seed in seeds:
        if seed.resolve() != cg.resolve() and (seed / "stamp").is_file() and \
                (seed / "stamp").read_text() == key:  # fmt: skip
            shutil.rmtree(cg, ignore_errors=True)
            shutil.copytree(seed, cg, ignore=lambda folder, names, top=seed: ["stamp"] * (
                Path(folder) == top))  # fmt: skip
            shutil.copy2(seed / "stamp", stamp)  # last: a copy cut short has no stamp
            print(f"overlay build: codegen output taken from {seed} (the same inputs)", flush=True)
            return False
    aoti = cg / "full" / "aoti"
    aoti.mkdir(parents=True, exist_ok=True)
    # the full run checks the AOTInductor C shim against the tree's checked-in headers
    for h in (fork / AOTI_SHIMS).glob("c_shim_*.h"):
        write_if_changed(aoti / h.name, h.read_bytes())
    write_if_changed(cg / "empty_deprecated.yaml", "[]\n")
    py = str(python)
    jobs = [
        ([py, "-m", "torchgen.gen", "--source-path", "aten/src/ATen", "--install_dir",
          str(cg / "full" / "aten"), "--per-operator-headers", "--aoti-install-dir", str(aoti)],
         "upstream codegen (python -m torchgen.gen) over the patched native_functions.yaml"),
        ([py, "tools/setup_helpers/generate_code.py", "--native-functions-path", NATIVE_YAML,
          "--tags-path", TAGS_YAML, "--gen-dir", str(cg / "full" / "gen"),
          "--per-operator-headers"],
         "upstream codegen (tools/setup_helpers/generate_code.py) over the patched yaml files"),
    ]  # fmt: skip
    # the selected run's outputs name what the new ops change (_generated_headers):
    # outputs of an earlier op set must not linger
    shutil.rmtree(cg / "new", ignore_errors=True)
    print(
        f"overlay build: codegen ({len(jobs) + bool(ops)} generator runs in parallel)", flush=True
    )
    if ops:
        jobs.append((
            [py, str(HERE / "codegen_main.py"), "--ops", ",".join(ops),
             "--aten-out", str(cg / "new" / "aten"), "--aoti-out", str(cg / "new" / "aoti"),
             "--autograd-out", str(cg / "new" / "autograd"),
             "--empty-deprecated", str(cg / "empty_deprecated.yaml")],
            "codegen restricted to the new ops (stacktool/overlay/codegen_main.py)"))  # fmt: skip
    _run_parallel(jobs, fork)
    stamp.write_text(key)
    return True


# --------------------------------------------------------------------------- headers


class Headers:
    """torch/include as the wheel ships it, and what the build lays over it.

    The tree's torch/include holds hardlinks into the unpacked wheel. Refreshing a header
    there replaces the link (the original is kept as a hardlink under include-orig/), so
    the wheel's version of every header stays known across builds and re-setups.
    """

    def __init__(self, fork: Path, build_dir: Path) -> None:
        self.include = fork / "torch" / "include"
        self.orig = build_dir / "include-orig"
        self.state_file = build_dir / "include-state.json"
        try:
            self.state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            self.state = {"replaced": [], "added": []}

    def wheel_bytes(self, rel: str) -> bytes | None:
        """The wheel's copy of header `rel`, None if it has none: only differences overlay."""
        if rel in self.state["added"]:
            return None
        path = self.orig / rel if rel in self.state["replaced"] else self.include / rel
        try:
            return path.read_bytes()
        except OSError:
            return None

    def refresh(self, wanted: dict[str, bytes]) -> int:
        """Make torch/include = wheel + `wanted`; undo earlier refreshes no longer wanted."""
        changed = 0
        for rel in list(self.state["replaced"]):
            if rel not in wanted:
                os.replace(self.orig / rel, self.include / rel)
                self.state["replaced"].remove(rel)
                changed += 1
        for rel in list(self.state["added"]):
            if rel not in wanted:
                (self.include / rel).unlink(missing_ok=True)
                self.state["added"].remove(rel)
                changed += 1
        for rel, data in sorted(wanted.items()):
            target = self.include / rel
            if rel not in self.state["replaced"] and rel not in self.state["added"]:
                if target.exists():
                    (self.orig / rel).parent.mkdir(parents=True, exist_ok=True)
                    (self.orig / rel).unlink(missing_ok=True)
                    os.link(target, self.orig / rel)
                    self.state["replaced"].append(rel)
                else:
                    self.state["added"].append(rel)
            changed += write_if_changed(target, data)
        self.state_file.write_text(json.dumps(self.state, indent=1, sort_keys=True))
        return changed


def _generated_headers(cg: Path) -> dict[str, Path]:
    """Full-run headers that adding ops can change: the names the selected run emits.

    Every other generated header is a per-operator header of an existing op, which the
    stack cannot change (new_ops refuses that).
    """
    found: dict[str, Path] = {}
    pairs = [(cg / "new" / "aten", cg / "full" / "aten", "ATen/"),
             (cg / "new" / "autograd", cg / "full" / "gen" / "torch/csrc/autograd/generated",
              "torch/csrc/autograd/generated/")]  # fmt: skip
    for new_dir, full_dir, prefix in pairs:
        for h in new_dir.rglob("*.h"):
            rel = h.relative_to(new_dir).as_posix()
            found[prefix + rel] = full_dir / rel
    return found


def stack_headers(fork: Path, changes: dict[str, str]) -> dict[str, Path]:
    """Headers the stack adds or changes in the source tree, by their torch/include path."""
    found = {}
    for path, status in changes.items():
        if status == "D" or not path.endswith((".h", ".hpp")):
            continue
        for root, prefix in HEADER_ROOTS.items():
            if path.startswith(root):
                found[prefix + path[len(root) :]] = fork / path
    return found


def headers_to_overlay(
    cg: Path, headers: Headers, stack_headers: dict[str, Path], ops: list[str]
) -> dict[str, bytes]:
    """{torch/include path: content} of the generated headers the new ops change and of the
    stack's headers, where they differ from the wheel's; none when the stack adds no op."""
    overlay_headers: dict[str, bytes] = {}
    if ops:
        for rel, path in {**_generated_headers(cg), **stack_headers}.items():
            if rel in NEVER_OVERLAID:
                continue
            data = path.read_bytes()
            if data != headers.wheel_bytes(rel):
                overlay_headers[rel] = data
    return overlay_headers


def sync_dir(root: Path, files: dict[str, bytes]) -> None:
    """Make `root` hold exactly `files`: a leftover of an earlier build must not be used."""
    for rel, data in files.items():
        write_if_changed(root / rel, data)
    if root.exists():
        for p in sorted(root.rglob("*"), reverse=True):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and rel not in files:
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()


# --------------------------------------------------------------------------- sources


_GPU_REGISTRATION = re.compile(r"(CUDA|HIP|MPS|XPU|MTIA)$")


def _has_registrations(text: str) -> bool:
    return "m.impl(" in text or "m.def(" in text


def gpu_registrations(cg: Path) -> list[str]:
    """Generated registration files of the new ops for GPU backends: not compiled.

    They include the GPU runtime's headers (RegisterSparseCUDA.cpp includes
    c10/cuda/CUDAGuard.h), which a CPU-only overlay has no toolkit for; `build` names them
    in its summary line, as it does GPU sources.
    """
    return sorted(f.name for f in (cg / "new" / "aten").glob("Register*.cpp")
                  if _GPU_REGISTRATION.search(f.stem) and _has_registrations(f.read_text()))  # fmt: skip


def _generated_sources(cg: Path, ops: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """({name: text} for the core library, {name: text} for the bindings).

    A selected-codegen file is compiled when it holds something for the new ops: a
    registration, an autograd Node, a view func. Files that hold only shared helpers
    (aten Functions.cpp's TensorMaker, ...) are left out: libtorch already has them.
    """
    core: dict[str, str] = {}
    aten = cg / "new" / "aten"
    gpu = gpu_registrations(cg)
    for f in sorted(aten.glob("Register*.cpp")):
        if f.stem[-2:-1] == "_" and f.stem[-1].isdigit():
            continue  # shards of *Everything.cpp
        if f.name in gpu:
            continue  # see gpu_registrations
        text = f.read_text()
        if f.name == "RegisterSchema.cpp":
            # libtorch owns the aten library (TORCH_LIBRARY) and defines get_gradients
            text = text.replace("TORCH_LIBRARY(aten, m)", "TORCH_LIBRARY_FRAGMENT(aten, m)")
            text = "\n".join(line for line in text.split("\n") if '"get_gradients(' not in line)
        if _has_registrations(text):
            core["aten/" + f.name] = text
    core["aten/OperatorsEverything.cpp"] = (aten / "OperatorsEverything.cpp").read_text()
    view_copy = (aten / "CompositeViewCopyKernels.cpp").read_text()
    names = {op.split(".", 1)[0] for op in ops}
    if any(re.search(rf"\b{re.escape(n)}\b", view_copy) for n in names):
        core["aten/CompositeViewCopyKernels.cpp"] = view_copy
    autograd = cg / "new" / "autograd"
    for name in ("VariableTypeEverything.cpp", "TraceTypeEverything.cpp",
                 "ADInplaceOrViewTypeEverything.cpp"):  # fmt: skip
        text = (autograd / name).read_text()
        if _has_registrations(text):
            core["autograd/" + name] = text
    functions = (autograd / "Functions.cpp").read_text()
    if "::apply(" in functions:
        core["autograd/Functions.cpp"] = functions
    view_funcs = (autograd / "ViewFuncs.cpp").read_text()
    if "::operator()(" in view_funcs:
        core["autograd/ViewFuncs.cpp"] = view_funcs
    bindings = {name: (autograd / name).read_text() for name in (
        "python_torch_functionsEverything.cpp", "python_functionsEverything.cpp",
        "python_return_types.cpp")}  # fmt: skip
    return core, bindings


GPU_DIRS = {"cuda", "hip", "mps", "miopen", "cudnn", "vulkan", "metal", "xpu"}


def _is_core_source(path: str) -> bool:
    if not path.endswith(".cpp"):
        return False
    if not path.startswith(("aten/src/ATen/", "torch/csrc/")):
        return False
    return not set(path.split("/")) & (GPU_DIRS | {"mkldnn", "test"})


GPU_SOURCES = (".cu", ".cuh", ".mm", ".hip")


def gpu_sources(changes: dict[str, str]) -> list[str]:
    """GPU sources the stack adds or edits: not compiled by the (CPU-only) overlay.

    The overlay compiles CPU code against libtorch_cpu; GPU kernels (a CUDA twin of a
    CPU kernel registered through a DispatchStub, say) are left out, and `build` says
    so in its summary line. Code that calls such a kernel must not assume it exists:
    e.g. check `stub.is_device_supported(device_type)` and fall back.
    """
    return sorted(p for p, status in changes.items() if p.endswith(GPU_SOURCES) and status != "D")


def files_naming(fork: Path, names: Iterable[str], roots: Iterable[str]) -> list[str]:
    """Tracked files under `roots` of the working tree `fork` that contain one of the words
    `names` (git grep: comments included, the caller reads the code)."""
    patterns = [arg for name in names for arg in ("-e", name)]
    if not patterns:
        return []
    result = subprocess.run(["git", "-C", str(fork), "grep", "-l", "-w", "-F", *patterns, "--",
                             *roots], capture_output=True, text=True)  # fmt: skip
    if result.returncode not in (0, 1):  # 1: no match
        raise StackError(f"git grep failed in {fork}:\n{result.stderr.strip()}")
    return result.stdout.splitlines()


def _list_users(fork: Path, changes: dict[str, str], lists: dict[str, tuple[str, str, list[str]]]
                ) -> tuple[dict[str, list[str]], list[str]]:  # fmt: skip
    """({upstream core source: the lists it names}, [GPU sources that expand one]).

    The stack's new files are compiled whole (full lists); tests are not in the wheel.
    StackError for a use in a header (compiled into many files of the wheel) or in a
    source the overlay does not compile (c10, mkldnn): the wheel would keep the old list.
    """
    core: dict[str, list[str]] = {}
    gpu: list[str] = []
    for path in files_naming(fork, lists, tuple(HEADER_ROOTS)):
        if changes.get(path) == "A" or "test" in path.split("/"):
            continue
        code = "\n".join(code_lines((fork / path).read_text()))
        uses = {n: len(re.findall(rf"\b{n}\b", code)) - (path == lists[n][0]) for n in lists}
        names = sorted(n for n, count in uses.items() if count > 0)
        if not names:
            continue  # in comments only, or the list's own #define
        if path.endswith(HEADERS):
            raise StackError(f"{path}: uses {', '.join(names)}, to which the stack adds "
                             "entries; code in a header is compiled into many files of the "
                             "wheel, which the overlay cannot redo")  # fmt: skip
        if _is_core_source(path):
            core[path] = names
        elif path.endswith(GPU_SOURCES) or set(path.split("/")) & GPU_DIRS:
            gpu.append(f"{path} (expands {', '.join(names)})")
        else:
            raise StackError(f"{path}: expands {', '.join(names)}, to which the stack adds "
                             "entries, and the overlay does not compile this file")  # fmt: skip
    return core, gpu


def stack_sources(fork: Path, base: str, changes: dict[str, str],
                  lists: dict[str, tuple[str, str, list[str]]], whole: frozenset[str] = frozenset()
                  ) -> tuple[list[Path], dict[str, str], list[str]]:  # fmt: skip
    """(new .cpp files of the stack, {upstream path: generated TU text}, GPU sources left out).

    A generated TU holds the lines the stack adds to an upstream file and, where the file
    expands a macro list of `lists`, that expansion again with the added entries alone.
    The files of `whole` are compiled whole (vec_callers), their changes with them.
    """
    new_files: list[Path] = []
    edited: dict[str, list[int]] = {}
    for path, status in sorted(changes.items()):
        if path.endswith(GPU_SOURCES):
            continue  # see gpu_sources
        if not _is_core_source(path) or path in whole:
            continue
        if status == "A":
            new_files.append(fork / path)
        elif status == "M":
            edited[path] = added_lines(fork, base, path)
        elif status == "D":
            raise StackError(f"{path}: the stack deletes an upstream source file; this "
                             "cannot be overlaid")  # fmt: skip
    users, gpu = _list_users(fork, changes, lists) if lists else ({}, [])
    added_tus: dict[str, str] = {}
    for path in sorted(set(edited) | set(users)):
        text = (fork / path).read_text()
        added = edited.get(path, [])
        names = {n: lists[n][1:] for n in users.get(path, [])}
        expanded, inserts = list_expansions(text, path, names, skip=added)
        tu = added_lines_tu(text, sorted(set(added) | set(expanded)), path, inserts)
        if tu and path.startswith(CPU_KERNELS):
            tu = REPOINT + tu
        if tu:
            added_tus[path] = tu
    return new_files, added_tus, gpu


# The wheel's libtorch_cpu defines and exports each DispatchStub's kernel pointer per CPU
# capability (DispatchStub<...>::DEFAULT, ::AVX2, ::AVX512), so a kernel file's added
# registrations must not define them again: they assign them instead, when
# libstack_overlay.so loads. The loader loads it right after torch._C, before any operator
# runs, so before a stub caches its choice on its first call.
REPOINT = """// Registrations re-point the wheel's DispatchStub pointers (stacktool/overlay/generate.py).
#include <ATen/native/DispatchStub.h>
#undef REGISTER_ARCH_DISPATCH
#define REGISTER_ARCH_DISPATCH(name, arch, fn) \\
  static const bool C10_CONCATENATE(stack_overlay_repoint_, name) = \\
      (name##_DECLARE_DISPATCH_type::arch = (fn), true);
"""


def sources(
    cg: Path, ops: list[str], added_tus: dict[str, str], new_files: list[Path]
) -> dict[str, str]:
    """{path under the build's src/: text}: what is compiled besides the stack's new files.

    The new ops' generated code (`_generated_sources`; the bindings' under bindings/), the
    translation units of `added_tus` (under added/), and this package's C++:
    overlay_unpack.cpp where the generated VariableType code calls unpack,
    overlay_cpublas.cpp where the stack's C++ (`new_files`, `added_tus`) calls
    cpublas::gemm, overlay_dispatch_refresh.cpp, and overlay_bindings_glue.cpp for the
    bindings.
    """
    core_gen, binding_gen = _generated_sources(cg, ops)
    texts = {
        **core_gen,
        **{"bindings/" + k: v for k, v in binding_gen.items()},
        **{"added/" + k.replace("/", "__"): v for k, v in added_tus.items()},
    }
    if "autograd/VariableTypeEverything.cpp" in core_gen:  # calls unpack: see the .cpp
        texts["overlay_unpack.cpp"] = (HERE / "overlay_unpack.cpp").read_text()
    stack_code = [*added_tus.values(), *(path.read_text() for path in new_files)]
    if any("cpublas::gemm(" in text for text in stack_code):  # not exported: see the .cpp
        texts["overlay_cpublas.cpp"] = (HERE / "overlay_cpublas.cpp").read_text()
    texts["overlay_dispatch_refresh.cpp"] = (HERE / "overlay_dispatch_refresh.cpp").read_text()
    texts["bindings/overlay_bindings_glue.cpp"] = (HERE / "overlay_bindings_glue.cpp").read_text()
    return texts
