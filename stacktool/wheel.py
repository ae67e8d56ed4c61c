"""The PyPI wheel torch==2.6.0: downloaded once, verified, unpacked, linked into the fork.

The fork gets the wheel's compiled files the way upstream's tools/nightly.py lays them out
(hardlinks, so the unpacked wheel in the cache is shared), and the venv gets the wheel's
runtime requirements; torch itself is never installed into site-packages.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from stacktool import config, upstream
from stacktool.errors import StackError


def fetch(cache: Path) -> Path:
    """The wheel file, downloaded into the cache with pip once, verified every time."""
    wheel = cache / "wheels" / config.TORCH_WHEEL
    if wheel.exists():
        upstream.verify(wheel, config.TORCH_WHEEL_SHA256)
    else:
        staging = cache / "wheels.partial"
        shutil.rmtree(staging, ignore_errors=True)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--dest", str(staging), config.TORCH_REQUIREMENT],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode != 0 or not (staging / config.TORCH_WHEEL).exists():
            raise StackError(
                f"pip download {config.TORCH_REQUIREMENT} failed:\n{result.stderr.strip()[-2000:]}"
            )
        upstream.verify(staging / config.TORCH_WHEEL, config.TORCH_WHEEL_SHA256)
        wheel.parent.mkdir(parents=True, exist_ok=True)
        (staging / config.TORCH_WHEEL).rename(wheel)
        shutil.rmtree(staging)
    return wheel


def unpack(wheel: Path, cache: Path) -> Path:
    """The (verified) wheel's contents, unpacked once into the cache, file modes kept."""
    dest = cache / wheel.name.removesuffix(".whl")
    if (dest / ".complete").exists():
        return dest
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, staging))
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                path.chmod(mode & 0o777)
    (staging / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def requirements(unpacked: Path) -> list[str]:
    """The wheel's runtime requirements (Requires-Dist without extras), as pip arguments."""
    metadata = next(unpacked.glob("torch-*.dist-info/METADATA")).read_text()
    found = []
    for line in re.findall(r"^Requires-Dist: (.*)$", metadata, re.M):
        if "extra ==" in line:
            continue
        found.append(re.sub(r"\s*\((.*?)\)", r" \1", line).strip())
    return found


def listing(unpacked: Path, fork: Path) -> list[Path]:
    """What tools/nightly.py links into a checkout (Linux), plus functorch's extension."""
    torch = unpacked / "torch"
    found = [*torch.glob("*.so"), *(torch / "lib").glob("*.so*")]
    fork_pyis = {p.relative_to(fork) for p in fork.glob("torch/**/*.pyi")}
    found += [p for p in sorted(torch.rglob("*.pyi")) if p.relative_to(unpacked) not in fork_pyis]
    found += [torch / "version.py", torch / "testing" / "_internal" / "generated"]
    found += [torch / "bin", torch / "include"]
    found += (unpacked / "functorch").glob("_C*.so")
    return [p for p in found if p.exists()]


def link(unpacked: Path, fork: Path) -> int:
    """Hardlink the wheel's compiled files into the fork, git-ignored; return how many files."""
    count = 0
    entries = listing(unpacked, fork)
    exclude = fork / ".git" / "info" / "exclude"
    ignored = [f"/{p.relative_to(unpacked)}{'/' if p.is_dir() else ''}" for p in entries]
    with exclude.open("a") as f:
        f.write("# linked from the torch wheel by ./stack setup\n" + "\n".join(ignored) + "\n")
    for src in entries:
        files = [src] if src.is_file() else [p for p in src.rglob("*") if p.is_file()]
        for file in files:
            target = fork / file.relative_to(unpacked)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            try:
                os.link(file, target)
            except OSError:
                shutil.copy2(file, target)
            count += 1
    return count
