"""What to compile (the overlay build's step 3): flags, support sources, build.ninja, ninja.

What generate.py gives (`generate.sources`, and the stack's new files) is compiled
against the wheel's headers and libraries with the wheel's ABI flags, with ninja, into two
libraries: `libstack_overlay.so` (kernels, schemas, registrations; links libtorch_cpu) and
the extension `_stack_overlay_bindings` (the Python functions and Node classes). Upstream
helpers that libtorch_cpu does not export are compiled into a private static archive
(SUPPORT_SOURCES). Ninja rebuilds what depends on what changed.

Compiles go through ccache (stacktool/ccache.py) when the build is given a cache: every path
on a compile command is relative to the build folder, the tree's files through the link
`fork` there, so the same translation unit of another tree (a gate level's worktree) has
the same command and is a hit.
"""

import fnmatch
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from stacktool.errors import StackError
from stacktool.overlay import vec_callers
from stacktool.overlay.changes import CPU_KERNELS
from stacktool.overlay.generate import run, write_if_changed

CORE_LIB = "libstack_overlay.so"
BINDINGS = "_stack_overlay_bindings"
FORK_LINK = "fork"  # in the build folder: the tree it builds, for paths that name no tree
# The wheel's ABI (torch._C._GLIBCXX_USE_CXX11_ABI is False; see torch.__config__.show()).
CXXFLAGS = ("-std=c++17 -fPIC -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=0 -fabi-version=11 "
            "-fvisibility-inlines-hidden -fvisibility=hidden -fno-math-errno "
            "-fno-trapping-math -DAT_PER_OPERATOR_HEADERS -DUSE_PTHREADPOOL -fopenmp")  # fmt: skip
# -fopenmp above: the wheel's ATen parallel backend is OpenMP (torch.__config__.parallel_info())
# and upstream's CMake compiles libtorch_cpu with OpenMP's flags (caffe2::openmp), so that
# at::parallel_for, inline in ATen/ParallelOpenMP.h, opens a parallel region in every TU;
# without them the pragma is ignored and a kernel's parallel_for runs on one thread. The
# libraries link the OpenMP runtime the wheel bundles (torch/lib/libgomp-<hash>.so.1, which
# libtorch_cpu needs): one runtime in the process. A torch without one uses the system's.
# Warnings as upstream's CMake build sets them for libtorch_cpu.
WARNINGS = ("-Wall -Wextra -Werror=return-type -Werror=non-virtual-dtor -Wno-unused-parameter "
            "-Wno-missing-field-initializers -Wno-type-limits -Wno-array-bounds "
            "-Wno-unknown-pragmas -Wno-strict-overflow -Wno-strict-aliasing -Wno-psabi "
            "-Wno-unused-but-set-variable -Wno-maybe-uninitialized -Wno-stringop-overflow")  # fmt: skip
# Upstream files that define helpers libtorch_cpu uses but does not export (declared
# without TORCH_API), needed by stack code in the directory they are keyed by (e.g. a batch
# rule calls moveBatchDimToFront). They hold no registrations or static state (checked),
# are compiled whole into a static archive and linked with --exclude-libs: private copies.
# Given the wheel's headers (compile_libraries' `wheel_include`), they are compiled against
# those alone: v2.6.0's code, whatever the stack generates, so one object serves every
# level's build from ccache (each level's generated headers differ).
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
# aten/src/ATen/native/cpu/*.cpp is compiled once per CPU capability, at -O3, with these
# flags (cmake/Codegen.cmake: OPT_FLAG, CPU_CAPABILITY_FLAGS).
CPU_CAPABILITIES = {
    "DEFAULT": "-O3",
    "AVX2": "-O3 -mavx2 -mfma -mf16c -mno-avx256-split-unaligned-load "
            "-mno-avx256-split-unaligned-store",
    "AVX512": "-O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma",
}  # fmt: skip


INJECTED = "injected/"  # under the build's src/: copies of the stack's new files, edited (Variant)


