"""The Docker node image, built offline: a Debian root file system made by debootstrap from this
machine's apt mirror, imported into the local engine. No container registry is involved.

The image is tagged ``testbed-node:<recipe hash>`` and labelled ``org.testbed.recipe=<hash>``.
The hash covers everything that goes in (suite, mirror, packages, the iptables variant, the
commands run in the root file system, the image settings and :data:`RECIPE_VERSION`), so the
backend finds the image of the current recipe by its tag, and building it again is instant.

Only the standard library is imported at the top: ``scripts/setup.sh`` runs this file to learn
the tag in a few milliseconds (``python image.py`` prints it).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

DEFAULT_IMAGE_REPO = "testbed-node"
RECIPE_LABEL = "org.testbed.recipe"
OWNER_LABEL = "org.testbed.owner"
#: Bump when the way the image is made changes in a way the other recipe fields do not show.
RECIPE_VERSION = 1
#: Debian packages of the image (debootstrap adds what they depend on).
PACKAGES = ("python3", "iproute2", "iptables", "tcpdump", "openssh-server", "iperf3", "procps", "iputils-ping",
            "netbase")
#: Programs a node image must have: what the backend, shaping, capture, deployment (Ansible over SSH:
#: python3, sh, tar, gzip, base64), measurements and tests run inside nodes.
REQUIRED_TOOLS = ("sh", "python3", "ip", "tc", "ss", "iptables", "tcpdump", "sshd", "iperf3", "ping", "ps", "pkill",
                  "sleep", "tar", "gzip", "base64")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Image settings given to the engine at import (an imported image has none of its own).
IMAGE_CHANGES = (f"ENV PATH={NODE_PATH}", "ENV LANG=C.UTF-8", 'CMD ["sleep", "infinity"]')
#: Run in the root file system (chroot) after debootstrap; $IPTABLES is ``nft`` or ``legacy``.
CONFIGURE_SCRIPT = r"""
set -eu
# iptables in the nodes uses the same backend as this machine's, so one rule set is seen from both sides
update-alternatives --quiet --set iptables /usr/sbin/iptables-$IPTABLES
update-alternatives --quiet --set ip6tables /usr/sbin/ip6tables-$IPTABLES
# sshd is started directly (no init): it needs its privilege separation directory
mkdir -p -m 0755 /run/sshd
# no host keys baked into the image: each run makes its own (`ssh-keygen -A` makes the defaults)
rm -f /etc/ssh/ssh_host_*
# nothing left that would refuse or start services, and no DNS settings of the build machine
rm -f /usr/sbin/policy-rc.d /etc/resolv.conf
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > /etc/hosts
echo testbed-node > /etc/hostname
# small: no apt caches or lists, logs, manuals, translations (nodes run in C.UTF-8), or documentation
# but the copyright files
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old \
       /var/log/apt/* /var/log/*.log /usr/share/man/* /usr/share/info/* /tmp/* /var/tmp/*
find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
"""
BUILD_ROOT = Path("/var/tmp")
BUILD_PREFIX = "testbed-image-"
BUILD_LOG = Path("/var/log/testbed-image-build.log")
BUILD_LOCK = Path("/run/lock/testbed-image-build.lock")
CHECK_TIMEOUT_S = 60


class ImageError(RuntimeError):
    """The node image cannot be built or used; the message is one line that names the fix."""


class ImageInputError(ImageError):
    """What was asked cannot be done on this machine as it is (bad input: exit status 2)."""


@dataclass(frozen=True)
class BuiltImage:
    ref: str
    id: str
    seconds: float
    cached: bool
    size_bytes: int


def print_to_stderr(line: str) -> None:
    print(f"image: {line}", file=sys.stderr, flush=True)


# --- the recipe ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AptSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    keyring: Optional[str] = None


def parse_one_line_sources(text: str) -> list[AptSource]:
    """``deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main`` lines (sources.list)."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        options = {}
        opts = re.match(r"^deb\s+\[([^\]]*)\]\s*", line)
        if opts:
            options = dict(o.split("=", 1) for o in opts.group(1).split() if "=" in o)
            line = "deb " + line[opts.end():]
        words = line.split()
        if len(words) >= 3 and words[0] == "deb":
            found.append(AptSource(words[1].rstrip("/"), words[2], tuple(words[3:]), options.get("signed-by")))
    return found


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Stanzas of ``Types: deb`` / ``URIs:`` / ``Suites:`` / ``Components:`` / ``Signed-By:`` (.sources)."""
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1].isspace() and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        signed_by = fields.get("signed-by", "")
        keyring = signed_by if signed_by and "\n" not in signed_by and signed_by.startswith("/") else None
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                found.append(AptSource(uri.rstrip("/"), suite, tuple(fields.get("components", "").split()), keyring))
    return found


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """This machine's apt sources, in the order apt reads them."""
    sources = []
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*"))]
    for path in files:
        if path.suffix not in (".list", ".sources") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        sources += parse_deb822_sources(text) if path.suffix == ".sources" else parse_one_line_sources(text)
    return sources


def base_source(sources: list[AptSource]) -> Optional[AptSource]:
    """The release's own archive: not -updates, -security, -backports, nor a flat repository."""
    for source in sources:
        if "/" in source.suite or re.search(r"-(updates|security|backports|proposed)$", source.suite):
            continue
        if source.uri.startswith(("http://", "https://", "file:/")) and "main" in source.components:
            return source
    return None


def host_iptables_variant() -> str:
    """``legacy`` or ``nft``: the backend of this machine's ``iptables`` (Debian 12's default is nft)."""
    path = shutil.which("iptables") or ("/usr/sbin/iptables" if os.path.exists("/usr/sbin/iptables") else None)
    if path is None:
        return "nft"
    try:
        version = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "nft"
    return "legacy" if "legacy" in version else "nft"


@dataclass(frozen=True)
class Recipe:
    suite: str
    mirror: str
    iptables: str
    packages: tuple[str, ...] = PACKAGES
    keyring: Optional[str] = field(default=None, compare=False)  # verifies what is fetched; not content

    def hash(self) -> str:
        doc = {"version": RECIPE_VERSION, "suite": self.suite, "mirror": self.mirror, "iptables": self.iptables,
               "packages": sorted(self.packages), "configure": CONFIGURE_SCRIPT, "changes": IMAGE_CHANGES}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def ref(self) -> str:
        return f"{DEFAULT_IMAGE_REPO}:{self.hash()}"


def resolve_recipe(mirror: Optional[str] = None, suite: Optional[str] = None) -> Recipe:
    """The recipe for this machine: suite and mirror from its apt sources unless given (or set in
    ``TESTBED_IMAGE_MIRROR`` / ``TESTBED_IMAGE_SUITE``, which change the default image too)."""
    mirror = (mirror or os.environ.get("TESTBED_IMAGE_MIRROR") or "").rstrip("/") or None
    suite = suite or os.environ.get("TESTBED_IMAGE_SUITE") or None
    source = base_source(apt_sources())
    if source is None and not (mirror and suite):
        raise ImageInputError("no Debian archive found in /etc/apt/sources.list(.d): give one with --mirror and "
                              "--suite (e.g. --mirror http://deb.debian.org/debian --suite bookworm)")
    keyring = source.keyring if source and (mirror is None or mirror == source.uri) else None
    return Recipe(suite or source.suite, mirror or source.uri, host_iptables_variant(), keyring=keyring)


def recipe_hash() -> str:
    return resolve_recipe().hash()


def default_image_ref() -> str:
    """``testbed-node:<hash>``: the image `testbed image build` makes for this machine's recipe."""
    return resolve_recipe().ref


# --- looking at images -------------------------------------------------------------------------


def find_image(client, ref: str):
    """The local image ``ref`` (a ``docker.models.images.Image``), or None when there is none.
    A malformed reference raises :class:`ImageInputError`."""
    import docker

    if not ref.strip():
        raise ImageInputError("the image reference is empty: name a local image, e.g. "
                              f"{DEFAULT_IMAGE_REPO}:<tag> (`testbed image build` makes the default)")
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 400:
            raise ImageInputError(f"{ref!r} is not a valid image reference ({_explain(exc)}): name a local "
                                  f"image, e.g. {DEFAULT_IMAGE_REPO}:<tag>") from None
        raise ImageError(f"cannot look up image {ref} in the Docker engine: {_explain(exc)}") from None


def missing_tools(client, ref: str, tools: tuple[str, ...] = REQUIRED_TOOLS) -> list[str]:
    """Which of ``tools`` the local image ``ref`` lacks, found by running a throw-away container
    (no network, labelled ``org.testbed.owner=image-check``, removed afterwards)."""
    import docker

    if find_image(client, ref) is None:
        raise ImageInputError(f"image {ref} is not in the local Docker engine: build the node image with "
                              "`testbed image build` (no registry needed), or name a local image")
    script = 'for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'
    container = client.containers.create(
        ref, entrypoint=["/bin/sh", "-c", script, "sh"], command=list(tools), network_mode="none",
        environment={"PATH": NODE_PATH}, labels={OWNER_LABEL: "image-check"}, detach=True)
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:
            if "no such file" in str(exc).lower() or "not found" in str(exc).lower():
                return list(tools)  # not even /bin/sh
            raise ImageError(f"cannot run a container of {ref}: {_explain(exc)}") from None
        status = container.wait(timeout=CHECK_TIMEOUT_S).get("StatusCode")
        output = container.logs(stdout=True, stderr=False).decode(errors="replace")
        if status != 0:
            errors = container.logs(stdout=False, stderr=True).decode(errors="replace").strip()
            if "exec /bin/sh" in errors:
                return list(tools)  # /bin/sh there but it cannot run (e.g. its libraries are missing)
            raise ImageError(f"checking the tools of {ref} failed (exit {status}): {errors[-200:] or 'no output'}")
        return [t for t in output.split() if t in tools]
    finally:
        container.remove(force=True)


def _explain(exc) -> str:
    return str(getattr(exc, "explanation", None) or exc).strip().splitlines()[0]


# --- building --------------------------------------------------------------------------------


def build_image(client=None, *, force: bool = False, mirror: Optional[str] = None, suite: Optional[str] = None,
                progress: Callable[[str], None] = print_to_stderr) -> BuiltImage:
    """Make the node image of the current recipe, unless it exists (``cached``) and not ``force``.

    Needs root and debootstrap. The root file system is made in a folder under /var/tmp that is
    removed afterwards, also on failure or interrupt; the image is tagged only once it is complete
    and has every tool of :data:`REQUIRED_TOOLS`.
    """
    started = time.monotonic()
    recipe = resolve_recipe(mirror, suite)
    if client is None:
        from testbed.backends.docker.engine import DockerUnavailable, docker_client

        try:
            client = docker_client(timeout=600.0)  # an import of a few hundred MB takes a while
        except DockerUnavailable as exc:
            raise ImageInputError(str(exc)) from None
    existing = find_image(client, recipe.ref)
    if existing is not None and not force:
        return _built(recipe, existing, started, cached=True)
    if os.geteuid() != 0:
        raise ImageInputError("building the node image needs root (debootstrap, chroot): run it with sudo")
    if shutil.which("debootstrap") is None:
        raise ImageInputError("debootstrap is not installed: apt-get install debootstrap (./scripts/setup.sh "
                              "installs it)")
    with _build_lock(progress), _interruptible():
        existing = find_image(client, recipe.ref)  # another build may have made it while we waited
        if existing is not None and not force:
            return _built(recipe, existing, started, cached=True)
        _remove_stale_build_dirs(progress)
        work = Path(_mkdtemp())
        try:
            progress(f"building {recipe.ref}: Debian {recipe.suite} from {recipe.mirror}, iptables "
                     f"{recipe.iptables} (a few minutes, once; in {work})")
            rootfs = work / "rootfs"
            _debootstrap(recipe, rootfs, progress)
            progress("configuring the root file system")
            _run_checked(["chroot", str(rootfs), "/bin/sh", "-s"], CONFIGURE_SCRIPT,
                         {"PATH": NODE_PATH, "IPTABLES": recipe.iptables, "LC_ALL": "C"}, "configuring the image")
            progress("importing it into the Docker engine")
            image_id = _import(client, recipe, rootfs, work)
        finally:
            _remove_tree(work)
        try:
            progress("checking that the image has every tool a node needs")
            missing = missing_tools(client, image_id)
            if missing:
                raise ImageError(f"the built image lacks {', '.join(missing)}; the recipe in {__file__} misses "
                                 "a package")
        except BaseException:
            _remove_image(client, image_id)
            raise
        client.api.tag(image_id, DEFAULT_IMAGE_REPO, recipe.hash())
        if existing is not None and existing.id != image_id:
            _remove_image(client, existing.id)  # the one --force replaced, unless a container still uses it
        built = _built(recipe, client.images.get(image_id), started, cached=False)
        progress(f"built {built.ref} ({built.size_bytes / 1e6:.0f} MB) in {built.seconds:.0f} s")
        return built


def _built(recipe: Recipe, image, started: float, *, cached: bool) -> BuiltImage:
    return BuiltImage(recipe.ref, image.id, round(time.monotonic() - started, 3), cached,
                      int(image.attrs.get("Size", 0)))


_PER_PACKAGE = re.compile(r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) [a-z0-9][a-z0-9+.:-]*"
                          r"( [0-9][^ ]*)?(\.\.\.)?$")


def _debootstrap(recipe: Recipe, rootfs: Path, progress: Callable[[str], None]) -> None:
    """debootstrap in a mount namespace of its own: the /proc, /sys and /dev it mounts in the root
    file system vanish with it, however it ends."""
    argv = ["unshare", "--mount", "--propagation", "private", "debootstrap", "--variant=minbase",
            "--components=main", f"--include={','.join(recipe.packages)}", "--force-check-gpg"]
    if recipe.keyring and os.path.exists(recipe.keyring):
        argv.append(f"--keyring={recipe.keyring}")
    argv += [recipe.suite, str(rootfs), recipe.mirror]
    progress(f"debootstrap (log: {BUILD_LOG})")
    errors, last, quiet = [], "", 0
    with open(BUILD_LOG, "w") as log, _process(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            log.write(line)
            line = line.rstrip()
            last = line or last
            if line.startswith("E:"):
                errors.append(line)
            if _PER_PACKAGE.match(line):
                quiet += 1
                if quiet % 50 == 0:
                    progress(f"debootstrap: {line} ({quiet} steps)")
            elif line.startswith(("I:", "W:", "E:")):
                progress(f"debootstrap: {line}")
        status = proc.wait()
    if status != 0:
        raise ImageError(f"debootstrap failed (exit {status}): {(errors or [last])[-1]}; the full log is {BUILD_LOG}"
                         f" (a mirror the build can reach: --mirror URL)")


def _import(client, recipe: Recipe, rootfs: Path, work: Path) -> str:
    """The root file system, streamed as a tar into the engine; the new (untagged) image's id."""
    import docker

    argv = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=security.capability", "--exclude=./dev/*",
            "--exclude=./proc/*", "--exclude=./sys/*", "-C", str(rootfs), "-cf", "-", "."]
    changes = [*IMAGE_CHANGES, f"LABEL {RECIPE_LABEL}={recipe.hash()}",
               f'LABEL org.testbed.debian="{recipe.suite} {recipe.mirror}"']
    with open(work / "tar.log", "w+") as tar_log, _process(argv, stdout=subprocess.PIPE, stderr=tar_log) as tar:
        def chunks() -> Iterator[bytes]:
            while block := tar.stdout.read(1 << 20):
                yield block

        try:
            answer = client.api.import_image_from_stream(chunks(), changes=changes)
        except docker.errors.APIError as exc:
            raise ImageError(f"the Docker engine refused the image: {_explain(exc)}") from None
        status = tar.wait()
        image_id = _imported_id(answer)
        if status != 0 or image_id is None:
            if image_id:
                _remove_image(client, image_id)
            tar_log.seek(0)
            raise ImageError(f"importing the image failed (tar exit {status}): "
                             f"{(tar_log.read().strip() or str(answer).strip())[-300:]}")
    return image_id


def _imported_id(answer: str) -> Optional[str]:
    for line in reversed(str(answer).strip().splitlines()):
        try:
            status = json.loads(line).get("status", "")
        except (ValueError, AttributeError):
            continue
        if status.startswith("sha256:"):
            return status
    return None


def _remove_image(client, image_id: str) -> None:
    import docker

    try:
        client.images.remove(image_id, force=False, noprune=False)
    except docker.errors.APIError:
        pass  # in use by a container, or already gone: untagged either way


@contextmanager
def _process(argv: list[str], **kwargs) -> Iterator[subprocess.Popen]:
    """A child in its own session (a Ctrl-C is ours to handle), stopped if we leave early."""
    try:
        proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
    except FileNotFoundError:
        raise ImageInputError(f"{argv[0]} is not installed (apt-get install util-linux tar debootstrap)") from None
    try:
        yield proc
    finally:
        if proc.poll() is None:
            _stop_group(proc)
        if proc.stdout:
            proc.stdout.close()


def _stop_group(proc: subprocess.Popen) -> None:
    import signal

    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_checked(argv: list[str], stdin: str, env: dict[str, str], what: str) -> None:
    with _process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                  text=True) as proc:
        output, _ = proc.communicate(stdin)
    if proc.returncode != 0:
        tail = output.strip().splitlines()[-1] if output.strip() else "no output"
        raise ImageError(f"{what} failed (exit {proc.returncode}): {tail}")


@contextmanager
def _build_lock(progress: Callable[[str], None]) -> Iterator[None]:
    """One build at a time on this machine (several ./test.sh may start together)."""
    import fcntl

    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another build of the node image is running here: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the build like Ctrl-C, so that it cleans up (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from testbed.run.signals import interrupt_guard

    with interrupt_guard() as guard:
        try:
            yield
        finally:
            guard.disarm()  # a second signal must not cut the clean-up short


def _mkdtemp() -> str:
    import tempfile

    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=BUILD_ROOT)


def _remove_stale_build_dirs(progress: Callable[[str], None]) -> None:
    """Folders of builds killed with -9 (under the lock, no other build is running)."""
    for path in BUILD_ROOT.glob(f"{BUILD_PREFIX}*"):
        progress(f"removing {path}, left by an interrupted build")
        _remove_tree(path)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def _remove_tree(path: Path) -> None:
    """Remove a build folder, never following a mount out of it (the host's /dev, /proc...)."""
    if not path.exists():
        return
    for point in sorted(_mounts_under(path), reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    if _mounts_under(path):
        raise ImageError(f"{path} still has mounts inside ({', '.join(_mounts_under(path))}): unmount them, "
                         f"then rm -rf {path}")
    shutil.rmtree(path)


if __name__ == "__main__":
    print(default_image_ref())
