"""A partner whose claimed step stays put gives its slot up (`PartnerConfig.frozen_publishes`).

An empty answer counts against a partner only when it owed news, and it owes none while its
claimed step is that of the copy we hold. So a key that sent one snapshot, then answered empty
at that step forever, kept its slot and its pulls for free. An honest partner's step moves at
each of its publishes, however rare: after `frozen_publishes` of ours without a claim past its
highest, a partner has stopped publishing or never meant to, and is replaced; past
`frozen_grace_publishes` of them it is drawn less and less meanwhile, while a partner that
publishes at least that often is drawn by its score alone."""

from __future__ import annotations

import pytest

from peer.core.config import PartnerConfig
from tests.unit.peer.core.partner_swarm import Swarm

HONEST, SLOW = "10.0.1.1:7000", "10.0.2.1:7000"
FROZEN = [f"10.6.6.{i}:7000" for i in range(1, 5)]
ROUNDS = 400


def each(s: Swarm, step: int) -> None:
    """HONEST publishes every round, SLOW once in 32 (a straggler, or a long publish period);
    FROZEN once, at the first round: its step claims never move again."""
    s.publish(HONEST, step)
    if step % 32 == 0:
        s.publish(SLOW, step)
    if step == 1:
        for address in FROZEN:
            s.publish(address, step)


def test_a_partner_whose_step_never_moves_is_replaced_and_a_slow_one_is_not() -> None:
    frozen_after = PartnerConfig().frozen_publishes
    assert frozen_after < ROUNDS - 100
    for seed in range(2):
        s = Swarm([HONEST, SLOW] + FROZEN, seed).run(ROUNDS, each)
        assert s.counts["partners_frozen_total"] == len(FROZEN) and s.barren == 0, (seed, s.counts)
        assert set(s.session.partners) == {HONEST, SLOW}, (seed, s.session.partners)
        ends = {a: max(step for step, b in s.pulled if b == a) for a in FROZEN}  # held to the bound, no longer
        assert all(frozen_after < end <= frozen_after + 16 for end in ends.values()), (seed, ends)
        assert all(s.news[a] == 1 for a in FROZEN), s.news  # its one snapshot, then nothing for hundreds of pulls
        # its share of pulls shrinks once its step has stayed put past the grace (65-85 pulls each without)
        assert all(s.pulls[a] <= 60 for a in FROZEN), (seed, s.pulls)
        assert s.pulls[SLOW] >= ROUNDS // 4 and s.news[SLOW] == 1 + ROUNDS // 32, (seed, s.pulls, s.news)


def test_its_slot_is_held_until_the_bound_only() -> None:
    s = Swarm([HONEST, SLOW] + FROZEN, 0, partners=PartnerConfig(frozen_publishes=40)).run(120, each)
    ends = {a: max(step for step, b in s.pulled if b == a) for a in FROZEN}
    assert all(40 < end <= 56 for end in ends.values()), ends
    assert set(s.session.partners) == {HONEST, SLOW}, s.session.partners
    with pytest.raises(ValueError, match="frozen_publishes"):
        PartnerConfig(frozen_publishes=0)
