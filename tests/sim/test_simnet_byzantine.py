"""Self-centred clipping keeps honest loss within 5% of clean under 20% attackers, while plain
mixing (clip=False, the control) diverges. NaN attackers are stopped by the protocol.

10 peers on a full mesh, 2 of them attacking: every honest peer has 2 liars among its 9
neighbours, so the clip radius uses the 0.3-quantile of recent neighbour distances (an
honest one; it must stay below the honest share 7/9) times 1.

Attacks on the protocol (future timestamps, join liars, sybil addresses) each run against
the production peer and against a control whose honest peers lack the one defence the
attack targets (`attack.undefended`): the defended run must stay within 5% of clean and
the control must do measurably worse.
"""

import pytest

from conftest import simulate

pytestmark = pytest.mark.slow  # a dozen 60 s swarms of 10 peers under attack, minutes on 2 cores: run by .ci/run's slow section

WORLD = {
    "n_peers": 10, "duration_s": 60.0, "eval_every_s": 2.0, "model_args": {"lr_decay_steps": 200},
    "speed": {"base_step_s": 0.1, "spread": 0.1, "jitter": 0.05},
    "links": {"latency_s": 0.02},
    "topology": {"kind": "full"},
    "gossip": {"gossip_every": 4, "compression": "int8", "clip_quantile": 0.3, "clip_multiplier": 1.0},
    "attack": {"kind": "sign_flip", "fraction": 0.2, "scale": 10.0},
}


@pytest.fixture(scope="module")
def summary() -> dict:
    runs = [
        {"name": "clean", "set": {"attack": {"kind": "none"}}},
        {"name": "clipped"},
        {"name": "plain", "set": {"gossip": {"clip": False}}},
        {"name": "future", "set": {"attack": {"kind": "future"}}},
        {"name": "future_trusting", "set": {"attack": {"kind": "future", "undefended": True}}},
    ]
    return simulate(WORLD, runs, [[r["name"], "clean"] for r in runs[1:]])


def test_clipping_keeps_honest_loss_within_5_percent(summary):
    assert summary["runs"]["clipped"]["totals"]["attackers"] == 2
    ratio = summary["ratios"]["clipped/clean"]["final_loss"]
    # Measured (seed 0): 1.026.
    assert ratio <= 1.05, ratio
    assert summary["runs"]["clipped"]["diverged_peers"] == 0


def test_control_plain_mixing_diverges(summary):
    plain = summary["runs"]["plain"]
    # Measured (seed 0): every honest peer's parameters overflow within ~25 s.
    clean = float(summary["runs"]["clean"]["final_loss"])
    assert plain["diverged_peers"] > 0 or float(plain["final_loss"]) > 10 * clean


def test_nan_updates_are_refused_by_the_protocol():
    world = {**WORLD, "n_peers": 6, "duration_s": 10.0, "attack": {"kind": "nan", "peers": [0]}}
    s = simulate(world, [{"name": "nan"}, {"name": "clean", "set": {"attack": {"kind": "none"}}}], [["nan", "clean"]])
    t = s["runs"]["nan"]["totals"]
    assert t["publish_failures"] >= 1  # the honest encoder will not sign NaN
    # receivers refuse them for their values, or drop them unread where they cannot follow the copy held
    # (no copy of the attacker yet: a gap), so none is applied and some are never decoded
    assert t["forged_frames"] >= 1 and 1 <= t["frames_refused"]["non_finite"] <= t["forged_frames"]
    assert s["runs"]["nan"]["diverged_peers"] == 0
    assert s["ratios"]["nan/clean"]["final_loss"] < 1.05


def test_a_neighbour_that_steps_farther_each_time_cannot_steer_the_radius():
    """Radius steering: two attackers publish a point 1.25x farther at every publish. The radius
    keeps one latest distance per neighbour and a cap from our own norm, so it does not follow;
    without clipping (the control) the swarm is dragged away."""
    world = {**WORLD, "duration_s": 40.0, "gossip": {"gossip_every": 4, "compression": "int8"},
             "attack": {"kind": "steer", "fraction": 0.2, "growth": 1.25}}
    runs = [{"name": "clean", "set": {"attack": {"kind": "none"}}}, {"name": "steer"},
            {"name": "steer_plain", "set": {"gossip": {"clip": False}}}]
    s = simulate(world, runs, [["steer", "clean"], ["steer_plain", "clean"]])
    # Measured (seed 0, 40 s): 1.051 defended (1.049 before exchanges were bound to their receiver,
    # which delays each pair's first push by one exchange); seeds 1-3 give 1.046-1.073 either way,
    # so the bound leaves seed 0 that noise. Without clipping: 3.8e28.
    assert s["ratios"]["steer/clean"]["final_loss"] <= 1.06
    assert s["ratios"]["steer_plain/clean"]["final_loss"] > 10


