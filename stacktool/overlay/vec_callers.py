"""Upstream CPU kernels that call an at::vec function the stack changes: compiled whole.

A full build recompiles every translation unit that includes a changed header. Of the
wheel's, only the kernel files compiled once per CPU capability (cmake/Codegen.cmake:
native/cpu/ and native/quantized/cpu/kernels/) see the x86 at::vec code (vec256/ in the
AVX2 build, vec512/ in the AVX512 one), and of those only the ones calling a changed
function change. `sources` finds the functions the stack changes in those headers (the
functions enclosing its changed lines) and, for each, its callers in CALLERS: it gives
each caller's file whole, once per capability where that function changed, as a
translation unit that re-points those callers' stubs only. The file's other
registrations stay the wheel's: QuantizedOpKernels.cpp's quantize kernels, say, take
fbgemm, whose headers the wheel does not ship, so a recompiled copy of them would differ.

CALLERS names the callers in v2.6.0 (`git grep "\\.tanh("` over the kernel files and the
native/cpu headers they include). `sources` refuses a changed function that a kernel file
calls but CALLERS does not list: a full build would recompile that file.

A file compiled whole this way may carry the stack's own changes (GELU's kernels in
Activation.cpp): `check_own_changes` allows lines changed inside the re-pointed stubs'
kernels or outside any function, each under an `#if` of the capabilities the file is
compiled whole at (DEFAULT's code, which stays the wheel's, must not change), and the
added-lines translation unit (generate.stack_sources) leaves such a file out.
"""

import re
from pathlib import Path

from stacktool.errors import StackError
from stacktool.git import git
from stacktool.overlay.changes import code_lines, parse_unified_diff

VEC = "aten/src/ATen/cpu/vec/"
# The builds that compile each x86 at::vec directory's code (its classes are #if'd on them).
VEC_CAPABILITIES = {VEC + "vec256/": ("AVX2",), VEC + "vec512/": ("AVX512",)}
KERNEL_DIRS = ("aten/src/ATen/native/cpu/", "aten/src/ATen/native/quantized/cpu/kernels/")
QUANTIZED_KERNELS = "aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp"
# {at::vec member function: {kernel file: the stubs whose kernels call it}}
CALLERS = {
    "tanh": {
        # GELU's tanh approximation (also through native/cpu/Gelu.h) and mish
        "aten/src/ATen/native/cpu/Activation.cpp": (
            "GeluKernel", "GeluBackwardKernel", "mish_stub", "mish_backward_stub"),
        QUANTIZED_KERNELS: ("qgelu_stub", "qtanh_stub"),
    },
}  # fmt: skip
# cmake/Codegen.cmake's per-file flags, as pragmas
PRAGMAS = {QUANTIZED_KERNELS: '#pragma GCC diagnostic ignored "-Wdeprecated-copy"\n'}
PREFIX = "recompiled/"  # under the build's src/: <file's path, / as __>.<capability>.cpp
_AVX512_REGISTRATION = re.compile(r"\b(?:ALSO_REGISTER_AVX512_DISPATCH|REGISTER_AVX512_DISPATCH)"
                                  r"\s*\(\s*(\w+)\s*,")  # fmt: skip
_DEFINITION = re.compile(r"\b(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?(?:->[^;{}]*)?$")
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}

REPOINT_ONLY = """// {path}, compiled whole: it calls at::vec's {function}, which the stack changes.
// Only the registrations of {stubs} re-point the wheel's
// pointers (stacktool/overlay/vec_callers.py); the file's others stay the wheel's.
#include <ATen/native/DispatchStub.h>
#include <string_view>
{pragma}#undef REGISTER_ARCH_DISPATCH
#define REGISTER_ARCH_DISPATCH(name, arch, fn) \\
  static const bool C10_CONCATENATE(stack_overlay_repoint_, name) = \\
      stack_overlay_repoints(#name) && (name##_DECLARE_DISPATCH_type::arch = (fn), true);
static constexpr bool stack_overlay_repoints(std::string_view stub) {{
  return {condition};
}}
#line 1 "{path}"
"""


