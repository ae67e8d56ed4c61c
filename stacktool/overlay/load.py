"""How it loads: manifest, import check, venv hook, tree files (the overlay build's step 4).

The loader (loader.py, installed into the venv by `install_loader` as `_stack_overlay.py`
with a .pth) loads the two libraries during `import torch`, from what the manifest
(`write_manifest`) names. `verify` loads a new build the way the venv will and checks
that `import torch` stays silent. `refresh_tree` refreshes the generated files of the tree
that the wheel ships stale for the new ops (annotated_fn_args.py, the .pyi stubs, the
headers in torch/include).
"""

import json
import os
import re
import subprocess
from pathlib import Path

from stacktool.errors import StackError
from stacktool.git import git
from stacktool.overlay.changes import NATIVE_YAML, TAGS_YAML
from stacktool.overlay.compile import BINDINGS, CORE_LIB
from stacktool.overlay.generate import Headers, digest, run, write_if_changed
from stacktool.overlay.loader import ENV, MANIFEST

HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- manifest


def forget_other_ops(build_dir: Path, ops: list[str]) -> None:
    """Remove the manifest of a build for other ops than `ops`, before building them."""
    manifest_path = build_dir / MANIFEST
    try:
        if json.loads(manifest_path.read_text())["ops"] != ops:
            manifest_path.unlink()  # built for other ops: a failed build must not leave it on
    except (OSError, ValueError, KeyError):
        pass


def write_manifest(fork: Path, build_dir: Path, ops: list[str], ext_suffix: str) -> bool:
    """Write what the loader reads (loader.MANIFEST); True if it changed."""
    manifest = {
        "fork": str(fork),
        "commit": git(fork, "rev-parse", "HEAD").strip(),  # see stale_message
        "ops": ops,
        "core": str(build_dir / CORE_LIB),
        "bindings": str(build_dir / (BINDINGS + ext_suffix)),
    }
    return write_if_changed(build_dir / MANIFEST, json.dumps(manifest, indent=1) + "\n")


# --------------------------------------------------------------------------- loader


def python_functions(build_dir: Path) -> set[str]:
    """The `torch.*` functions the build's bindings define: torchgen binds no Python
    function to some ops (those named `*_backward`, among others: SKIP_PYTHON_BINDINGS in
    tools/autograd/gen_python_functions.py)."""
    source = build_dir / "src" / "bindings" / "python_torch_functionsEverything.cpp"
    return set(re.findall(r'^\s*\{"(\w+)", castPyCFunction', source.read_text(), re.M))


def verify(python: Path, fork: Path, build_dir: Path, ops: list[str]) -> None:
    """Load the new build the way the venv will, and check `import torch` stays silent.

    Catches what linking cannot (the bindings are linked without --no-undefined, as
    Python extensions are) and any warning the registrations print ("Overriding a
    previously registered kernel"). Activates the loader explicitly, so it also works
    before install_loader; with the .pth installed, that one is used. `fork` comes first on
    sys.path and `build_dir` is named to the hook (loader.ENV), so a worktree's
    build is checked against that worktree.
    """
    names = [op for op in ops if "." not in op]
    bound = [n for n in names if n in python_functions(build_dir)]
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import loader; "
            "sys.path.pop(0); "
            f"loader.activate({str(build_dir)!r}); import torch; "
            f"missing = [n for n in {names!r} if not hasattr(torch.ops.aten, n)]; "
            f"missing += [f'torch.{{n}}' for n in {bound!r} if not hasattr(torch, n)]; "
            "sys.exit(f'torch lacks {missing}' if missing else 0)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(fork), ENV: str(build_dir)}
    result = subprocess.run([str(python), "-W", "error", "-X", "dev", "-c", code], cwd="/",
                            env=env, capture_output=True, text=True)  # fmt: skip
    if result.returncode != 0 or result.stderr.strip() or result.stdout.strip():
        raise StackError(
            f"the overlay built in {build_dir} does not load cleanly "
            f"(python -W error -X dev -c 'import torch'):\n"
            f"{(result.stdout + result.stderr).strip()[-4000:]}"
        )


def install_loader(site_packages: Path, build_dir: Path, fork: Path) -> None:
    """Install the import hook for `build_dir`'s overlay of `fork` into a venv's site-packages.

    Writes `_stack_overlay.py` (a copy of loader.py) and `_stack_overlay.pth`;
    neither the fork nor the wheel's files are touched. Idempotent. While `build_dir` holds
    no built overlay, importing the fork's torch says so.
    """
    site_packages.mkdir(parents=True, exist_ok=True)
    write_if_changed(site_packages / "_stack_overlay.py", (HERE / "loader.py").read_bytes())
    args = f"{str(build_dir.resolve())!r}, {str(fork.resolve())!r}"
    hook = f"import _stack_overlay; _stack_overlay.activate({args})\n"
    write_if_changed(site_packages / "_stack_overlay.pth", hook)


