"""The tarball deployed to every node: code packages (``router/``, ``traffic/``, ``runfolder/``, and e.g.
``zenohrouter/`` for the Zenoh driver), ``nodectl.py``, ``lib/`` holding Python distributions
unpacked (by default prometheus-client, our router's only dependency; ``eclipse-zenoh`` for the
Zenoh driver), files a driver ships itself, and ``BUNDLE.json`` -- so a node needs only python3
(>= 3.9): no pip, no network.

Each distribution is shipped at the version installed on the controller, from its wheel in a
cache (``/var/cache/testbed/wheels``), filled with ``pip download --only-binary=:all:`` from PyPI
(for a platform wheel such as eclipse-zenoh's, pip picks the one for this machine); without
network and without a cached wheel, the controller's installed files of the distribution are
copied instead (its ``RECORD``, through importlib.metadata). ``BUNDLE.json`` says which version
and source each distribution was shipped from.

An *optional* distribution (uvloop, for our router's event loop) is shipped only as a wheel that
installs on this machine (what the nodes of this machine's backends run), and only when it is
installed on the controller; otherwise ``BUNDLE.json`` says why not, and the router runs without it.
"""
from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

REPO_ROOT = Path(__file__).resolve().parents[2]
NODECTL = REPO_ROOT / "playbooks" / "files" / "nodectl.py"
DEFAULT_CACHE = Path("/var/cache/testbed/wheels")
PACKAGES = ("router", "traffic", "runfolder")
DISTRIBUTIONS = ("prometheus-client",)
#: our router's dependency (the default distribution)
DEPENDENCY = "prometheus-client"


class BundleError(RuntimeError):
    pass


def _wheel_prefix(name: str) -> str:
    """A distribution's name as wheel file names spell it (PEP 427: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _supported_tags() -> Optional[set]:
    try:
        from packaging.tags import sys_tags
    except ImportError:  # pragma: no cover - pip's own packaging is not importable as such
        return None
    return {str(t) for t in sys_tags()}


def _wheel_fits(path: Path, tags: Optional[set]) -> bool:
    """Whether a wheel file installs on this machine (python-abi-platform tags of its name)."""
    parts = path.name[:-len(".whl")].split("-")
    if len(parts) < 5:
        return False
    pys, abis, plats = parts[-3].split("."), parts[-2].split("."), parts[-1].split(".")
    if tags is None:  # no packaging module: pure wheels only
        return plats == ["any"]
    return any(f"{p}-{a}-{pl}" in tags for p in pys for a in abis for pl in plats)


def _cached_wheel(cache: Path, name: str, version: str, tags: Optional[set]) -> Optional[Path]:
    prefix = _wheel_prefix(name)
    found = [p for p in sorted(cache.glob("*.whl"))
             if p.name.lower().startswith(f"{prefix}-{version.lower()}-") and _wheel_fits(p, tags)]
    return found[0] if found else None


def _wheel(cache: Path, name: str, version: str) -> Optional[Path]:
    """The cached wheel of ``name`` ``version`` for this machine, downloading it if needed (None: no wheel)."""
    tags = _supported_tags()
    found = _cached_wheel(cache, name, version, tags)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "--dest", str(cache), f"{name}=={version}"],
                       capture_output=True, text=True, timeout=300)
    return _cached_wheel(cache, name, version, tags) if r.returncode == 0 else None


def _skip(path: Union[Path, str]) -> bool:
    p = Path(path)
    return "__pycache__" in p.parts or p.suffix in (".pyc", ".pyo")


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _installed_files(dist: metadata.Distribution) -> List[tuple]:
    """(absolute path, path inside lib/) of each installed file of ``dist`` under its site folder."""
    out = []
    for f in dist.files or ():
        rel = Path(str(f))
        if rel.is_absolute() or ".." in rel.parts or _skip(rel):  # scripts in bin/, caches
            continue
        src = Path(str(dist.locate_file(f)))
        if src.is_file():
            out.append((src, rel.as_posix()))
    return out


def _ship_distribution(tar: tarfile.TarFile, name: str, cache: Path) -> Dict[str, str]:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise BundleError(f"{name} is not installed on the controller; `pip install {name}`") from None
    version = dist.version
    try:
        wheel = _wheel(cache, name, version)
    except (OSError, subprocess.SubprocessError):
        wheel = None
    if wheel is not None:
        _add_wheel(tar, wheel)
        return {"version": version, "source": f"wheel {wheel.name}"}
    files = _installed_files(dist)
    if not files:
        raise BundleError(f"{name} {version}: no wheel in {cache}, PyPI unreachable, and no list of its "
                          f"installed files (RECORD) to copy; `pip download --only-binary=:all: --dest {cache} "
                          f"{name}=={version}` on a machine with network")
    for src, rel in files:
        tar.add(src, arcname=f"lib/{rel}", recursive=False)
    where = Path(str(dist.locate_file("")))
    return {"version": version, "source": f"installed copy from {where} (no wheel in {cache} and PyPI unreachable)"}


def _ship_optional(tar: tarfile.TarFile, name: str, cache: Path) -> Dict[str, str]:
    """Ship the wheel of optional distribution ``name`` at the controller's version; when there is
    none (not installed here, or no wheel for this machine), what BUNDLE.json says instead."""
    try:
        version = metadata.distribution(name).version
    except metadata.PackageNotFoundError:
        return {"shipped": "no", "reason": f"not installed on the controller (`pip install {name}` to ship it)"}
    try:
        wheel = _wheel(cache, name, version)
    except (OSError, subprocess.SubprocessError):
        wheel = None
    if wheel is None:
        return {"version": version, "shipped": "no",
                "reason": f"no wheel of {name} {version} for this machine in {cache}, nor from PyPI"}
    _add_wheel(tar, wheel)
    return {"version": version, "shipped": "yes", "source": f"wheel {wheel.name}"}


def _add_wheel(tar: tarfile.TarFile, wheel: Path) -> None:
    """A wheel's files, unpacked into lib/."""
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.infolist():
            if member.is_dir() or member.filename.startswith(("/", "..")) or ".." in member.filename.split("/"):
                continue
            mode = (member.external_attr >> 16) & 0o777 or 0o644
            _add_file(tar, f"lib/{member.filename}", zf.read(member), mode)


