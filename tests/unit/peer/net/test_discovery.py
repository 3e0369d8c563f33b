import asyncio
import secrets
import threading
import time

import pytest

from peer.net.discovery import Discovery, PeerInfo, StaticDiscovery, format_address, parse_address
from peer.net.mdns import SERVICE_TYPE, MdnsConfig, MdnsDiscovery

LOOPBACK = ["127.0.0.1"]  # never the default interfaces: nothing may leave the machine
RUN = secrets.token_hex(4)  # other test runs on this host may be announcing at the same time


def pid(i: int) -> str:
    return f"{i:064x}"


# -- addresses and PeerInfo ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [("127.0.0.1:8000", ("127.0.0.1", 8000)), ("host-a.lan:1", ("host-a.lan", 1)),
     ("[::1]:65535", ("::1", 65535)), ("localhost:080", ("localhost", 80))],
)
def test_parse_address_accepts_host_port(text, expected):
    assert parse_address(text) == expected
    host, port = expected
    assert parse_address(format_address(host, port)) == expected


@pytest.mark.parametrize(
    "text", ["nohost", "h:0x", ":80", "h:", "h:0", "h:65536", "h:-1", "::1:80", "[::1:80", "[nope]:80", "a b:80", "h:８０"]
)
def test_parse_address_names_the_bad_value(text):
    with pytest.raises(ValueError) as err:
        parse_address(text)
    assert repr(text) in str(err.value)


def test_peer_info_is_validated():
    PeerInfo(peer_id="", address="h:1")
    for kw in ({"peer_id": "ab"}, {"peer_id": "A" * 64}, {"address": "nohost"}, {"source": "dns"}):
        with pytest.raises(ValueError):
            PeerInfo(**{"peer_id": pid(1), "address": "h:1", "source": "mdns", **kw})


# -- StaticDiscovery ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["nohost", "h:0x"])
def test_static_discovery_refuses_bad_addresses_naming_them(bad):
    with pytest.raises(ValueError, match=repr(bad).replace("[", r"\[")):
        StaticDiscovery(["good:1", bad], on_found=lambda p: None)
    with pytest.raises(ValueError):
        StaticDiscovery("good:1", on_found=lambda p: None)  # one string, not a list


def test_static_discovery_reports_each_address_once_at_start():
    found: list[PeerInfo] = []
    d = StaticDiscovery(["a:1", "b:2", "a:1"], on_found=found.append)
    assert isinstance(d, Discovery)

    async def main():
        assert found == []  # nothing before start
        await d.async_start()
        await d.async_stop()
        await d.async_stop()  # idempotent

    asyncio.run(main())
    assert found == [PeerInfo("", "a:1", source="static"), PeerInfo("", "b:2", source="static")]


def test_a_raising_callback_does_not_stop_discovery(caplog):
    calls = []

    def bad(p):
        calls.append(p)
        raise RuntimeError("consumer bug")

    asyncio.run(StaticDiscovery(["a:1", "b:2"], on_found=bad).async_start())
    assert len(calls) == 2 and "consumer bug" in caplog.text


# -- MdnsConfig ---------------------------------------------------------------------------


def test_mdns_config_is_validated():
    ok = {"peer_id": pid(1), "port": 9000, "swarm": "s", "fingerprint": "fp", "interfaces": LOOPBACK}
    MdnsConfig(**ok)
    for bad in ({"peer_id": "x"}, {"port": 0}, {"port": 70000}, {"swarm": ""}, {"swarm": "s" * 250},
                {"fingerprint": ""}, {"interfaces": []}, {"interfaces": "127.0.0.1"}, {"interfaces": ["eth0"]},
                {"interfaces": ["0.0.0.0"]}, {"advertise_ips": ["nope"]}, {"resolve_timeout_s": 0},
                {"max_services": 0}, {"max_services": 2.5}):
        with pytest.raises(ValueError):
            MdnsConfig(**{**ok, **bad})


# -- MdnsDiscovery on loopback ------------------------------------------------------------