@dataclass(frozen=True)
class Variant:
    """Another build of the same sources into its own folder (stacktool/sanitize.py's).

    `cxxflags` are added to the compile of every translation unit or, given `only`, of
    those whose object (`core/aten__src__ATen__native__cpu__AttnKernel.AVX2`: its folder
    under obj/ and its name) matches one of its shell patterns: the rest is compiled as the
    overlay build compiles it, so ccache has it. `ldflags` are added to both links.
    `tree_build` is the build folder that refreshes the tree's generated files
    (build/overlay for pytorch/): its record of the wheel's headers is read, never written,
    so this build overlays the same headers (and its commands are the overlay build's); the
    variant writes nothing in the tree. `inject`: (tree path, text, replacement) edits made
    to the copies of the sources it compiles (each text must occur once), never to the
    tree: the sanitizers' own test (a known overrun must be reported).
    """

    cxxflags: str
    ldflags: str = ""
    tree_build: Path | None = None
    only: tuple[str, ...] = ()
    inject: tuple[tuple[str, str, str], ...] = ()


def inject(
    variant: Variant, fork: Path, texts: dict[str, str], new_files: list[Path],
    added_tus: dict[str, str], src: Path,
) -> list[Path]:  # fmt: skip
    """Apply `variant.inject` to the sources to compile: an added-lines TU's text in
    `texts` is edited in place; an edited new file is added to `texts` under INJECTED (its
    tree path kept) and compiled from there instead of the tree. The new files to compile."""
    new_files = list(new_files)
    for path, text, replacement in variant.inject:
        if path in added_tus:
            name = "added/" + path.replace("/", "__")
            original = texts[name]
        elif fork / path in new_files:
            name = INJECTED + path
            original = (fork / path).read_text()
            new_files[new_files.index(fork / path)] = src / name
        else:
            raise StackError(f"cannot inject into {path}: the stack compiles no such file")
        if original.count(text) != 1:
            raise StackError(f"cannot inject into {path}: {text!r} occurs "
                             f"{original.count(text)} times in it, not once")  # fmt: skip
        texts[name] = original.replace(text, replacement)
    return new_files


def _capability_flags() -> dict[str, str]:
    """{capability: compiler flags} for a file compiled once per CPU capability."""
    return {cap: f"-DCPU_CAPABILITY={cap} -DCPU_CAPABILITY_{cap} {flags}".strip()
            for cap, flags in CPU_CAPABILITIES.items()}  # fmt: skip


# --------------------------------------------------------------------------- support sources


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


def _python_info(python: Path) -> dict:
    """The venv Python's include dir and EXT_SUFFIX: the bindings must match the interpreter."""
    code = ("import json, sysconfig; print(json.dumps({'include': sysconfig.get_paths()"
            "['include'], 'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX')}))")  # fmt: skip
    return json.loads(run([str(python), "-c", code], Path("/"), f"{python} -c sysconfig"))


def link_fork(fork: Path, build_dir: Path) -> None:
    """The link FORK_LINK in `build_dir` to the tree it builds."""
    link = build_dir / FORK_LINK
    if not link.is_symlink() or link.readlink() != fork:
        link.unlink(missing_ok=True)
        link.symlink_to(fork, target_is_directory=True)


def relative(path: Path, fork: Path, build_dir: Path) -> str:
    """`path` as a compile command names it: relative to the build folder, the fork's files
    through FORK_LINK; other paths (Python's and the venv's headers) stay absolute."""
    for base, name in ((build_dir, ""), (fork, FORK_LINK)):
        if path.is_relative_to(base):
            return (Path(name) / path.relative_to(base)).as_posix()
    return str(path)


