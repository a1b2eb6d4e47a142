"""Where the dissector is, how to load it, and the tshark/wireshark command for a run's captures.

``tb.lua`` ships in this package. It is loaded per command (``-X lua_script:PATH``) or found by Wireshark in the
user's personal plugin folder (``install``). A run's captures need two preferences: the TCP ports its routers
used (``tb.ports``) and its manifest (``tb.manifest``: message origins by router name); every capture needs one
TCP preference (``TCP_PREFS``).
"""
from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from runfolder.layout import LAYOUT
from testbed.drivers.routerconfig import RouterPorts

LUA_FILE = Path(__file__).with_name("tb.lua")
#: Wireshark's personal Lua plugin folder on Linux and macOS (Help > About > Folders, "Personal Lua Plugins")
PERSONAL_PLUGINS = Path("~/.local/lib/wireshark/plugins")
#: Wireshark's TCP preference that reassembles segments in sequence order. Without it (Wireshark's default), a
#: segment lost and retransmitted inside a router frame that spans several segments (a drop in a link's tc
#: queue, then a fast retransmission) gets "[Reassembly error, protocol TCP: New fragment overlaps old data
#: (retransmission?)]", and where the loss happened before the capture point the frames behind the gap are
#: never decoded: tshark then shows fewer messages than the analysis's decoder (spark/pcap.py), which
#: reassembles in sequence order too. Every command printed here passes it.
TCP_PREFS = ("-o", "tcp.reassemble_out_of_order:TRUE")


class WiresharkError(Exception):
    """A results folder the dissector cannot be pointed at (the message says why)."""


def install(folder: Optional[Path] = None) -> Path:
    """Copy tb.lua into ``folder`` (the personal plugin folder by default); the path it was copied to."""
    target = (folder or PERSONAL_PLUGINS).expanduser()
    target.mkdir(parents=True, exist_ok=True)
    dest = target / LUA_FILE.name
    shutil.copyfile(LUA_FILE, dest)
    return dest


@dataclass(frozen=True)
class RunCaptures:
    """What a results folder tells the dissector: the run's ports, its manifest and its capture files."""

    manifest: Path
    ports: RouterPorts
    ports_recorded: bool  # False: a run from before the manifest recorded them (the defaults are assumed)
    pcaps: List[Path]

    def prefs(self) -> List[str]:
        """``-o`` arguments: the ports to decode on and the manifest to name the routers from."""
        return ["-o", f"tb.ports:{self.ports.router},{self.ports.client}", "-o", f"tb.manifest:{self.manifest}"]


def run_captures(results_dir: Path) -> RunCaptures:
    """The run in ``results_dir`` (one run's folder); WiresharkError when it is not one our router's wire can read."""
    manifest_path = results_dir / LAYOUT.manifest
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as err:
        raise WiresharkError(f"{results_dir} is not a run's results folder: cannot read {manifest_path}: {err}")
    wire = (manifest.get("router_driver") or {}).get("wire", "testbed")
    if wire != "testbed":
        raise WiresharkError(f"the run in {results_dir} used router wire {wire!r}: tb.lua decodes the testbed "
                             "router's protocol only (Zenoh's wire has its own Wireshark dissector)")
    recorded = (manifest.get("extra") or {}).get("ports")
    try:
        ports = RouterPorts(**recorded) if isinstance(recorded, dict) else RouterPorts()
    except TypeError:
        raise WiresharkError(f"{manifest_path}: extra.ports {recorded!r} is not {{router, client, metrics}}")
    pcaps = sorted((results_dir / LAYOUT.pcap_dir).glob("*.pcap"))
    return RunCaptures(manifest_path.resolve(), ports, isinstance(recorded, dict), pcaps)


def tshark_argv(captures: Optional[RunCaptures], pcap: str) -> List[str]:
    """tshark reading ``pcap`` with the dissector (and the run's preferences), showing only its frames."""
    return ["tshark", "-X", f"lua_script:{LUA_FILE}", *prefs(captures), "-r", pcap, "-Y", "tb"]


def wireshark_argv(captures: Optional[RunCaptures], pcap: str) -> List[str]:
    return ["wireshark", "-X", f"lua_script:{LUA_FILE}", *prefs(captures), pcap]


def prefs(captures: Optional[RunCaptures]) -> List[str]:
    """The ``-o`` arguments of a printed command: the TCP preference (``TCP_PREFS``), then the run's own."""
    return [*TCP_PREFS, *(captures.prefs() if captures else [])]


def how_to_load(captures: Optional[RunCaptures]) -> List[str]:
    """What `testbed wireshark` prints: the dissector's path and the commands that load it."""
    pcap = str(captures.pcaps[0]) if captures and captures.pcaps else "CAPTURE.pcap"
    lines = [str(LUA_FILE), "", "tshark (add -V -O tb for every field; -Y 'tb.flow == 3' to filter):",
             "  " + shlex.join(tshark_argv(captures, pcap)), "Wireshark:",
             "  " + shlex.join(wireshark_argv(captures, pcap))]
    if captures:
        lines.append(f"(the run's {len(captures.pcaps)} capture(s) are in {captures.pcaps[0].parent if captures.pcaps else '(none)'};"
                     f" ports {captures.ports.router},{captures.ports.client}"
                     + ("" if captures.ports_recorded else ", the defaults: this run's manifest does not record its ports")
                     + ")")
    lines += ["", f"Or once for every capture: testbed wireshark --install (copies it into {PERSONAL_PLUGINS}/);",
              "then no -X is needed, and the preferences are under Edit > Preferences > Protocols > TB;",
              "switch on Protocols > TCP > Reassemble out-of-order segments there too (a retransmitted segment",
              "inside a frame is otherwise marked malformed: docs/wireshark.md)."]
    return lines
