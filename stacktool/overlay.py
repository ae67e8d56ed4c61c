"""The overlay build: what a full PyTorch build does, for the stack's new operators only.

A from-source build of PyTorch takes hours on 2 cores. Everything in `torch` except what
the stack adds is already in the PyPI wheel of the same commit (linked into the fork the
way tools/nightly.py does), so `build` only:

1. runs upstream's codegen (`torchgen.gen`, `tools/setup_helpers/generate_code.py`, with
   per-operator headers) over the complete patched yaml files: this validates them
   exactly as a full build would, and gives the headers and Python-side files;
2. runs the same generators again restricted to the new ops (overlay_codegen.py);
3. compiles only the new ops' generated code, the C++ files the stack adds, the lines it
   adds to upstream C++ files, and the upstream expansions of the macro lists it adds
   entries to, with those entries alone (overlay_sources.py), against the wheel's headers and
   libraries with the wheel's ABI flags, with ninja, into two libraries:
   `libstack_overlay.so` (kernels, schemas, registrations; links libtorch_cpu) and the
   extension `_stack_overlay_bindings` (the Python functions and Node classes);
4. refreshes the generated files of the tree that the wheel ships stale for the new ops
   (annotated_fn_args.py, the .pyi stubs, the headers in torch/include).

`install_loader` puts into the venv the .pth + module (overlay_loader.py) that load the
two libraries during `import torch`. `new_ops` says which ops are new, and refuses a
stack that changes an existing op: an overlay cannot change what the wheel has compiled.

Incremental: codegen is skipped when its inputs did not change (content digest), files
are written only when their content changes, and ninja rebuilds what depends on what
changed; a no-op rebuild takes about a second, a kernel edit one compile and a link.
"""

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
from pathlib import Path

from stacktool import overlay_loader, overlay_sources
from stacktool.errors import StackError
from stacktool.overlay_loader import MANIFEST

BASE = "attn/0"
HERE = Path(__file__).resolve().parent
NATIVE_YAML = "aten/src/ATen/native/native_functions.yaml"
TAGS_YAML = "aten/src/ATen/native/tags.yaml"
DERIVATIVES_YAML = "tools/autograd/derivatives.yaml"
CORE_LIB = "libstack_overlay.so"
BINDINGS = "_stack_overlay_bindings"

# Inputs of the code generators. The stack may change the yaml files (checked op by op);
# a change anywhere else here would change the generated code of every op, which an
# overlay cannot do.
GENERATOR_INPUTS = ("torchgen/", "tools/autograd/", "aten/src/ATen/templates/",
                    "tools/setup_helpers/generate_code.py", TAGS_YAML)  # fmt: skip
YAML_INPUTS = (NATIVE_YAML, DERIVATIVES_YAML)

# Where headers of the source tree live under torch/include.
HEADER_ROOTS = {"aten/src/ATen/": "ATen/", "c10/": "c10/", "torch/csrc/": "torch/csrc/"}
# New-op headers would shift libtorch's interned-symbol enum values: never overlaid.
NEVER_OVERLAID = {"ATen/core/aten_interned_strings.h"}

# The wheel's ABI (torch._C._GLIBCXX_USE_CXX11_ABI is False; see torch.__config__.show()).
CXXFLAGS = ("-std=c++17 -fPIC -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=0 -fabi-version=11 "
            "-fvisibility-inlines-hidden -fvisibility=hidden -fno-math-errno "
            "-fno-trapping-math -DAT_PER_OPERATOR_HEADERS -DUSE_PTHREADPOOL")  # fmt: skip
# Warnings as upstream's CMake build sets them for libtorch_cpu.
WARNINGS = ("-Wall -Wextra -Werror=return-type -Werror=non-virtual-dtor -Wno-unused-parameter "
            "-Wno-missing-field-initializers -Wno-type-limits -Wno-array-bounds "
            "-Wno-unknown-pragmas -Wno-strict-overflow -Wno-strict-aliasing -Wno-psabi "
            "-Wno-unused-but-set-variable -Wno-maybe-uninitialized -Wno-stringop-overflow")  # fmt: skip
