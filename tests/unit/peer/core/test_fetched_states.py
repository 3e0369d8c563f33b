"""`FetchedStates`: a fetched state outlives the session's verdict only if the verdict adopts
it, and only until the adoption step takes it (peer/core/fetched.py)."""

from __future__ import annotations

import pytest
import torch

from peer.core.actions import Adopt, Count, JoinDone, Log
from peer.core.fetched import FetchedStates

REFUSED = [Count("joins_refused_total"), Log("not joining from a:1: its state scores worse", "warning")]
ADOPTED = [Adopt(3, "a:1", 40), JoinDone("a:1"), Count("joins_total"), Log("joined")]


def test_a_refused_state_is_not_held_and_the_verdict_passes_through() -> None:
    fetched = FetchedStates()
    verdict = fetched.judged(3, torch.ones(4), REFUSED)
    assert verdict == REFUSED and len(fetched) == 0


def test_an_adopted_state_is_held_until_taken_whole() -> None:
    fetched = FetchedStates()
    x = torch.tensor([1.0, -2.0, 3.5])
    assert fetched.judged(3, x, ADOPTED) == ADOPTED and len(fetched) == 1
    taken = fetched.take(3)
    assert taken is x and taken.tolist() == [1.0, -2.0, 3.5]
    assert len(fetched) == 0


def test_an_adopt_naming_another_token_holds_nothing() -> None:
    fetched = FetchedStates()
    fetched.judged(4, torch.ones(2), ADOPTED)  # ADOPTED adopts token 3
    assert len(fetched) == 0
    with pytest.raises(KeyError, match="no fetched state is held under token 3"):
        fetched.take(3)


def test_a_verdict_with_no_actions_holds_nothing() -> None:
    """A late reply (the request had timed out, or the join moved on): `state_done` returns nothing."""
    fetched = FetchedStates()
    assert fetched.judged(9, torch.ones(2), []) == [] and len(fetched) == 0


def test_clear_drops_everything_held() -> None:
    fetched = FetchedStates()
    fetched.judged(3, torch.ones(2), ADOPTED)
    fetched.judged(5, torch.zeros(2), [Adopt(5, "b:2", 50)])
    assert len(fetched) == 2
    fetched.clear()
    assert len(fetched) == 0
