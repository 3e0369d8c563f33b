"""The status page a peer serves at GET /, opened in headless Chromium.

Two tiny-preset peers on 127.0.0.1 (the second bootstrapped with --peer): once the first
one's /v1/status has loss points and a neighbour row, Chromium loads its page, lets the
page's own script poll /v1/status, and the dumped DOM must show the loss curve, the
neighbour row and figures that agree with /v1/status read before and after. A lone peer's
page must say how to add a neighbour, draw the curve with step and time axes, explain
consensus distance and show no placeholder rows. Screenshots are kept as artifacts (under
the test's tmp_path, and in $GOSSIP_TTS_ARTIFACTS when set).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.conftest import tiny_args

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (apt-get install chromium)")


def _status(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/v1/status", timeout=30) as r:
        return json.loads(r.read())


def _chromium(profile: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Headless Chromium with nothing it would reach out to the network for on its own."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _attr(tag: str, name: str) -> str | None:
    m = re.search(rf'\b{name}="([^"]*)"', tag)
    return html.unescape(m.group(1)) if m else None


def _element(dom: str, element_id: str) -> str:
    m = re.search(rf'<[^>]*\bid="{element_id}"[^>]*>', dom)
    assert m, f"no #{element_id} in the page:\n{dom[:3000]}"
    return m.group(0)


def test_status_page_draws_the_loss_curve_and_neighbours(corpus, spawn, tmp_path, swarm_name):
    common = ("--listen", "127.0.0.1:0", "--no-mdns", "--swarm", swarm_name)
    a = spawn("a", *tiny_args(corpus["shard0"], tmp_path / "a", *common, steps=100000))
    address = a.wait_listening()
    b = spawn("b", *tiny_args(corpus["shard1"], tmp_path / "b", *common, "--peer", address, steps=100000))
    b.wait_listening()

    deadline, before = time.monotonic() + 180, {}
    while time.monotonic() < deadline:
        before = _status(address)
        if len(before["loss_history"]) >= 3 and any(n["step"] is not None for n in before["neighbours"]):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no loss points and neighbour row within 180 s: {before}\n{a.text()[-2000:]}")

    url = f"http://{address}/"
    page = _chromium(tmp_path / "profile", "--virtual-time-budget=6000", "--dump-dom", url)
    after = _status(address)
    assert page.returncode == 0, page.stderr[-3000:]
    dom = page.stdout

    assert _attr(re.search(r"<body[^>]*>", dom).group(0), "data-ready") == "1", dom[:3000]
    points = int(_attr(_element(dom, "loss-curve"), "data-points"))
    assert len(before["loss_history"]) <= points <= len(after["loss_history"]) + 1
    line = _attr(_element(dom, "loss-line"), "points")
    assert line and len(line.split()) == points

    rows = re.findall(r'<tr[^>]*\bdata-peer="([0-9a-f]*)"[^>]*>', dom)
    assert b.peer_id in rows, rows
    row = re.search(rf'<tr[^>]*\bdata-peer="{b.peer_id}"[^>]*>', dom).group(0)
    b_before = next(n for n in before["neighbours"] if n["peer_id"] == b.peer_id)
    b_after = next(n for n in after["neighbours"] if n["peer_id"] == b.peer_id)
    assert b_before["step"] <= int(_attr(row, "data-step")) <= b_after["step"]

    step = int(_attr(_element(dom, "step"), "data-value"))
    assert before["step"] <= step <= after["step"]
    loss = float(_attr(_element(dom, "loss"), "data-value"))
    assert re.search(rf'id="loss"[^>]*>{loss:.4f}<', dom) and 0 < loss < 100
    assert int(_attr(_element(dom, "swarm-size"), "data-value")) == after["swarm_size"] == 2
    assert before["bytes_in"] <= int(_attr(_element(dom, "bytes-in"), "data-value")) <= after["bytes_in"]
    assert before["bytes_out"] <= int(_attr(_element(dom, "bytes-out"), "data-value")) <= after["bytes_out"]
    assert float(_attr(_element(dom, "steps-per-s"), "data-value")) > 0
    assert int(_attr(_element(dom, "refusals"), "data-rows")) == len(after["refusals"])
    assert f">{swarm_name}<" in dom and f">{a.peer_id}<" in dom

    assert _attr(_element(dom, "no-neighbours"), "hidden") is not None  # the hint is for a lone peer only
    _screenshot(url, tmp_path, "status-page.png")


def _screenshot(url: str, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    result = _chromium(tmp_path / f"profile-{name}", "--virtual-time-budget=6000", "--window-size=1200,1400",
                       f"--screenshot={shot}", "--hide-scrollbars", url)
    assert result.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000, result.stderr[-3000:]
    artifacts = os.environ.get("GOSSIP_TTS_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / shot.name)
    return shot


def test_lone_peer_page_has_axes_a_neighbour_hint_an_explained_consensus_and_no_placeholder_rows(
        corpus, spawn, tmp_path, swarm_name):
    a = spawn("a", *tiny_args(corpus["shard0"], tmp_path / "a", "--listen", "127.0.0.1:0", "--no-mdns",
                              "--swarm", swarm_name, steps=100000))
    address = a.wait_listening()
    deadline, status = time.monotonic() + 180, {}
    while time.monotonic() < deadline and len(status.get("loss_history", [])) < 20:
        status = _status(address)
        time.sleep(0.5)
    assert len(status["loss_history"]) >= 20 and not status["neighbours"] and not status["refusals"], status

    url = f"http://{address}/"
    page = _chromium(tmp_path / "profile", "--virtual-time-budget=6000", "--dump-dom", url)
    assert page.returncode == 0, page.stderr[-3000:]
    dom = page.stdout
    assert _attr(re.search(r"<body[^>]*>", dom).group(0), "data-ready") == "1", dom[:3000]

    assert _attr(_element(dom, "no-neighbours"), "hidden") is None, _element(dom, "no-neighbours")
    assert re.search(rf'id="hint-address"[^>]*>{re.escape(address)}<', dom), "the hint names this peer's address"
    assert _attr(_element(dom, "neighbours"), "hidden") is not None  # no empty table under the hint
    assert _attr(_element(dom, "refusals"), "hidden") is not None and _attr(_element(dom, "no-refusals"), "hidden") is None
    assert not re.search(r"<td[^>]*>none</td>", dom), "no 'none | 0' placeholder row"

    axes = _element(dom, "loss-axes")
    assert int(_attr(axes, "data-x-ticks")) >= 2 and int(_attr(axes, "data-y-ticks")) >= 2, axes
    steps = [int(v) for v in re.findall(r'class="tick x-tick"[^>]*>(\d+)<', dom)]
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] <= status["loss_history"][-1][0] + 200, steps
    assert re.findall(r'class="tick x-time"[^>]*>[^<]*\d\d[^<]*<', dom), "time of day under the step ticks"
    assert len(re.findall(r'class="tick y-tick"', dom)) >= 2
    assert any("RMS distance" in title for title in re.findall(r'<div class="fig" title="([^"]*)"', dom))
    assert re.search(r'id="consensus-note"[^>]*>Consensus distance: how far apart the replicas are', dom)
    _screenshot(url, tmp_path, "status-page-alone.png")