# Upstream files that define helpers libtorch_cpu uses but does not export (declared
# without TORCH_API), needed by stack code in the directory they are keyed by (e.g. a batch
# rule calls moveBatchDimToFront). They hold no registrations or static state (checked),
# are compiled whole into a static archive and linked with --exclude-libs: private copies.
SUPPORT_SOURCES = {
    "aten/src/ATen/functorch/": ("aten/src/ATen/functorch/BatchRulesHelper.cpp",
                                 "aten/src/ATen/functorch/PlumbingHelper.cpp"),
}  # fmt: skip
SUPPORT_LIB = "libstack_overlay_support.a"
_REGISTRATION = re.compile(
    r"\b(TORCH_LIBRARY\w*|REGISTER_\w+|C10_REGISTER\w*|DEFINE_DISPATCH)\s*\("
)
# cmake/Codegen.cmake defines HAVE_<capability>_CPU_DEFINITION for all of libtorch_cpu on
# x86-64 (the wheel's DispatchStubImpl::get_call_ptr takes DEFAULT, AVX512 and AVX2
# pointers): every TU that uses a DispatchStub must see the same declarations.
if platform.machine().lower() in ("x86_64", "amd64"):
    CXXFLAGS += " -DHAVE_AVX512_CPU_DEFINITION -DHAVE_AVX2_CPU_DEFINITION"
# aten/src/ATen/native/cpu/*.cpp is compiled once per CPU capability (cmake/Codegen.cmake).
CPU_CAPABILITIES = {
    "DEFAULT": "",
    "AVX2": "-mavx2 -mfma -mf16c -mno-avx256-split-unaligned-load "
            "-mno-avx256-split-unaligned-store",
    "AVX512": "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma",
}  # fmt: skip


# --------------------------------------------------------------------------- new ops


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line).rstrip()


def yaml_entries(text: str, key: str = "func", where: str = NATIVE_YAML) -> dict[str, list[str]]:
    """Entries of native_functions.yaml (key "func") or derivatives.yaml (key "name").

    {operator name (name.overload): the entry's lines without comments or blank lines}.
    Plain text, no YAML library: these files are lists of `- func: ...` blocks, and two
    entries mean the same iff their lines do (a reordered field counts as a change, which
    only makes the check stricter). Keeps the tool free of third-party imports.
    """
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        m = re.match(rf"^- {key}:\s*(.*)$", line)
        if m:
            name = _op_name(m.group(1))
            if name in found:
                raise StackError(f"{where}:{number}: operator {name} is declared twice")
            current = found[name] = [line]
        elif current is not None and line.startswith((" ", "\t")):
            current.append(line)
        else:
            raise StackError(f"{where}:{number}: expected '- {key}: ...' or an indented "
                             f"field, got {line.strip()[:60]!r}")  # fmt: skip
    return found


def _fields(lines: list[str]) -> dict[str, str]:
    """Top-level fields of one entry: {"func": ..., "variants": ..., "dispatch": "<block>"}."""
    fields: dict[str, str] = {}
    last = None
    for line in lines:
        m = re.match(r"^(?:- |  )(\w+):\s*(.*)$", line)
        if m and not line.startswith("   "):
            last = m.group(1)
            fields[last] = m.group(2).strip()
        elif last is not None:
            fields[last] += "\n" + line.strip()
    return fields


def _op_name(func: str) -> str:
    return func.split("(", 1)[0].strip()


