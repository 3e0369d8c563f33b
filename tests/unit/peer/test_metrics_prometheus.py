"""/metrics text as Prometheus reads it: exact counters, complete histograms, build and process info, forgetting."""

from __future__ import annotations

import logging

from prometheus_client.parser import text_string_to_metric_families

from peer.metrics import CONTENT_TYPE, Metrics


def parsed(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of the exposition, read by prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(m.render()) for s in family.samples}


def test_counters_keep_every_digit():
    m = Metrics(process=False)
    m.inc("bytes_sent_total", 123_456_789)
    m.inc("bytes_sent_total", 1)
    m.inc("frames_refused_total", 3_995_061, reason="bad_signature")
    samples = parsed(m)
    assert samples[("gossip_tts_bytes_sent_total", ())] == 123_456_790
    assert samples[("gossip_tts_frames_refused_total", (("reason", "bad_signature"),))] == 3_995_061
    assert m.get("bytes_sent_total") == 123_456_790 and m.total("frames_refused_total") == 3_995_061


def test_histogram_counts_every_observation_not_a_window():
    m = Metrics(process=False)
    values = [i % 70 for i in range(5000)]  # more than any recent-values window
    for v in values:
        m.observe("mixed_staleness_steps", v)
    m.observe("exchange_seconds", 0.2)
    samples = parsed(m)
    assert samples[("gossip_tts_mixed_staleness_steps_count", ())] == len(values)
    assert samples[("gossip_tts_mixed_staleness_steps_sum", ())] == sum(values)
    assert samples[("gossip_tts_mixed_staleness_steps_bucket", (("le", "64.0"),))] == sum(v <= 64 for v in values)
    assert samples[("gossip_tts_exchange_seconds_bucket", (("le", "0.25"),))] == 1  # time buckets for *_seconds
    assert len(m.recent("mixed_staleness_steps")) == 4096 and m.recent("mixed_staleness_steps")[-1] == values[-1]


def test_build_info_process_metrics_and_content_type():
    samples = parsed(Metrics())
    build = [labels for (name, labels) in samples if name == "gossip_tts_build_info"]
    assert len(build) == 1 and dict(build[0])["version"] and dict(build[0])["python"]
    assert ("process_cpu_seconds_total", ()) in samples and ("process_start_time_seconds", ()) in samples
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_forget_drops_a_neighbours_series_and_only_those():
    m = Metrics(process=False)
    for peer in ("aa", "bb"):
        m.set("neighbour_distance", 1.5, peer=peer)
        m.observe("exchange_seconds", 0.1, peer=peer)
    m.inc("exchanges_total")
    assert m.forget(peer="aa") == 2
    names = {(name, labels) for name, labels in parsed(m)}
    assert ("gossip_tts_neighbour_distance", (("peer", "bb"),)) in names
    assert not any(("peer", "aa") in labels for _, labels in names)
    assert m.get("neighbour_distance", peer="aa") == 0.0 and m.get("exchanges_total") == 1
    m.set("neighbour_distance", 2.0, peer="aa")  # a neighbour that comes back gets a fresh series
    assert m.get("neighbour_distance", peer="aa") == 2.0


def test_each_instance_has_its_own_registry_and_a_label_slip_does_not_raise(caplog):
    a, b = Metrics(process=False), Metrics(process=False)
    a.inc("exchanges_total", 2)
    b.inc("exchanges_total", 5)
    assert (a.get("exchanges_total"), b.get("exchanges_total")) == (2, 5)
    with caplog.at_level(logging.WARNING, logger="peer.metrics"):
        a.inc("exchanges_total", reason="x")  # same name, other labels: ignored with one warning
        a.inc("exchanges_total", reason="y")
    assert a.total("exchanges_total") == 2 and len(caplog.records) == 1
