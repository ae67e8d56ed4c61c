"""The project's virtual environment: torch's runtime requirements and upstream's test tools.

torch is not installed into it: a .pth file puts pytorch/ on sys.path, so `import torch`
from any directory loads the fork (as upstream's tools/nightly.py arranges it).
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from stacktool import config
from stacktool.config import Layout
from stacktool.errors import StackError
from stacktool.overlay.load import python_functions
from stacktool.overlay.loader import MANIFEST

PTH = "_stack_fork.pth"
INSTALLED = "stack-requirements.json"  # in a venv: what was installed, to skip it next time


def base_python() -> str:
    """A Python 3.11 to create the venv with."""
    if sys.version_info[:2] == config.PYTHON_VERSION:
        return sys.executable
    name = "python{}.{}".format(*config.PYTHON_VERSION)
    found = shutil.which(name)
    if found is None:
        raise StackError(f"{name} is required (torch==2.6.0's wheel is cp311); install it first")
    return found


def project(requirement: str) -> str:
    """A requirement's project name, normalized as PEP 503 does: "PyYAML>=6" and "pyyaml"
    name one project, as do "typing_extensions" and "Typing.Extensions"."""
    name = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def ensure(path: Path, requirements: list[str]) -> bool:
    """Create a venv at `path` with `requirements` unless it has them (its INSTALLED record
    lists every one); True if it did work. The record keeps what earlier calls installed,
    one requirement per project (the last installed)."""
    python = path / "bin" / "python"
    marker = path / INSTALLED
    had: list[str] = []
    if python.exists() and marker.exists():
        with contextlib.suppress(ValueError):
            had = json.loads(marker.read_text())
    if set(requirements) <= set(had):
        return False
    if not python.exists():
        run([base_python(), "-m", "venv", str(path)], f"creating {path}")
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *requirements],
        f"installing requirements into {path}",
    )  # fmt: skip
    kept = [r for r in had if project(r) not in {project(n) for n in requirements}]
    marker.write_text(json.dumps(sorted({*kept, *requirements}), indent=1))
    return True


def write_pth(layout: Layout) -> None:
    """Put the fork on the venv's sys.path, as tools/nightly.py's pytorch-nightly.pth does."""
    (layout.site_packages / PTH).write_text(f"{layout.fork}\n")


def torch_identity(
    layout: Layout, cwd: Path, ops: tuple[str, ...] = (), functions: tuple[str, ...] = ()
) -> tuple[str, str, str]:
    """(torch.__file__, torch.version.git_version, the `ops` torch.ops.aten lacks and the
    `functions` torch lacks) seen from `cwd`.

    StackError if import torch fails or says its overlay is stale (overlay.loader).
    """
    result = subprocess.run(
        [str(layout.python), "-c",
         "import torch; print(torch.__file__); print(torch.version.git_version); "
         f"print(','.join([n for n in {list(ops)!r} if not hasattr(torch.ops.aten, n)] + "
         f"[f'torch.{{n}}' for n in {list(functions)!r} if not hasattr(torch, n)]) or '-')"],
        cwd=cwd, env={**os.environ, **layout.python_env}, capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0 or "stack overlay:" in result.stderr:
        raise StackError(f"import torch failed in .venv (from {cwd}):\n{result.stderr[-3000:]}")
    file, version, missing = result.stdout.split()[-3:]
    return file, version, missing.strip("-")


def prove_torch(layout: Layout, cwd: Path) -> str:
    """Check that the venv imports the fork's torch of the pinned commit; return a proof line."""
    try:  # the ops the overlay in build/ was built for, and those torchgen gave torch.* functions
        ops = [op for op in json.loads((layout.overlay / MANIFEST).read_text())["ops"]
               if "." not in op]  # fmt: skip
        functions = [op for op in ops if op in python_functions(layout.overlay)]
    except (OSError, ValueError, KeyError):
        ops, functions = [], []
    file, version, missing = torch_identity(layout, cwd, tuple(ops), tuple(functions))
    if missing:
        raise StackError(f"import torch lacks the stack's {missing}: run ./stack build")
    expected = layout.fork / "torch" / "__init__.py"
    if Path(file) != expected:
        raise StackError(f"from {cwd}, import torch loads {file}, not the fork's {expected}")
    if version != config.TORCH_GIT_VERSION:
        raise StackError(f"torch.version.git_version is {version}, not {config.TORCH_GIT_VERSION}")
    return f"torch {file} (git {version[:12]}) imported from {cwd}"


def run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise StackError(f"{what} failed:\n{(result.stderr or result.stdout)[-3000:]}")