def diff_ops(pristine: str, patched: str, where: str = NATIVE_YAML) -> list[str]:
    """New operators of `patched` relative to `pristine` (native_functions.yaml texts).

    Includes the overloads that `autogen:` of a new entry asks for. StackError when the
    patched file changes or removes an existing entry (schema, dispatch or any field):
    the wheel has that op compiled, so it cannot be overlaid.
    """
    old = yaml_entries(pristine, where=f"{where} (pristine)")
    new = yaml_entries(patched, where=where)
    for name, lines in old.items():
        if name not in new:
            raise StackError(f"{where}: the stack removes the existing operator {name}; "
                             "an existing op cannot be overlaid")  # fmt: skip
        if new[name] != lines:
            before, after = _fields(lines), _fields(new[name])
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            what = "schema" if "func" in changed else ", ".join(changed) or "entry"
            raise StackError(
                f"{where}: the stack changes the {what} of the existing operator {name} "
                f"({after.get('func', name)}); an existing op cannot be overlaid (the wheel "
                "has it compiled): add a new op instead, or do a full from-source build"
            )
    ops: list[str] = []
    for name, lines in new.items():
        if name in old:
            continue
        ops.append(name)
        ops += [x.strip() for x in _fields(lines).get("autogen", "").split(",") if x.strip()]
    return ops


def new_ops(fork: Path, base: str = BASE) -> list[str]:
    """The operators the stack adds to native_functions.yaml (working tree vs `base`).

    StackError, naming the op, if the stack changes an existing op's schema or dispatch.
    """
    pristine = overlay_sources.git(fork, "show", f"{base}:{NATIVE_YAML}")
    return diff_ops(pristine, (fork / NATIVE_YAML).read_text())


def check_new_ops_overlayable(fork: Path, base: str, ops: list[str]) -> None:
    """StackError unless the overlay can build these ops: `torch.*` functions only (the
    Python glue installs no Tensor methods or torch.nn/linalg/fft/special functions), and
    derivatives.yaml entries changed for new ops only."""
    entries = yaml_entries((fork / NATIVE_YAML).read_text())
    for name in ops:
        if name not in entries:
            continue  # made by autogen:
        fields = _fields(entries[name])
        variants = {v.strip() for v in fields.get("variants", "function").split(",")}
        if "method" in variants or "python_module" in fields:
            raise StackError(
                f"{NATIVE_YAML}: {name}: Tensor methods and torch.nn/linalg/fft/special "
                "functions are not supported by the overlay's Python glue (only "
                "`variants: function` in the torch namespace)"
            )
    before = yaml_entries(overlay_sources.git(fork, "show", f"{base}:{DERIVATIVES_YAML}"),
                          "name", f"{DERIVATIVES_YAML} (pristine)")  # fmt: skip
    after = yaml_entries((fork / DERIVATIVES_YAML).read_text(), "name", DERIVATIVES_YAML)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name) and name not in ops:
            raise StackError(
                f"{DERIVATIVES_YAML}: the stack changes the derivative of the existing "
                f"operator {name}; this cannot be overlaid (libtorch has it compiled)"
            )


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


def _digest(fork: Path, paths: list[str], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for rel in paths:
        p = fork / rel
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(fork)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path, what: str) -> str:
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


def _python_info(python: Path) -> dict:
    """The venv Python's include dir and EXT_SUFFIX: the bindings must match the interpreter."""
    code = ("import json, sysconfig; print(json.dumps({'include': sysconfig.get_paths()"
            "['include'], 'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX')}))")  # fmt: skip
    return json.loads(_run([str(python), "-c", code], Path("/"), f"{python} -c sysconfig"))


# --------------------------------------------------------------------------- codegen


