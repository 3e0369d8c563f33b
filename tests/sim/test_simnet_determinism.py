"""Same seed, same numbers: two runs print byte-identical summary lines."""

from conftest import simulate

WORLD = {
    "n_peers": 6, "duration_s": 8.0, "eval_every_s": 1.0,
    "speed": {"base_step_s": 0.1, "spread": 0.3, "jitter": 0.2, "stragglers": {"1": 3.0}},
    "links": {"latency_s": 0.02, "latency_dist": "lognormal", "latency_jitter": 0.5, "loss": 0.05},
    "session": {"request_timeout_s": 1.0},
    "topology": {"kind": "random_regular", "degree": 3},
    "partitions": [{"start_s": 2.0, "end_s": 4.0, "groups": [[0, 1]]}],
    "gossip": {"gossip_every": 2, "compression": "topk:0.1+int8"},
    "churn": {"mode": "schedule", "events": [
        {"t": 1.5, "peer": 2, "action": "crash"}, {"t": 2.5, "peer": 3, "action": "leave"},
        {"t": 3.0, "peer": 2, "action": "join"}, {"t": 5.0, "peer": 3, "action": "join"}]},
    "attack": {"kind": "nan", "peers": [5]},
}
RUNS = [{"name": "gossip"}, {"name": "flipped", "set": {"attack": {"kind": "sign_flip", "scale": 3.0}}}]


def summary_line(seed: int) -> str:
    lines: list[str] = []
    simulate(WORLD, RUNS, [["flipped", "gossip"]], seed=seed, lines=lines)
    assert lines[-1].startswith("summary: {")
    return lines[-1]


def test_same_seed_gives_byte_identical_summaries():
    first, second = summary_line(0), summary_line(0)
    assert first == second
    # The check can fail: another seed gives other numbers.
    assert summary_line(1) != first


def test_the_small_scenario_exercises_what_it_claims_to():
    s = simulate(WORLD, RUNS[:1])["runs"]["gossip"]
    t = s["totals"]
    assert t["churn"] == {"crash": 1, "leave": 1, "join": 2}
    assert t["joins"] == 2  # both restarted peers fetched a signed state
    assert t["packets_lost"] > 0 and t["exchange_failures"] > 0  # loss and the partition bit
    assert t["frames_refused"].get("non_finite", 0) > 0  # the NaN attacker's forged frames
