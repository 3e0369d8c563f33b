"""How hard one neighbour copy pulls: staleness from our own publish, a redescending clip, mirrored stamps.

Exact values on hand-built views and in-process nodes (no sockets, no threads).
"""

import math

import pytest
import torch

from async_opt import mix_diffs
from async_opt.mixing import check_power
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.core.view import CopyView, MixView
from peer.metrics import Metrics
from protocol import Identity, flat_model_spec
from tests.unit.exchange_helpers import exchange

T = 1_000_000.0


def mixer_at_one_step_per_second(pulls: int = 2, **cfg) -> Mixer:
    """Two pulls per publish: each copy weighs 2/3 of a pair average's γ = 0.5, i.e. 1/3."""
    mixer = Mixer(GossipConfig(swarm="test", staleness="constant,gamma=0.5", clip=False, **cfg), pulls)
    mixer.observe_boundary(T - 1.0)
    mixer.observe_boundary(T)  # step time 1 s: staleness in steps = seconds
    return mixer


def view(published_at: float | None, copies: list[tuple[float, float]]) -> MixView:
    """Our public copy at 0 and one pulled neighbour copy per (value, published_at)."""
    return MixView(torch.zeros(4), tuple(CopyView(bytes([i + 1]) * 32, i + 1, torch.full((4,), v), at, pulled=i + 1)
                                         for i, (v, at) in enumerate(copies)), 0.0, published_at)


def staleness_of(mixer: Mixer, v: MixView, now: float = T + 3.0) -> list[float]:
    return mixer.mix(torch.zeros(4), v, 10, now)[1].staleness_steps


def test_staleness_counts_from_our_own_last_publish():
    """Our x̂_i was published at T − 2; a copy published after it is not stale, one published at
    T − 10 is 8 steps older than ours, whatever the time of the mix."""
    assert staleness_of(mixer_at_one_step_per_second(), view(T - 2.0, [(1.0, T - 1.0), (1.0, T - 10.0)])) == [0.0, 8.0]


def test_the_control_counts_from_now():
    """staleness_relative=False: our own copy's age (5 s here) is counted against every copy."""
    mixer = mixer_at_one_step_per_second(staleness_relative=False)
    assert staleness_of(mixer, view(T - 2.0, [(1.0, T - 1.0), (1.0, T - 10.0)])) == [4.0, 13.0]


def test_before_our_first_publish_nothing_is_older_and_a_later_stamp_is_capped_at_now():
    mixer = mixer_at_one_step_per_second()
    assert staleness_of(mixer, view(None, [(1.0, T - 50.0)])) == [0.0]
    mixer = mixer_at_one_step_per_second()  # our publish stamped 100 s after the mix: counted as now
    assert staleness_of(mixer, view(T + 103.0, [(1.0, T - 7.0)])) == [10.0]


def test_a_fresher_copy_pulls_with_the_full_rate():
    mixer = mixer_at_one_step_per_second()
    mixed, _ = mixer.mix(torch.zeros(4), view(T - 2.0, [(1.0, T - 1.0)]), 10, T + 3.0)
    assert torch.allclose(mixed, torch.full((4,), 1 / 3))  # gamma 0.5 × 2/3, weight 1


@pytest.mark.parametrize("power, pull", [(1.0, 2.0), (2.0, 1.0), (3.0, 0.5)])
def test_a_copy_beyond_the_radius_pulls_less_the_farther_it_is(power, pull):
    """A difference of length 4 against a radius of 2: plain clipping pulls the radius, 2; power p
    pulls 2 · (2/4)^(p − 1). Inside the radius every power pulls the whole difference."""
    far = torch.tensor([4.0, 0.0])
    out = mix_diffs(torch.zeros(2), [(far, 1.0, 4.0)], 2.0, power)
    assert out.tolist() == pytest.approx([pull, 0.0])
    near = torch.tensor([1.5, 0.0])
    assert mix_diffs(torch.zeros(2), [(near, 1.0, 1.5)], 2.0, power).tolist() == pytest.approx([1.5, 0.0])