def _codegen(fork: Path, python: Path, cg: Path, ops: list[str]) -> bool:
    """Steps 1 and 2; skipped when nothing they read changed. True if they ran."""
    stamp = cg / "stamp"
    key = _digest(fork, list(GENERATOR_INPUTS) + list(YAML_INPUTS) + ["tools/autograd/deprecated.yaml"],
                  ",".join(ops) + (HERE / "overlay_codegen.py").read_text())  # fmt: skip
    if stamp.exists() and stamp.read_text() == key:
        return False
    stamp.unlink(missing_ok=True)
    aoti = cg / "full" / "aoti"
    aoti.mkdir(parents=True, exist_ok=True)
    # the full run checks the AOTInductor C shim against the tree's checked-in headers
    for h in (fork / "torch/csrc/inductor/aoti_torch/generated").glob("c_shim_*.h"):
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
    if ops:
        jobs.append((
            [py, str(HERE / "overlay_codegen.py"), "--ops", ",".join(ops),
             "--aten-out", str(cg / "new" / "aten"), "--aoti-out", str(cg / "new" / "aoti"),
             "--autograd-out", str(cg / "new" / "autograd"),
             "--empty-deprecated", str(cg / "empty_deprecated.yaml")],
            "codegen restricted to the new ops (stacktool/overlay_codegen.py)"))  # fmt: skip
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


def _stack_headers(fork: Path, changes: dict[str, str]) -> dict[str, Path]:
    """Headers the stack adds or changes in the source tree, by their torch/include path."""
    found = {}
    for path, status in changes.items():
        if status == "D" or not path.endswith((".h", ".hpp")):
            continue
        for root, prefix in HEADER_ROOTS.items():
            if path.startswith(root):
                found[prefix + path[len(root) :]] = fork / path
    return found


def _sync_dir(root: Path, files: dict[str, bytes]) -> None:
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
HEADERS = (".h", ".hpp", ".cuh")


def gpu_sources(changes: dict[str, str]) -> list[str]:
    """GPU sources the stack adds or edits: not compiled by the (CPU-only) overlay.

    The overlay compiles CPU code against libtorch_cpu; GPU kernels (a CUDA twin of a
    CPU kernel registered through a DispatchStub, say) are left out, and `build` says
    so in its summary line. Code that calls such a kernel must not assume it exists:
    e.g. check `stub.is_device_supported(device_type)` and fall back.
    """
    return sorted(p for p, status in changes.items() if p.endswith(GPU_SOURCES) and status != "D")


def list_additions(fork: Path, base: str, changes: dict[str, str]
                   ) -> dict[str, tuple[str, str, list[str]]]:  # fmt: skip
    """{macro: (header, parameter, added entries)}: the entries the stack adds to macro
    lists of the upstream headers it changes (`_(attn)` in AT_FORALL_LOWER_PRECISION_FP).

    Upstream files compiled into the wheel expand these lists: laying the header over
    torch/include changes nothing there, so _stack_sources expands them again with the
    added entries alone. StackError for other changes to existing macros.
    """
    found: dict[str, tuple[str, str, list[str]]] = {}
    for path, status in sorted(changes.items()):
        if status != "M" or not path.endswith(HEADERS) or not path.startswith(tuple(HEADER_ROOTS)):
            continue
        old = overlay_sources.git(fork, "show", f"{base}:{path}")
        new = (fork / path).read_text()
        for name, (param, entries) in overlay_sources.added_list_entries(old, new, path).items():
            found[name] = (path, param, entries)
    return found


def _list_users(fork: Path, changes: dict[str, str], lists: dict[str, tuple[str, str, list[str]]]
                ) -> tuple[dict[str, list[str]], list[str]]:  # fmt: skip
    """({upstream core source: the lists it names}, [GPU sources that expand one]).

    The stack's new files are compiled whole (full lists); tests are not in the wheel.
    StackError for a use in a header (compiled into many files of the wheel) or in a
    source the overlay does not compile (c10, mkldnn): the wheel would keep the old list.
    """
    core: dict[str, list[str]] = {}
    gpu: list[str] = []
    for path in overlay_sources.files_naming(fork, lists, tuple(HEADER_ROOTS)):
        if changes.get(path) == "A" or "test" in path.split("/"):
            continue
        code = "\n".join(overlay_sources.code_lines((fork / path).read_text()))
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


