"""Stopping a peer with a request still in progress (a slow shard upload, a /v1/state answer
to a slow reader): the server gives it `http_server.SHUTDOWN_TIMEOUT_S` and then ends it, and a
network stop that overruns its wait (`runtime.STOP_WAIT_S`) is logged, not raised, so the
run's result and its final checkpoint still come back."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

import pytest
import torch

import peer.net.http_server as http_server_mod
import peer.runtime as runtime_mod
from peer.local.checkpoint import load_checkpoint
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.net.driver import AsyncDriver
from peer.local.loop import LoopConfig
from peer.net.config import NetConfig
from peer.startup import build_peer
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from protocol import Identity
from tests.unit.driver_helpers import running_driver

DIM = 16


def _hang_state_requests(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Every /v1/state answer hangs (as one to a reader that stopped reading); the event is set once one does."""
    entered = threading.Event()

    async def hang(self: AsyncDriver) -> bytes:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(AsyncDriver, "serve_state", hang)
    return entered


def _ask_state(address: str) -> None:
    """GET /v1/state from a thread of its own, which gives up on its own (it is never joined)."""

    def ask() -> None:
        try:
            urllib.request.urlopen(f"http://{address}/v1/state", timeout=8.0).read()
        except OSError:
            pass

    threading.Thread(target=ask, daemon=True).start()


def test_the_shutdown_timeout_is_well_inside_the_stop_wait() -> None:
    # runner.cleanup gives a request in progress the timeout to finish, then as long again once cancelled
    assert 0 < 2 * http_server_mod.SHUTDOWN_TIMEOUT_S < runtime_mod.STOP_WAIT_S / 2


def test_stop_ends_a_request_in_progress_within_the_shutdown_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server_mod, "SHUTDOWN_TIMEOUT_S", 0.3, raising=False)
    entered = _hang_state_requests(monkeypatch)
    with running_driver(0x51, stop=False) as rig:
        _ask_state(rig.driver.address)
        assert entered.wait(5.0)
        t0 = time.monotonic()
        rig.call(rig.network.stop(), 5.0)
        assert time.monotonic() - t0 < 2 * 0.3 + 1.0


@pytest.mark.parametrize("joining", [False, True], ids=["training", "joining"])
def test_a_stop_that_overruns_its_wait_still_returns_the_result_and_checkpoint(
        tmp_path, monkeypatch: pytest.MonkeyPatch, joining: bool) -> None:
    monkeypatch.setattr(runtime_mod, "STOP_WAIT_S", 0.5, raising=False)  # the hung answer outlasts it
    entered = _hang_state_requests(monkeypatch)
    stop = threading.Event()
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if line.startswith("listening on http://"):  # stop with an answer in progress
            _ask_state(line.split("http://", 1)[1].split()[0])
            entered.wait(5.0)
            stop.set()

    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=DIM, shard=0, n_shards=2, heterogeneity=0.0, seed=0))
    peer = build_peer(trainer, LoopConfig(checkpoint_dir=tmp_path), GossipConfig(swarm="stop-test"),
                      NetConfig(listen="127.0.0.1:0", mdns=False), Identity.generate(b"\x52" * 32), emit=emit,
                      session_cfg=SessionConfig(join=joining, join_wait_s=20.0, join_timeout_s=30.0))
    t0 = time.monotonic()
    result = peer.run(stop)
    assert time.monotonic() - t0 < 8.0
    assert entered.is_set() and result.checkpoints_written == 1
    assert any("stopped while joining" in line for line in lines) == joining
    assert any("did not stop within" in line for line in lines), lines
    assert torch.equal(load_checkpoint(tmp_path)[0]["w"], trainer.get_flat_params())
