"""The pieces of simnet, each against hand-computed values."""


import pytest
import torch

from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from simnet.attacks.trainer import AttackConfig, AttackTrainer
from simnet.runs.baselines import SyncSim, ring_allreduce_s
from simnet.runs.config import world_from_dict
from simnet.runs.scenario import builtin_scenarios, load_scenario, scenario_from_dict
from simnet.world.churn import ChurnConfig, churn_events
from simnet.world.links import LinkConfig, PartitionConfig, Partitions, SimLinks
from simnet.world.mlp_trainer import MLPConfig, MLPTrainer, forward, loss_and_grad, loss_fn
from simnet.world.scheduler import Scheduler
from simnet.world.speed import SpeedConfig, SpeedModel
from simnet.world.topology import Topology, TopologyConfig


def test_scheduler_orders_by_time_then_insertion():
    s, seen = Scheduler(), []
    s.at(2.0, lambda: seen.append("b"))
    s.at(1.0, lambda: seen.append("a"))
    s.at(2.0, lambda: seen.append("c"))
    s.after(0.5, lambda: s.after(0.0, lambda: seen.append("nested")))
    assert s.run_until(1.5) and seen == ["nested", "a"] and s.now() == 1.5
    s.run_until(10.0)
    assert seen == ["nested", "a", "b", "c"] and s.now() == 10.0
    with pytest.raises(ValueError):
        s.after(-1.0, lambda: None)


def links(n=4, **kw):
    sched = Scheduler()
    topo_kw = kw.pop("topology", {})
    topo = Topology(TopologyConfig(**topo_kw), n, 0)
    parts = Partitions([PartitionConfig(**p) for p in kw.pop("partitions", [])], topo)
    return sched, SimLinks(LinkConfig(**kw), topo, parts, sched, 0)


def test_uplink_serialises_concurrent_sends():
    sched, net = links(latency_s=0.1, bandwidth_mbps=8.0)  # 1 MB/s
    arrivals = {}
    net.send(0, 1, 1_000_000, lambda: arrivals.setdefault("first", sched.now()))
    net.send(0, 2, 1_000_000, lambda: arrivals.setdefault("second", sched.now()))
    net.send(3, 2, 1_000_000, lambda: arrivals.setdefault("other", sched.now()))
    sched.run_until(10)
    assert arrivals["first"] == pytest.approx(1.1)
    assert arrivals["second"] == pytest.approx(2.1)  # queued behind the first on peer 0's uplink
    assert arrivals["other"] == pytest.approx(1.1)  # another uplink is free


def test_wan_links_use_their_own_latency_and_bandwidth():
    sched, net = links(n=4, latency_s=0.001, bandwidth_mbps=1000.0,
                       topology={"kind": "clusters", "n_clusters": 2, "wan_latency_s": 0.5, "wan_bandwidth_mbps": 8.0})
    got = {}
    net.send(0, 1, 1_000_000, lambda: got.setdefault("lan", sched.now()))
    net.send(2, 0, 1_000_000, lambda: got.setdefault("wan", sched.now()))
    sched.run_until(10)
    assert got["lan"] == pytest.approx(0.008 + 0.001)
    assert got["wan"] == pytest.approx(1.0 + 0.5)


def test_partition_drops_messages_until_it_heals():
    sched, net = links(latency_s=0.5, partitions=[{"start_s": 1.0, "end_s": 3.0, "groups": [[0]]}])
    got = []
    net.send(0, 1, 100, lambda: got.append("before"))  # arrives at 0.5
    sched.run_until(0.8)
    net.send(0, 1, 100, lambda: got.append("in flight"))  # would arrive at 1.3: cut
    sched.run_until(2.0)
    net.send(0, 1, 100, lambda: got.append("during"))
    net.send(1, 2, 100, lambda: got.append("same side"))
    sched.run_until(3.0)
    net.send(0, 1, 100, lambda: got.append("healed"))
    sched.run_until(5.0)
    assert got == ["before", "same side", "healed"]
    assert net.messages_lost == 2
    assert net.partitions.heal_time([0, 1, 2], 1.5) == 3.0


