"""Puts the overlay-built ops into torch while `import torch` runs (installed as _stack_overlay).

`stacktool.overlay.install_loader` copies this file into the venv as `_stack_overlay.py`,
next to `_stack_overlay.pth`, whose one line is

    import _stack_overlay; _stack_overlay.activate('/path/to/build', '/path/to/pytorch')

so every Python of the venv (and every subprocess it starts, e.g. run_test.py's) runs it
at start-up. Nothing in the fork or in the wheel's files is touched. Standard library only.

Why a sys.meta_path finder, and why two phases: `torch/__init__.py` copies the names out of
`torch._C._VariableFunctions` right after `torch._C._initExtension()`, and
`torch/_torch_docs.py` calls `add_docstr(torch.attn, ...)` during `import torch`, so the
new functions must exist right after `torch._C` is loaded, before that copy; a hook at the
end of `import torch` is too late. The finder acts only on `torch._C` and wraps its
loader's `exec_module`:

- phase 1, right after `torch._C` executes (inside `from torch._C import *`): load the core
  library RTLD_GLOBAL (its static initializers register the schemas and kernels with the
  dispatcher; stack_overlay_refresh_batched works around a dispatcher quirk, see
  overlay_dispatch_refresh.cpp), then the binding module, which adds the `torch.*` functions to
  `torch._C._VariableFunctionsClass` and the named-tuple types to `torch._C._return_types`;
- phase 2: `torch._C._functions` exists only once `torch._C._initExtension()` ran, so that
  function is wrapped once and the new autograd Node classes (e.g. AttnBackward0) are
  added to `torch._C._functions` after it.

It does nothing when the `torch._C` being imported is not the fork's the overlay was built
for, or when the stack adds no ops at that checkout. When the build directory holds no
overlay at all (an interrupted setup or build), importing the fork's torch prints one line
saying so and what to run (the patched torch then fails on its first reference to a new op).
"""

import importlib.abc
import importlib.util
import json
import os
import sys

MANIFEST = "overlay.json"
ENV = "STACK_OVERLAY_BUILD"  # names another build dir to load (the gate's worktree build)


class _StackOverlayFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of `torch._C` (see module doc)."""

    def __init__(self, manifest: dict) -> None:
        self.manifest = manifest

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch._C":
            return None
        spec = _real_spec(self, fullname, path, target)
        if not _from_fork(spec, self.manifest["fork"]):
            return spec  # not the fork this overlay was built for: leave it alone
        exec_module = spec.loader.exec_module
        manifest = self.manifest

        def exec_then_overlay(module):
            exec_module(module)
            _phase1(module, manifest)

        spec.loader.exec_module = exec_then_overlay
        return spec


class _MissingOverlayFinder(importlib.abc.MetaPathFinder):
    """Says, when the fork's `torch._C` is imported, that its overlay was never built."""

    def __init__(self, build_dir: str, fork: str) -> None:
        self.build_dir, self.fork = build_dir, fork

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch._C":
            return None
        spec = _real_spec(self, fullname, path, target)
        if _from_fork(spec, self.fork):
            print(f"stack overlay: {self.build_dir} holds no built overlay for {self.fork} "
                  "(an interrupted ./stack setup or build?): run ./stack build",
                  file=sys.stderr)  # fmt: skip
        return spec


def _real_spec(finder, fullname, path, target):
    """The spec the other finders give, `finder` taken off sys.meta_path (it acts once)."""
    sys.meta_path.remove(finder)
    for other in sys.meta_path:
        find = getattr(other, "find_spec", None)
        spec = find(fullname, path, target) if find is not None else None
        if spec is not None:
            return spec
    return None


def _from_fork(spec, fork: str) -> bool:
    if spec is None or spec.loader is None or spec.origin is None:
        return False
    torch_dir = os.path.realpath(os.path.join(fork, "torch"))
    return os.path.dirname(os.path.realpath(spec.origin)) == torch_dir


def fork_head(fork: str) -> str | None:
    """The commit the fork's HEAD names, read from .git without running git; None if unknown.

    In a worktree, .git is a file naming its own git dir; refs live in the common one.
    """
    git_dir = os.path.join(fork, ".git")
    try:
        if os.path.isfile(git_dir):
            with open(git_dir, encoding="utf-8") as f:
                git_dir = os.path.join(fork, f.read().strip().removeprefix("gitdir: "))
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8") as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head  # detached
        ref = head[len("ref: ") :]
        if os.path.exists(os.path.join(git_dir, "commondir")):
            with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as f:
                git_dir = os.path.join(git_dir, f.read().strip())
        if os.path.exists(os.path.join(git_dir, ref)):
            with open(os.path.join(git_dir, ref), encoding="utf-8") as f:
                return f.read().strip()
        with open(os.path.join(git_dir, "packed-refs"), encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        pass
    return None


def stale_message(manifest: dict) -> str | None:
    """One line if the fork's HEAD is not the commit the overlay was built from, else None."""
    built, now = manifest.get("commit"), fork_head(manifest["fork"])
    if not built or not now or built == now:
        return None
    return (f"stack overlay: {manifest['build']} was built from {manifest['fork']} at "
            f"{built[:12]}, but its HEAD is now {now[:12]}: run ./stack build")  # fmt: skip


def _phase1(C, manifest: dict) -> None:
    """Load the overlay into the fresh torch._C, before torch/__init__.py reads its functions."""
    import ctypes

    stale = stale_message(manifest)
    if stale:  # a plain line, not a warning: `python -W error` must still import torch
        print(stale, file=sys.stderr)

    try:
        core = ctypes.CDLL(manifest["core"], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        spec = importlib.util.spec_from_file_location(
            "_stack_overlay_bindings", manifest["bindings"]
        )
        bindings = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bindings)
    except OSError as e:
        raise ImportError(
            f"stack overlay: cannot load the overlay build in {manifest['build']}: {e}; "
            "rebuild it (./stack build)"
        ) from e
    for op in manifest["ops"]:  # see overlay_dispatch_refresh.cpp
        core.stack_overlay_refresh_batched(op.encode())
    bindings.install_functions(C._VariableFunctionsClass)
    new_types = bindings.return_types()
    for name in dir(new_types):
        if not name.startswith("__"):
            setattr(C._return_types, name, getattr(new_types, name))
    init_extension = C._initExtension

    def _initExtension(*args, **kwargs):
        result = init_extension(*args, **kwargs)
        bindings.install_nodes(C._functions)
        return result

    C._initExtension = _initExtension
    C._stack_overlay = manifest  # for humans and tests: what was overlaid


def activate(build_dir: str, fork: str | None = None) -> None:
    """Install the finder if `build_dir` holds a built overlay (idempotent, silent); if it
    holds none, the one that says so when `fork`'s torch is imported.

    The environment variable STACK_OVERLAY_BUILD, if set, names the build dir instead (and
    `fork` is not its fork).
    """
    if os.environ.get(ENV):
        build_dir, fork = os.environ[ENV], None
    finders = ("_StackOverlayFinder", "_MissingOverlayFinder")
    if any(type(f).__name__ in finders for f in sys.meta_path):
        return
    if "torch._C" in sys.modules:
        return
    path = os.path.join(build_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        if fork:
            sys.meta_path.insert(0, _MissingOverlayFinder(build_dir, fork))
        return
    if not manifest.get("core"):
        return  # the stack adds no ops at this checkout
    manifest["build"] = build_dir
    sys.meta_path.insert(0, _StackOverlayFinder(manifest))
