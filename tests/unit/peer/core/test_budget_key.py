"""A remote address's budget key (`peer.core.budget_key`): an IPv4 address itself, an IPv6
address's /64, since one IPv6 host commonly holds a whole /64; and an IPv6 key's wider block (a
/48, one site's allocation: `Blocks`), whose budgets its /64s share."""

from __future__ import annotations

import pytest

from peer.core.budget_key import Blocks, budget_key


@pytest.mark.parametrize("address, key", [
    ("203.0.113.7", "203.0.113.7"),
    ("127.0.0.1", "127.0.0.1"),
    ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
    ("2001:DB8:1:2:0:0:0:9", "2001:db8:1:2::/64"),  # any spelling of one address, one key
    ("::1", "::/64"),
    ("::ffff:203.0.113.7", "203.0.113.7"),  # a dual-stack listener's view of an IPv4 client
    ("::ffff:cb00:7107", "203.0.113.7"),
    ("fe80::1%eth0", "fe80::/64"),
    ("fe80::1%2", "fe80::/64"),
    ("?", "?"),
    ("", ""),
    ("peer-3.example", "peer-3.example"),
    ("not an address", "not an address"),
    ("2001:db8::1/64", "2001:db8::1/64"),  # a network, not an address: kept as it came
    ("203.0.113.7%eth0", "203.0.113.7"),
])
def test_the_key_of_an_address(address: str, key: str) -> None:
    assert budget_key(address) == key


def test_addresses_of_one_slash_64_share_a_key_and_of_two_do_not() -> None:
    same = {budget_key(f"2001:db8:aa:bb:{i:x}::{i:x}") for i in range(1, 200)}
    assert same == {"2001:db8:aa:bb::/64"}
    neighbours = {budget_key(f"2001:db8:aa:{i:x}::1") for i in range(200)}  # adjacent /64s: one key each
    assert len(neighbours) == 200
    assert len({budget_key(f"198.51.100.{i}") for i in range(200)}) == 200  # IPv4: every address its own


@pytest.mark.parametrize("blocks, key, block", [
    (Blocks(48, 4), "2001:db8:1:2::/64", "2001:db8:1::/48"),  # a budget key
    (Blocks(48, 4), "2001:db8:1:ff:1::9", "2001:db8:1::/48"),  # or an address
    (Blocks(56, 4), "2001:db8:1:2ff::1", "2001:db8:1:200::/56"),
    (Blocks(48, 4), "203.0.113.7", None),  # IPv4: no block (a /24 is often many customers)
    (Blocks(48, 4), "::ffff:203.0.113.7", None),
    (Blocks(48, 4), "?", None),
    (Blocks(48, 4), "peer-3.example", None),
    (Blocks(64, 4), "2001:db8:1:2::/64", None),  # a prefix of 64: no block budgets
])
def test_the_block_of_a_key(blocks: Blocks, key: str, block: str | None) -> None:
    assert blocks.of(key) == block


def test_slash_64s_of_one_48_share_a_block_and_of_two_do_not() -> None:
    blocks = Blocks(48, 4)
    assert {blocks.of(budget_key(f"2001:db8:7:{i:x}::1")) for i in range(0, 65536, 97)} == {"2001:db8:7::/48"}
    assert len({blocks.of(budget_key(f"2001:db8:{i:x}::1")) for i in range(200)}) == 200


@pytest.mark.parametrize("prefix, share", [(65, 4), (-1, 4), (48, 0)])
def test_block_settings_out_of_range_are_refused(prefix: int, share: int) -> None:
    with pytest.raises(ValueError):
        Blocks(prefix, share)
