"""tshark with the dissector, read back as the tree it decoded (PDML), for the tests of testbed/wireshark."""
from __future__ import annotations

import codecs
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence
from xml.etree import ElementTree as ET

import pytest

from testbed.wireshark.dissector import LUA_FILE, TCP_PREFS

TSHARK_MISSING = "" if shutil.which("tshark") else \
    "needs tshark (scripts/setup.sh installs Debian's tshark: apt-get install tshark)"
needs_tshark = pytest.mark.skipif(bool(TSHARK_MISSING), reason=TSHARK_MISSING or "ok")


def tshark(pcap: Path, *args: str, timeout: float = 600) -> str:
    """tshark's standard output for ``pcap`` read with the dissector (and ``args``), with no preference set."""
    proc = subprocess.run(["tshark", "-X", f"lua_script:{LUA_FILE}", "-r", str(pcap), *args], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"tshark exited {proc.returncode}: {proc.stderr[-3000:]}"
    assert "Lua" not in proc.stderr or "error" not in proc.stderr.lower(), proc.stderr[-3000:]
    return proc.stdout


@dataclass
class Decoded:
    """What tshark decoded of a capture: per DATA message (in a DATA frame or reassembled from FRAGMENT pieces)
    its traffic flow (None: no traffic header); frame kinds; expert infos; every tb field's values."""

    message_flows: List[Optional[int]] = field(default_factory=list)
    kinds: Counter = field(default_factory=Counter)
    experts: List[Dict[str, str]] = field(default_factory=list)
    values: Dict[str, List[str]] = field(default_factory=dict)
    packets: int = 0

    def flows(self) -> Counter:
        return Counter(f for f in self.message_flows if f is not None)

    def malformed(self) -> List[Dict[str, str]]:
        """Expert infos of the malformed group or of error severity (a Lua error included), and malformed marks."""
        return [e for e in self.experts if e.get("group") == "malformed" or e.get("severity") == "error"]


def _walk(el: ET.Element, out: Decoded, in_message: bool) -> None:
    for child in el:
        name = child.get("name") or ""
        if name == "tb.message":
            flows = [f for f in child.iter("field") if f.get("name") == "tb.flow"]
            out.message_flows.append(int(flows[0].get("show")) if flows else None)
        if name.startswith("tb.") or name.startswith("_ws."):
            out.values.setdefault(name, []).append(child.get("show") or "")
        if name == "tb.kind":
            out.kinds[int(child.get("show"))] += 1
        if name in ("_ws.expert", "_ws.malformed", "_ws.lua.error") or name.startswith("_ws.malformed"):
            info = {k: v for k, v in child.attrib.items()}
            for sub in child.iter("field"):
                key = (sub.get("name") or "").rsplit(".", 1)[-1]
                info[key] = sub.get("showname") or sub.get("show") or ""
                if key in ("group", "severity"):
                    info[key] = (sub.get("showname") or "").split(":", 1)[-1].strip().split(" ")[0].lower()
                if key == "message":
                    info[key] = sub.get("show") or ""
            if name != "_ws.expert":
                info["group"] = "malformed"
            out.experts.append(info)
        _walk(child, out, in_message)


def decode(pcap: Path, *prefs: str, tcp_prefs: Sequence[str] = TCP_PREFS) -> Decoded:
    """Every tb frame of ``pcap`` as tshark decodes it with the dissector and the TCP preference every printed
    command passes (``tcp_prefs``; testbed/wireshark/dissector.py), ``prefs``: more tshark arguments."""
    # its warnings go to a file: a pipe read only at the end would block tshark once it filled (64 KiB)
    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen(["tshark", "-X", f"lua_script:{LUA_FILE}", "-r", str(pcap), *tcp_prefs, *prefs,
                             "-T", "pdml", "-J", "tb _ws", "-Y", "tb || _ws.malformed || _ws.expert"],
                            stdout=subprocess.PIPE, stderr=errors)
    out = Decoded()
    parser = ET.XMLPullParser(["end"])
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a field may show bytes that are not UTF-8
    for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):
        parser.feed(text.decode(chunk))
        for _event, el in parser.read_events():
            if el.tag == "packet":
                out.packets += 1
                _walk(el, out, False)
                el.clear()
    status = proc.wait(timeout=600)
    errors.seek(0)
    assert status == 0, errors.read().decode(errors="replace")[-3000:]
    return out


def analysis_flows(pcap: Path) -> Counter:
    """The traffic messages the analysis's decoder (spark/pcap.py) observes in ``pcap``, per flow."""
    from spark.pcap import decode_pcap_file

    return Counter(obs[2] for obs in decode_pcap_file(str(pcap)).observations)


def tshark_version() -> str:
    """This tshark's version (``4.0.17``), '' without one."""
    if TSHARK_MISSING:
        return ""
    out = subprocess.run(["tshark", "--version"], capture_output=True, text=True, timeout=60).stdout
    return out.split("(Wireshark) ", 1)[-1].split()[0] if "(Wireshark) " in out else ""
