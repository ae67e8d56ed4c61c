"""Pinned inputs and the project's layout: every path and version the tool uses lives here."""

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from stacktool.overlay.loader import ENV as OVERLAY_ENV

# Upstream source: Debian's source package of PyTorch v2.6.0.
DEBIAN_PACKAGE = "pytorch"
DEBIAN_VERSION = "2.6.0+dfsg-7"
DEBIAN_SUITES = ("trixie", "sid")
UPSTREAM_TARBALL = "pytorch_2.6.0+dfsg.orig.tar.xz"
UPSTREAM_SHA256 = "099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff"
UPSTREAM_VERSION = "2.6.0"

# Binaries: the PyPI wheel built from the same commit.
TORCH_REQUIREMENT = "torch==2.6.0"
TORCH_WHEEL = "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl"
TORCH_WHEEL_SHA256 = "7979834102cd5b7a43cc64e87f2f3b14bd0e1458f06e9f88ffa386d07c7446e1"
TORCH_GIT_VERSION = "2236df1770800ffea5697b11b0bb0d910b2e59e1"
PYTHON_VERSION = (3, 11)

# What v2.6.0's CI installs to run its tests (pinned where its CI pins them).
TEST_REQUIREMENTS = (
    "pytest==7.3.2",
    "pytest-rerunfailures==14.0",
    "pytest-flakefinder==1.1.0",
    "pytest-xdist==3.3.1",
    "expecttest==0.2.1",
    "hypothesis==5.35.1",
    "numpy==1.26.2",
    "pyyaml",
    "typing_extensions",
    "psutil",
    "scipy==1.13.1",
    "ninja",
    "unittest-xml-reporting<=3.2.0,>=2.0.0",
    "matplotlib==3.11.2",  # ./stack bench's plot
    # The overlay build of a CPU kernel file: ATen/cpu/vml.h includes mkl.h (the wheel was
    # built with MKL 2024.2, whose VML functions libtorch_cpu exports).
    "mkl-include==2024.2.0",
)
# What the overlay build needs of those before its import check (torchgen's and gen_pyi's
# imports, ninja, mkl.h): installed first, so that setup builds while pip installs the rest.
BUILD_REQUIREMENTS = ("pyyaml", "typing_extensions", "ninja", "mkl-include==2024.2.0")

# The pristine commit is made with a fixed identity and date so its id is the same everywhere.
PRISTINE_IDENTITY = {
    "GIT_AUTHOR_NAME": "PyTorch upstream",
    "GIT_AUTHOR_EMAIL": "upstream@pytorch.invalid",
    "GIT_AUTHOR_DATE": "2025-01-29T00:00:00+0000",
    "GIT_COMMITTER_NAME": "PyTorch upstream",
    "GIT_COMMITTER_EMAIL": "upstream@pytorch.invalid",
    "GIT_COMMITTER_DATE": "2025-01-29T00:00:00+0000",
}
BASE_REF = "attn/0"  # tag on the pristine commit
BRANCH = "stack"  # the branch that holds one commit per PR


def level_ref(level: int) -> str:
    """The tag that marks PR `level` (attn/0 is pristine upstream)."""
    return f"attn/{level}"