def enclosing_functions(text: str) -> list[str | None]:
    """Per line of C++ `text`, the outermost function whose definition holds it, or None."""
    names: list[str | None] = []
    stack: list[str | None] = []
    head = ""  # the code since the last ; { or }
    for line in code_lines(text):
        if line.lstrip().startswith("#"):
            names.append(None)
            continue
        here = next((s for s in stack if s), None)
        for ch in line:
            if ch == "{":
                m = _DEFINITION.search(head.strip())
                stack.append(m.group(1) if m and m.group(1) not in _NOT_FUNCTIONS else None)
                here = here or next((s for s in stack if s), None)
                head = ""
            elif ch == "}":
                if stack:
                    stack.pop()
                head = ""
            elif ch == ";":
                head = ""
            else:
                head += ch
        head += " "
        names.append(here)
    return names


def changed_functions(fork: Path, base: str, changes: dict[str, str]) -> dict[str, set[str]]:
    """{capability: names of the at::vec functions the stack changes in its build}."""
    found: dict[str, set[str]] = {}
    for path, status in sorted(changes.items()):
        capabilities = next((c for d, c in VEC_CAPABILITIES.items() if path.startswith(d)), ())
        if status != "M" or not capabilities:
            continue
        added, removed = parse_unified_diff(git(fork, "diff", "-U0", base, "--", path))
        new = enclosing_functions((fork / path).read_text())
        old = enclosing_functions(git(fork, "show", f"{base}:{path}"))
        names = {new[k - 1] for k in added if k <= len(new)}
        names |= {old[k - 1] for k, _ in removed if k <= len(old)}
        for capability in capabilities:
            found.setdefault(capability, set()).update(n for n in names if n)
    return found


def _unlisted_callers(fork: Path, base: str, function: str) -> list[str]:
    """Kernel files of `base` that call `.function(` (or include a native/cpu header that
    does) but are not in CALLERS."""
    pattern = rf"\.{function}\("
    hits = git(fork, "grep", "-l", "-E", pattern, base, "--", *KERNEL_DIRS, check=False)
    paths = {line.split(":", 1)[1] for line in hits.splitlines()}
    for header in sorted(p for p in paths if p.endswith(".h")):
        include = header.removeprefix("aten/src/")
        users = git(fork, "grep", "-l", "-F", f"<{include}>", base, "--", *KERNEL_DIRS,
                    check=False)  # fmt: skip
        paths |= {line.split(":", 1)[1] for line in users.splitlines()}
    listed = CALLERS.get(function, {})
    return sorted(p for p in paths if p.endswith(".cpp") and p not in listed)


def _wanted(fork: Path, base: str, changes: dict[str, str]) -> dict[tuple[str, str], tuple]:
    """{(kernel file, capability): (changed functions it calls, stubs to re-point)} of the
    files `sources` compiles whole. StackError for an unlisted caller (see `sources`)."""
    wanted: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for capability, functions in sorted(changed_functions(fork, base, changes).items()):
        for function in sorted(functions):
            unlisted = _unlisted_callers(fork, base, function)
            if unlisted:
                raise StackError(
                    f"the stack changes at::vec's {function}, which {', '.join(unlisted)} "
                    "call(s); the overlay does not compile them again: add their stubs to "
                    "CALLERS in stacktool/overlay/vec_callers.py"
                )
            for path, stubs in CALLERS.get(function, {}).items():
                names, repointed = wanted.setdefault((path, capability), (set(), set()))
                names.add(function)
                repointed.update(stubs)
    for path, capability in list(wanted):
        text = (fork / path).read_text()
        if capability == "AVX512" and not wanted[path, capability][1] & set(
            _AVX512_REGISTRATION.findall(text)
        ):
            del wanted[path, capability]  # REGISTER_DISPATCH: no AVX512 kernel, AVX2's runs
    return wanted


def whole_files(fork: Path, base: str, changes: dict[str, str]) -> dict[str, set[str]]:
    """{kernel file: the stubs re-pointed} for each file `sources` compiles whole."""
    found: dict[str, set[str]] = {}
    for (path, _), (_, stubs) in _wanted(fork, base, changes).items():
        found.setdefault(path, set()).update(stubs)
    return found


