"""LAN discovery over mDNS/DNS-SD (python-zeroconf), for peers that share a network.

Each peer registers one `_gossip-tts._tcp.local.` service whose TXT records carry what a
neighbour needs to decide, before any TCP connection, whether the peer is worth talking
to: `swarm`, `fp` (model fingerprint), `pk` (public key hex) and `v` (protocol version).
It browses the same type and reports matching peers through the Discovery callbacks.

Zeroconf is created inside `async_start`, on the running loop, so it runs on that loop and
starts no thread of its own (created outside a loop, it would start a shared thread that
outlives us). The TXT records are unauthenticated hints: the signed /v1/hello decides.

Removal is reported when a peer unregisters (its goodbye packets arrive at once). A peer
that dies without unregistering is only removed by zeroconf when its PTR record expires
(75 minutes); the neighbour table's failure detection handles that case much sooner.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
from dataclasses import dataclass
from functools import partial

import ifaddr
from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from peer.net.discovery import PEER_ID_HEX_LEN, OnFound, OnLost, PeerInfo, format_address, is_peer_id, safe_call

log = logging.getLogger(__name__)

SERVICE_TYPE = "_gossip-tts._tcp.local."
PROTOCOL_VERSION = "1"
_TXT_MAX = 255  # one DNS-SD TXT string, "key=value", is at most 255 bytes

STAT_KEYS = (
    "found",  # a matching peer reported for the first time (per service instance)
    "updated",  # a reported peer re-reported with a changed address, swarm or fingerprint
    "lost",  # a reported peer removed (goodbye or expiry) or turned non-matching
    "filtered_self",  # another instance announcing our own public key
    "filtered_swarm",  # resolutions refused: another swarm
    "filtered_fingerprint",  # resolutions refused: another model fingerprint
    "filtered_version",  # resolutions refused: another protocol version
    "malformed",  # resolutions refused: missing or invalid TXT, no usable address
    "resolve_failed",  # no complete answer within resolve_timeout_s
    "over_limit",  # announcements ignored: max_services names already tracked
)


def default_advertise_ips() -> list[str]:
    """This host's non-loopback IPv4 addresses, or loopback when it has no other."""
    ips: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ipaddress.IPv4Address(ip.ip).is_loopback and ip.ip not in ips:
                ips.append(ip.ip)
    return ips or ["127.0.0.1"]


@dataclass
class MdnsConfig:
    peer_id: str
    """Our hex Ed25519 public key: announced as `pk`, and how we recognise our own service."""
    port: int
    """The port our HTTP server listens on (after binding, when it was 0)."""
    swarm: str
    """Only peers announcing the same swarm are reported."""
    fingerprint: str
    """Only peers announcing the same model fingerprint are reported."""
    interfaces: list[str] | None = None
    """IPv4 addresses of the interfaces to announce and listen on; None = all (zeroconf's
    default). Tests must pass ["127.0.0.1"] so that nothing leaves the machine."""
    advertise_ips: list[str] | None = None
    """Addresses put in our A/AAAA records; None = `interfaces`, or this host's
    non-loopback IPv4 addresses when `interfaces` is None."""
    resolve_timeout_s: float = 3.0
    """How long to wait for a browsed service's SRV/TXT/A records before giving up."""
    max_services: int = 256
    """Service names tracked at once (reported or being resolved). Anyone on the LAN can announce
    names without end; past this many, a new name is ignored (counted `over_limit`) until a
    tracked one goes away, so what we hold stays bounded."""

    def __post_init__(self) -> None:
        if not is_peer_id(self.peer_id):
            raise ValueError(f"peer_id must be {PEER_ID_HEX_LEN} lowercase hex characters, got {self.peer_id!r}")
        if not isinstance(self.port, int) or not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port!r}")
        for key, value in (("swarm", self.swarm), ("fp", self.fingerprint)):
            if not value:
                raise ValueError(f"{key} must not be empty")
            if len(f"{key}={value}".encode()) > _TXT_MAX:
                raise ValueError(f"{key}={value!r} does not fit one {_TXT_MAX}-byte TXT string")
        if self.interfaces is not None:
            if isinstance(self.interfaces, str) or not self.interfaces:
                raise ValueError(f"interfaces must be None or a non-empty list of IPv4 addresses: {self.interfaces!r}")
            self.interfaces = [_check_ip(ip, "interface", v4_only=True) for ip in self.interfaces]
        if self.advertise_ips is not None:
            if isinstance(self.advertise_ips, str) or not self.advertise_ips:
                raise ValueError(f"advertise_ips must be None or a non-empty list, got {self.advertise_ips!r}")
            self.advertise_ips = [_check_ip(ip, "advertised address", v4_only=False) for ip in self.advertise_ips]
        if not self.resolve_timeout_s > 0:
            raise ValueError(f"resolve_timeout_s must be > 0, got {self.resolve_timeout_s}")
        if not isinstance(self.max_services, int) or self.max_services < 1:
            raise ValueError(f"max_services must be an integer >= 1, got {self.max_services!r}")


