"""A peer's /metrics passes `promtool check metrics` alone and in a swarm of three, the
counters a user queries exist at 0 before first use, no label collides with the ones
Prometheus sets itself (`job`, `instance`: they would arrive as `exported_job`), and every
series the shipped Grafana dashboard queries is one a peer exposes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess

pytestmark = pytest.mark.slow  # a lone peer and a swarm of three real peer processes, scraped: run by .ci/run's slow section

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)")
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gossip-tts-dashboard.json"


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        return resp.read().decode()


def promtool_problems(text: str) -> str:
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return (result.stdout + result.stderr).strip() if result.returncode else ""


def label_names(text: str) -> set[str]:
    return {m for labels in re.findall(r"^[a-z_]+\{([^}]*)\}", text, re.M) for m in re.findall(r"(\w+)=\"", labels)}


@pytest.fixture(scope="module")
def scrapes(corpus, tmp_path_factory) -> dict[str, list[str]]:
    """/metrics of a lone peer, then of each peer of a swarm of three that has exchanged."""
    tmp = tmp_path_factory.mktemp("promtool")
    started: list[PeerProcess] = []

    def start(i: int, *extra: str) -> PeerProcess:
        started.append(PeerProcess(tiny_args(corpus[f"shard{i}"], tmp / f"p{i}", "--listen", "127.0.0.1:0", "--no-mdns",
                                             *extra, steps=100000), tmp / f"p{i}.log"))
        return started[-1]

    try:
        first = start(0)
        address = first.wait_listening()
        first.wait_for(r"^step \d+ loss", 120)
        alone = scrape(address)
        for p in (start(1, "--peer", address), start(2, "--peer", address)):
            p.wait_listening()
        for p in started:
            p.wait_for(r"^step \d+ loss .* exchanges/s (?!0\.00 )\d.* consensus \d", 240)
        return {"alone": [alone], "swarm": [scrape(p.address) for p in started]}
    finally:
        for p in started:
            p.kill()


@needs_promtool
def test_lone_peer_and_swarm_of_three_are_promtool_clean(scrapes):
    for text in scrapes["alone"] + scrapes["swarm"]:
        assert promtool_problems(text) == "", promtool_problems(text)


def test_counters_exist_at_zero_from_the_start_and_no_label_is_prometheus_own(scrapes):
    alone = scrapes["alone"][0]
    for series in ("gossip_tts_exchanges_total 0.0", "gossip_tts_bytes_received_total 0.0",
                   'gossip_tts_frames_refused_total{reason="bad_signature"} 0.0', "gossip_tts_evictions_total 0.0"):
        assert series in alone, series
    for text in scrapes["alone"] + scrapes["swarm"]:
        assert not label_names(text) & {"job", "instance"}, label_names(text)
    for text in scrapes["swarm"]:
        assert re.search(r"^gossip_tts_exchanges_total [1-9]", text, re.M), text


def test_every_series_the_grafana_dashboard_queries_is_exposed(scrapes):
    exposed = {m for text in scrapes["swarm"] for m in re.findall(r"^(gossip_tts_\w+)", text, re.M)}
    queried = {m for panel in json.loads(DASHBOARD.read_text())["panels"] for target in panel["targets"]
               for m in re.findall(r"gossip_tts_\w+", target["expr"])}
    assert queried and queried <= exposed, sorted(queried - exposed)
