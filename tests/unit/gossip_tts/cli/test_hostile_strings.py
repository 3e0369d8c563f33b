"""A peer-supplied string never reaches a person's screen raw: each is checked where it enters
(a control frame's or a hello's `listen` must parse as HOST:PORT) and escaped where it
leaves (`gossip-tts status`, log lines). The hostile strings clear the screen, set the
window title, ring the bell, rewrite the current line and forge a table row."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Iterator

import pytest
import torch
from aiohttp import web
from click.testing import CliRunner

from gossip_tts.cli.main import main
from gossip_tts.cli.status import render
from gossip_tts.cli.logs import ConsoleFormatter, JsonFormatter
from gossip_tts.cli.terminal_text import printable
from peer.core.addresses import PeerInfo
from peer.core.config import SessionConfig
from peer.core.control import read_control
from peer.core.gossip_config import GossipConfig
from peer.core.hello import make_hello, read_hello
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from protocol import FrameRefused, Identity, decode_frame, pack_bundle
from protocol.messages import bundle_digest, make_control_frame, make_snapshot_frame, make_update_frame
from tests.unit.driver_helpers import Network

HOSTILE = [
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]0;owned\x07",  # set the window title (OSC ... BEL)
    "\x07",  # bell
    "127.0.0.1:1\rforged",  # rewrite the line
    "127.0.0.1:1\n  ffffffffffffffff  10.0.0.1:1  9999",  # forge a neighbour row
    "\x9b31m",  # an 8-bit CSI
    "\u202eevil",  # right-to-left override
]
SWARM = "hostile-strings"
SPEC = {"w": ((16,), "float32")}


def unprintable(text: str) -> list[str]:
    """The characters of `text` a terminal would act on instead of showing (newlines excepted)."""
    return [c for c in text if c != "\n" and printable(c) != c]


@pytest.mark.parametrize("text", HOSTILE)
def test_printable_escapes_every_control_sequence_and_keeps_plain_text(text):
    shown = printable(text)
    assert not unprintable(shown) and "\n" not in shown
    assert printable("peer 127.0.0.1:8080 ünïcode ▁▂▃") == "peer 127.0.0.1:8080 ünïcode ▁▂▃"
    assert printable("\x1b") == "\\x1b" and printable("\u202e") == "\\u202e"


def test_status_render_escapes_whatever_a_status_answer_holds():
    s = {"peer_id": HOSTILE[0], "swarm": HOSTILE[1], "listen": HOSTILE[3], "fingerprint": HOSTILE[5],
         "step": HOSTILE[2], "neighbours": [{"peer_id": h, "address": h, "step": h, "staleness": h} for h in HOSTILE],
         "refusals": {h: h for h in HOSTILE}}
    text = render(s)
    assert not unprintable(text), text
    assert len(text.splitlines()) == 4 + 2 + len(HOSTILE) + 1  # figures, table head, a row each, refusals


def test_log_lines_escape_peer_text():
    record = logging.LogRecord("peer", logging.INFO, __file__, 1, "found %s", (HOSTILE[4],), None)
    assert not unprintable(ConsoleFormatter().format(record)) and "\n" not in ConsoleFormatter().format(record)
    assert not unprintable(JsonFormatter().format(record))


# ---------------------------------------------------------------------------------------- entry checks
def _control(extra: dict, identity: Identity, node: GossipNode) -> bytes:
    return make_control_frame(identity, kind="ack", swarm=SWARM, fingerprint=node.fingerprint, seq=1, step=1,
                              timestamp=time.time(), extra=extra, limits=node.limits)


@pytest.mark.parametrize("listen", HOSTILE + ["host:99999", "host:0", "host", "[zz]:1"])
def test_a_control_frame_whose_listen_is_not_an_address_is_refused(listen):
    node = GossipNode(GossipConfig(swarm=SWARM), Identity.generate(b"\x01" * 32), SPEC, torch.zeros(16), now=time.time())
    frame = _control({"listen": listen}, Identity.generate(b"\x02" * 32), node)
    header = decode_frame(frame, node.policy, now=time.time()).header
    with pytest.raises(FrameRefused, match="listen"):
        read_control(header)
    assert read_control(decode_frame(_control({"listen": "127.0.0.1:80"}, Identity.generate(b"\x02" * 32), node),
                                     node.policy, now=time.time()).header).listen == "127.0.0.1:80"


@pytest.mark.parametrize("listen", HOSTILE)
def test_a_hello_whose_listen_is_not_an_address_is_refused(listen):
    node = GossipNode(GossipConfig(swarm=SWARM), Identity.generate(b"\x01" * 32), SPEC, torch.zeros(16), now=time.time())
    hello = make_hello(Identity.generate(b"\x02" * 32), swarm=SWARM, fingerprint=node.fingerprint, seq=1, step=1,
                       now=time.time(), listen=listen, peers=[], limits=node.limits, nonce="ab" * 8)
    with pytest.raises(FrameRefused, match="listen"):
        read_hello(hello, node.policy, time.time(), "ab" * 8)


# ---------------------------------------------------------------------------------------- end to end
@contextmanager
def screen() -> Iterator[io.StringIO]:
    """Every log record, at every level, as the command line prints it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ConsoleFormatter())
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def victim():
    """One peer's network side on 127.0.0.1 (no training thread), and the loop it runs on."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    node = GossipNode(GossipConfig(swarm=SWARM), Identity.generate(b"\x07" * 32), SPEC, torch.zeros(16), now=time.time())
    driver = AsyncDriver(NodeWorker(node, time.time), SessionConfig(join=False, hello_every_s=0.2),
                         # benching off: the hostile requests, all from 127.0.0.1, are refused far past the
                         # refusal budget, and a benched address's connections are reset before they reach
                         # the code whose output this checks
                         NetConfig(listen="127.0.0.1:0", mdns=False, refusals_per_s=float("inf")), Metrics(),
                         emit=logging.getLogger("peer").info,
                         on_adopt=lambda x, step: None)
    network = Network.of(driver)
    asyncio.run_coroutine_threadsafe(network.start(), loop).result(30)
    yield driver, loop
    asyncio.run_coroutine_threadsafe(network.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _post(address: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{address}/v1/exchange", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _hostile_exchanges(victim_node: GossipNode, address: str, text: str) -> None:
    """A key that completes a ticketed exchange saying it listens at `text`; another that pushes
    frames with `text` in every free-form field; control frames with `text` in each field."""
    key = victim_node.identity.public_key
    for listen in (text, "127.0.0.1:9"):
        attacker = GossipNode(GossipConfig(swarm=SWARM), Identity.generate(), SPEC, torch.ones(16), now=time.time(),
                              listen=listen)
        for _ in range(2):  # a first contact, then the ticketed exchange
            status, reply = _post(address, attacker.build_request(key, time.time()))
            if status == 200:
                attacker.handle_response(reply, time.time())
    to_epoch, ticket = attacker.held_tickets.take(key)
    now, ident = time.time(), attacker.identity
    frames = [
        make_snapshot_frame(ident, swarm=SWARM, fingerprint=attacker.fingerprint, seq=5, step=5, timestamp=now,
                            vector=torch.ones(16), extra={"epoch": text, "kind": text, text: text}),
        make_update_frame(ident, swarm=SWARM, fingerprint=attacker.fingerprint, seq=6, step=6, timestamp=now,
                          codec="identity", delta=torch.ones(16), extra={"epoch": text, text: text})[0],
    ]
    extra = {"epoch": attacker.epoch, "listen": "127.0.0.1:9", "bundle": bundle_digest(frames), text: text}
    control = make_control_frame(ident, kind="ack", swarm=SWARM, fingerprint=attacker.fingerprint, seq=99, step=6,
                                 timestamp=now, extra=extra, limits=attacker.limits, to=key, to_epoch=to_epoch,
                                 ticket=ticket)
    _post(address, pack_bundle([control, *frames]))
    for field in ("epoch", "bundle", "have_epoch", "have_seq", "offer", "reply", "listen"):
        frame = make_control_frame(ident, kind="ack", swarm=SWARM, fingerprint=attacker.fingerprint, seq=100, step=6,
                                   timestamp=now, extra={field: text}, limits=attacker.limits, to=key)
        _post(address, pack_bundle([frame]))


def _hostile_hello_server(loop: asyncio.AbstractEventLoop, texts: list[str]) -> tuple[web.AppRunner, str]:
    """A fake peer whose /v1/hello answers carry `text` in each of a hello's fields in turn."""
    identity, answered = Identity.generate(), [0]
    node = GossipNode(GossipConfig(swarm=SWARM), identity, SPEC, torch.zeros(16), now=time.time())

    async def hello(request: web.Request) -> web.Response:
        text = texts[answered[0] % len(texts)]
        field = answered[0] // len(texts) % 4
        answered[0] += 1
        extra = {"nonce": request.query.get("nonce", ""), "listen": address if field else text,
                 "peers": [{"id": text, "address": "127.0.0.1:2"}, {"id": "", "address": text}]}
        if field == 2:
            extra["nonce"] = text
        if field == 3:
            extra[text] = text
        body = make_control_frame(identity, kind="hello", swarm=SWARM, fingerprint=node.fingerprint, seq=answered[0],
                                  step=1, timestamp=time.time(), extra=extra, limits=node.limits)
        return web.Response(body=body)

    async def start() -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.router.add_get("/v1/hello", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, f"127.0.0.1:{runner.addresses[0][1]}"

    runner, address = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    return runner, address


def test_no_hostile_string_in_any_frame_reaches_the_screen(victim):
    driver, loop = victim
    with screen() as logged:
        runner, fake = _hostile_hello_server(loop, HOSTILE)
        loop.call_soon_threadsafe(driver.on_found, PeerInfo(peer_id="", address=fake, source="static"))
        for text in HOSTILE:
            _hostile_exchanges(driver.node, driver.address, text)
        deadline = time.monotonic() + 20
        while driver.metrics.total("hello_failures_total") + driver.metrics.total("hello_listen_mismatch_total") < 8:
            assert time.monotonic() < deadline, "the victim did not dial the hostile hello server"
            time.sleep(0.1)
        shown = CliRunner().invoke(main, ["status", driver.address])
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
    assert shown.exit_code == 0, shown.output
    assert not unprintable(shown.output), shown.output
    assert not unprintable(logged.getvalue()), logged.getvalue()
    assert driver.metrics.total("frames_refused_total") > 0