def _stack_sources(fork: Path, base: str, changes: dict[str, str],
                   lists: dict[str, tuple[str, str, list[str]]]
                   ) -> tuple[list[Path], dict[str, str], list[str]]:  # fmt: skip
    """(new .cpp files of the stack, {upstream path: generated TU text}, GPU sources left out).

    A generated TU holds the lines the stack adds to an upstream file and, where the file
    expands a macro list of `lists`, that expansion again with the added entries alone.
    """
    new_files: list[Path] = []
    edited: dict[str, list[int]] = {}
    for path, status in sorted(changes.items()):
        if path.endswith(GPU_SOURCES):
            continue  # see gpu_sources
        if not _is_core_source(path):
            continue
        if status == "A":
            new_files.append(fork / path)
        elif status == "M":
            edited[path] = overlay_sources.added_lines(fork, base, path)
        elif status == "D":
            raise StackError(f"{path}: the stack deletes an upstream source file; this "
                             "cannot be overlaid")  # fmt: skip
    users, gpu = _list_users(fork, changes, lists) if lists else ({}, [])
    added_tus: dict[str, str] = {}
    for path in sorted(set(edited) | set(users)):
        text = (fork / path).read_text()
        added = edited.get(path, [])
        names = {n: lists[n][1:] for n in users.get(path, [])}
        expanded, inserts = overlay_sources.list_expansions(text, path, names, skip=added)
        tu = overlay_sources.added_lines_tu(text, sorted(set(added) | set(expanded)), path,
                                            inserts)  # fmt: skip
        if tu:
            added_tus[path] = tu
    return new_files, added_tus, gpu


def _support_sources(fork: Path, origins: list[str]) -> list[Path]:
    """SUPPORT_SOURCES for the directories the stack's C++ (`origins`) comes from."""
    found = []
    for directory, files in SUPPORT_SOURCES.items():
        if any(o.startswith(directory) for o in origins):
            for rel in files:
                m = _REGISTRATION.search((fork / rel).read_text())
                if m:
                    raise StackError(f"{rel}: now holds registrations ({m.group(1)}); it can no "
                                     "longer be compiled as a private support file")  # fmt: skip
                found.append(fork / rel)
    return found


# --------------------------------------------------------------------------- ninja


def _ninja_file(
    fork: Path,
    build_dir: Path,
    python_include: str,
    ext_suffix: str,
    core_sources: list[tuple[Path, str, str]],
    binding_sources: list[Path],
    support_sources: list[Path],
) -> str:
    """build.ninja text. core_sources: (source, object stem, extra flags)."""
    torch_include = fork / "torch" / "include"
    torch_lib = fork / "torch" / "lib"
    cxx = os.environ.get("CXX", "c++")
    lines = [
        "# @generated by stacktool/overlay.py: the overlay build (see its docstring)",
        "ninja_required_version = 1.5",
        f"cxx = {cxx}",
        f"cxxflags = {CXXFLAGS} {WARNINGS}",
        f"includes = -I{build_dir / 'include'} -I{torch_include} "
        f"-I{torch_include / 'torch/csrc/api/include'} -I{python_include}",
        "rule cxx",
        "  command = $cxx -MMD -MF $out.d $cxxflags $extra $includes -c $in -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
        "rule link",
        "  command = $cxx -shared -o $out $in $ldflags",
        "  description = LINK $out",
        "rule ar",
        "  command = rm -f $out && ar rcs $out $in",
        "  description = AR $out",
        "",
    ]

    def compile_each(kind: str, sources: list[tuple[Path, str, str]]) -> str:
        """A build edge per (source, object stem, extra flags); the objects, space-separated."""
        objs = []
        for source, stem, extra in sources:
            objs.append(f"obj/{kind}/{stem}.o")
            lines.extend([f"build {objs[-1]}: cxx {source}", f"  extra = {extra}"])
        return " ".join(objs)

    support = ""
    if support_sources:
        objs = compile_each("support", [(s, s.stem, "") for s in support_sources])
        lines += [f"build {SUPPORT_LIB}: ar {objs}"]
        support = f" {SUPPORT_LIB}"
    core_objs = compile_each("core", core_sources)
    lines += [
        f"build {CORE_LIB}: link {core_objs}{support}",
        f"  ldflags = -L{torch_lib} -ltorch_cpu -lc10 -Wl,--no-undefined "
        f"-Wl,--exclude-libs,{SUPPORT_LIB} -Wl,-rpath,{torch_lib} -Wl,-soname,{CORE_LIB}",
    ]
    binding_objs = compile_each("bindings", [(s, s.stem, "") for s in binding_sources])
    lines += [
        f"build {BINDINGS}{ext_suffix}: link {binding_objs} | {CORE_LIB}",
        f"  ldflags = -L{torch_lib} -L{build_dir} -l:{CORE_LIB} -ltorch_python -ltorch_cpu "
        f"-lc10 -Wl,-rpath,{torch_lib} -Wl,-rpath,{build_dir}",
        "",
    ]
    return "\n".join(lines)


