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


def sources(fork: Path, base: str, changes: dict[str, str]) -> dict[str, str]:
    """{path under the build's src/: text} of the kernel files to compile again, whole.

    StackError for a changed function that a kernel file calls but CALLERS does not list.
    """
    wanted: dict[tuple[str, str], tuple[set[str], set[str]]] = {}  # (file, cap): names, stubs
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
    texts: dict[str, str] = {}
    for (path, capability), (names, stubs) in sorted(wanted.items()):
        text = (fork / path).read_text()
        if capability == "AVX512" and not stubs & set(_AVX512_REGISTRATION.findall(text)):
            continue  # registered by REGISTER_DISPATCH: no AVX512 kernel, the AVX2 one runs
        name = f"{PREFIX}{path.replace('/', '__').removesuffix('.cpp')}.{capability}.cpp"
        texts[name] = REPOINT_ONLY.format(
            path=path, function=", ".join(sorted(names)), stubs=", ".join(sorted(stubs)),
            pragma=PRAGMAS.get(path, ""),
            condition=" || ".join(f'stub == "{s}"' for s in sorted(stubs))) + text  # fmt: skip
    return texts


def capability(name: str) -> str:
    """The capability a recompiled file's `name` under src/ is compiled for."""
    return name.removesuffix(".cpp").rsplit(".", 1)[1]


def short_names(names: list[str] | dict[str, str]) -> list[str]:
    """`Activation.AVX2` for each recompiled file's name under src/."""
    return [n.removeprefix(PREFIX).removesuffix(".cpp").rsplit("__", 1)[-1] for n in names]
