"""The key a remote address's budgets are kept under: an IPv4 address, or an IPv6 /64.

Per-address limits (open requests, connections, request and work rates, refusals, snapshots in
answers, shard uploads) assume an address costs something to get. An IPv4 address does; an
IPv6 host is routinely handed a whole /64 (2^64 addresses), so keyed by its raw address every
such limit was one fresh address away. Budgets therefore key an IPv6 address by its /64, as
`peer.core.diversity` spreads partners over /64s; an IPv4-mapped IPv6 address (what a
dual-stack listener sees of an IPv4 client) is its IPv4 address, so a client is charged the
same whichever socket it reached.
"""

from __future__ import annotations

import ipaddress

IPV6_BUDGET_PREFIX = 64
"""The IPv6 prefix one budget covers: the block one host is commonly assigned."""


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
