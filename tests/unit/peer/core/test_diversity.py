"""Choices spread over hosts and subnets: an IPv6 host is its /64 and its subnet the /48 a site is
given, as an IPv4 address is its host and a /24 its subnet, so one site's many /64s count as one
subnet, not as many."""

from __future__ import annotations

from peer.core.diversity import host_of, spread, subnet_of


def test_hosts_and_subnets_of_each_kind_of_address() -> None:
    assert (host_of("203.0.113.7:7000"), subnet_of("203.0.113.7:7000")) == ("203.0.113.7", "203.0.113.0/24")
    assert host_of("[2001:db8:1:2::5]:7000") == "2001:db8:1:2::/64"
    assert subnet_of("[2001:db8:1:2::5]:7000") == "2001:db8:1::/48"
    assert subnet_of("[::ffff:203.0.113.7]:7000") == "203.0.113.0/24"  # an IPv4-mapped address is IPv4
    assert subnet_of("peer-3:7000") == "peer-3"  # a host name is its own subnet


def test_many_64s_of_one_48_take_no_more_than_a_subnets_share() -> None:
    one_site = [f"[2001:db8:7:{i:x}::1]:7000" for i in range(20)]  # 20 hosts, one /48
    elsewhere = [f"[2001:db8:{100 + i:x}::1]:7000" for i in range(6)]  # 6 hosts, 6 /48s
    chosen = spread(one_site + elsewhere, 8, per_host=2, per_subnet=4)
    assert len(chosen) == 8
    assert sum(a in one_site for a in chosen) == 4  # before, its /64s were 20 subnets: all 8 slots
    assert spread(one_site, 8, per_host=2, per_subnet=4, held=one_site[:4]) == []  # already at its share