def _check_ip(ip: str, what: str, v4_only: bool) -> str:
    try:
        parsed = ipaddress.IPv4Address(ip) if v4_only else ipaddress.ip_address(ip)
    except ValueError:
        kind = "an IPv4 address" if v4_only else "an IP address"
        raise ValueError(f"{what} {ip!r} is not {kind}") from None
    if parsed.is_unspecified or parsed.is_multicast:
        raise ValueError(f"{what} {ip!r} cannot be used (unspecified or multicast)")
    return str(parsed)


class MdnsDiscovery:
    """Announce ourselves and report same-swarm, same-model peers seen over mDNS.

    `on_found` fires once per service instance, and again only when what it announces
    changes; `on_lost` fires with the last PeerInfo reported for it. Stopping reports
    nothing lost: our leaving says nothing about the others.
    """

    def __init__(self, cfg: MdnsConfig, on_found: OnFound, on_lost: OnLost) -> None:
        self.cfg = cfg
        self._on_found, self._on_lost = on_found, on_lost
        suffix = secrets.token_hex(3)
        self.instance_name = f"{cfg.peer_id[:16]}-{suffix}.{SERVICE_TYPE}"
        self._host_name = f"gossip-{cfg.peer_id[:16]}-{suffix}.local."
        self.stats: dict[str, int] = dict.fromkeys(STAT_KEYS, 0)
        self._aiozc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._reported: dict[str, PeerInfo] = {}  # service name -> what we last reported
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs to every resolution
        self._resolving: dict[str, asyncio.Task[None]] = {}  # the current one per name
        self._resolve_again: set[str] = set()  # names that changed while being resolved
        self._running = False

    @property
    def peers(self) -> dict[str, PeerInfo]:
        """Currently reported peers by service instance name (a copy)."""
        return dict(self._reported)

    async def async_start(self) -> None:
        """Start browsing, then register (probing takes about a second on the wire)."""
        if self._aiozc is not None:
            raise RuntimeError("MdnsDiscovery already started")
        cfg = self.cfg
        ips = cfg.advertise_ips or cfg.interfaces or default_advertise_ips()
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            self.instance_name,
            port=cfg.port,
            addresses=[ipaddress.ip_address(ip).packed for ip in ips],
            properties={"swarm": cfg.swarm, "fp": cfg.fingerprint, "pk": cfg.peer_id, "v": PROTOCOL_VERSION},
            server=self._host_name,
        )
        self._aiozc = AsyncZeroconf(interfaces=cfg.interfaces) if cfg.interfaces else AsyncZeroconf()
        self._running = True
        try:
            self._browser = AsyncServiceBrowser(self._aiozc.zeroconf, SERVICE_TYPE, handlers=[self._on_state_change])
            announced = await self._aiozc.async_register_service(self._info, allow_name_change=True)
            await announced
        except BaseException:
            await self.async_stop()
            raise
        self.instance_name = self._info.name  # allow_name_change may have renamed a clash

    async def async_stop(self) -> None:
        """Stop browsing, cancel resolutions, send goodbyes and close the sockets."""
        if self._aiozc is None:
            return
        self._running = False
        aiozc, self._aiozc = self._aiozc, None
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._resolving.clear()
        self._resolve_again.clear()
        self._reported.clear()  # a restart reports everyone afresh
        await aiozc.async_close()  # unregisters (goodbye packets) before closing

    # -- browser events (called on the loop by zeroconf) --------------------------------

    def _on_state_change(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if not self._running or name == self.instance_name:
            return
        if state_change is ServiceStateChange.Removed:
            self._async_forget(name)
        else:
            self._async_schedule_resolve(name)

    def _async_schedule_resolve(self, name: str) -> None:
        if name in self._resolving:
            self._resolve_again.add(name)  # resolve once more when the current one ends
            return
        if name not in self._reported and len(self._reported.keys() | self._resolving.keys()) >= self.cfg.max_services:
            self.stats["over_limit"] += 1
            return
        assert self._aiozc is not None
        coro = self._async_resolve(self._aiozc.zeroconf, name)
        task = asyncio.get_running_loop().create_task(coro, name=f"mdns-resolve {name}")
        self._resolving[name] = task
        self._tasks.add(task)
        task.add_done_callback(partial(self._resolve_done, name))

    def _resolve_done(self, name: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._resolving.get(name) is task:
            del self._resolving[name]
        if not task.cancelled() and task.exception() is not None:
            log.error("mDNS resolution of %s failed", name, exc_info=task.exception())
        if name in self._resolve_again and self._running:
            self._resolve_again.discard(name)
            self._async_schedule_resolve(name)

    def _async_forget(self, name: str) -> None:
        task = self._resolving.pop(name, None)
        if task is not None:
            task.cancel()
        self._resolve_again.discard(name)
        self._report_lost(name)

    async def _async_resolve(self, zc: Zeroconf, name: str) -> None:
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        if not await info.async_request(zc, self.cfg.resolve_timeout_s * 1000):
            self.stats["resolve_failed"] += 1
            return
        peer = self._classify(info)
        if peer is None:
            self._report_lost(name)  # it may have matched before an update
            return
        previous = self._reported.get(name)
        if previous == peer:
            return
        self._reported[name] = peer
        self.stats["updated" if previous else "found"] += 1
        safe_call(self._on_found, peer, "found")

    def _report_lost(self, name: str) -> None:
        peer = self._reported.pop(name, None)
        if peer is not None:
            self.stats["lost"] += 1
            safe_call(self._on_lost, peer, "lost")

    def _classify(self, info: AsyncServiceInfo) -> PeerInfo | None:
        """The PeerInfo for a resolved service, or None (counted) when it is not for us."""
        txt = info.decoded_properties
        if txt.get("v") != PROTOCOL_VERSION:
            self.stats["filtered_version" if txt.get("v") else "malformed"] += 1
            return None
        pk = txt.get("pk") or ""
        if not is_peer_id(pk):
            self.stats["malformed"] += 1
            return None
        if pk == self.cfg.peer_id:
            self.stats["filtered_self"] += 1
            return None
        if txt.get("swarm") != self.cfg.swarm:
            self.stats["filtered_swarm"] += 1
            return None
        if txt.get("fp") != self.cfg.fingerprint:
            self.stats["filtered_fingerprint"] += 1
            return None
        ips = info.parsed_addresses(IPVersion.V4Only) or info.parsed_addresses(IPVersion.V6Only)
        if not ips or not info.port:
            self.stats["malformed"] += 1
            return None
        try:
            return PeerInfo(
                peer_id=pk,
                address=format_address(ips[0], info.port),
                swarm=self.cfg.swarm,
                fingerprint=self.cfg.fingerprint,
                source="mdns",
            )
        except ValueError:
            self.stats["malformed"] += 1
            return None