def test_the_most_any_copy_pulls_is_the_radius_and_a_copy_ten_radii_out_pulls_a_tenth():
    pulls = {d: mix_diffs(torch.zeros(1), [(torch.tensor([d]), 1.0, d)], 1.0, 2.0).item() for d in (0.5, 1.0, 2.0, 10.0)}
    assert pulls == pytest.approx({0.5: 0.5, 1.0: 1.0, 2.0: 0.5, 10.0: 0.1})


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, math.inf, math.nan])
def test_a_power_below_one_or_not_finite_is_refused(bad):
    with pytest.raises(ValueError, match="power"):
        check_power(bad)
    with pytest.raises(ValueError, match="clip_power"):
        GossipConfig(clip_power=bad)


def node(i: int) -> GossipNode:
    spec = flat_model_spec(4)
    return GossipNode(GossipConfig(swarm="test"), Identity.generate(bytes([i]) * 32), spec, torch.zeros(4),
                      now=T, metrics=Metrics())


@pytest.mark.parametrize("lead, held_as", [(10.0, T - 10.0), (290.0, T - 290.0), (-3.0, T - 3.0), (0.0, T)])
def test_a_stamp_after_arrival_counts_as_old_as_it_claims_to_be_new(lead, held_as):
    """A sender stamps its frames `lead` seconds from our clock. A stamp from the past is taken as it
    is; one from the future is mirrored about the arrival, so a liar claiming 290 s of freshness is
    held as 290 s old (past every staleness cut-off) and a sender whose clock runs 10 s ahead loses
    those 10 s, not everything."""
    a, b = node(1), node(2)
    exchange(a, b, T)  # first contact: b's ticket for a
    a.publish(torch.ones(4), 1, T + lead)
    b.handle_request(a.build_request(b.identity.public_key, T + lead), T)
    assert b.neighbours[a.identity.public_key].published_at == held_as


def test_each_neighbour_pulls_once_per_publish_of_ours():
    """x̂_i stays put until we publish, so four new versions of the same copy would pull the same
    difference four times over (a straggler between its publishes overshoots by 4·γ). Within one
    publish period a neighbour's versions share one rate; a second neighbour has its own; our next
    publish starts a new consensus step."""
    mixer = mixer_at_one_step_per_second()
    ours = torch.zeros(4)
    x = torch.zeros(4)

    def mix(public: torch.Tensor, *copies: tuple[int, int, float]) -> torch.Tensor:
        v = MixView(public, tuple(CopyView(bytes([key]) * 32, version, torch.full((4,), value), T, pulled=version)
                                  for key, version, value in copies), 0.0, T - 1.0)
        return mixer.mix(x, v, 10, T + 1.0)[0]

    x = mix(ours, (1, 1, 1.0))
    assert torch.allclose(x, torch.full((4,), 1 / 3))  # 1/3 of the difference 1
    for version in (2, 3, 4):
        x = mix(ours, (1, version, 1.0))
    assert torch.allclose(x, torch.full((4,), 1 / 3))  # newer versions, same period: nothing more
    x = mix(ours, (1, 4, 1.0), (2, 1, -1.0))
    assert torch.allclose(x, torch.zeros(4))  # another neighbour pulls with its own rate
    x = mix(torch.zeros(4), (1, 5, 1.0), (2, 1, -1.0))  # we published (a new x̂_i): a new step
    assert torch.allclose(x, torch.full((4,), 1 / 3))


def test_m_fresh_dense_copies_give_the_exact_mean_of_the_m_plus_one_models():
    for pulls, values in ((1, [3.0]), (2, [1.0, 2.0]), (3, [1.0, 2.0, 5.0])):
        mixer = Mixer(GossipConfig(swarm="test", staleness="constant,gamma=0.5", clip=False), pulls)
        copies = tuple(CopyView(bytes([i + 1]) * 32, 1, torch.full((4,), v), T, pulled=1) for i, v in enumerate(values))
        mixed, report = mixer.mix(torch.zeros(4), MixView(torch.zeros(4), copies, 0.0, T), 10, T)
        assert report.mixed == pulls
        assert torch.allclose(mixed, torch.full((4,), sum(values) / (pulls + 1)))


