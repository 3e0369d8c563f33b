"""Where peers live, as far as spreading our choices goes: their host and their subnet.

Keys are free to make and listeners cheap to run, but addresses are not: one machine running
many listeners shares one IP (an IPv6 host a /64), and a rented block shares a /24 (an IPv6 site
a /48). So the choices a stranger could otherwise fill with many identities of one machine (our
partners, the peers our hello names) are spread over hosts and subnets first, as libp2p caps
peers per IP and GossipSub's mesh spreads them. A host given by name (simnet's, a DNS name) is its own subnet.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable
from typing import TypeVar

from peer.core.addresses import PeerInfo, parse_address
from peer.core.budget_key import IPV6_SITE_PREFIX, budget_key

T = TypeVar("T", str, PeerInfo)


def host_of(address: str) -> str:
    """The host of `address`, as far as one machine goes: its IPv4 address, an IPv6 address's /64
    (one host is commonly handed a whole /64: `peer.core.budget_key`), a host name itself."""
    return budget_key(parse_address(address)[0])


def subnet_of(address: str) -> str:
    """An IPv4 address's /24, an IPv6 address's /48 (a site's allocation, 65,536 /64s: as a rented
    IPv4 block shares a /24), a host name itself."""
    host = host_of(address)
    try:
        net = ipaddress.ip_network(host, strict=False)
    except ValueError:
        return host
    return str(net.supernet(new_prefix=24 if net.version == 4 else IPV6_SITE_PREFIX))


def _address(item: str | PeerInfo) -> str:
    return item if isinstance(item, str) else item.address


def spread(items: Iterable[T], n: int, per_host: int, per_subnet: int, *, held: Iterable[str] = ()) -> list[T]:
    """Up to `n` of `items`, in their order, with at most `per_host` per host and `per_subnet` per
    subnet counting the addresses already `held`."""
    hosts = Counter(host_of(a) for a in held)
    subnets = Counter(subnet_of(a) for a in held)
    out: list[T] = []
    for item in items:
        if len(out) >= n:
            break
        host, subnet = host_of(_address(item)), subnet_of(_address(item))
        if hosts[host] < per_host and subnets[subnet] < per_subnet:
            out.append(item)
            hosts[host] += 1
            subnets[subnet] += 1
    return out
