"""The PyPI wheel torch==2.6.0: downloaded once, verified, unpacked, linked into the fork.

The fork gets the wheel's compiled files the way upstream's tools/nightly.py lays them out
(hardlinks, so the unpacked wheel in the cache is shared), and the venv gets the wheel's
runtime requirements; torch itself is never installed into site-packages.
"""

import base64
import csv
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from stacktool import config, upstream
from stacktool.errors import StackError

LINKED = "# linked from the torch wheel by ./stack setup\n"  # heads wheel.link's ignore lines


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


def unpack(wheel: Path, cache: Path) -> tuple[Path, list[str]]:
    """The (verified) wheel's contents, unpacked once into the cache, file modes kept.

    Checked against the wheel's RECORD (per-file sha256, urlsafe base64 without padding, the
    standard wheel mechanism), read from the wheel itself: every file's hash as it is
    unpacked, and each time setup finds the unpacked tree every file's size, since hashing
    all 1.5 GB of it takes about 9 s here (longer than a no-change setup) and stat-ing its
    11k files 0.2 s. A missing or resized file is extracted again and hashed; it is rewritten
    in place, so a fork's hardlink to it is repaired too. Returns the tree and those files.
    """
    dest = cache / wheel.name.removesuffix(".whl")
    with zipfile.ZipFile(wheel) as archive:
        files = record(archive)
        if (dest / ".complete").exists():
            damaged = sorted(n for n, (_, size) in files.items() if _size(dest / n) != size)
            for name in damaged:
                _extract(archive, name, dest, files)
            return dest, damaged
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for info in archive.infolist():
                if not info.is_dir():
                    _extract(archive, info.filename, staging, files)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    (staging / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest, []


def record(archive: zipfile.ZipFile) -> dict[str, tuple[str, int]]:
    """The wheel's RECORD: path -> (sha256 as RECORD writes it, size) for each hashed file."""
    name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n))
    rows = csv.reader(archive.read(name).decode().splitlines())
    return {path: (digest, int(size)) for path, digest, size in rows if digest}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _extract(archive: zipfile.ZipFile, name: str, root: Path, files: dict) -> None:
    """Write one member under `root` (mode kept); raise unless it matches its RECORD line."""
    info = archive.getinfo(name)
    target = root / name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with archive.open(info) as src, open(target, "wb") as out:
        for block in iter(lambda: src.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    if info.external_attr >> 16:
        target.chmod((info.external_attr >> 16) & 0o777)
    found = "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    expected = files.get(name, (found,))[0]  # RECORD itself has no hash
    if found != expected:
        raise StackError(
            f"{name} in {archive.filename} does not match the wheel's RECORD "
            f"({expected}, got {found}); delete the wheel and run setup again"
        )


def requirements(wheel: Path) -> list[str]:
    """The wheel's runtime requirements (Requires-Dist without extras), as pip arguments, read
    from the wheel file itself: known before it is unpacked, so pip can start first."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        metadata = archive.read(name).decode()
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
    if (fork / ".git").is_dir():  # a worktree (.git is a file) shares its repository's
        ignored = [f"/{p.relative_to(unpacked)}{'/' if p.is_dir() else ''}" for p in entries]
        with exclude.open("a") as f:
            f.write(LINKED + "\n".join(ignored) + "\n")
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