class Recorder:
    """Collects one instance's events with their times."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.found: dict[str, PeerInfo] = {}  # peer_id -> info
        self.lost: list[PeerInfo] = []
        self.found_at: dict[str, float] = {}
        self.lost_at: list[float] = []

    def on_found(self, info: PeerInfo) -> None:
        self.found[info.peer_id] = info
        self.found_at.setdefault(info.peer_id, time.monotonic() - self.t0)

    def on_lost(self, info: PeerInfo) -> None:
        self.lost.append(info)
        self.lost_at.append(time.monotonic() - self.t0)


async def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition") -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


def make(i: int, rec: Recorder, swarm: str = "a", fingerprint: str = "fp-1") -> MdnsDiscovery:
    cfg = MdnsConfig(
        peer_id=pid(i), port=20000 + i, swarm=f"{swarm}-{RUN}", fingerprint=fingerprint, interfaces=LOOPBACK
    )
    return MdnsDiscovery(cfg, on_found=rec.on_found, on_lost=rec.on_lost)


@pytest.mark.timeout(60)
def test_announcements_past_max_services_are_ignored_and_counted():
    """Anyone on the LAN can announce names without end: what we track stays bounded."""
    from types import SimpleNamespace

    from zeroconf import ServiceStateChange

    from peer.net.mdns import SERVICE_TYPE

    async def scenario() -> None:
        rec = Recorder(time.monotonic())
        disc = MdnsDiscovery(MdnsConfig(peer_id=pid(1), port=9000, swarm="s", fingerprint="fp", interfaces=LOOPBACK,
                                        max_services=8), on_found=rec.on_found, on_lost=rec.on_lost)
        never = asyncio.Event()

        async def resolve_slowly(zc, name):  # a resolution that waits for an answer
            await never.wait()

        disc._async_resolve = resolve_slowly  # type: ignore[method-assign]
        disc._aiozc, disc._running = SimpleNamespace(zeroconf=None), True  # as after async_start
        names = [f"attacker-{i}.{SERVICE_TYPE}" for i in range(1000)]
        for name in names:
            disc._on_state_change(None, SERVICE_TYPE, name, ServiceStateChange.Added)
        await asyncio.sleep(0)
        assert len(disc._resolving) == 8 and disc.stats["over_limit"] == 992
        disc._on_state_change(None, SERVICE_TYPE, names[0], ServiceStateChange.Updated)  # tracked: not refused
        assert disc.stats["over_limit"] == 992
        disc._on_state_change(None, SERVICE_TYPE, names[0], ServiceStateChange.Removed)  # frees a slot
        disc._on_state_change(None, SERVICE_TYPE, names[500], ServiceStateChange.Added)
        assert names[500] in disc._resolving and len(disc._resolving) == 8
        for task in list(disc._tasks):
            task.cancel()
        await asyncio.gather(*disc._tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_mdns_peers_find_each_other_filter_strangers_and_see_goodbyes():
    async def main():
        threads_before = set(threading.enumerate())
        t0 = time.monotonic()
        recs = [Recorder(t0) for _ in range(4)]
        a, b = make(1, recs[0]), make(2, recs[1])
        other_swarm = make(3, recs[2], swarm="b")
        other_model = make(4, recs[3], fingerprint="fp-2")
        everyone = [a, b, other_swarm, other_model]
        assert all(isinstance(d, Discovery) for d in everyone)
        try:
            await asyncio.gather(*(d.async_start() for d in everyone))
            assert a.instance_name.endswith(SERVICE_TYPE) and a.instance_name.startswith(pid(1)[:16])
            await wait_for(lambda: pid(2) in recs[0].found and pid(1) in recs[1].found, what="a and b to meet")
            # strangers are resolved, refused and counted, both ways round
            await wait_for(
                lambda: a.stats["filtered_swarm"] >= 1 and a.stats["filtered_fingerprint"] >= 1
                and other_swarm.stats["filtered_swarm"] >= 3 and other_model.stats["filtered_fingerprint"] >= 2
                and other_model.stats["filtered_swarm"] >= 1,
                what="filters to count",
            )
            assert recs[0].found[pid(2)] == PeerInfo(pid(2), "127.0.0.1:20002", f"a-{RUN}", "fp-1", "mdns")
            assert recs[1].found[pid(1)] == PeerInfo(pid(1), "127.0.0.1:20001", f"a-{RUN}", "fp-1", "mdns")
            assert set(recs[0].found) == {pid(2)} and set(recs[1].found) == {pid(1)}  # never itself
            assert recs[2].found == {} and recs[3].found == {}
            assert a.stats["found"] == 1 and a.stats["filtered_self"] == 0
            print(f"discovered a->b at {recs[0].found_at[pid(2)]:.2f}s, b->a at {recs[1].found_at[pid(1)]:.2f}s")

            t_stop = time.monotonic() - t0
            await b.async_stop()
            stop_s = time.monotonic() - t0 - t_stop
            await wait_for(lambda: recs[0].lost, what="a to see b's goodbye")
            assert recs[0].lost == [recs[0].found[pid(2)]] and a.stats["lost"] == 1
            assert pid(2) not in {p.peer_id for p in a.peers.values()}
            print(f"b stopped in {stop_s:.2f}s; a saw it lost {recs[0].lost_at[0] - t_stop:.2f}s after stop began")
        finally:
            await asyncio.gather(*(d.async_stop() for d in everyone))
        assert recs[1].lost == []  # stopping reports nothing about the others
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await wait_for(lambda: set(threading.enumerate()) <= threads_before, timeout_s=2.0, what="threads to end")

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_mdns_restart_reports_peers_afresh_and_start_twice_is_refused():
    async def main():
        threads_before = set(threading.enumerate())
        t0 = time.monotonic()
        rec_a, rec_b = Recorder(t0), Recorder(t0)
        a, b = make(6, rec_a, swarm="r"), make(7, rec_b, swarm="r")
        await a.async_stop()  # stop before start: nothing to do
        try:
            await asyncio.gather(a.async_start(), b.async_start())
            with pytest.raises(RuntimeError):
                await a.async_start()
            await wait_for(lambda: pid(7) in rec_a.found and pid(6) in rec_b.found, what="a and b to meet")
            await a.async_stop()
            await a.async_stop()
            await wait_for(lambda: len(rec_b.lost) == 1, what="b to see a leave")
            rec_a.found.clear()
            await a.async_start()
            await wait_for(lambda: pid(7) in rec_a.found, what="a, restarted, to find b again")
            await wait_for(lambda: b.stats["found"] == 2, what="b to find a again")
            assert set(b.peers.values()) == {rec_b.found[pid(6)]}
        finally:
            await asyncio.gather(a.async_stop(), b.async_stop())
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await wait_for(lambda: set(threading.enumerate()) <= threads_before, timeout_s=2.0, what="threads to end")

    asyncio.run(main())


@pytest.mark.timeout(30)
def test_mdns_twin_announcing_our_own_key_is_filtered_as_self():
    async def main():
        t0 = time.monotonic()
        rec_x, rec_twin = Recorder(t0), Recorder(t0)
        x, twin = make(8, rec_x, swarm="t"), make(8, rec_twin, swarm="t")  # same key, two instances
        assert x.instance_name != twin.instance_name
        try:
            await asyncio.gather(x.async_start(), twin.async_start())
            await wait_for(
                lambda: x.stats["filtered_self"] >= 1 and twin.stats["filtered_self"] >= 1, what="twins to meet"
            )
        finally:
            await asyncio.gather(x.async_stop(), twin.async_stop())
        assert rec_x.found == {} and rec_twin.found == {}

    asyncio.run(main())


def test_port_zero_is_only_for_listeners():
    assert parse_address("0.0.0.0:0", listener=True) == ("0.0.0.0", 0)
    with pytest.raises(ValueError, match="outside 1..65535"):
        parse_address("0.0.0.0:0")