def test_a_timestamp_from_the_future_buys_no_freshness(summary):
    """The sign-flip attackers' frames claim a time 290 s ahead (just inside the receivers' 300 s
    skew window). Receivers mirror a stamp from after its arrival: such a copy counts as 290 s old,
    past the staleness cut-off (tau_max 64 steps = 6.4 s here), so it weighs nothing; the control
    believes the claim and mixes those copies as never stale. The payload itself (a sign flip x10)
    is far outside the radius, whose pull redescends, so the loss barely tells the runs apart: the
    weight is what the lie buys, and what is checked."""
    runs, r = summary["runs"], summary["ratios"]
    # Measured (seed 0): 1.0062 defended, 1.0073 trusting; copies mixed by all 10 peers 2,127
    # defended, 2,523 trusting, 2,608 clean: the liars' copies (2 of 9 neighbours) weigh nothing.
    assert r["future/clean"]["final_loss"] <= 1.05
    assert runs["future"]["totals"]["mixes"] <= 0.9 * runs["future_trusting"]["totals"]["mixes"]
    assert runs["future"]["totals"]["frames_refused"].get("stale_timestamp", 0) == 0  # heard, not refused


def test_a_flip_from_an_attacker_that_never_mixes_is_far_out_and_barely_pulls():
    """Sign-flip attackers that ignore what they receive: their vector follows their own training
    alone and lands ten times its progress away from every honest copy. With plain clipping
    (clip_power = 1, the control) each such copy still pulls a whole radius at every mix; with
    the default redescending clip its pull falls with its distance."""
    world = {**WORLD, "duration_s": 40.0, "attack": {**WORLD["attack"], "mixes": False}}
    runs = [{"name": "clean", "set": {"attack": {"kind": "none"}}}, {"name": "flip"},
            {"name": "flip_clipped", "set": {"gossip": {"clip_power": 1.0}}}]
    s = simulate(world, runs, [["flip", "clean"], ["flip_clipped", "clean"]])
    defended, control = s["ratios"]["flip/clean"]["final_loss"], s["ratios"]["flip_clipped/clean"]["final_loss"]
    # Measured (40 s, seeds 0/1/2): 1.011/1.024/1.009 defended, 1.114/1.220/1.142 with plain clipping.
    assert defended <= 1.03, defended
    assert control >= defended + 0.03, (defended, control)


def test_an_attacker_at_the_edge_of_the_radius_stays_within_5_percent():
    """The attacker who knows the rule: it publishes straight back along its progress, as far as its
    median distance to the copies it holds (what a receiver's radius is made of), at every publish.
    Redescending does not help against it (it sits at the radius); the radius bounds it."""
    world = {**WORLD, "duration_s": 40.0, "attack": {"kind": "edge", "fraction": 0.2, "scale": 1.0}}
    s = simulate(world, [{"name": "clean", "set": {"attack": {"kind": "none"}}}, {"name": "edge"}], [["edge", "clean"]])
    # Measured (40 s, seeds 0/1/2): 1.020/1.050/1.022 (without clipping 1.028/1.055/1.029): the
    # radius is the whole defence here, and seed 1 sits on the bound.
    assert s["ratios"]["edge/clean"]["final_loss"] <= 1.05
    assert s["runs"]["edge"]["diverged_peers"] == 0


SMALL = {**WORLD, "duration_s": 30.0, "attack": {"peers": [0, 1]}}
REJOINS = {"mode": "schedule", "events": [
    {"t": 8.0, "peer": 5, "action": "crash"}, {"t": 12.0, "peer": 5, "action": "join"},
    {"t": 10.0, "peer": 7, "action": "leave"}, {"t": 16.0, "peer": 7, "action": "join"}]}


@pytest.fixture(scope="module")
def protocol_attacks() -> dict:
    """Join liars (with two honest peers restarting and joining) and sybils, each with its control."""
    liar = {"attack": {"kind": "join_liar", "scale": 3e30}, "churn": REJOINS, "session": {"request_timeout_s": 5.0}}
    sybil = {"attack": {"kind": "sybil", "sybil_rate": 20.0}, "bootstrap": "one"}

    def control(arm: dict) -> dict:
        return {**arm, "attack": {**arm["attack"], "undefended": True}}

    runs = [{"name": "clean", "set": {"attack": {"kind": "none"}}},
            {"name": "join_liar", "set": liar}, {"name": "join_liar_trusting", "set": control(liar)},
            {"name": "sybil", "set": sybil}, {"name": "sybil_trusting", "set": control(sybil)}]
    return simulate(SMALL, runs, [[r["name"], "clean"] for r in runs[1:]])


