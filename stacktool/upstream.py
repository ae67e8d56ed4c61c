"""Upstream PyTorch v2.6.0 source: fetched with apt's own client, verified, extracted.

apt runs under a private configuration in the cache (its own sources list, lists and
archives), so nothing is written to /etc. The mirror is the one the machine's apt sources
already name, so no registry host is written into this repository.
"""

import hashlib
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from stacktool import config
from stacktool.errors import StackError
from stacktool.git import git

APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str) -> None:
    """Raise unless `path` has the pinned sha256."""
    actual = sha256_of(path)
    if actual != expected:
        raise StackError(
            f"checksum mismatch for {path}:\n  expected sha256 {expected}\n  got      {actual}\n"
            "The file is not the pinned upstream release; delete it and run setup again."
        )


def debian_mirror(sources: tuple[Path, ...] = APT_SOURCES) -> tuple[str, str | None]:
    """The (URI, Signed-By) of the Debian archive named in the machine's apt sources."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(source.glob("*.list")) + sorted(source.glob("*.sources"))
        elif source.is_file():
            files.append(source)
    for path in files:
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([\w-]+):\s*(.*)$", stanza, re.M))
                if fields.get("Enabled", "yes").lower() == "no":
                    continue
                for uri in fields.get("URIs", "").split():
                    if uri.rstrip("/").endswith("/debian"):
                        return uri.rstrip("/"), fields.get("Signed-By")
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb(?:-src)?\s+(\[[^\]]*\]\s+)?(\S+)", line)
                if m and m.group(2).rstrip("/").endswith("/debian"):
                    options = m.group(1) or ""
                    signed = re.search(r"signed-by=(\S+?)\]?(\s|$)", options)
                    return m.group(2).rstrip("/"), signed.group(1) if signed else None
    raise StackError(
        "no Debian archive found in the machine's apt sources "
        f"({', '.join(map(str, sources))}); pass --upstream PATH to a v2.6.0 tarball or checkout"
    )


def fetch_tarball(cache: Path) -> Path:
    """The verified upstream tarball, downloaded with `apt-get source` into `cache` once."""
    downloads = cache / "upstream"
    tarball = downloads / config.UPSTREAM_TARBALL
    if tarball.exists():
        verify(tarball, config.UPSTREAM_SHA256)
        return tarball
    if shutil.which("apt-get") is None:
        raise StackError(
            "apt-get is not installed: it fetches the upstream source package "
            f"{config.DEBIAN_PACKAGE} {config.DEBIAN_VERSION}. "
            "Pass --upstream PATH to a v2.6.0 tarball or checkout instead."
        )
    uri, signed_by = debian_mirror()
    apt = cache / "apt"
    for sub in ("lists/partial", "archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    options = f"[signed-by={signed_by}] " if signed_by else ""
    (apt / "sources.list").write_text(
        "".join(f"deb-src {options}{uri} {suite} main\n" for suite in config.DEBIAN_SUITES)
    )
    apt_options = [
        "-o", f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={apt / 'lists'}",
        "-o", f"Dir::Cache={apt}",
        "-o", "Debug::NoLocking=1",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    staging = downloads.with_name("upstream.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    spec = f"{config.DEBIAN_PACKAGE}={config.DEBIAN_VERSION}"
    for step in (["update"], ["source", "--download-only", spec]):
        result = subprocess.run(
            ["apt-get", *apt_options, "-q", *step], cwd=staging, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise StackError(
                f"apt-get {' '.join(step)} failed (mirror {uri}, suites "
                f"{', '.join(config.DEBIAN_SUITES)}):\n{result.stderr.strip()[-2000:]}"
            )
    verify(staging / config.UPSTREAM_TARBALL, config.UPSTREAM_SHA256)
    shutil.rmtree(downloads, ignore_errors=True)
    staging.rename(downloads)
    return tarball


def check_source(path: Path) -> Path:
    """An --upstream PATH, checked before setup changes anything: it exists and is v2.6.0.

    A directory is checked as extract checks it; a tarball by the version.txt at its top
    (reading it decompresses the archive up to that file).
    """
    path = path.resolve()
    if not path.exists():
        raise StackError(f"--upstream {path}: no such file or directory")
    if path.is_dir():
        check_version(path)
        _check_commit(path)
        return path
    try:
        with tarfile.open(path) as tar:
            member = next((m for m in tar if re.fullmatch(r"([^/]+/)?version\.txt", m.name)), None)
            version = tar.extractfile(member).read().decode().strip() if member else None
    except (tarfile.TarError, OSError) as e:
        raise StackError(f"--upstream {path}: not a readable tarball ({e})") from e
    if not (version or "").startswith(config.UPSTREAM_VERSION):
        raise StackError(f"--upstream {path}: {found_version(version)}, "
                         f"not PyTorch v{config.UPSTREAM_VERSION}")  # fmt: skip
    return path


def _check_commit(tree: Path) -> None:
    """A git checkout must be at v2.6.0's commit."""
    if (tree / ".git").exists():
        head = git(tree, "rev-parse", "HEAD").strip()
        if head != config.TORCH_GIT_VERSION:
            raise StackError(f"{tree} is at commit {head}, not v2.6.0 ({config.TORCH_GIT_VERSION})")


def extract(source: Path, dest: Path) -> str:
    """Put the upstream tree at `dest` (which must not exist); return a description of it.

    `source` is the verified Debian tarball, another v2.6.0 tarball, or a v2.6.0 checkout.
    """
    if source.is_dir():
        check_version(source)
        _check_commit(source)
        if (source / ".git").exists():
            head = git(source, "rev-parse", "HEAD").strip()
            dest.mkdir(parents=True)
            archive = subprocess.run(
                ["git", "-C", str(source), "archive", "HEAD"], capture_output=True, check=True
            )
            subprocess.run(
                ["tar", "-x", "--no-same-owner", "-C", str(dest)], input=archive.stdout, check=True
            )
            return f"git checkout {source} at {head}"
        shutil.copytree(source, dest, symlinks=True)
        return f"directory {source}"
    staging = dest.with_name(dest.name + ".extract")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    result = subprocess.run(
        ["tar", "-x", "--no-same-owner", "-f", str(source), "-C", str(staging)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise StackError(f"cannot extract {source}: {result.stderr.strip()}")
    entries = list(staging.iterdir())
    top = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
    check_version(top)
    top.rename(dest)
    shutil.rmtree(staging, ignore_errors=True)
    digest = sha256_of(source)
    if digest == config.UPSTREAM_SHA256:
        return (
            f"Debian source package {config.DEBIAN_PACKAGE} {config.DEBIAN_VERSION}, "
            f"{config.UPSTREAM_TARBALL}, sha256 {digest}"
        )
    return f"tarball {source.name}, sha256 {digest}"


def check_version(tree: Path) -> None:
    version_file = tree / "version.txt"
    version = version_file.read_text().strip() if version_file.exists() else None
    if not (version or "").startswith(config.UPSTREAM_VERSION):
        raise StackError(
            f"{tree}: {found_version(version)}, not PyTorch v{config.UPSTREAM_VERSION}"
        )


def found_version(version: str | None) -> str:
    return f"version.txt says {version}" if version else "no version.txt"
