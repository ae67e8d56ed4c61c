"""Gather the stack's attn C++ for a CUDA check on a machine that cannot run the fork.

A GPU machine lent to a session has its own PyTorch, Python and CUDA (not v2.6.0's)
and no network, so the fork cannot run there. What can run there is the stack's own
code: Attn.cpp and Attn.h as the fork has them, FunctionsManual's
attn_backward and attn_jvp, attn's OpInfo sample and error inputs, and its
decomposition in torch/_decomp. `prepare` copies them into one folder beside
cuda_check_suite.py, which builds them as the extension op stack::attn and tests it
on CUDA, eager and compiled, and the venv's expecttest (which torch's test helpers
import and such a machine may lack) under site/.

    python3.11 -m stacktool.cuda_check [DEST]      (default: .cuda-check)
"""

import ast
import shutil
import sys
from pathlib import Path

from stacktool import errors

ROOT = Path(__file__).resolve().parent.parent
NATIVE = "aten/src/ATen/native"
COPIED = (f"{NATIVE}/Attn.cpp", f"{NATIVE}/Attn.h")
MANUAL = "torch/csrc/autograd/FunctionsManual.cpp"
OPINFO = "torch/testing/_internal/common_methods_invocations.py"
MANUAL_FIRST = "// attn(q, k, v): x = q k^T"
MANUAL_FUNCTIONS = ("attn_backward(", "attn_jvp(")
OPINFO_FUNCTIONS = ("sample_inputs_attn", "error_inputs_attn")
DECOMP = "torch/_decomp/decompositions.py"
DECOMP_FUNCTIONS = ("attn",)
EXPECTTEST = "lib/python3.11/site-packages/expecttest"


def manual_text(source: str) -> str:
    """FunctionsManual's attn comment block through the end of attn_jvp."""
    start = source.find(MANUAL_FIRST)
    jvp = source.find("std::tuple<Tensor, Tensor> attn_jvp(", start)
    if start < 0 or jvp < 0:
        raise errors.StackError(f"{MANUAL}: attn_backward and attn_jvp not found")
    end = source.index("\n}\n", jvp) + 3
    text = source[start:end]
    missing = [name for name in MANUAL_FUNCTIONS if name not in text]
    if missing:
        raise errors.StackError(f"{MANUAL}: {', '.join(missing)} not found")
    return text


def functions_text(source: str, path: str, names: tuple[str, ...]) -> str:
    """The module-level functions names of the fork's file path (without decorators)."""
    found = {
        node.name: ast.get_source_segment(source, node)
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name in names
    }
    missing = [name for name in names if name not in found]
    if missing:
        raise errors.StackError(f"{path}: {', '.join(missing)} not found")
    return "\n\n\n".join(found[name] for name in names) + "\n"


def prepare(fork: Path, venv: Path, dest: Path) -> None:
    """Fill dest with the suite, the fork's files it builds and reads, and venv's expecttest."""
    sources = [fork / path for path in (*COPIED, MANUAL, OPINFO, DECOMP)] + [
        venv / EXPECTTEST / "__init__.py"
    ]
    absent = [str(path) for path in sources if not path.is_file()]
    if absent:
        raise errors.StackError(f"not found (run ./stack setup): {', '.join(absent)}")
    manual = manual_text((fork / MANUAL).read_text())
    opinfo = functions_text((fork / OPINFO).read_text(), OPINFO, OPINFO_FUNCTIONS)
    decomp = functions_text((fork / DECOMP).read_text(), DECOMP, DECOMP_FUNCTIONS)
    if dest.exists():
        shutil.rmtree(dest)
    for path in COPIED:
        target = dest / "src" / path.removeprefix("aten/src/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fork / path, target)
    (dest / "src" / "attn_manual.inc").write_text(manual)
    (dest / "attn_opinfo.py").write_text(opinfo)
    (dest / "attn_decomp.py").write_text(decomp)
    shutil.copytree(venv / EXPECTTEST, dest / "site" / "expecttest",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copyfile(Path(__file__).with_name("cuda_check_suite.py"), dest / "cuda_check_suite.py")


def main(argv: list[str]) -> int:
    dest = Path(argv[0]) if argv else ROOT / ".cuda-check"
    try:
        prepare(ROOT / "pytorch", ROOT / ".venv", dest)
    except errors.StackError as error:
        print(f"cuda_check: {error}", file=sys.stderr)
        return 2
    print(f"prepared {dest}; on the GPU machine: python3 {dest.name}/cuda_check_suite.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
