"""The keys a remote address's budgets are kept under: an IPv4 address or an IPv6 /64, and for
IPv6 also the wider block that /64 lies in.

Per-address limits (open requests, connections, request and work rates, refusals, snapshots in
answers, shard uploads) assume an address costs something to get. An IPv4 address does; an
IPv6 host is routinely handed a whole /64 (2^64 addresses), so keyed by its raw address every
such limit was one fresh address away. Budgets therefore key an IPv6 address by its /64, as
`peer.core.diversity` spreads partners over /64s; an IPv4-mapped IPv6 address (what a
dual-stack listener sees of an IPv4 client) is its IPv4 address, so a client is charged the
same whichever socket it reached.

A /64 is not what an IPv6 allocation costs either: a home is commonly given a /56 (256 /64s), a
site a /48 (65,536), for the price of one connection. So the limits that strangers can flood
(refusals and benching, stranger exchanges, address work, full states, open requests,
connections, shard uploads, snapshots in answers) also keep a budget per block (`Blocks`, a /48
by default), `share` /64s' worth, checked beside each /64's: a flood spread over a /48 gets
`share` /64s' budgets, not 65,536, while a site with a few honest hosts still fits. IPv4 has no
such aggregate: an IPv4 address is already paid for one by one, and a /24 is often many
unrelated customers (a provider's carrier-grade NAT, a cloud's range), who would be benched
together for one of them.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

IPV6_BUDGET_PREFIX = 64
"""The IPv6 prefix one budget covers: the block one host is commonly assigned."""
IPV6_SITE_PREFIX = 48
"""The IPv6 block a site is commonly assigned (a home's /56 lies in one): the default block of the
per-block budgets (`NetConfig.ipv6_block_prefix`) and an IPv6 address's subnet where choices are
spread (`peer.core.diversity.subnet_of`), as an IPv4 address's /24 is."""


def budget_key(address: str) -> str:
    """The budget key of a remote host address (no port): an IPv4 address itself, an IPv6 address's
    /64 ("2001:db8:1:2::/64"), an IPv4-mapped one's IPv4 address; a zone id ("%eth0") is dropped,
    and anything that is not an IP address ("?" for an unknown peer, a host name) is kept as it is."""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return address
    if ip.version == 4:
        return str(ip)
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    return str(ipaddress.IPv6Network(f"{ip}/{IPV6_BUDGET_PREFIX}", strict=False))


@dataclass(frozen=True)
class Blocks:
    """IPv6 blocks wider than a /64 whose budgets are kept beside their /64s' (`NetConfig.ipv6_block_prefix`,
    `ipv6_block_share`): each block's budget is `share` times a /64's, so a flood from many /64s of
    one allocation is held to a few /64s' worth. A prefix of 64 keeps no block budgets."""

    prefix: int
    """The block's prefix length: 48, a site's allocation, covers a home's /56 too."""
    share: int
    """A block's budgets, in /64s' budgets: room for a few honest hosts of one site at once."""

    def __post_init__(self) -> None:
        if not (0 <= self.prefix <= IPV6_BUDGET_PREFIX and self.share >= 1):
            raise ValueError(f"ipv6_block_prefix must be within 0..{IPV6_BUDGET_PREFIX} and ipv6_block_share >= 1, "
                             f"got {self.prefix} and {self.share}")

    def of(self, key: str) -> str | None:
        """The block key ("2001:db8:1::/48") of a budget key or address; None for IPv4, for what is not
        an address ("?"), and with a prefix of 64 (no block budgets)."""
        return _block_of(key, self.prefix)


@functools.lru_cache(maxsize=4096)
def _block_of(key: str, prefix: int) -> str | None:
    """`Blocks.of`, remembered for the keys seen most recently: it is asked several times a request,
    and the benched-connection path runs on the event loop for every accepted connection."""
    try:
        net = ipaddress.ip_network(budget_key(key), strict=False)
    except ValueError:
        return None
    if net.version == 4 or prefix >= net.prefixlen:
        return None
    return str(net.supernet(new_prefix=prefix))


SITE_BLOCKS = Blocks(IPV6_SITE_PREFIX, 4)
"""The default blocks (`NetConfig.ipv6_block_prefix`, `ipv6_block_share`), and those where network settings
are not read: snapshots in answers (`peer.core.snapshots`) and candidate slots (`peer.core.candidates`)."""
NO_BLOCKS = Blocks(IPV6_BUDGET_PREFIX, 1)
"""No budgets kept per block: every budget is per /64 (or IPv4 address) alone."""
