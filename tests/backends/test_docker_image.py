"""The Docker node image: built offline from this machine's Debian mirror, complete, cached by its
recipe hash, and every way it can go wrong is one line naming the fix, with nothing left behind."""
from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testbed.backends.docker.image import (BUILD_PREFIX, BUILD_ROOT, OWNER_LABEL, RECIPE_LABEL, REQUIRED_TOOLS,
                                           AptSource, ImageInputError, Recipe, base_source, build_image,
                                           default_image_ref, find_image, host_iptables_variant, missing_tools,
                                           parse_deb822_sources, parse_one_line_sources, recipe_hash, resolve_recipe)
from testbed.backends.docker.image import _imported_id
from tests.conftest import IS_ROOT

REPO = Path(__file__).resolve().parents[2]

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security/
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBF...
"""
ONE_LINE = """\
# deb http://old.example/debian buster main
deb-src http://deb.debian.org/debian bookworm main
deb [arch=amd64 signed-by=/etc/apt/keyrings/local.gpg] http://mirror.example/debian/ bookworm main contrib
deb http://security.debian.org/debian-security bookworm-security main
"""


def cli(*args: str, env: "dict | None" = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("image: ")]
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def build_dir_of(stderr: str) -> Path:
    """The build folder named in the build's first progress line."""
    found = re.search(rf"in ({re.escape(str(BUILD_ROOT))}/{BUILD_PREFIX}\w+)\)", stderr)
    assert found, stderr
    return Path(found.group(1))


# --- the recipe: no engine needed ----------------------------------------------------------


def test_sources_are_read_in_both_formats():
    deb822 = parse_deb822_sources(DEB822)
    assert [(s.uri, s.suite) for s in deb822] == [
        ("http://deb.debian.org/debian", "bookworm"), ("http://deb.debian.org/debian", "bookworm-updates"),
        ("http://deb.debian.org/debian-security", "bookworm-security")]
    assert deb822[0].keyring == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert deb822[2].keyring is None  # an inline key is not a keyring file
    one_line = parse_one_line_sources(ONE_LINE)
    assert one_line[0] == AptSource("http://mirror.example/debian", "bookworm", ("main", "contrib"),
                                    "/etc/apt/keyrings/local.gpg")
    assert len(one_line) == 2


def test_base_archive_is_the_release_not_its_updates():
    sources = [AptSource("http://deb.debian.org/debian-security", "bookworm-security", ("main",)),
               AptSource("http://deb.debian.org/debian", "bookworm-updates", ("main",)),
               AptSource("http://deb.debian.org/debian", "bookworm", ("main",))]
    assert base_source(sources) == sources[2]
    assert base_source(sources[:2]) is None


def test_recipe_hash_covers_what_goes_in():
    base = Recipe("bookworm", "http://deb.debian.org/debian", "nft")
    assert base.hash() == Recipe("bookworm", "http://deb.debian.org/debian", "nft", keyring="/k.gpg").hash()
    others = [Recipe("trixie", base.mirror, "nft"), Recipe(base.suite, "http://mirror.example/debian", "nft"),
              Recipe(base.suite, base.mirror, "legacy"), Recipe(base.suite, base.mirror, "nft", ("python3",))]
    assert len({base.hash(), *(r.hash() for r in others)}) == 5
    assert default_image_ref() == f"testbed-node:{recipe_hash()}"


def test_recipe_follows_this_machine_and_overrides(monkeypatch):
    here = resolve_recipe()
    assert here.iptables == host_iptables_variant()
    assert resolve_recipe(mirror="http://mirror.example/debian/").mirror == "http://mirror.example/debian"
    assert resolve_recipe(suite="trixie").suite == "trixie"
    monkeypatch.setenv("TESTBED_IMAGE_SUITE", "trixie")
    assert default_image_ref() == Recipe("trixie", here.mirror, here.iptables).ref


def test_setup_gets_the_ref_without_importing_the_package():
    """scripts/setup.sh runs image.py as a file on every call: it must import only the standard library."""
    out = subprocess.run([sys.executable, "-X", "importtime", "testbed/backends/docker/image.py"],
                         capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == default_image_ref()
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()]
    assert not [m for m in imported if m.split(".")[0] in ("testbed", "pydantic", "docker", "requests")]


# --- the engine --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    from testbed.backends.docker.engine import DockerUnavailable, docker_client, dockerd_path

    if not IS_ROOT:
        pytest.skip("needs root: debootstrap, chroot and the Docker engine")
    if dockerd_path() is None:
        pytest.skip("needs Docker: apt-get install docker.io (./scripts/setup.sh installs and starts it)")
    try:
        engine = docker_client(timeout=600.0)
    except DockerUnavailable as exc:
        pytest.fail(f"Docker is installed but unusable: {exc}")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def node_image(client):
    return build_image(client)  # the real build the first time (a minute or a few), cached afterwards


