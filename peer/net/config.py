"""Where a real (aiohttp + mDNS) peer listens and whom it asks first.

Timeouts, cadences and joining are the session's (`peer.core.config.SessionConfig`), shared
with simnet; only what exists for real sockets lives here. A remote address, in the limits per
address below, is an IPv4 address or an IPv6 /64 (`peer.core.budget_key`): one IPv6 host
commonly holds a whole /64. The limits strangers can flood are also kept per wider IPv6 block
(`ipv6_block_prefix`), at `ipv6_block_share` /64s' worth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from peer.core.budget_key import SITE_BLOCKS, Blocks
from peer.net.discovery import parse_address


@dataclass
class NetConfig:
    listen: str = "0.0.0.0:0"
    """HOST:PORT to serve on; port 0 picks any free port (the chosen one is printed)."""
    advertise_host: str | None = None
    """Address others should dial; default: the listen host, or this machine's LAN IP for 0.0.0.0."""
    peers: list[str] = field(default_factory=list)
    """Bootstrap HOST:PORT addresses (--peer); the rest is learned by peer exchange."""
    mdns: bool = True
    mdns_interfaces: list[str] | None = None
    """IPs whose interfaces carry mDNS; None: all interfaces."""
    seed: int = 0
    """Seeds the choice of neighbours."""
    max_requests_per_address: int = 4
    """Requests one remote address may have open at once; more get 429."""
    max_connections: int = 128
    """Connections open at once from all addresses together; one more is closed as it is
    accepted. Per-address limits alone do not hold: one machine may speak from many addresses.
    Each connection may hold up to ~0.4 MB of received, not yet read bytes."""
    max_connections_per_address: int = 16
    """Connections one remote address may hold open at once; one more is closed as it is made.
    Without it one address with `max_connections` idle sockets kept everyone else out. Room for
    a few peers behind one address, each with a connection or two in use."""
    reserved_connections: int = 8
    """Connections past `max_connections` held only for addresses that hold none yet: however many
    addresses fill the rest, an operator (the status page, /metrics, `gossip-tts status`) or a
    newcomer from a fresh address still gets in."""
    idle_timeout_s: float = 30.0
    """A connection with no request in progress for this long is closed."""
    body_budget_frames: float = 2.0
    """Request bodies held in memory at once, from all addresses together, in frame limits (the
    largest body accepted: twice an exact fp32 snapshot of the model). Received bytes count, not
    declared ones; a body that would pass the budget is refused (503)."""
    body_read_timeout_s: float = 30.0
    """A request body's grace: it is dropped once it falls this far behind the floor rate
    (`SessionConfig.min_transfer_rate`), and what it sends never buys more than this ahead, so a
    slow, stalling or dripping sender holds nothing for long."""
    max_queued_requests: int = 16
    """Requests of others (exchanges, states) waiting for the node worker at once; more get 503,
    so that strangers cannot queue unbounded verify and decode work ahead of our own."""
    state_every_s: float = 10.0
    """One GET /v1/state per remote address per this many seconds; more get 429."""
    stranger_exchanges_per_s: float = 1.0
    """Exchanges per second, per remote address, that the node verifies and answers although
    they spend no ticket of ours (first contacts, refused frames). Each costs us a signature
    check, a signed ticket and two thread hops, out of training's CPU (SECURITY.md), and costs
    its sender a few hundred bytes; an honest neighbour needs one per restart of either side, so one a
    second leaves room for many peers behind one address. Past `stranger_exchange_burst` more,
    an address's exchanges get 429 before their body is read until its bucket refills; `inf`
    turns the limit off."""
    stranger_exchange_burst: int = 4
    """The most such exchanges one address may send at once: a few peers behind one address meet
    us together, more a second apart. Kept small because a flood that pauses finds the burst
    refilled, and each exchange in it reaches the node worker
    (docs/benchmarks/peer.md#a-snapshot-leech-on-real-processes)."""
    key_work_per_s: float = 16.0
    """Work per second, in applied updates (`peer.core.ingest.exchange_work`: an exchange's own check
    and answer, plus a model-sized pass per frame it carries, more for a snapshot's bytes), that one
    key's exchanges may cost the node, ticketed or not; past `key_work_burst` its exchanges get 429
    until the budget refills. An answer hands out a fresh ticket, so without it one first contact
    buys an unrationed chain of exchanges, each decoded. An honest partner asks once per publish
    of its own, with one update, so as often as it steps: room for a small model stepping fast,
    since a refused partner's exchange fails and it drops us as a partner."""
    key_work_burst: float = 32.0
    """The most work one key's exchanges may cost at once (a few snapshots, or a gap fill)."""
    address_work_per_s: float = 24.0
    """As `key_work_per_s`, for all keys behind one remote address together: fresh keys are free to
    make, addresses are not. Room for a few honest peers behind one address (a NAT, or a swarm
    on one machine). `inf` turns either limit off."""
    address_work_burst: float = 48.0
    """The most work one address's exchanges may cost at once."""
    refusals_per_s: float = 8.0
    """Refused requests per second (429, or refused for what they are) past which an address is
    benched: its connections are closed as they are made, before HTTP is parsed, until it is
    back within this rate (`peer.net.refusal_bench`). Refusals are paid on the event loop, which
    shares the interpreter lock and the core with training. `inf` turns benching off (a flood
    of refused requests then costs training: SECURITY.md)."""
    refusal_burst: float = 32.0
    """The most refusals one address may collect at once before it is benched."""
    refusals_in_all_per_s: float = 8.0
    """As `refusals_per_s`, for all addresses together (two seconds' worth at once): an address
    past its `refusal_strikes`, refused while that is spent, is benched at once, so many
    addresses, each within its own rate, still reach HTTP not much more often than this."""
    refusal_strikes: int = 4
    """Refusals an address may collect in a minute before `refusals_in_all_per_s` may bench it:
    anyone can spend the budget in all, and an honest newcomer or restarted peer refused once
    or twice during a flood must be answered, not benched with the flooders."""
    benched_connections_per_s: float = 32.0
    """Connections of benched addresses turned away per second, all together (a second's worth at
    once), past which accepting pauses until half of that is back: each wakes the event loop,
    which then takes the interpreter lock from training. New connections wait in the kernel
    meanwhile (a newcomer's connect is retried); connections already held go on. `inf`: never."""
    ipv6_block_prefix: int = SITE_BLOCKS.prefix
    """The IPv6 block (a /48: a site's allocation, and a home's /56 within it) whose /64s share
    budgets beside their own: refusals and benching, stranger exchanges, address work, full
    states, open requests, connections and shard uploads (`peer.core.budget_key.Blocks`). One
    allocation is 65,536 /64s, each otherwise budgeted as one address. 64 keeps no block budgets.
    The snapshots our answers carry keep the default blocks (`peer.core.budget_key.SITE_BLOCKS`)
    whatever this says: the node reads no network settings."""
    ipv6_block_share: int = SITE_BLOCKS.share
    """Each block's budgets, in /64s' (or IPv4 addresses') budgets: a flood from one block gets
    this many addresses' worth however many /64s it speaks from, while a site with a few honest
    hosts (each of which may itself be a few peers) still fits."""

    network_nice: int = 10
    """Added to the nice value of the network side's threads (event loop, node worker) on Linux
    (`peer.net.thread_priority`): where training saturates a core, what exchanges and strangers'
    requests cost comes out of what training leaves, about a tenth of a contended core at 10, not
    out of training. Idle cores serve it at full speed. 0 leaves them as training is."""
    trusted_keys: str | None = None
    """A file of public keys (hex, one per line, # comments): only these peers are talked to."""

    def __post_init__(self) -> None:
        parse_address(self.listen, listener=True)
        for address in self.peers:
            parse_address(address)
        self.peers = list(self.peers)
        for name in ("max_requests_per_address", "max_connections", "max_connections_per_address", "max_queued_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.network_nice <= 19:
            raise ValueError(f"network_nice must be within 0..19 (added to the threads' nice value), got {self.network_nice}")
        if self.reserved_connections < 0:
            raise ValueError(f"reserved_connections must be >= 0, got {self.reserved_connections}")
        if not (self.body_budget_frames >= 1 and self.idle_timeout_s > 0):
            raise ValueError("body_budget_frames must be >= 1 (one largest body must fit) and idle_timeout_s > 0")
        if not (self.stranger_exchanges_per_s > 0 and self.stranger_exchange_burst >= 1):
            raise ValueError("stranger_exchanges_per_s must be > 0 and stranger_exchange_burst >= 1, got "
                             f"{self.stranger_exchanges_per_s} and {self.stranger_exchange_burst}")
        if not (self.key_work_per_s > 0 and self.address_work_per_s > 0
                and self.key_work_burst >= 1 and self.address_work_burst >= 1):
            raise ValueError("key_work_per_s and address_work_per_s must be > 0, their bursts >= 1, got "
                             f"{self.key_work_per_s}, {self.address_work_per_s}, {self.key_work_burst}, "
                             f"{self.address_work_burst}")
        if not (min(self.refusals_per_s, self.refusals_in_all_per_s, self.benched_connections_per_s) > 0
                and self.refusal_burst >= 1 and self.refusal_strikes >= 1):
            raise ValueError("refusals_per_s, refusals_in_all_per_s and benched_connections_per_s must be > 0, "
                             f"refusal_burst and refusal_strikes >= 1, got {self.refusals_per_s}, "
                             f"{self.refusals_in_all_per_s}, {self.benched_connections_per_s}, "
                             f"{self.refusal_burst} and {self.refusal_strikes}")
        if not (self.body_read_timeout_s > 0 and self.state_every_s >= 0):
            raise ValueError("body_read_timeout_s must be > 0 and state_every_s >= 0")
        self.blocks()  # validates the block settings

    def blocks(self) -> Blocks:
        """The IPv6 blocks budgeted beside their /64s."""
        return Blocks(self.ipv6_block_prefix, self.ipv6_block_share)