@dataclass(frozen=True)
class Layout:
    """Where things live below the project root.

    `tree` and `overlay_dir` name another checkout of the fork and its overlay build (the
    gate's per level, see `gate_tree`); by default they are pytorch/ and build/overlay.
    """

    root: Path
    tree: Path | None = None
    overlay_dir: Path | None = None

    @property
    def fork(self) -> Path:
        return self.tree or self.root / "pytorch"

    def gate_tree(self, level: int) -> "Layout":
        """The gate's own worktree of the fork and build for PR `level` (never pytorch/).

        One per level: each stays at its level's commit, so a later run rebuilds nothing.
        """
        gate = self.root / "build" / "gate" / f"level-{level}"
        return replace(self, tree=gate / "pytorch", overlay_dir=gate / "overlay")

    def lint_tree(self) -> "Layout":
        """The gate's worktree for lint (build/gate/lint/pytorch, no build of its own): each
        level's commit is checked out there in turn with its generated stubs, so that one
        mypy daemon checks every level, as after a branch switch, not one cold per tree."""
        lint = self.root / "build" / "gate" / "lint"
        return replace(self, tree=lint / "pytorch", overlay_dir=lint / "overlay")

    @property
    def python_env(self) -> dict[str, str]:
        """What the venv's Python needs to import torch from `fork` with its overlay."""
        if self.tree is None:
            return {}  # the venv's .pth files name pytorch/ and build/overlay
        return {"PYTHONPATH": str(self.fork), OVERLAY_ENV: str(self.overlay)}

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def venv(self) -> Path:
        return self.root / ".venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def cache(self) -> Path:
        return self.root / ".cache"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def wheel_tree(self) -> Path:
        """The unpacked wheel: v2.6.0's own torch (./stack bench's baseline)."""
        return self.cache / TORCH_WHEEL.removesuffix(".whl")

    @property
    def overlay(self) -> Path:
        return self.overlay_dir or self.build / "overlay"

    def inductor_cache(self, capability: str | None) -> Path:
        """torch.compile's cache (TORCHINDUCTOR_CACHE_DIR) for processes importing this tree's
        torch under ATEN_CPU_CAPABILITY=`capability` (unset or empty: "native"): one per tree
        (pytorch/, or the gate's level-N: each is another torch) and value. v2.6.0's inductor
        reuses a kernel compiled under another capability: torch.compile(torch.tanh) run 200
        times at avx2, then at avx512, in one cache ends in "double free or corruption".
        A kernel inductor compiled includes the tree's torch/include, whose headers the
        overlay build changes (at::vec's tanh, say), and inductor's cache key hashes no
        header: the folder is named after them too (`headers_key`), so that a header
        change is never served a kernel compiled against the old one.
        """
        tree = self.fork.parent.name if self.tree else "pytorch"
        name = f"{capability or 'native'}-{self.headers_key()}"
        return self.inductor_caches / tree / name

    @property
    def pycache(self) -> Path:
        """The bytecode of every module the gate's test processes, the bench's workers and the
        README loop's blocks import (PYTHONPYCACHEPREFIX, see suites.suite_env): below it,
        each source's absolute path, so trees never share."""
        return self.build / "pycache"

    @property
    def inductor_caches(self) -> Path:
        """Where every tree's inductor_cache folders are."""
        return self.build / "inductor-cache"

    def headers_key(self) -> str:
        """A digest of the headers the overlay build laid over the wheel's in the tree's
        torch/include (its include-state.json): 12 hex digits, "wheel" for none."""
        try:
            state = json.loads((self.overlay / "include-state.json").read_text())
        except (OSError, ValueError):
            return "wheel"
        laid = sorted(state.get("replaced", []) + state.get("added", []))
        if not laid:
            return "wheel"
        digest = hashlib.sha256()
        for rel in laid:
            path = self.fork / "torch" / "include" / rel
            digest.update(rel.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
        return digest.hexdigest()[:12]

    @property
    def ccache(self) -> Path:
        """The compiler cache of every overlay build of the project (stacktool/ccache.py)."""
        return self.build / "ccache"

    def builds(self) -> list[Path]:
        """Every overlay build folder of the project: build/overlay and the gate's levels'."""
        return [self.build / "overlay", *sorted(self.build.glob("gate/level-*/overlay"))]

    @property
    def lock(self) -> Path:
        return self.root / ".stack.lock"

    @property
    def gradient_doc(self) -> Path:
        return self.root / "attn_gradient.md"

    @property
    def site_packages(self) -> Path:
        major, minor = PYTHON_VERSION
        return self.venv / "lib" / f"python{major}.{minor}" / "site-packages"