def _ninja(python: Path) -> str:
    found = shutil.which("ninja") or str(python.parent / "ninja")
    if not Path(found).exists():
        raise StackError("ninja not found (pip install ninja into the venv)")
    return found


def _verify(python: Path, fork: Path, build_dir: Path, ops: list[str]) -> None:
    """Load the new build the way the venv will, and check `import torch` stays silent.

    Catches what linking cannot (the bindings are linked without --no-undefined, as
    Python extensions are) and any warning the registrations print ("Overriding a
    previously registered kernel"). Activates the loader explicitly, so it also works
    before install_loader; with the .pth installed, that one is used. `fork` comes first on
    sys.path and `build_dir` is named to the hook (overlay_loader.ENV), so a worktree's
    build is checked against that worktree.
    """
    names = [op for op in ops if "." not in op]
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import overlay_loader; "
            "sys.path.pop(0); "
            f"overlay_loader.activate({str(build_dir)!r}); import torch; "
            f"missing = [n for n in {names!r} if not hasattr(torch, n)]; "
            "sys.exit(f'torch lacks {missing}' if missing else 0)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(fork), overlay_loader.ENV: str(build_dir)}
    result = subprocess.run([str(python), "-W", "error", "-X", "dev", "-c", code], cwd="/",
                            env=env, capture_output=True, text=True)  # fmt: skip
    if result.returncode != 0 or result.stderr.strip() or result.stdout.strip():
        raise StackError(
            f"the overlay built in {build_dir} does not load cleanly "
            f"(python -W error -X dev -c 'import torch'):\n"
            f"{(result.stdout + result.stderr).strip()[-4000:]}"
        )


# --------------------------------------------------------------------------- tree refresh


def _refresh_python_files(fork: Path, python: Path, build_dir: Path, cg: Path) -> int:
    """annotated_fn_args.py and the .pyi stubs of the tree, from the patched yaml files."""
    changed = write_if_changed(
        fork / "torch/testing/_internal/generated/annotated_fn_args.py",
        (cg / "full/gen/torch/testing/_internal/generated/annotated_fn_args.py").read_bytes(),
    )
    pyi = build_dir / "pyi"
    stamp = pyi / "stamp"
    # gen_pyi copies docstrings out of _torch_docs.py / _tensor_docs.py: rerun on doc edits
    key = (cg / "stamp").read_text() + _digest(
        fork, ["torch/_torch_docs.py", "torch/_tensor_docs.py", "tools/pyi/",
               "torch/_C/__init__.pyi.in", "torch/_C/_VariableFunctions.pyi.in",
               "torch/_C/return_types.pyi.in", "torch/_C/_nn.pyi.in",
               "torch/nn/functional.pyi.in"])  # fmt: skip
    if not (stamp.exists() and stamp.read_text() == key):
        stamp.unlink(missing_ok=True)
        _run([str(python), "-W", "ignore", "-m", "tools.pyi.gen_pyi",
              "--native-functions-path", NATIVE_YAML, "--tags-path", TAGS_YAML,
              "--deprecated-functions-path", "tools/autograd/deprecated.yaml",
              "--out", str(pyi / "out")], fork, "python -m tools.pyi.gen_pyi")  # fmt: skip
        stamp.write_text(key)
    for f in sorted((pyi / "out").rglob("*.pyi")):
        changed += write_if_changed(fork / f.relative_to(pyi / "out"), f.read_bytes())
    return changed


