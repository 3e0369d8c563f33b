"""Gossip reaches the target before synchronous all-reduce when one peer is 5x slower.

Control: with no straggler on a fast LAN, all-reduce (a full averaged gradient every
step, almost free to communicate, at three times the step size of one process, which its
8-fold batch allows) gets there first, so the check can fail.
"""

from conftest import simulate

WORLD = {
    "n_peers": 8, "duration_s": 300.0, "eval_every_s": 1.0, "target_loss": 0.75, "stop_at_target": True,
    "tail_fraction": 0.0,
    "speed": {"base_step_s": 0.1, "stragglers": {"0": 5.0}},
    "links": {"latency_s": 0.05, "bandwidth_mbps": 100.0},
    "topology": {"kind": "random_regular", "degree": 4},
    "gossip": {"gossip_every": 4, "compression": "int8"},
}
RUNS = [{"name": "gossip"}, {"name": "allreduce", "method": "allreduce"}]


def test_gossip_beats_allreduce_with_a_straggler():
    s = simulate(WORLD, RUNS, [["gossip", "allreduce"]])
    gossip, ar = s["runs"]["gossip"]["time_to_target_s"], s["runs"]["allreduce"]["time_to_target_s"]
    assert gossip is not None and ar is not None
    assert gossip < ar / 3, (gossip, ar)


def test_control_allreduce_wins_without_straggler_on_a_lan():
    lan = {**WORLD, "speed": {"base_step_s": 0.1}, "links": {"latency_s": 0.0005, "bandwidth_mbps": 10000.0}}
    s = simulate(lan, [RUNS[0], {**RUNS[1], "set": {"model_args": {"lr": 0.3}}}])
    gossip, ar = s["runs"]["gossip"]["time_to_target_s"], s["runs"]["allreduce"]["time_to_target_s"]
    # Measured (seed 0): gossip 5 s (partner steps at work), all-reduce at lr 0.3 3 s (at lr 0.2 it ties gossip).
    assert gossip is not None and ar is not None
    assert ar < gossip, (gossip, ar)
