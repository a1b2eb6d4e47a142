"""Docker backend: one container per node, links as veth pairs between the containers' namespaces.

Containers run the node image (`testbed image build`, or any local image with the same
tools) with ``network_mode: none``: Docker adds no interface, bridge or route, so the only
paths between nodes are the veth pairs made here, created directly inside the two
namespaces with the interface names of the topology (as containerlab does). Each
container's network namespace is also named ``tbed-<lab>-<node>`` (like a Mininet node's),
so shaping, the management path and `clean` work as for Mininet; commands and files reach
a node through :class:`~testbed.backends.docker.access.ContainerAccess`.

Every container is labelled with its lab and node, and the lab state records the
container and namespace names before anything is created, so `testbed clean` after a
kill -9 at any moment removes exactly ours.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from testbed import proc
from testbed.backends.base import BackendError, Lab, LabLink, LabNode
from testbed.backends.docker.access import ContainerAccess
from testbed.backends.localns import netns
from testbed.backends.localns.backend import (NamespaceBackend, address_link, node_work_dir, prepare_node_namespace,
                                              release_appliance, release_namespaces)

LAB_LABEL = "org.testbed.lab"
NODE_LABEL = "org.testbed.node"
START_TIMEOUT_S = 30.0
#: containers created and started at once
ENGINE_WORKERS = 8


def container_name(lab: str, node: str) -> str:
    return netns.name_for(lab, node)


class DockerBackend(NamespaceBackend):
    name = "docker"

    def __init__(self, image: Optional[str] = None):
        self._image = image
        self._checked_image = None
        self._client = None

    # -- the engine and the image ----------------------------------------------------

    @property
    def client(self):
        if self._client is None:
            from testbed.backends.docker.engine import DockerUnavailable, docker_client

            try:
                self._client = docker_client()
            except DockerUnavailable as exc:
                raise BackendError(str(exc)) from exc
        return self._client

    @property
    def image_ref(self) -> str:
        if self._image is None:
            from testbed.backends.docker.image import default_image_ref

            self._image = default_image_ref()
        return self._image

    def _image_obj(self):
        """The node image, checked once: present, and with every tool a node needs."""
        if self._checked_image is not None:
            return self._checked_image
        from testbed.backends.docker.image import ImageError, find_image, missing_tools

        try:
            image = find_image(self.client, self.image_ref)
            if image is None:
                raise BackendError(f"node image {self.image_ref} is not in the local Docker engine: "
                                   "build it with `testbed image build` (no registry is needed), or pass --image")
            missing = missing_tools(self.client, self.image_ref)
        except ImageError as exc:
            raise BackendError(str(exc)) from exc
        if missing:
            raise BackendError(f"node image {self.image_ref} lacks {', '.join(missing)}: use `testbed image build`'s "
                               "image, or add them to yours")
        self._checked_image = image
        return image

    def versions(self) -> dict:
        from testbed.backends.docker.engine import engine_versions

        return engine_versions(self.client)

    # -- building -------------------------------------------------------------------

    def check(self, spec) -> None:
        import shutil

        host = os.environ.get("DOCKER_HOST", "")
        if host and not host.startswith("unix://"):
            raise BackendError(f"DOCKER_HOST={host} is a remote engine: the docker backend needs the engine on "
                               "this machine (it links the containers' namespaces with veths); unset DOCKER_HOST")
        if shutil.which("nsenter") is None:
            raise BackendError("nsenter is missing (it reaches into the containers): apt-get install util-linux")
        self._image_obj()
        plan = self.plan(spec)
        clash = [name for name in plan["containers"] if self._exists(name)]
        if clash:
            raise BackendError(f"container {clash[0]} already exists: a lab named {spec.name!r} is up or was left "
                               f"behind (`testbed down {spec.name}` or `testbed clean`), or it is someone else's "
                               "(rename the topology)")
        for name in plan["netns"]:
            if netns.exists(name):
                raise BackendError(f"network namespace {name} already exists: a lab named {spec.name!r} is up or "
                                   f"was left behind; run `testbed down {spec.name}` or `testbed clean`")

    def plan(self, spec) -> dict:
        names = [container_name(spec.name, node) for node in spec.nodes]
        return {"containers": names, "netns": names, "label": f"{LAB_LABEL}={spec.name}"}

    def up(self, spec) -> Lab:
        self.check(spec)
        image = self._image_obj()
        nodes: dict[str, LabNode] = {}
        # Containers are created and started concurrently (each is an engine round trip or two).
        with ThreadPoolExecutor(max_workers=ENGINE_WORKERS) as pool:
            started = list(pool.map(lambda item: self._start_container(spec.name, item[0], image), spec.nodes.items()))
        for (name, node_spec), (container, pid) in zip(spec.nodes.items(), started):
            cname = container.name
            netns.attach(cname, pid)
            prepare_node_namespace(cname)
            nodes[name] = LabNode(name, node_spec.kind, {"netns": cname, "container": container.id, "pid": pid})

        netns_of = {n: node.handle["netns"] for n, node in nodes.items()}
        links: list[LabLink] = []
        for link in spec.resolved_links():
            # Both ends are made inside their namespaces: nothing of the link ever exists here.
            proc.run(["ip", "link", "add", "name", link.a.ifname, "netns", netns_of[link.a.node], "type", "veth",
                      "peer", "name", link.b.ifname, "netns", netns_of[link.b.node]])
            links.append(address_link(link, netns_of))
        return Lab(spec.name, self.name, nodes, links, info={**self.versions(), "image": self.image_ref,
                                                             "image_id": image.id})

    def _start_container(self, lab: str, node: str, image) -> tuple:
        container = self.client.containers.create(
            image.id, command=["sleep", "infinity"], name=container_name(lab, node), hostname=node,
            network_mode="none", labels={LAB_LABEL: lab, NODE_LABEL: node},
            init=True, detach=True)
        container.start()
        return container, _wait_running(container)

    # -- teardown (from this process or another) ------------------------------------------

    def release(self, lab_name: str, plan: dict, lab: Optional[dict]) -> list[str]:
        """The lab's namespaces (with every process in them) first, which needs no engine; then its
        containers, which does: with the engine down, that part is an error naming the fix."""
        present = [n for n in plan.get("netns", []) if netns.exists(n)]
        removed = release_appliance(plan)
        removed += [f"process {pid}" for pid in release_namespaces(present)]
        removed += [f"namespace {n}" for n in present]
        ours = self._labelled(lambda lab: lab == lab_name)
        errors = _remove_containers(ours)
        if errors:
            raise BackendError("; ".join(errors))
        return removed + [f"container {c.name}" for c in ours]

    def leftovers(self, live_labs: set[str]) -> list[str]:
        found = super().leftovers(live_labs)
        if _docker_installed():
            found += [f"container {c.name}" for c in self._leftover_containers(live_labs)]
        return found

    def release_leftovers(self, live_labs: set[str]) -> list[str]:
        """Containers of no live lab, and image-check containers a killed check left; then, as for every
        namespace backend, namespaces, management interfaces and SSH leftovers."""
        removed = super().release_leftovers(live_labs)
        if _docker_installed():
            ours = self._leftover_containers(live_labs)
            errors = _remove_containers(ours)
            if errors:
                raise BackendError("; ".join(errors))
            removed += [f"container {c.name}" for c in ours]
        return removed

    def _leftover_containers(self, live_labs: set[str]) -> list:
        from testbed.backends.docker.image import CHECK_TIMEOUT_S, OWNER_LABEL

        stale = time.time() - 2 * CHECK_TIMEOUT_S  # a younger one may be another process's check under way
        checks = [c for c in self._labelled(lambda owner: owner == "image-check", OWNER_LABEL)
                  if _created_s(c) < stale]
        return self._labelled(lambda lab: lab not in live_labs) + checks

    def _exists(self, name: str) -> bool:
        import docker.errors

        try:
            self.client.containers.get(name)
            return True
        except docker.errors.NotFound:
            return False

    def _labelled(self, which, label: str = LAB_LABEL) -> list:
        """Containers carrying ``label`` whose value ``which`` accepts (containers removed meanwhile, e.g. by
        another lab, are passed over)."""
        return [c for c in self.client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
                if which(c.labels.get(label))]

    def access(self, lab: Lab, node: str) -> ContainerAccess:
        """Access to the node's container, after checking that the PID recorded for it is still that
        container's (after an engine restart it may be another process's)."""
        handle = lab.node(node).handle
        pid = int(handle["pid"])
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            cgroups = ""
        if handle["container"] not in cgroups:
            raise BackendError(f"node {node}'s container {handle['container'][:12]} no longer runs as process {pid} "
                               f"(stopped, or the engine restarted): `testbed down {lab.name}` or `testbed clean`")
        return ContainerAccess(node, pid, node_work_dir(lab.name, node))


def _created_s(container) -> float:
    """When the engine created ``container`` (seconds since the epoch)."""
    from datetime import datetime

    created = container.attrs.get("Created", "")
    try:
        return datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0


def _wait_running(container) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        container.reload()
        state = container.attrs["State"]
        if state.get("Running") and state.get("Pid"):
            return int(state["Pid"])
        if state.get("Status") in ("exited", "dead") or time.monotonic() > deadline:
            raise BackendError(f"container {container.name} did not start ({state.get('Status')}: "
                               f"{state.get('Error') or container.logs(tail=5).decode(errors='replace').strip()})")
        time.sleep(0.05)


def _remove_containers(containers) -> list[str]:
    """Remove (killing what runs in them) every container, concurrently; returns the errors."""
    def remove(container) -> "str | None":
        try:
            container.remove(force=True)
        except Exception as exc:  # noqa: BLE001 - a container already gone is fine; others are reported
            if getattr(getattr(exc, "response", None), "status_code", None) != 404:
                return f"removing container {container.name}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=ENGINE_WORKERS) as pool:
        return [e for e in pool.map(remove, containers) if e]


def _docker_installed() -> bool:
    """Is a Docker engine installed here? Without one, no container of ours can exist."""
    from testbed.backends.docker.engine import dockerd_path

    return dockerd_path() is not None
