"""Token buckets: exact refills, a bound on the addresses remembered, an address's bucket kept beside
its IPv6 block's."""

from __future__ import annotations

import pytest

from peer.core.budget_key import Blocks, budget_key
from peer.core.token_bucket import AddressBuckets, BlockBuckets, TokenBucket


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    b = TokenBucket(tokens=2.0, at=0.0)
    assert [b.take(rate=0.5, burst=2.0, now=0.0) for _ in range(3)] == [True, True, False]
    assert not b.take(0.5, 2.0, now=1.0)  # half a token
    assert b.take(0.5, 2.0, now=2.0)
    b.refill(0.5, 2.0, now=100.0)
    assert b.tokens == 2.0  # no more than the burst however long it waited
    b.refill(0.5, 2.0, now=50.0)  # a clock that went back adds nothing and moves nothing back
    assert (b.tokens, b.at) == (2.0, 100.0)


def test_each_address_has_its_own_bucket_and_a_new_one_starts_full() -> None:
    buckets = AddressBuckets(rate=1.0, burst=3, max_addresses=10)
    assert [buckets.take("a", 0.0) for _ in range(4)] == [True, True, True, False]
    assert buckets.take("b", 0.0)  # another address is not held back
    assert not buckets.has("a", 0.5) and buckets.has("a", 1.0)


def test_the_least_recently_used_address_is_forgotten_past_the_bound() -> None:
    buckets = AddressBuckets(rate=0.0, burst=1, max_addresses=2)
    for address in ("a", "b"):
        assert buckets.take(address, 0.0)
    buckets.has("a", 0.0)  # "a" is now the more recent
    assert buckets.take("c", 0.0) and len(buckets) == 2
    assert not buckets.has("a", 0.0)  # remembered, still empty
    assert buckets.has("b", 0.0)  # forgotten, so full again


@pytest.mark.parametrize("args", [(-1.0, 1, 1), (1.0, 0, 1), (1.0, 1, 0)])
def test_nonsense_settings_are_refused(args) -> None:
    with pytest.raises(ValueError):
        AddressBuckets(*args)


def test_block_buckets_pass_where_the_address_and_its_block_both_have_room() -> None:
    buckets = BlockBuckets(rate=1.0, burst=2, max_addresses=3, blocks=Blocks(48, 2))
    a, b, c = (budget_key(f"2001:db8:1:{i}::1") for i in (1, 2, 3))  # one /48, its burst 4
    assert [buckets.take(a, 0.0) for _ in range(3)] == [True, True, False]  # a's own burst
    assert buckets.take(b, 0.0) and buckets.take(b, 0.0)  # the /48's 4 spent
    assert not buckets.has(c, 0.0) and buckets.wait(c, 0.0) == 0.5  # c's own bucket is full; the /48 refills at 2/s
    assert buckets.take("203.0.113.7", 0.0) and buckets.take(budget_key("2001:db8:2::1"), 0.0)  # no block; another
    for i in range(10):  # both maps stay bounded
        buckets.take(budget_key(f"2001:db8:{i + 10:x}::1"), 0.0)
    assert len(buckets.addresses) == 3 and len(buckets.wide) == 3
