"""torch.compile's CPU kernels compiled with their prefix header precompiled, in the gate's tests.

Inductor writes each CPU kernel as a C++ file whose first line includes its prefix header
(torch/_inductor/codegen/cpp_prefix.h, copied into its cache: at::vec, c10, 181,000 lines
preprocessed) and compiles it with g++, as many times as the tests compile a graph. Parsing
that header is most of each compile: a tanh kernel took 1.98 s, 0.82 s with the header
precompiled; level 5's inductor OpInfo tests at avx2, alone, back to back, 91 s, 68 s
(Zen 4). Upstream precompiles the same header, after v2.6.0, in cpp_wrapper and
AOTInductor mode (#144293).

The gate's test processes get CXX = stacktool/bin/g++ (`environment`; named g++ because
inductor tells GCC by the name), which runs `main`: it precompiles the header a source
includes first, once per compiler, header text and compile options, into the store (in
the tree's inductor cache: a header change gets another store), and links it beside the
header as `HEADER.gch/KEY.gch`, GCC's own place for a header's precompiled variants. GCC
takes one only where it is valid for the compile's options, and parses the header as
always otherwise: the compiled kernel is the same (inductor passes no -g, whose debug
information would name the header the precompiled one was made from). Then it runs g++
with the arguments unchanged. A failure to precompile only leaves the compile as it was.
"""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "bin" / "g++"
COMPILER = "STACK_PCH_CXX"  # the compiler the shim runs (the g++ CXX named before, or g++)
STORE = "STACK_PCH_STORE"  # where the precompiled headers go
PYTHON = "STACK_PCH_PYTHON"  # the shim's Python: this one (a pyenv shim takes 50 ms more)
# A kernel's first line: `#include "/abs/path/to/its/prefix.h"` (codecache.cpp_prefix()).
FIRST_INCLUDE = re.compile(rb'\A\s*#include "(/[^"\n]+\.h)"')
# What the header's compile drops of the kernel's command: output, linking, the source.
OUTPUT, DROPPED, LINKING = "-o", ("-shared", "-c"), ("-l", "-L", "-Wl,")


def environment(store: Path, inherited: dict[str, str]) -> dict[str, str]:
    """The variables that give a test process the shim, precompiling into `store`; none
    where CXX names another compiler than g++: the shim makes GCC's .gch files, and
    inductor tells GCC by the name (with CXX=c++ it would pass other flags through it)."""
    compiler = inherited.get("CXX", "g++")
    found = shutil.which(compiler)
    if found and Path(found).resolve() == SHIM:  # a process the gate started: its compiler
        compiler = inherited.get(COMPILER, "g++")
        found = shutil.which(compiler)
    if os.path.basename(compiler) != "g++" or not found:
        return {}
    return {"CXX": str(SHIM), COMPILER: compiler, STORE: str(store), PYTHON: sys.executable}


def header_flags(args: list[str], source: str) -> list[str]:
    """The kernel's compile options, as the header's compile takes them."""
    flags, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == OUTPUT:
            skip = True
        elif arg != source and arg not in DROPPED and not arg.startswith(LINKING):
            flags.append(arg)
    return flags


def precompile(compiler: str, store: Path, header: Path, flags: list[str]) -> Path | None:
    """The header precompiled with `flags` in `store` (made once, under a lock: the gate's
    two workers may compile at once); None if GCC could not. The key names the compiler's
    file and its time too: another GCC's precompiled header would never be taken."""
    found = Path(shutil.which(compiler) or compiler).resolve()
    identity = f"{found}\0{found.stat().st_mtime_ns}".encode()
    key = hashlib.sha256(b"\0".join([identity, header.read_bytes(), *map(str.encode, flags)]))
    name = key.hexdigest()[:16]
    made = store / f"{name}.gch"
    if made.exists():
        return made
    store.mkdir(parents=True, exist_ok=True)
    with open(store / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if made.exists():
            return made
        partial = store / f"{name}.gch.partial"
        command = [compiler, *flags, "-x", "c++-header", str(header), "-o", str(partial)]
        proc = subprocess.run(command, capture_output=True)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            return None
        os.replace(partial, made)
    return made


def link_beside(header: Path, made: Path) -> None:
    """`HEADER.gch/NAME.gch` -> `made`; a link left dangling (a store since removed) is
    replaced."""
    variants = Path(f"{header}.gch")
    variants.mkdir(exist_ok=True)
    link = variants / made.name
    if link.is_symlink() and not link.exists():
        link.unlink(missing_ok=True)
    try:
        link.symlink_to(made)
    except FileExistsError:
        pass


def prepare(compiler: str, store: Path, args: list[str]) -> None:
    """Precompile and link the header a compile of one C++ source includes first, if any."""
    sources = [arg for arg in args if arg.endswith(".cpp") and os.path.isfile(arg)]
    if len(sources) != 1:
        return
    with open(sources[0], "rb") as source:
        first = FIRST_INCLUDE.match(source.read(4096))
    if first is None:
        return
    header = Path(os.fsdecode(first.group(1)))
    made = precompile(compiler, store, header, header_flags(args, sources[0]))
    if made is not None:
        link_beside(header, made)


def main(args: list[str]) -> None:
    """The shim: prepare the precompiled header, then become the compiler. Its variables
    are not passed on: a compiler that is a shim again (another checkout's) runs g++."""
    compiler = os.environ.pop(COMPILER, "g++")
    store = os.environ.pop(STORE, None)
    os.environ.pop(PYTHON, None)
    if store:
        try:
            prepare(compiler, Path(store), args)
        except (OSError, ValueError):  # ValueError: a path Python cannot pass on
            pass  # the compile goes on without it
    os.execvp(compiler, [compiler, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
