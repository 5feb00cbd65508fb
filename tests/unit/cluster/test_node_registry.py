"""Hardware profiles and the node registry (health from heartbeats, explicit times)."""

import pytest

from caramba.cluster import HardwareProfile, NodeRegistry, UnknownNode, backend_resources, probe


def test_probe_describes_this_machine():
    p = probe("n1")
    assert p.node_id == "n1" and p.cpus >= 1 and p.memory_bytes > 0 and p.gflops > 0
    assert p.has_backend("cpu") and "cpu" in p.available_backends
    assert p.backends["cpu"].versions["numpy"]
    assert backend_resources(p.backends)["backend:cpu"] > 0
    assert probe("n2", measure=False).gflops == 0.0


def test_health_follows_heartbeats(tmp_path):
    reg = NodeRegistry(tmp_path / "nodes.sqlite", heartbeat_ttl=10)
    reg.register(HardwareProfile(node_id="a", cpus=2), now=100.0)
    reg.register(HardwareProfile(node_id="b"), now=100.0)
    assert [n.health for n in reg.nodes(now=105.0)] == ["alive", "alive"]
    reg.heartbeat("a", now=115.0)
    assert {n.node_id: n.health for n in reg.nodes(now=120.0)} == {"a": "alive", "b": "suspect"}
    assert [n.node_id for n in reg.nodes(now=131.0, health="dead")] == ["b"]
    reg.heartbeat("a", now=90.0)  # a late, out-of-order heartbeat never moves time back
    assert reg.get("a", now=120.0).last_heartbeat == 115.0
    with pytest.raises(UnknownNode, match="no node 'c' is registered"):
        reg.heartbeat("c")
    reg.close()
    again = NodeRegistry(tmp_path / "nodes.sqlite", heartbeat_ttl=10)
    assert again.get("a", now=116.0).profile.cpus == 2  # persistent
    again.remove("b")
    assert [n.node_id for n in again.nodes()] == ["a"]