def _add_tree(tar: tarfile.TarFile, root: Path, arcroot: str) -> None:
    if root.is_file():
        tar.add(root, arcname=arcroot, recursive=False)
        return
    for path in sorted(root.rglob("*")):
        if path.is_file() and not _skip(path):
            tar.add(path, arcname=f"{arcroot}/{path.relative_to(root).as_posix()}", recursive=False)


def build_bundle(dest: Path, cache: Path = DEFAULT_CACHE, packages: Sequence[str] = PACKAGES,
                 distributions: Sequence[str] = DISTRIBUTIONS, extra: Iterable[Union[str, Path]] = (),
                 optional: Sequence[str] = ()) -> Path:
    """Write ``dest`` (a .tar.gz) and ``<dest>.b64`` (the same, base64, as the playbooks ship it); return ``dest``.

    ``packages``: folders of this repository shipped as code; ``distributions``: installed Python
    distributions shipped unpacked into ``lib/``; ``extra``: files or folders (paths on this machine)
    put in the bundle's root under their own names; ``optional``: distributions shipped as a wheel for
    this machine when there is one (BUNDLE.json's ``optional`` says which were, and why not)."""
    dest = Path(dest)
    for pkg in packages:
        if not (REPO_ROOT / pkg / "__init__.py").is_file():
            raise BundleError(f"package {pkg!r} is not a folder of {REPO_ROOT} with an __init__.py")
    extras = [Path(p) for p in extra]
    for p in extras:
        if not p.exists():
            raise BundleError(f"{p} (a file to ship in the bundle) does not exist")
    dest.parent.mkdir(parents=True, exist_ok=True)
    info: Dict[str, object] = {"built_ns": time.time_ns(), "packages": list(packages)}
    shipped: Dict[str, Dict[str, str]] = {}
    tmp = dest.with_name(dest.name + ".part")
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
            for pkg in packages:
                _add_tree(tar, REPO_ROOT / pkg, pkg)
            tar.add(NODECTL, arcname="nodectl.py")
            for name in distributions:
                shipped[name] = _ship_distribution(tar, name, Path(cache))
                info[name] = shipped[name]["version"]  # as before: the version under the distribution's name
            if optional:
                info["optional"] = {name: _ship_optional(tar, name, Path(cache)) for name in optional}
            for p in extras:
                _add_tree(tar, p, p.name)
            info["distributions"] = shipped
            if extras:
                info["extra"] = [p.name for p in extras]
            _add_file(tar, "BUNDLE.json", (json.dumps(info, indent=2) + "\n").encode())
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    dest.with_name(dest.name + ".b64").write_bytes(base64.encodebytes(dest.read_bytes()))
    return dest


def main(argv: Optional[list] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m testbed.deploy.bundle",
                                     description="Build the node bundle (and its .b64) for the playbooks")
    parser.add_argument("dest", help="e.g. out/bundle.tar.gz")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="wheel cache folder")
    parser.add_argument("--package", action="append", dest="packages",
                        help=f"code package to ship (repeatable; default {' '.join(PACKAGES)})")
    parser.add_argument("--distribution", action="append", dest="distributions",
                        help=f"installed distribution to ship in lib/ (repeatable; default {' '.join(DISTRIBUTIONS)})")
    parser.add_argument("--optional", action="append", default=[],
                        help="distribution shipped as a wheel for this machine if there is one (repeatable; e.g. uvloop)")
    args = parser.parse_args(argv)
    try:
        path = build_bundle(Path(args.dest), Path(args.cache), tuple(args.packages or PACKAGES),
                            tuple(args.distributions or DISTRIBUTIONS), optional=tuple(args.optional))
    except BundleError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 2
    print(f"{path} and {path}.b64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
