from __future__ import annotations

import json
import subprocess
import sys

import pytest

from router.config import ConfigError, config_from_dict, load_config

BASE = {"node": "r1", "router_listen": ["127.0.0.1:7447"], "client_listen": ["127.0.0.1:7448"]}


def test_defaults():
    cfg = config_from_dict(dict(BASE))
    assert cfg.lease_ms == 3000 and cfg.keepalive_ms == 750
    assert cfg.pipeline.scheduler == "strict"
    assert cfg.pipeline.queue_sizes == (1, 1, 1, 1, 2, 4, 2, 1)
    assert str(cfg.router_listen[0]) == "127.0.0.1:7447"


def test_full_config():
    cfg = config_from_dict(dict(BASE, neighbours=[{"name": "r2", "address": "10.0.0.2", "port": 7447, "weight": 50,
                                                    "capacity_bps": 10_000_000}],
                                queue_sizes={"data": 8, "1": 2}, scheduler="wrr",
                                wrr_weights=[1, 2, 3, 4, 5, 6, 7, 8], batch_size_bytes=8192,
                                metrics_listen={"host": "127.0.0.1", "port": 9100}, lease_ms=2000))
    assert cfg.neighbours[0].weight == 50 and cfg.neighbours[0].capacity_bps == 10_000_000
    assert cfg.pipeline.queue_sizes[5] == 8 and cfg.pipeline.queue_sizes[1] == 2
    assert cfg.pipeline.batch_threshold_bytes == 8192
    assert cfg.keepalive_ms == 500
    assert cfg.metrics_listen is not None and cfg.metrics_listen.port == 9100


@pytest.mark.parametrize("patch, message", [
    ({"colour": "red"}, "unknown config key"),
    ({"neighbours": [{"name": "r2", "address": "x", "port": 1, "wieght": 3}]}, "unknown key"),
    ({"neighbours": [{"name": "r2", "port": 1}]}, "missing required key 'address'"),
    ({"scheduler": "fifo"}, "scheduler"),
    ({"queue_sizes": [1, 2]}, "expected 8 values"),
    ({"queue_sizes": {"hot": 1}}, "unknown priority"),
    ({"lease_ms": 1000, "keepalive_ms": 1000}, "keepalive_ms"),
    ({"log_level": "LOUD"}, "log_level"),
    ({"router_listen": ["nohost"]}, "host:port"),
    ({"node": ""}, "node"),
    ({"neighbours": [{"name": "r1", "address": "x", "port": 1}]}, "differ from node"),
    ({"fragmentation": "yes"}, "fragmentation"),
    ({"max_message_bytes": 10}, "max_message_bytes"),
    ({"streaming_links": 1}, "streaming_links"),
    ({"streaming_threshold_bytes": 0}, "streaming_threshold_bytes"),
    ({"stream_pacing": 1.5}, "stream_pacing"),
])
def test_rejections_name_the_problem(patch, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(dict(BASE, **patch))


def test_load_json_and_yaml(tmp_path):
    (tmp_path / "n.json").write_text(json.dumps(BASE))
    assert load_config(str(tmp_path / "n.json")).node == "r1"
    (tmp_path / "n.yaml").write_text("node: r9\nclient_listen: ['127.0.0.1:1']\n")
    assert load_config(str(tmp_path / "n.yaml")).node == "r9"
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_config(str(tmp_path / "bad.json"))


def test_cli_rejects_unknown_key_with_exit_2(tmp_path):
    (tmp_path / "n.json").write_text(json.dumps(dict(BASE, surprise=1)))
    r = subprocess.run([sys.executable, "-m", "router", "--config", str(tmp_path / "n.json")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "unknown config key" in r.stderr and "surprise" in r.stderr
