"""GET /v1/status is typed (ints are ints, unknown is null), GET / is the page, and the
history, progress lines and `gossip-tts status` read the same figures."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest
import torch
from click.testing import CliRunner

from gossip_tts.cli.main import main
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.local.loop import LoopConfig, ProgressMeter, record_step
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from peer.startup import build_peer
from peer.net.status import consensus_distance
from peer import cadence_gauges
from peer.core.publish_budget import CadenceReading
from peer.local.status_history import LossHistory
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from peer.trainer import StepStats
from protocol import Identity
from tests.unit.driver_helpers import Network


def _get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.headers["Content-Type"], r.read()


def _status(address: str) -> dict:
    return json.loads(_get(f"http://{address}/v1/status")[1])


@dataclass
class Lone:
    """A started driver and the loss history its /v1/status shows."""

    driver: AsyncDriver
    history: LossHistory

    @property
    def address(self) -> str:
        return self.driver.address

    @property
    def metrics(self) -> Metrics:
        return self.driver.metrics

    @property
    def node(self) -> GossipNode:
        return self.driver.node

    def record(self, stats: StepStats) -> None:
        """What the training loop records of a step: its figures and a point of the curve."""
        record_step(self.metrics, stats, 0.01, 0.001)
        self.history.add(stats.step, stats.loss, time.time(), stats.audio_seconds)


@pytest.fixture
def lone_driver():
    """One peer's network side on 127.0.0.1, with no training thread (nothing stepped yet)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    x = torch.zeros(16)
    node = GossipNode(GossipConfig(swarm="status-test"), Identity.generate(b"\x07" * 32), {"w": ((16,), "float32")}, x,
                      now=time.time())
    worker = NodeWorker(node, time.time)
    driver = AsyncDriver(worker, SessionConfig(join=False), NetConfig(listen="127.0.0.1:0", mdns=False), Metrics(),
                         emit=lambda s: None, on_adopt=lambda x, step: None)
    network = Network.of(driver)
    asyncio.run_coroutine_threadsafe(network.start(), loop).result(30)
    yield Lone(driver, network.history)
    asyncio.run_coroutine_threadsafe(network.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
    worker.close()


def test_status_before_the_first_step_is_typed_with_nulls(lone_driver):
    s = _status(lone_driver.address)
    assert s["peer_id"] == lone_driver.node.peer_id and s["swarm"] == "status-test"
    assert s["listen"] == lone_driver.address and isinstance(s["fingerprint"], str)
    assert s["step"] == 0 and type(s["step"]) is int
    for key in ("loss", "steps_per_s", "audio_seconds_per_s", "median_staleness", "consensus_distance",
                "publish_every", "publish_period", "publish_reason"):  # no step boundary has run
        assert s[key] is None, key
    assert s["loss_history"] == [] and s["neighbours"] == [] and s["refusals"] == {}
    for key in ("bytes_in", "bytes_out", "exchanges", "swarm_size"):
        assert type(s[key]) is int, key
    assert s["swarm_size"] == 1 and s["bytes_in"] == 0


def test_status_after_steps_has_a_typed_loss_history_and_rates(lone_driver):
    for step in (1, 2, 3):
        lone_driver.record(StepStats(step, 2.0 / step, samples=4, audio_seconds=1.5))
        time.sleep(0.02)
    s = _status(lone_driver.address)
    assert s["step"] == 3 and type(s["step"]) is int
    assert s["loss"] == pytest.approx(2.0 / 3)
    assert [p[0] for p in s["loss_history"]] == [1, 2, 3]
    assert all(type(p[0]) is int and type(p[1]) is float and type(p[2]) is float for p in s["loss_history"])
    assert s["steps_per_s"] > 0 and s["audio_seconds_per_s"] == pytest.approx(1.5 * s["steps_per_s"], rel=1e-6)
    text = lone_driver.metrics.render()
    assert "gossip_tts_step_seconds_count 3.0" in text and "gossip_tts_audio_seconds_total 4.5" in text


def test_status_says_the_publish_cadence_and_its_reason(lone_driver):
    """What the step boundary records (`peer.cadence_gauges`) is on /v1/status and drawn by the page."""
    cadence_gauges.record(lone_driver.metrics, CadenceReading(512, 0.05, protocol_s=1.2, step_s=0.05))
    lone_driver.metrics.set("publish_period_steps", 500)
    s = _status(lone_driver.address)
    assert (s["publish_every"], s["publish_period"]) == (512, 500)
    assert s["publish_reason"] == "budget 5%: protocol 1.2 s per publish, step 0.05 s → every 512 steps"
    cadence_gauges.record(lone_driver.metrics, CadenceReading(4))
    assert _status(lone_driver.address)["publish_reason"] == "pinned by --gossip-every"
    page = _get(f"http://{lone_driver.address}/")[1].decode()
    assert 'id="publish-every"' in page and "s.publish_reason" in page


def test_the_page_is_one_self_contained_html_file(lone_driver):
    content_type, body = _get(f"http://{lone_driver.address}/")
    page = body.decode()
    assert content_type.startswith("text/html")
    assert 'id="loss-curve"' in page and 'fetch("/v1/status"' in page and 'id="neighbours"' in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # no external assets


def test_status_command_prints_what_the_peer_reports(lone_driver):
    lone_driver.record(StepStats(1, 1.25, samples=4, audio_seconds=1.0))
    out = CliRunner().invoke(main, ["status", lone_driver.address])
    assert out.exit_code == 0, out.output
    assert f"peer {lone_driver.node.peer_id}" in out.output
    assert "step 1  loss 1.2500" in out.output and "swarm size 1" in out.output
    assert "refused frames: none" in out.output and "neighbours (0)" in out.output
    raw = CliRunner().invoke(main, ["status", "--json", lone_driver.address])
    assert raw.exit_code == 0 and json.loads(raw.output)["step"] == 1


def test_status_command_names_an_unreachable_peer():
    out = CliRunner().invoke(main, ["status", "127.0.0.1:9", "--timeout", "2"])
    assert out.exit_code == 1 and "http://127.0.0.1:9/v1/status" in out.output


class SlowToy(LeastSquaresTrainer):
    """The toy trainer at a pace two shared CPU cores can gossip alongside."""

    def step(self) -> StepStats:
        time.sleep(0.01)
        return super().step()


@pytest.mark.slow  # two in-process peers training until they see each other, 30 s on 2 cores: run by .ci/run's slow section
def test_two_peers_see_each_other_in_status_and_progress_lines(tmp_path):
    peers, threads, stops, lines = [], [], [], [[], []]
    address = None
    for i in range(2):
        net = NetConfig(listen="127.0.0.1:0", mdns=False, peers=[address] if address else [])
        peer = build_peer(SlowToy(LeastSquaresConfig(dim=8, samples_per_shard=32, seed=i)), LoopConfig(log_every_s=0.2),
                          GossipConfig(swarm="status-pair", gossip_every=1, compression="identity"), net,
                          Identity.generate(bytes([i + 1]) * 32), emit=lines[i].append, session_cfg=SessionConfig(join=False))
        stop = threading.Event()
        thread = threading.Thread(target=peer.run, args=(stop,), daemon=True)
        thread.start()
        peers.append(peer), threads.append(thread), stops.append(stop)
        deadline = time.monotonic() + 30
        while not peer.driver.address and time.monotonic() < deadline:
            time.sleep(0.05)
        address = peer.driver.address
    try:
        deadline, s = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            s = _status(peers[0].driver.address)
            rows = [n for n in s["neighbours"] if n["step"] is not None]
            if rows and s["bytes_in"] > 0 and s["swarm_size"] == 2 and s["consensus_distance"] is not None:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no neighbour in {s}")
        row = rows[0]
        assert row["peer_id"] == peers[1].identity.peer_id and row["address"] == peers[1].driver.address
        assert type(row["step"]) is int and type(row["staleness"]) is int and row["staleness"] >= 0
        assert type(row["last_contact_s"]) is float and row["live"] is True
        assert row["rtt_s"] is None or type(row["rtt_s"]) is float
        assert type(s["bytes_out"]) is int and s["bytes_out"] > 0
        exposition = peers[0].metrics.render()
        for histogram in ("exchange_seconds", "step_seconds", "boundary_seconds"):
            count = re.search(rf"^gossip_tts_{histogram}_count (\S+)$", exposition, re.M)
            assert count and float(count.group(1)) >= 1, histogram
        assert 'gossip_tts_exchange_seconds_bucket{le="0.005"}' in exposition  # time buckets
        progress = [line for line in lines[0] if line.startswith("step ")]
        assert progress[0].startswith("step 1 ")  # the first line comes after the first step
        assert any("neighbours 1 exchanges/s" in line and " in " in line and " out " in line
                   and "staleness" in line and "consensus" in line for line in progress), progress[-3:]
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(60)


def test_loss_history_keeps_the_whole_run_in_bounded_points():
    h = LossHistory(max_points=8)
    for step in range(1, 101):
        h.add(step, float(step), t=float(step), audio_seconds=2.0)
    points = h.points()
    assert len(points) <= 8 and points[0][0] <= 16 and points[-1][0] == 100
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    assert h.last() == (100, 100.0, 100.0)
    steps_per_s, audio = h.rates()
    assert steps_per_s == pytest.approx(1.0) and audio == pytest.approx(2.0)
    assert LossHistory().rates() == (None, None) and LossHistory().last() is None


def test_consensus_distance_matches_the_definition_at_any_chunk_size():
    vs = [torch.randn(1000, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    mean = torch.stack(vs).double().mean(0)
    want = float(torch.sqrt(sum(((v.double() - mean) ** 2).sum() for v in vs) / 3))
    assert consensus_distance(vs, chunk=7) == pytest.approx(want, rel=1e-12)
    assert consensus_distance(vs) == pytest.approx(want, rel=1e-12)


def test_progress_line_carries_gossip_figures():
    metrics = Metrics(process=False)
    t = [0.0]
    lines: list[str] = []
    meter = ProgressMeter(lambda: t[0], 10.0, lines.append, metrics)
    t[0] = 1.0
    meter.update(StepStats(1, 2.0, samples=4))
    assert lines == ["step 1 loss 2.0000 samples/s 4.0 audio-s/s 0.0 neighbours 0 exchanges/s 0.00 in 0B/s out 0B/s "
                     "staleness - consensus - publish every -"]
    metrics.set("neighbours", 2)
    metrics.inc("exchanges_total", 30)
    metrics.inc("bytes_received_total", 25_000)
    metrics.inc("bytes_sent_total", 2_000_000)
    metrics.inc("mixes_total", 3)
    for tau in (9, 1, 2, 4):  # the first one is older than the last line's interval
        metrics.observe("mixed_staleness_steps", tau)
    metrics.set("consensus_distance", 0.125)
    metrics.set("publish_period_steps", 12)
    cadence_gauges.record(metrics, CadenceReading(16, 0.05, protocol_s=1.2, step_s=0.0625))
    t[0] = 5.0
    meter.update(StepStats(2, 1.0, samples=4))
    assert len(lines) == 1  # not yet: 10 s between lines
    t[0] = 11.0
    meter.update(StepStats(3, 1.0, samples=4))
    assert lines[1] == ("step 3 loss 1.0000 samples/s 0.8 audio-s/s 0.0 neighbours 2 exchanges/s 3.00 in 2.5kB/s "
                        "out 200.0kB/s staleness 2 consensus 0.125 publish every 12 steps "
                        "(budget 5%: protocol 1.2 s per publish, step 0.062 s → every 16 steps)")


@pytest.fixture
def fake_peer():
    """An HTTP server on 127.0.0.1 whose /v1/status answer the test chooses."""
    import http.server

    answer = {"body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield answer, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)


@pytest.mark.parametrize("body, complaint", [
    (b"x" * (5 << 20), "larger than 4194304 bytes"),
    (b"<html>not json</html>", "not JSON"),
    (b'{"hello": 1}', "not a peer status"),
])
def test_status_command_refuses_what_is_not_a_status(fake_peer, body, complaint):
    answer, address = fake_peer
    answer["body"] = body
    out = CliRunner().invoke(main, ["status", address])
    assert out.exit_code == 1 and complaint in out.output, out.output