def test_attackers_partition_cuts_the_runs_attackers_off_and_nobody_else():
    topo = Topology(TopologyConfig(), 5, 0)
    parts = Partitions([PartitionConfig(start_s=0.0, end_s=10.0, attackers=True)], topo, frozenset({1, 3}))
    assert parts.blocked(1, 0, 5.0) and parts.blocked(2, 3, 5.0)
    assert not parts.blocked(1, 3, 5.0) and not parts.blocked(0, 4, 5.0)
    assert not parts.blocked(1, 0, 10.0)  # healed
    no_attack = Partitions([PartitionConfig(start_s=0.0, end_s=10.0, attackers=True)], topo)
    assert not any(no_attack.blocked(a, b, 5.0) for a in range(5) for b in range(5))


@pytest.mark.parametrize("spec", [{}, {"groups": [[0]], "attackers": True}, {"clusters": True, "attackers": True}])
def test_a_partition_names_exactly_one_way_to_cut(spec):
    with pytest.raises(ValueError, match="exactly one of"):
        PartitionConfig(start_s=0.0, end_s=1.0, **spec)


def test_message_loss_and_packet_loss():
    sched, net = links(latency_s=0.01, loss=0.3, loss_mode="message")
    got = []
    for _ in range(1000):
        net.send(0, 1, 100, lambda: got.append(1))
    sched.run_until(100)
    assert 600 < len(got) < 800
    sched, net = links(latency_s=0.01, bandwidth_mbps=1000.0, loss=0.2, loss_mode="packet", rto_s=0.2)
    times = []
    for _ in range(50):
        net.send(1, 2, 15_000, lambda: times.append(sched.now()))  # 10 packets each
        sched.run_until(sched.now() + 10)
    assert len(times) == 50 and net.packets_lost > 0  # every message arrives, some later
    assert max(b - a for a, b in zip([0.0] + times, times)) > 10 + 0.2


def test_topologies():
    degrees = lambda t: sorted({len(a) for a in t.adj})
    assert degrees(Topology(TopologyConfig(kind="full"), 6, 0)) == [5]
    assert degrees(Topology(TopologyConfig(kind="ring", degree=2), 6, 0)) == [2]
    assert degrees(Topology(TopologyConfig(kind="random_regular", degree=4), 64, 3)) == [4]
    t = Topology(TopologyConfig(kind="clusters", n_clusters=2, wan_degree=1), 8, 0)
    assert t.cluster == [0, 0, 0, 0, 1, 1, 1, 1] and t.is_wan(0, 4) and not t.is_wan(0, 3)
    assert all(any(t.is_wan(a, b) for b in t.adj[a]) for a in range(8))


def test_poisson_churn_rate_and_rejoins():
    cfg = ChurnConfig(mode="poisson", rate_per_min=0.3, downtime_s=20.0, min_online=1)
    events = churn_events(cfg, 100, 600.0, seed=0)
    departures = [e for e in events if e.action != "join"]
    assert 240 < len(departures) < 360  # 0.3 x 100 peers x 10 min = 300 expected (minus offline peers)
    assert {e.action for e in departures} == {"crash", "leave"}
    assert events == sorted(events, key=lambda e: (e.t, e.peer, e.action))
    online = set(range(100))
    for e in events:  # never leave while away, never join while present
        assert (e.peer in online) == (e.action != "join")
        (online.discard if e.action != "join" else online.add)(e.peer)
    assert churn_events(cfg, 100, 600.0, seed=0) == events


def test_speed_model_stragglers_and_shared_streams():
    cfg = SpeedConfig(base_step_s=0.1, spread=0.2, jitter=0.1, stragglers={2: 5.0})
    a, b = SpeedModel(cfg, 4, seed=7), SpeedModel(cfg, 4, seed=7)
    assert a.factors[2] == 5.0
    seq = [a.step_time(2) for _ in range(100)]
    assert seq == [b.step_time(2) for _ in range(100)]
    assert 0.45 < sum(seq) / 100 < 0.56


def test_ring_allreduce_time_formula():
    sched, net = links(n=4, latency_s=0.05, bandwidth_mbps=8.0)
    # 2(n-1)/n * bytes/bandwidth + 2(n-1) * latency
    assert ring_allreduce_s(net, [0, 1, 2, 3], 1_000_000) == pytest.approx(1.5 * 1.0 + 6 * 0.05)


