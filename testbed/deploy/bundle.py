"""The tarball deployed to every node: ``router/``, ``traffic/``, ``nodectl.py`` and ``lib/``
holding prometheus_client (the router's only dependency, pure Python) unpacked from its
wheel, so a node needs only python3 — no pip, no network.

The wheel comes from a cache (``/var/cache/testbed/wheels``), filled once with
``pip download`` from PyPI on the controller; without network and without a cached
wheel, the controller's own installed (pure-Python) copy is shipped instead.
"""
from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
NODECTL = REPO_ROOT / "playbooks" / "files" / "nodectl.py"
DEFAULT_CACHE = Path("/var/cache/testbed/wheels")
PACKAGES = ("router", "traffic")
DEPENDENCY = "prometheus-client"


class BundleError(RuntimeError):
    pass


def _wheel(cache: Path, version: str) -> Optional[Path]:
    """The cached pure-Python wheel of prometheus-client ``version``, downloading it if needed."""
    found = sorted(cache.glob(f"prometheus_client-{version}-*py3-none-any.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--dest", str(cache), f"{DEPENDENCY}=={version}"],
                       capture_output=True, text=True, timeout=180)
    found = sorted(cache.glob(f"prometheus_client-{version}-*py3-none-any.whl"))
    return found[0] if r.returncode == 0 and found else None


def _skip(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo")


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def build_bundle(dest: Path, cache: Path = DEFAULT_CACHE) -> Path:
    """Write ``dest`` (a .tar.gz) and ``<dest>.b64`` (the same, base64, as the playbooks ship it); return ``dest``."""
    try:
        version = metadata.version(DEPENDENCY)
    except metadata.PackageNotFoundError:
        raise BundleError(f"{DEPENDENCY} is not installed on the controller; `pip install {DEPENDENCY}`") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    wheel = None
    try:
        wheel = _wheel(cache, version)
    except (OSError, subprocess.SubprocessError):
        wheel = None
    info = {"built_ns": time.time_ns(), "packages": list(PACKAGES), DEPENDENCY: version}
    with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
        for pkg in PACKAGES:
            root = REPO_ROOT / pkg
            for path in sorted(root.rglob("*")):
                if path.is_file() and not _skip(path):
                    tar.add(path, arcname=str(path.relative_to(REPO_ROOT)), recursive=False)
        tar.add(NODECTL, arcname="nodectl.py")
        if wheel is not None:
            info["dependency_source"] = f"wheel {wheel.name}"
            with zipfile.ZipFile(wheel) as zf:
                for member in zf.infolist():
                    if member.is_dir() or member.filename.startswith(".."):
                        continue
                    _add_file(tar, f"lib/{member.filename}", zf.read(member))
        else:
            import prometheus_client

            pkg_dir = Path(prometheus_client.__file__).parent
            info["dependency_source"] = f"installed copy {pkg_dir} (no wheel in {cache} and PyPI unreachable)"
            for path in sorted(pkg_dir.rglob("*")):
                if path.is_file() and not _skip(path):
                    tar.add(path, arcname=f"lib/prometheus_client/{path.relative_to(pkg_dir)}", recursive=False)
        _add_file(tar, "BUNDLE.json", (json.dumps(info, indent=2) + "\n").encode())
    dest.with_name(dest.name + ".b64").write_bytes(base64.encodebytes(dest.read_bytes()))
    return dest


def main(argv: Optional[list] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m testbed.deploy.bundle",
                                     description="Build the node bundle (and its .b64) for the playbooks")
    parser.add_argument("dest", help="e.g. out/bundle.tar.gz")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="wheel cache folder")
    args = parser.parse_args(argv)
    path = build_bundle(Path(args.dest), Path(args.cache))
    print(f"{path} and {path}.b64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
