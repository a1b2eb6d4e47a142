"""`testbed wireshark`: the dissector's path and how to load it; `--install` into the personal plugin folder;
for a results folder, the tshark command with the run's ports (manifest extra.ports) and manifest, which decodes
that run's captures as printed."""
from __future__ import annotations

import json
import shlex

from router.codec import FrameKind, encode_frame, encode_json_frame, router_id
from testbed.wireshark.dissector import LUA_FILE
from tests.conftest import run_cli
from tests.wireshark.test_wireshark_frames import message, write_capture
from tests.wireshark.tshark import needs_tshark, tshark


def test_prints_the_path_and_how_to_load_it():
    out = run_cli("wireshark").stdout
    assert out.splitlines()[0] == str(LUA_FILE) and LUA_FILE.is_file()
    assert f"-X lua_script:{LUA_FILE}" in out and "--install" in out


def test_install_copies_it_into_the_personal_plugin_folder(tmp_path):
    out = run_cli("wireshark", "--install", env={"HOME": str(tmp_path)}).stdout
    installed = tmp_path / ".local/lib/wireshark/plugins/tb.lua"
    assert installed.read_text() == LUA_FILE.read_text() and f"installed {installed}" in out


def a_run(tmp_path, ports: dict):
    run = tmp_path / "run"
    (run / "pcap").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"spec": {"routers": ["r1", "r2"]}, "extra": {"ports": ports},
                                                   "router_driver": {"name": "testbed", "wire": "testbed"}}))
    stream = encode_json_frame(FrameKind.HELLO, {"role": "router", "name": "r1"}) + encode_frame(
        FrameKind.DATA, message(3, 0, priority=1, origin=router_id("r2")), flags=1)
    write_capture(run / "pcap/r1-eth1.pcap", stream, port=ports["router"])
    return run


@needs_tshark
def test_the_printed_command_decodes_on_the_runs_ports_with_its_router_names(tmp_path):
    run = a_run(tmp_path, {"router": 17447, "client": 17448, "metrics": 19464})
    out = run_cli("wireshark", str(run)).stdout
    [line] = [line for line in out.splitlines() if line.strip().startswith("tshark -X")]
    argv = shlex.split(line)
    assert "tb.ports:17447,17448" in argv and f"tb.manifest:{run / 'manifest.json'}" in argv
    assert "tcp.reassemble_out_of_order:TRUE" in argv  # test_wireshark_retransmissions.py: what it is for
    # the heuristic off: the ports preference alone finds the frames
    fields = ["--disable-heuristic", "tb_tcp", "-Y", "tb", "-T", "fields", "-e", "tb.origin_name", "-e", "tb.flow"]
    assert tshark(run / "pcap/r1-eth1.pcap", *argv[argv.index("-o"):argv.index("-r")], *fields).splitlines() == ["r2\t3"]
    assert tshark(run / "pcap/r1-eth1.pcap", *fields).split() == []


def test_a_run_of_another_wire_is_refused(tmp_path):
    run = a_run(tmp_path, {"router": 7447, "client": 7448, "metrics": 9464})
    (run / "manifest.json").write_text(json.dumps({"router_driver": {"name": "zenoh", "wire": "zenoh"}}))
    result = run_cli("wireshark", str(run), check=False)
    assert result.returncode == 2 and "wire 'zenoh'" in result.stderr
    result = run_cli("wireshark", str(tmp_path / "nothing"), check=False)
    assert result.returncode == 2 and "not a run's results folder" in result.stderr


def test_its_results_folder_completes(tmp_path):
    from tests.test_cli_completion import complete

    a_run(tmp_path / "results", {"router": 7447, "client": 7448, "metrics": 9464})
    (tmp_path / "results/other").mkdir()
    assert complete("wireshark", "results/", cwd=tmp_path) == ["results/run"]