@pytest.fixture
def tiny_image(client):
    """Import a tar of a few files (no registry); remove every such image afterwards."""
    made: list[str] = []

    def make(files: dict[str, str]) -> str:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for inside, on_host in files.items():
                tar.add(os.path.realpath(on_host), arcname=inside)
        image_id = _imported_id(client.api.import_image_from_data(data.getvalue(),
                                                                  changes=[f"LABEL {OWNER_LABEL}=test"]))
        assert image_id, "the engine did not say which image it imported"
        made.append(image_id)
        return image_id

    yield make
    for image_id in made:
        client.images.remove(image_id, force=True)


def check_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}=image-check"})


def test_node_image_has_every_tool_and_this_machines_iptables(client, node_image):
    assert node_image.ref == default_image_ref() and node_image.id.startswith("sha256:")
    image = client.images.get(node_image.ref)
    assert image.labels[RECIPE_LABEL] == recipe_hash()
    assert missing_tools(client, node_image.ref) == []
    assert check_containers(client) == []
    out = client.containers.run(node_image.ref, ["sh", "-c", "iptables -V; test -d /run/sshd && echo sshd-dir; "
                                                 "ls /etc/ssh/ | grep -c host_key || true; ls /var/lib/apt/lists"],
                                network_mode="none", remove=True, labels={OWNER_LABEL: "test"}).decode()
    assert ("nf_tables" in out) == (host_iptables_variant() == "nft"), out
    assert "sshd-dir" in out and out.split()[-1] == "0", out  # no baked-in host keys, no apt lists


def test_second_build_is_cached(client, node_image):
    again = build_image(client)
    assert again.cached is True and again.id == node_image.id and again.ref == node_image.ref
    result = cli("image", "build", "--json")
    assert result.returncode == 0, result.stderr
    assert '"cached": true' in result.stdout and node_image.id in result.stdout


def test_missing_tools_names_what_an_image_lacks(client, tiny_image):
    empty = tiny_image({"etc/hostname": "/etc/hostname"})
    assert missing_tools(client, empty) == list(REQUIRED_TOOLS)  # not even a shell
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc):
        pytest.skip("the shell-only image is made from this machine's amd64 dash and libc")
    shell_only = tiny_image({"bin/sh": "/bin/dash", "bin/sleep": "/bin/sleep", "lib/x86_64-linux-gnu/libc.so.6": libc,
                             "lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2"})
    missing = missing_tools(client, shell_only)
    assert missing == [t for t in REQUIRED_TOOLS if t not in ("sh", "sleep")]
    assert check_containers(client) == []


def test_bad_references_are_one_line_with_the_fix(client):
    with pytest.raises(ImageInputError) as bad:
        find_image(client, "Not A Reference")
    assert "not a valid image reference" in str(bad.value) and "\n" not in str(bad.value)
    assert find_image(client, "testbed-nosuch:0") is None
    with pytest.raises(ImageInputError) as absent:
        missing_tools(client, "testbed-nosuch:0")
    assert "testbed image build" in str(absent.value) and "\n" not in str(absent.value)


def test_cli_without_engine_is_exit_2_with_the_fix():
    line = one_line_error(cli("image", "build", env={"DOCKER_HOST": "unix:///nonexistent.sock"}), 2)
    assert "Docker" in line and ("start" in line or "install" in line), line


def test_failed_build_leaves_nothing(client):
    before = {i.id for i in client.images.list(all=True)}
    result = cli("image", "build", "--mirror", "http://127.0.0.1:9/debian", timeout=300)
    line = one_line_error(result, 1)
    assert "debootstrap failed" in line and "testbed-image-build.log" in line, line
    assert not build_dir_of(result.stderr).exists()
    assert {i.id for i in client.images.list(all=True)} <= before


def test_interrupted_build_leaves_nothing(client, node_image):
    """SIGTERM while debootstrap runs: it is stopped, its folder removed, the image kept as it was."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "image", "build", "--force"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "debootstrap:" in line:
                break
        else:
            pytest.fail("the build ended before debootstrap ran: " + "".join(seen))
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(60) == 1, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "error: interrupted by SIGTERM" in rest and "Traceback" not in rest, rest
    assert not build_dir_of("".join(seen)).exists()
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")
                if b"debootstrap" in _read(p) and BUILD_PREFIX.encode() in _read(p)]
    assert client.images.get(node_image.ref).id == node_image.id


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
