"""A containerlab topology (``*.clab.yml``, https://containerlab.dev/manual/topo-def-file/) as ours: its nodes
(each a router; ``topology.defaults`` and ``topology.kinds`` merged into every node as containerlab does: the
node's own keys over its kind's over the defaults), its veth ``links[].endpoints`` with their interface names
(made valid where ours would refuse them, e.g. ``e1-1`` -> ``e11``), and the list of what has no equivalent here
(images, startup configs, the management network, ...), named in the output's comments.

The file is read with the topology loader (``testbed.spec.loader.validate_yaml``) against models of
containerlab's keys, so an unknown key is an error at its line with the keys allowed, and a link to a node that
does not exist is one at the endpoint's line."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from pydantic import Field, create_model

from testbed.spec.errors import SpecError, SpecProblem, format_path
from testbed.spec.loader import validate_yaml
from testbed.spec.models import StrictModel

from .model import Imported, ImportedEnd, ImportedLink, ImportedNode
from .names import ifnames, node_names, topology_name

#: a node's keys in containerlab (its clab.schema.json "node-config"): only ``kind`` has an equivalent here
NODE_KEYS = (
    "kind", "type", "image", "image-pull-policy", "restart-policy", "license", "group", "labels",
    "startup-config", "startup-delay", "enforce-startup-config", "suppress-startup-config", "auto-remove",
    "exec", "binds", "ports", "env", "env-files", "user", "entrypoint", "cmd", "publish", "runtime",
    "mgmt-ipv4", "mgmt-ipv6", "mgmt_ipv4", "mgmt_ipv6", "network-mode", "cpu", "memory", "cpu-set", "shm-size",
    "cap-add", "sysctls", "devices", "sandbox", "kernel", "extras", "config", "wait-for", "stages", "dns",
    "certificate", "healthcheck", "aliases", "components", "SANs",
)
#: a link's keys (brief form ``endpoints: ["a:eth1", "b:eth1"]`` and extended form ``type: veth``)
LINK_KEYS = ("endpoints", "type", "mtu", "vars", "labels", "endpoint", "host-interface", "mode", "remote", "vni",
             "udp-port")
#: an endpoint's keys in the extended form (``{node: a, interface: eth1}``)
ENDPOINT_KEYS = ("node", "interface", "mac", "vars", "labels")
#: what a link's endpoint names instead of a node, for a link out of the lab (to this machine, the management
#: network, a macvlan): no equivalent here
SPECIAL_NODES = ("host", "mgmt-net", "macvlan")


def _model(name: str, keys: Tuple[str, ...], **typed: Any) -> type:
    fields = {key.replace("-", "_dash_"): (Any, Field(None, alias=key)) for key in keys if key not in typed}
    return create_model(name, __base__=StrictModel, **fields, **typed)


ClabEndpoint = _model("ClabEndpoint", ENDPOINT_KEYS, node=(str, ...), interface=(Optional[str], None))
ClabNode = _model("ClabNode", NODE_KEYS, kind=(Optional[str], None))
ClabLink = _model("ClabLink", LINK_KEYS, type=(Optional[str], None),
                  endpoints=(Optional[List[Union[str, ClabEndpoint]]], None))
ClabTopology = create_model("ClabTopology", __base__=StrictModel,
                            defaults=(Optional[ClabNode], None), kinds=(Dict[str, Optional[ClabNode]], {}),
                            nodes=(Dict[str, Optional[ClabNode]], ...), links=(List[ClabLink], []),
                            groups=(Any, None))
ClabFile = create_model("ClabFile", __base__=StrictModel, name=(str, ...), prefix=(Any, None), mgmt=(Any, None),
                        settings=(Any, None), topology=(ClabTopology, ...))


def _set_keys(node: Optional[StrictModel]) -> Dict[str, Any]:
    """The keys a node (or kind, or the defaults) gives, by their containerlab names."""
    if node is None:
        return {}
    fields = type(node).model_fields
    return {fields[f].alias or f: getattr(node, f) for f in node.model_fields_set}


def clab_topology(text: str, path: Path, name: Optional[str] = None) -> Imported:
    """The topology of a containerlab file's ``text`` read from ``path``."""
    filename = str(path)
    clab, parsed = validate_yaml(text, filename, ClabFile, "the file is empty; a containerlab topology has "
                                                           "name: and topology: nodes:", "name, topology, ...")
    topo = clab.topology
    imported = Imported(name=name or topology_name(clab.name), file=path.name, fmt="containerlab topology",
                        description=f"containerlab lab {clab.name} ({path.name})")
    imported.method.append("nodes: every containerlab node is a router (`kind: host` by hand for an end host); "
                           "topology.defaults and topology.kinds are merged into each node as containerlab does")
    ignored = [key for key in ("prefix", "mgmt", "settings") if getattr(clab, key) is not None]
    if topo.groups is not None:
        ignored.append("topology.groups")
    if ignored:
        imported.notes.append(f"ignored (no equivalent here): {', '.join(ignored)}")

    defaults = _set_keys(topo.defaults)
    names = node_names(topo.nodes)
    for clab_name, node in topo.nodes.items():
        own = _set_keys(node)
        kind = own.get("kind") or defaults.get("kind")
        merged = {**defaults, **_set_keys(topo.kinds.get(kind) if kind else None), **own}
        line = parsed.line_of(("topology", "nodes", clab_name))
        source = f"containerlab node {clab_name} (line {line})"
        if kind:
            source += f", kind {kind}" + ("" if "kind" in own else " (topology.defaults)")
        unused = sorted(k for k in merged if k != "kind")
        if unused:
            source += f"; ignored: {', '.join(unused)}"
        if names[clab_name] != clab_name:
            imported.notes.append(f"node {clab_name!r} is {names[clab_name]!r} here (node names: 1-10 lowercase "
                                  "letters or digits)")
        imported.nodes.append(ImportedNode(names[clab_name], source))

    problems: List[SpecProblem] = []
    kept: List[Tuple[List[Tuple[str, Optional[str]]], str]] = []
    for i, link in enumerate(topo.links):
        loc = ("topology", "links", i)
        where = f"links[{i}] (line {parsed.line_of(loc)})"
        if link.type not in (None, "veth"):
            imported.notes.append(f"ignored {where}: a {link.type} link, out of the lab (no equivalent here)")
            continue
        ends = link.endpoints or []
        if len(ends) != 2:
            problems.append(SpecProblem(filename, parsed.line_of(loc + ("endpoints",)), format_path(loc),
                                        f"a link has two endpoints, this one {len(ends)}"))
            continue
        pairs = [(e.node, e.interface) if not isinstance(e, str) else tuple(e.split(":", 1)) if ":" in e
                 else (e, None) for e in ends]
        if any(node in SPECIAL_NODES and node not in topo.nodes for node, _ in pairs):
            imported.notes.append(f"ignored {where}: an endpoint is {', '.join(n for n, _ in pairs)}, out of the "
                                  "lab (no equivalent here)")
            continue
        bad = False
        for j, (node, _) in enumerate(pairs):
            if node not in topo.nodes:
                end_loc = loc + ("endpoints", j)
                problems.append(SpecProblem(filename, parsed.line_of(end_loc), format_path(end_loc),
                                            f"no node {node!r} in topology.nodes (nodes: {', '.join(topo.nodes)})"))
                bad = True
        if bad:
            continue
        kept.append((pairs, where))
        extra = sorted(k for k in _set_keys(link) if k not in ("endpoints", "type"))
        if extra:
            imported.notes.append(f"ignored in {where}: {', '.join(extra)}")
    if problems:
        raise SpecError(problems)
    by_node: Dict[str, List[str]] = {}
    for pairs, _ in kept:
        for node, interface in pairs:
            if interface:
                by_node.setdefault(node, []).append(interface)
    renamed = {node: ifnames(found) for node, found in by_node.items()}
    for node, mapping in renamed.items():
        for theirs, ours in mapping.items():
            if theirs != ours:
                imported.notes.append(f"interface {node}:{theirs} is {names[node]}:{ours} here (interface names: "
                                      "1-15 lowercase letters or digits)")
    for pairs, where in kept:
        ends = [ImportedEnd(names[node], renamed[node][interface] if interface else None) for node, interface in pairs]
        source = f"{where}: {' - '.join(':'.join(filter(None, p)) for p in pairs)}"
        imported.links.append(ImportedLink(ends[0], ends[1], source))
    return imported