def test_joiners_never_adopt_a_liars_state(protocol_attacks):
    """Two attackers answer every hello with step 1e9 and every state request with weights of
    about 1e30, signed and well formed. Restarted peers ask everyone, fetch the furthest along
    first, and refuse it on their probe batch; the control adopts it."""
    runs, ratios = protocol_attacks["runs"], protocol_attacks["ratios"]
    t = runs["join_liar"]["totals"]
    assert t["churn"]["join"] == 2 and t["joins"] == 2  # both restarted peers joined...
    assert t["adopted_from_attacker"] == 0 and t["joins_refused"] >= 2  # ...from an honest state, past the liars
    # Measured (seed 0): 0.9995 defended (4 lies refused); the control adopted both lies and ended at ~1e27.
    assert ratios["join_liar/clean"]["final_loss"] <= 1.05
    control = runs["join_liar_trusting"]
    assert control["totals"]["adopted_from_attacker"] >= 1
    assert control["final_loss"] > 10 * runs["clean"]["final_loss"]


def test_sybil_addresses_get_no_snapshots_and_displace_no_partner(protocol_attacks):
    """Two attackers send 20 control-only exchanges a second, each from a fresh key naming a made-up
    listen address, to peers that learn each other by peer exchange (one bootstrap address each).
    Those addresses stay candidates until a hello signed over our nonce comes back from them, which
    never happens; the control takes them as verified at once and picks partners among them."""
    runs, ratios = protocol_attacks["runs"], protocol_attacks["ratios"]
    t = runs["sybil"]["totals"]
    assert t["sybil_requests"] > 500
    assert t["exchanges_to_made_up"] == 0 and t["snapshots_to_made_up"] == 0
    assert t["partners_made_up"] == 0 and t["partners_real_min"] >= 7
    # Measured (seed 0): 1.0008 defended, 1.077 for the control (49 partner slots held by made-up
    # addresses at the end, 199 exchanges sent to them; none carried a snapshot, since a push needs
    # a ticket from the receiver's answer and nothing ever answers there).
    assert ratios["sybil/clean"]["final_loss"] <= 1.05
    c = runs["sybil_trusting"]["totals"]
    assert c["exchanges_to_made_up"] > 0 and c["partners_made_up"] > 0 and c["snapshots_to_made_up"] == 0
    assert ratios["sybil_trusting/clean"]["final_loss"] > ratios["sybil/clean"]["final_loss"] + 0.03


def test_pushy_liars_that_exchange_with_everyone_every_period_buy_no_more_pulls():
    """Two ALIE and two steering liars start an exchange with every partner at every publish
    (`attack.pushy`): far more exchanges than the honest peers start, yet only the copies of
    partners an honest peer chose pull it, so each ends within 5% of clean."""
    world = {**WORLD, "duration_s": 40.0}
    runs = [{"name": "clean", "set": {"attack": {"kind": "none"}}},
            {"name": "alie", "set": {"attack": {"kind": "alie", "z": 1.0}}},
            {"name": "pushy_alie", "set": {"attack": {"kind": "alie", "z": 1.0, "pushy": True}}},
            {"name": "pushy_steer", "set": {"attack": {"kind": "steer", "growth": 1.25, "pushy": True}}}]
    s = simulate(world, runs, [["pushy_alie", "clean"], ["pushy_steer", "clean"]])
    # Each pushy liar starts max_partners (8) exchanges a publish where an honest peer starts 4:
    # two of ten peers at twice the count add ~20% to the swarm's exchanges.
    assert s["runs"]["pushy_alie"]["totals"]["exchanges_ok"] > 1.1 * s["runs"]["alie"]["totals"]["exchanges_ok"]
    for name in ("pushy_alie", "pushy_steer"):
        assert s["ratios"][f"{name}/clean"]["final_loss"] <= 1.05, s["ratios"][f"{name}/clean"]
        assert s["runs"][name]["diverged_peers"] == 0


def test_pushy_is_refused_on_attacks_that_publish_no_parameters():
    from simnet.attacks.trainer import AttackConfig

    with pytest.raises(ValueError, match="pushy"):
        AttackConfig(kind="sybil", pushy=True)
    with pytest.raises(ValueError, match="pushy"):
        AttackConfig(kind="alie", pushy_undefended=True)


def test_attackers_cut_off_reach_nobody():
    """The `attackers_cut` control: with the attackers partitioned off, what they publish cannot
    matter, so the honest peers end bit for bit the same under any lie (and unlike the attacked run)."""
    world = {**WORLD, "n_peers": 6, "duration_s": 10.0, "attack": {"kind": "sign_flip", "peers": [0, 1], "scale": 10.0}}
    cut = {"partitions": [{"start_s": 0.0, "end_s": 1000.0, "attackers": True}]}
    s = simulate(world, [{"name": "flip_cut", "set": cut},
                         {"name": "steer_cut", "set": {**cut, "attack": {"kind": "steer", "peers": [0, 1]}}},
                         {"name": "flip"}], [])
    runs = s["runs"]
    assert runs["flip_cut"]["final_loss"] == runs["steer_cut"]["final_loss"]
    assert runs["flip"]["final_loss"] != runs["flip_cut"]["final_loss"]