def test_allreduce_of_stepped_replicas_is_the_averaged_gradient_step():
    world = world_from_dict({"n_peers": 4, "model": "lsq", "duration_s": 10.0})
    sim = SyncSim(world, 0, "allreduce")
    x0 = sim.x.clone()
    grads = []
    for tr in sim.trainers:  # the gradient each replica will use on its next minibatch
        probe = LeastSquaresTrainer(tr.cfg)
        probe.generator.set_state(tr.generator.get_state())
        probe.set_flat_params(x0)
        idx = torch.randint(0, probe.a.shape[0], (probe.cfg.batch_size,), generator=probe.generator)
        a, b = probe.a[idx], probe.b[idx]
        grads.append(a.T @ (a @ x0 - b) / len(idx))
    sim._round()
    expected = x0 - sim.trainers[0].cfg.lr * torch.stack(grads).mean(0)
    assert torch.allclose(sim.x, expected, atol=1e-6)


def test_attack_wrapper_publishes_lies_and_mixes_honestly():
    inner = LeastSquaresTrainer(LeastSquaresConfig(dim=4))
    att = AttackTrainer(inner, AttackConfig(kind="sign_flip", scale=2.0, peers=[0]), seed=0)
    x0 = att.get_flat_params()
    assert torch.equal(x0, inner.w)  # unarmed: honest (the node's public copy starts at x0)
    att.arm(lambda: [])
    inner.set_flat_params(x0 + 1.0)
    shown = att.get_flat_params()
    assert torch.allclose(shown, x0 - 2.0)  # x0 - s (x - x0)
    att.set_flat_params(shown + 0.5)  # a mixing step moved what it showed by +0.5
    assert torch.allclose(inner.w, x0 + 1.5)  # ...so its honest parameters move by +0.5
    nan = AttackTrainer(LeastSquaresTrainer(LeastSquaresConfig(dim=4)), AttackConfig(kind="nan", peers=[0]), 0)
    nan.arm(lambda: [])
    assert torch.isnan(nan.get_flat_params()).all()
    chosen = AttackConfig(kind="scale", fraction=0.25).attackers(8, seed=1)
    assert len(chosen) == 2 and chosen == AttackConfig(kind="scale", fraction=0.25).attackers(8, seed=1)


@pytest.mark.parametrize("task,out_dim", [("classify", 4), ("regress", 3)])
def test_mlp_backward_matches_autograd(task, out_dim):
    cfg = MLPConfig(task=task, out_dim=out_dim)
    tr = MLPTrainer(cfg)
    flat = tr.flat.clone().requires_grad_(True)
    x, y = tr.x[:32], tr.y[:32]
    loss = loss_fn(cfg, forward(cfg, flat, x), y)
    (expected,) = torch.autograd.grad(loss, flat)
    value, grad = loss_and_grad(cfg, tr.flat, x, y)
    assert value == pytest.approx(float(loss.detach()), rel=1e-6)
    assert torch.allclose(grad, expected, atol=1e-6)


def test_builtin_scenarios_load():
    assert {"byzantine", "churn", "scale", "stragglers", "wan"} <= set(builtin_scenarios())
    for name in builtin_scenarios():
        cfg = load_scenario(name, seed=3)
        assert cfg.seed == 3 and cfg.worlds


@pytest.mark.parametrize("data,message", [
    ({"world": {"n_peer": 3}, "runs": [{"name": "a"}]}, "n_peer"),
    ({"world": {"speed": {"base_step": 1}}, "runs": [{"name": "a"}]}, "base_step"),
    ({"runs": [{"name": "a", "method": "ddp"}]}, "method"),
    ({"runs": [{"name": "a", "method": "allreduce", "set": {"churn": {"mode": "poisson", "rate_per_min": 1}}}]},
     "baselines"),
    ({"world": {"gossip": {"compresion": "int8"}}, "runs": [{"name": "a"}]}, "compresion"),
    ({"runs": [{"name": "a"}], "compare": [["a", "b"]]}, "compare"),
    ({"runs": []}, "runs"),
])
def test_bad_scenarios_name_the_problem(data, message):
    with pytest.raises(ValueError, match=message):
        scenario_from_dict(data)


def test_a_scenario_sets_a_nested_session_section_by_name():
    world = world_from_dict({"n_peers": 2, "session": {"partners": {"barren_answers": 5}, "pulls_per_publish": 1}})
    cfg = world.session_config()
    assert cfg.partners.barren_answers == 5 and cfg.pulls_per_publish == 1
    with pytest.raises(ValueError, match="unknown session.partners setting"):
        world_from_dict({"n_peers": 2, "session": {"partners": {"nope": 1}}}).session_config()