def test_a_period_never_weighs_more_than_its_pulls_however_the_copies_arrive():
    """One pull per publish: a pair average. A second neighbour's copy arriving in the same period
    (an exchange of the last period answered late) waits for the next one instead of pulling
    the model past the mean; the ended period's weights are what the step-size rule measures."""
    mixer = mixer_at_one_step_per_second(pulls=1)
    ours, x = torch.zeros(4), torch.zeros(4)
    one = CopyView(b"\x01" * 32, 1, torch.ones(4), T, pulled=1)
    two = CopyView(b"\x02" * 32, 2, torch.full((4,), 3.0), T, pulled=2)
    x, report = mixer.mix(x, MixView(ours, (one,), 0.0, T - 1.0), 10, T + 1.0)
    assert torch.allclose(x, torch.full((4,), 0.5)) and report.mixed == 1
    x, report = mixer.mix(x, MixView(ours, (one, two), 0.0, T - 1.0), 10, T + 1.0)
    assert torch.allclose(x, torch.full((4,), 0.5)) and report.mixed == 0
    published = torch.full((4,), 0.5)
    assert mixer.end_period(MixView(published, (one, two), 0.0, T)) == [0.5]
    x, report = mixer.mix(x, MixView(published, (one, two), 0.0, T), 10, T + 1.0)
    assert torch.allclose(x, torch.full((4,), 0.5 + 0.5 * 2.5)) and report.mixed == 1


def test_only_pulled_copies_move_us_and_the_control_mixes_pushed_ones():
    """A copy pushed at us (version 3, last pulled at 1, already mixed) waits for our next pull of
    that neighbour; one never pulled waits too. With pull_only off both pull at once."""
    pushed = [CopyView(b"\x01" * 32, 3, torch.ones(4), T, pulled=1), CopyView(b"\x02" * 32, 2, torch.ones(4), T)]
    for pull_only, moved in ((True, 0), (False, 2)):
        mixer = mixer_at_one_step_per_second(pull_only=pull_only)
        first = (CopyView(b"\x01" * 32, 1, torch.zeros(4), T, pulled=1),)
        mixer.mix(torch.zeros(4), MixView(torch.zeros(4), first, 0.0, T - 1.0), 10, T + 1.0)
        view = MixView(torch.ones(4), tuple(pushed), 0.0, T)  # a new period
        assert mixer.has_news(view) is (moved > 0)
        assert mixer.mix(torch.zeros(4), view, 10, T + 1.0)[1].mixed == moved


def test_the_mixer_keeps_no_old_public_copy_alive():
    """The period is told by which x̂_i the view holds; holding it strongly would keep an old
    parameter-sized copy in memory for a whole publish period after the node replaced it."""
    import gc
    import weakref

    mixer = mixer_at_one_step_per_second()
    old = torch.zeros(4)
    mixer.mix(torch.zeros(4), MixView(old, (CopyView(b"\x01" * 32, 1, torch.ones(4), T, pulled=1),), 0.0, T - 1.0), 10, T + 1.0)
    gone = weakref.ref(old)
    del old
    gc.collect()
    assert gone() is None


def pipemare_mixer(gossip_every: int, per_period: bool) -> Mixer:
    """PipeMare at step 0 (p = 1: weight 1 / (1 + τ)), one pull, γ 0.5, one step per second."""
    cfg = GossipConfig(swarm="test", staleness="pipemare:K=2000,p_min=0,gamma=0.5", clip=False,
                       gossip_every=gossip_every, per_period=per_period)
    mixer = Mixer(cfg, 1)
    mixer.observe_boundary(T - 1.0)
    mixer.observe_boundary(T)
    return mixer


@pytest.mark.parametrize("per_period, pull", [(True, 0.5 / 1.5), (False, 0.5 / 33)])
def test_at_a_long_period_staleness_counts_in_periods(per_period, pull):
    """A publish every 64 steps, a copy published 32 steps before ours: half a period old, it
    pulls 1 / 1.5 of γ; counted in steps (the control) it pulls 1 / 33 of it, as if it were a
    copy 32 publishes old."""
    mixed, report = pipemare_mixer(64, per_period).mix(torch.zeros(4), view(T - 2.0, [(1.0, T - 34.0)]), 0, T + 3.0,
                                                       period_steps=64)
    assert report.staleness_steps == [32.0]  # reported in steps either way
    assert mixed.tolist() == pytest.approx([pull] * 4)


def test_at_a_publish_every_step_periods_and_steps_are_the_same():
    a, _ = pipemare_mixer(1, True).mix(torch.zeros(4), view(T - 2.0, [(1.0, T - 10.0)]), 0, T + 3.0, period_steps=1)
    b, _ = pipemare_mixer(1, False).mix(torch.zeros(4), view(T - 2.0, [(1.0, T - 10.0)]), 0, T + 3.0, period_steps=1)
    assert torch.equal(a, b)