def sources(fork: Path, base: str, changes: dict[str, str]) -> dict[str, str]:
    """{path under the build's src/: text} of the kernel files to compile again, whole.

    StackError for a changed function that a kernel file calls but CALLERS does not list.
    """
    texts: dict[str, str] = {}
    for (path, capability), (names, stubs) in sorted(_wanted(fork, base, changes).items()):
        text = (fork / path).read_text()
        name = f"{PREFIX}{path.replace('/', '__').removesuffix('.cpp')}.{capability}.cpp"
        texts[name] = REPOINT_ONLY.format(
            path=path, function=", ".join(sorted(names)), stubs=", ".join(sorted(stubs)),
            pragma=PRAGMAS.get(path, ""),
            condition=" || ".join(f'stub == "{s}"' for s in sorted(stubs))) + text  # fmt: skip
    return texts


def check_own_changes(fork: Path, base: str, path: str, stubs: list[str]) -> None:
    """StackError unless the stack's changes to `path`, a file compiled whole re-pointing
    `stubs`, sit where that covers them: each changed line under an `#if` of the AVX
    capabilities only, inside the kernel of one of `stubs` or outside every function that
    `base` has."""
    added, removed = parse_unified_diff(git(fork, "diff", "-U0", base, "--", path))
    new_text, old_text = (fork / path).read_text(), git(fork, "show", f"{base}:{path}")
    kernels = {fn: stub for stub, fn in _REGISTRATION.findall(new_text)}
    read = {t: (t.splitlines(), enclosing_functions(t), _avx_only(t)) for t in (new_text, old_text)}
    old_functions = set(read[old_text][1])
    places = [(k, new_text) for k in added] + [(k, old_text) for k, _ in removed]
    for number, text in places:
        lines, functions, avx_only = read[text]
        line, function = lines[number - 1].strip(), functions[number - 1]
        if not line or line.startswith("//"):
            continue
        if not avx_only[number - 1]:
            problem = "outside an `#if` of the AVX capabilities (DEFAULT keeps the wheel's code)"
        elif function in old_functions - {None} and kernels.get(function) not in stubs:
            problem = f"in {function}, not the kernel of a re-pointed stub ({', '.join(stubs)})"
        else:
            continue
        raise StackError(f"{path}:{number}: the stack changes this file, which the overlay "
                         f"compiles whole at the AVX capabilities, {problem}: {line[:60]!r}")  # fmt: skip


_REGISTRATION = re.compile(
    r"\b(?:ALSO_)?REGISTER_\w*DISPATCH\s*\(\s*(\w+)\s*,\s*&?\s*(?:\w+::)*(\w+)\s*\)"
)
_AVX_ONLY = re.compile(r"#\s*(?:el)?if\s+defined\s*\(\s*CPU_CAPABILITY_AVX(?:2|512)\s*\)"
                       r"(?:\s*\|\|\s*defined\s*\(\s*CPU_CAPABILITY_AVX(?:2|512)\s*\))*\s*$")  # fmt: skip


def _avx_only(text: str) -> list[bool]:
    """Per line of C++ `text`, whether an enclosing `#if` / `#elif` compiles it in the AVX
    builds only (an `#else` of one does not)."""
    found, stack = [], []  # stack: per open #if, whether its current branch is AVX-only
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"#\s*if", stripped):
            stack.append(bool(_AVX_ONLY.match(stripped)))
        elif re.match(r"#\s*el", stripped) and stack:
            stack[-1] = bool(_AVX_ONLY.match(stripped))
        elif re.match(r"#\s*endif", stripped) and stack:
            found.append(any(stack))
            stack.pop()
            continue
        found.append(any(stack))
    return found


def capability(name: str) -> str:
    """The capability a recompiled file's `name` under src/ is compiled for."""
    return name.removesuffix(".cpp").rsplit(".", 1)[1]


def short_names(names: list[str] | dict[str, str]) -> list[str]:
    """`Activation.AVX2` for each recompiled file's name under src/."""
    return [n.removeprefix(PREFIX).removesuffix(".cpp").rsplit("__", 1)[-1] for n in names]