# --------------------------------------------------------------------------- tree refresh


ANNOTATED_FN_ARGS = "torch/testing/_internal/generated/annotated_fn_args.py"
# the stubs v2.6.0's gen_pyi writes, and what it reads besides the yaml files
GENERATED_STUBS = (
    "torch/_C/__init__.pyi", "torch/_C/_VariableFunctions.pyi", "torch/_C/_nn.pyi",
    "torch/_VF.pyi", "torch/nn/functional.pyi", "torch/return_types.pyi",
)  # fmt: skip
PYI_INPUTS = (
    "torch/_torch_docs.py", "torch/_tensor_docs.py", "tools/pyi/", "torch/_C/__init__.pyi.in",
    "torch/_C/_VariableFunctions.pyi.in", "torch/_C/return_types.pyi.in",
    "torch/_C/_nn.pyi.in", "torch/nn/functional.pyi.in",
)  # fmt: skip


def python_outputs() -> list[str]:
    """The tree files a build's refresh writes (paths in the tree): the generated Python
    that mypy reads."""
    return [ANNOTATED_FN_ARGS, *GENERATED_STUBS]


def restore_wheel_python_files(fork: Path, wheel: Path) -> int:
    """The wheel's copies of python_outputs() back in the tree, the number changed: what the
    codegen makes of v2.6.0's inputs (a build at a later commit may have refreshed them)."""
    return sum(write_if_changed(fork / rel, (wheel / rel).read_bytes()) for rel in python_outputs())


def _refresh_python_files(fork: Path, python: Path, build_dir: Path, cg: Path) -> int:
    """annotated_fn_args.py and the .pyi stubs of the tree, from the patched yaml files."""
    generated = (cg / "full/gen" / ANNOTATED_FN_ARGS).read_bytes()
    changed = write_if_changed(fork / ANNOTATED_FN_ARGS, generated)
    pyi = build_dir / "pyi"
    stamp = pyi / "stamp"
    # gen_pyi copies docstrings out of _torch_docs.py / _tensor_docs.py: rerun on doc edits
    key = (cg / "stamp").read_text() + digest(fork, list(PYI_INPUTS))
    if not (stamp.exists() and stamp.read_text() == key):
        stamp.unlink(missing_ok=True)
        run([str(python), "-W", "ignore", "-m", "tools.pyi.gen_pyi",
             "--native-functions-path", NATIVE_YAML, "--tags-path", TAGS_YAML,
             "--deprecated-functions-path", "tools/autograd/deprecated.yaml",
             "--out", str(pyi / "out")], fork, "python -m tools.pyi.gen_pyi")  # fmt: skip
        stamp.write_text(key)
    out = pyi / "out"
    written = sorted(str(f.relative_to(out)) for f in out.rglob("*.pyi"))
    if written != sorted(GENERATED_STUBS):  # the lint tree and builds without codegen use those
        raise StackError(f"gen_pyi wrote {written}, not the stubs load.GENERATED_STUBS names")
    for rel in GENERATED_STUBS:
        changed += write_if_changed(fork / rel, (out / rel).read_bytes())
    return changed


def refresh_headers(
    headers: Headers, overlay_headers: dict[str, bytes], stack_headers: dict[str, Path]
) -> int:
    """Refresh the tree's torch/include; the number of files changed.

    Of the headers overlaid (generate.headers_to_overlay), those the wheel has, the new
    per-operator headers (ATen/ops/) and the stack's own go into torch/include (`Headers`
    undoes earlier refreshes no longer wanted). Done before compiling: a TU compiled
    earlier names the tree's header in its dependencies, not the build's include/ copy
    that now shadows it, and is compiled again only if the tree's changes.
    """
    return headers.refresh({
        rel: data for rel, data in overlay_headers.items()
        if headers.wheel_bytes(rel) is not None or rel.startswith("ATen/ops/")
        or rel in stack_headers
    })  # fmt: skip


def refresh_tree(fork: Path, python: Path, build_dir: Path, cg: Path) -> int:
    """Refresh the tree's generated Python-side files for the new ops; the number changed."""
    return _refresh_python_files(fork, python, build_dir, cg)