# --------------------------------------------------------------------------- build


def build(fork: Path, python: Path, build_dir: Path, jobs: int) -> None:
    """Overlay-build the stack checked out in `fork` into `build_dir` (see module doc).

    `python` is the venv's interpreter (it runs the fork's code generators); `jobs` is
    ninja's -j. Prints a one-line timing summary. StackError on anything to act on.
    """
    t0 = time.monotonic()
    fork, build_dir = fork.resolve(), build_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    changes = overlay_sources.changed_files(fork, BASE)
    for path in changes:
        if path.startswith(GENERATOR_INPUTS) and path not in YAML_INPUTS:
            raise StackError(f"{path}: the stack changes PyTorch's code generators; the "
                             "generated code of every op would change, which an overlay "
                             "cannot do (full from-source build needed)")  # fmt: skip
    ops = new_ops(fork, BASE)
    check_new_ops_overlayable(fork, BASE, ops)
    lists = list_additions(fork, BASE, changes)
    manifest_path = build_dir / MANIFEST
    try:
        if json.loads(manifest_path.read_text())["ops"] != ops:
            manifest_path.unlink()  # built for other ops: a failed build must not leave it on
    except (OSError, ValueError, KeyError):
        pass
    cg = build_dir / "codegen"

    t = time.monotonic()
    ran_codegen = _codegen(fork, python, cg, ops)
    t_codegen = time.monotonic() - t

    t = time.monotonic()
    headers = Headers(fork, build_dir)
    stack_headers = _stack_headers(fork, changes)
    overlay_headers: dict[str, bytes] = {}
    if ops:
        for rel, path in {**_generated_headers(cg), **stack_headers}.items():
            if rel in NEVER_OVERLAID:
                continue
            data = path.read_bytes()
            if data != headers.wheel_bytes(rel):
                overlay_headers[rel] = data
    _sync_dir(build_dir / "include", overlay_headers)

    new_files, added_tus, gpu_users = _stack_sources(fork, BASE, changes, lists)
    summary = f"{len(ops)} new op(s)"
    skipped_gpu = gpu_sources(changes) + gpu_users
    if not ops and not new_files and not added_tus:
        manifest_path.unlink(missing_ok=True)  # the loader is then a no-op
        compiled = "nothing to compile"
        t_compile = 0.0
    else:
        if not ops:
            raise StackError("the stack adds C++ but no operator; the overlay build only "
                             "builds new operators")  # fmt: skip
        core_gen, binding_gen = _generated_sources(cg, ops)
        skipped_gpu += gpu_registrations(cg)
        src = build_dir / "src"
        texts = {
            **core_gen,
            **{"bindings/" + k: v for k, v in binding_gen.items()},
            **{"added/" + k.replace("/", "__"): v for k, v in added_tus.items()},
        }
        if "autograd/VariableTypeEverything.cpp" in core_gen:  # calls unpack: see the .cpp
            texts["overlay_unpack.cpp"] = (HERE / "overlay_unpack.cpp").read_text()
        texts["overlay_dispatch_refresh.cpp"] = (HERE / "overlay_dispatch_refresh.cpp").read_text()
        texts["bindings/overlay_bindings_glue.cpp"] = (
            HERE / "overlay_bindings_glue.cpp"
        ).read_text()
        _sync_dir(src, {k: v.encode() for k, v in texts.items()})
        core_sources: list[tuple[Path, str, str]] = []
        for path in new_files:
            rel = path.relative_to(fork).as_posix()
            stem = rel.replace("/", "__").removesuffix(".cpp")
            if "/native/cpu/" in rel:
                for cap, flags in CPU_CAPABILITIES.items():
                    core_sources.append((path, f"{stem}.{cap}",
                                         f"-DCPU_CAPABILITY={cap} -DCPU_CAPABILITY_{cap} {flags}"))  # fmt: skip
            else:
                core_sources.append((path, stem, ""))
        for name in sorted(texts):
            if not name.startswith("bindings/"):
                core_sources.append((src / name, name.replace("/", "__").removesuffix(".cpp"), ""))
        binding_sources = [src / name for name in sorted(texts) if name.startswith("bindings/")]
        origins = [p.relative_to(fork).as_posix() for p in new_files] + list(added_tus)
        support_sources = _support_sources(fork, origins)
        info = _python_info(python)
        write_if_changed(
            build_dir / "build.ninja",
            _ninja_file(
                fork,
                build_dir,
                info["include"],
                info["ext_suffix"],
                core_sources,
                binding_sources,
                support_sources,
            ),
        )
        result = subprocess.run([_ninja(python), "-C", str(build_dir), f"-j{jobs}"],
                                capture_output=True, text=True)  # fmt: skip
        if result.returncode != 0:
            raise StackError(f"overlay compile failed (ninja -C {build_dir}):\n"
                             f"{(result.stdout + result.stderr).strip()[-6000:]}")  # fmt: skip
        steps = [line for line in result.stdout.splitlines() if "] CXX " in line]
        total = len(core_sources) + len(binding_sources) + len(support_sources)
        compiled = f"compiled {len(steps)}/{total} TUs"
        t_compile = time.monotonic() - t
        manifest = {
            "fork": str(fork),
            "commit": overlay_sources.git(fork, "rev-parse", "HEAD").strip(),  # see stale_message
            "ops": ops,
            "core": str(build_dir / CORE_LIB),
            "bindings": str(build_dir / (BINDINGS + info["ext_suffix"])),
        }
        changed_manifest = write_if_changed(manifest_path, json.dumps(manifest, indent=1) + "\n")
        if steps or changed_manifest:
            _verify(python, fork, build_dir, ops)
            compiled += ", import checked"
        summary += f" ({', '.join(ops)})"

    t = time.monotonic()
    refreshed = headers.refresh({
        rel: data for rel, data in overlay_headers.items()
        if headers.wheel_bytes(rel) is not None or rel.startswith("ATen/ops/")
        or rel in stack_headers
    })  # fmt: skip
    refreshed += _refresh_python_files(fork, python, build_dir, cg)
    t_refresh = time.monotonic() - t
    print(
        f"overlay build: {summary}; codegen {f'{t_codegen:.1f}s' if ran_codegen else 'up to date'}"
        f", {compiled} in {t_compile:.1f}s (-j{jobs}), {refreshed} tree file(s) refreshed"
        f" in {t_refresh:.1f}s; total {time.monotonic() - t0:.1f}s"
        + (
            f"; {len(skipped_gpu)} GPU source(s) NOT compiled (CPU-only overlay): "
            f"{', '.join(skipped_gpu)}"
            if skipped_gpu
            else ""
        ),
        flush=True,
    )


# --------------------------------------------------------------------------- loader


def install_loader(site_packages: Path, build_dir: Path) -> None:
    """Install the import hook for `build_dir`'s overlay into a venv's site-packages.

    Writes `_stack_overlay.py` (a copy of overlay_loader.py) and `_stack_overlay.pth`;
    neither the fork nor the wheel's files are touched. Idempotent. The hook is a silent
    no-op while `build_dir` holds no built overlay.
    """
    site_packages.mkdir(parents=True, exist_ok=True)
    write_if_changed(site_packages / "_stack_overlay.py", (HERE / "overlay_loader.py").read_bytes())
    hook = f"import _stack_overlay; _stack_overlay.activate({str(build_dir.resolve())!r})\n"
    write_if_changed(site_packages / "_stack_overlay.pth", hook)