def _ninja_file(
    fork: Path,
    build_dir: Path,
    python_include: str,
    venv_include: Path,
    ext_suffix: str,
    core_sources: list[tuple[Path, str, str]],
    binding_sources: list[Path],
    support_sources: list[Path],
    launcher: str = "",
    variant: Variant | None = None,
    wheel_include: Path | None = None,
) -> str:
    """build.ninja text. core_sources: (source, object stem, extra flags); `launcher`: what
    goes before the compiler on a compile command (ccache.launcher), or nothing; `variant`:
    its flags go on the compiles (those it names, see Variant.only) and links;
    `wheel_include`: the wheel's torch/include, the support sources' only headers."""
    torch_include = Path(FORK_LINK) / "torch" / "include"
    torch_lib = fork / "torch" / "lib"
    cxx = os.environ.get("CXX", "c++")
    lines = [
        "# @generated by stacktool/overlay/compile.py: the overlay build (see stacktool/overlay/)",
        "ninja_required_version = 1.5",
        f"cxx = {cxx}",
        f"launcher = {launcher}",
        f"cxxflags = {CXXFLAGS} {WARNINGS}",
        f"includes = -Iinclude -I{torch_include} -I{torch_include / 'torch/csrc/api/include'} "
        f"-I{python_include} -I{venv_include}",
        "rule cxx",
        "  command = $launcher $cxx -MMD -MF $out.d $cxxflags $extra $includes -c $in -o $out",
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

    def compile_each(kind: str, sources: list[tuple[Path, str, str]], includes: str = "") -> str:
        """A build edge per (source, object stem, extra flags); the objects, space-separated.
        `includes`: the edges' own include flags, instead of the build's."""
        objs = []
        for source, stem, extra in sources:
            name = f"{kind}/{stem}"
            if variant is not None and (
                not variant.only or any(fnmatch.fnmatchcase(name, p) for p in variant.only)
            ):
                extra = f"{variant.cxxflags} {extra}".strip()
            objs.append(f"obj/{kind}/{stem}.o")
            lines.extend([f"build {objs[-1]}: cxx {relative(source, fork, build_dir)}",
                          f"  extra = {extra}"])  # fmt: skip
            if includes:
                lines.append(f"  includes = {includes}")
        return " ".join(objs)

    support = ""
    if support_sources:
        wheel_only = wheel_include and (f"-I{wheel_include} -I{wheel_include / 'torch/csrc/api/include'} "
                                        f"-I{python_include} -I{venv_include}")  # fmt: skip
        objs = compile_each("support", [(s, s.stem, "") for s in support_sources], wheel_only or "")
        lines += [f"build {SUPPORT_LIB}: ar {objs}"]
        support = f" {SUPPORT_LIB}"
    core_objs = compile_each("core", core_sources)
    bundled_openmp = sorted(torch_lib.glob("libgomp*.so*"))
    openmp = f"-l:{bundled_openmp[0].name}" if bundled_openmp else "-lgomp"
    libs = f"{openmp} {variant.ldflags}".strip() if variant else openmp  # sanitizers' runtimes
    lines += [
        f"build {CORE_LIB}: link {core_objs}{support}",
        f"  ldflags = -L{torch_lib} -ltorch_cpu -lc10 {libs} -Wl,--no-undefined "
        f"-Wl,--exclude-libs,{SUPPORT_LIB} -Wl,-rpath,{torch_lib} -Wl,-soname,{CORE_LIB}",
    ]
    binding_objs = compile_each("bindings", [(s, s.stem, "") for s in binding_sources])
    lines += [
        f"build {BINDINGS}{ext_suffix}: link {binding_objs} | {CORE_LIB}",
        f"  ldflags = -L{torch_lib} -L{build_dir} -l:{CORE_LIB} -ltorch_python -ltorch_cpu "
        f"-lc10 {libs} -Wl,-rpath,{torch_lib} -Wl,-rpath,{build_dir}",
        "",
    ]
    return "\n".join(lines)


def _ninja(python: Path) -> str:
    found = shutil.which("ninja") or str(python.parent / "ninja")
    if not Path(found).exists():
        raise StackError("ninja not found (pip install ninja into the venv)")
    return found


# --------------------------------------------------------------------------- compile


def ninja(command: str, build_dir: Path, jobs: int) -> int:
    """Run ninja, printing a line as each translation unit finishes; the number compiled.

    Each line counts the TUs this run compiles (from a dry run), on a terminal and in a log
    alike (a pipe: ninja reports an edge when it finishes, followed by `FAILED:` if it
    failed, so a TU is counted at the line after it). StackError with the output.
    """
    dry = subprocess.run([command, "-C", str(build_dir), "-n"], capture_output=True, text=True)
    todo = sum("] CXX " in line for line in dry.stdout.splitlines())
    env = {**os.environ, "NINJA_STATUS": "[%f/%t] "}
    output, done, finished = [], 0, None
    with subprocess.Popen([command, "-C", str(build_dir), f"-j{jobs}"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:  # fmt: skip
        for line in itertools.chain(proc.stdout, [""]):  # "": the last TU's verdict
            output.append(line)
            if finished and line.startswith("FAILED:"):
                print(f"overlay build: FAILED to compile {finished}", flush=True)
            elif finished:
                done += 1
                print(f"overlay build: compiled {done}/{todo} TUs: {finished}", flush=True)
            finished = Path(line.split("] CXX ", 1)[1].strip()).name if "] CXX " in line else None
    if proc.returncode != 0:
        raise StackError(f"overlay compile failed (ninja -C {build_dir}):\n"
                         f"{''.join(output).strip()[-6000:]}")  # fmt: skip
    return done


def compile_libraries(
    fork: Path,
    python: Path,
    build_dir: Path,
    new_files: list[Path],
    sources: list[str],
    edited: list[str],
    jobs: int,
    launcher: str = "",
    variant: Variant | None = None,
    wheel_include: Path | None = None,
) -> tuple[str, int, int]:
    """Compile and link the two libraries: (the bindings' EXT_SUFFIX, TUs compiled, TUs).

    `new_files` are the stack's new .cpp files (those under native/cpu/ compiled once per
    CPU capability), `sources` the files under `build_dir`/src (generate.sources: those
    under bindings/ go into the extension), `edited` the upstream files whose added lines
    are among them; `launcher` goes before the compiler (ccache); `variant`: another
    build's flags (a new file edited by it lies under src/INJECTED); `wheel_include`: the
    unpacked wheel's torch/include (see SUPPORT_SOURCES). StackError with the compiler's
    output if ninja fails.
    """
    src = build_dir / "src"

    def tree_path(path: Path) -> str:  # a new file's path in the tree (also when injected)
        return path.relative_to(src / INJECTED if path.is_relative_to(src / INJECTED) else fork
                                ).as_posix()  # fmt: skip

    core_sources: list[tuple[Path, str, str]] = []
    for path in new_files:
        rel = tree_path(path)
        stem = rel.replace("/", "__").removesuffix(".cpp")
        if rel.startswith(CPU_KERNELS):
            core_sources += [(path, f"{stem}.{cap}", flags)
                             for cap, flags in _capability_flags().items()]  # fmt: skip
        else:
            core_sources.append((path, stem, ""))
    kernels = "added/" + CPU_KERNELS.replace("/", "__")
    for name in sorted(sources):
        stem = name.replace("/", "__").removesuffix(".cpp")
        if name.startswith(kernels):  # a kernel file's added lines: once per capability
            core_sources += [(src / name, f"{stem}.{cap}", flags)
                             for cap, flags in _capability_flags().items()]  # fmt: skip
        elif name.startswith(vec_callers.PREFIX):  # a kernel file whole, at one capability
            core_sources.append(
                (src / name, stem, _capability_flags()[vec_callers.capability(name)])
            )
        elif not name.startswith(("bindings/", INJECTED)):
            core_sources.append((src / name, stem, ""))
    binding_sources = [src / name for name in sorted(sources) if name.startswith("bindings/")]
    origins = [tree_path(p) for p in new_files] + list(edited)
    support_sources = _support_sources(fork, origins)
    info = _python_info(python)
    link_fork(fork, build_dir)
    write_if_changed(
        build_dir / "build.ninja",
        _ninja_file(
            fork,
            build_dir,
            info["include"],
            python.parent.parent / "include",  # the venv's: mkl.h (mkl-include)
            info["ext_suffix"],
            core_sources,
            binding_sources,
            support_sources,
            launcher,
            variant,
            wheel_include,
        ),
    )
    steps = ninja(_ninja(python), build_dir, jobs)
    total = len(core_sources) + len(binding_sources) + len(support_sources)
    return info["ext_suffix"], steps, total
