"""What each of a peer's metrics means, and which exist at 0 from the start.

`Metrics` creates a metric on first use; a write that passes no help text takes it from
`HELP` here (promtool refuses a family without help, and Grafana shows it as the tooltip).
`expose_from_start` creates the counters a user is likely to query at 0, with their known
label values: a lone peer's `rate(gossip_tts_exchanges_total[5m])` or a refusals panel
should read 0, not "no data", before the first exchange.
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import RefusalReason

HELP: dict[str, str] = {
    "steps": "local training steps",
    "loss": "training loss of the last local step",
    "samples_total": "training samples consumed",
    "audio_seconds_total": "seconds of audio trained on",
    "tflops": "achieved TFLOP/s of the training step",
    "shard_errors": "data shards that could not be read",
    "skipped_samples": "training samples skipped as unreadable or unusable",
    "skipped_clips": "clips skipped for being longer than --max-frames",
    "neighbours": "neighbours we hold a copy of",
    "peers_live": "peers in the neighbour table not judged dead",
    "consensus_distance": "RMS distance of our parameters and the neighbour copies to their mean",
    "exchanges_total": "completed push-pull exchanges (either side)",
    "exchanges_ok_total": "exchanges we started that ended in a verified reply",
    "exchange_failures_total": "exchanges we started that failed (refused, timed out, unreachable)",
    "bytes_received_total": "bytes of exchange bodies received",
    "bytes_sent_total": "bytes of exchange bodies sent",
    "frames_refused_total": "update frames refused, by the first check they failed",
    "hello_failures_total": "hellos we sent that got no verified answer",
    "hello_listen_mismatch_total": "hellos answered by a peer signed for another address",
    "hello_bad_listen_total": "hellos naming a listen address that does not parse",
    "inbound_bad_listen_total": "inbound exchanges naming a listen address that does not parse",
    "bootstrap_retries_total": "hellos sent again to a --peer address that had not answered",
    "candidates_refused_total": "discovered addresses dropped: too many unverified candidates",
    "evictions_total": "neighbours evicted as unreachable",
    "joins_total": "joins that adopted a neighbour's state",
    "joins_alone_total": "joins that ended training from our own weights",
    "joins_refused_total": "neighbour states refused on joining: they scored worse on our probe batch",
    "publish_failures_total": "updates that could not be published (e.g. non-finite parameters)",
    "published_total": "compressed updates published",
    "mixes_total": "neighbour copies mixed into the parameters",
    "updates_applied_total": "neighbour updates applied to their public copies",
    "snapshots_sent_total": "exact public-copy snapshots sent to fill a gap",
    "snapshots_received_total": "exact public-copy snapshots received",
    "http_refused_total": "requests refused before reaching a handler, by reason",
    "http_responses_total": "HTTP answers, by status",
    "connections_refused_total": "connections closed at once: max_connections were open",
    "worker_cpu_seconds_total": "CPU seconds of the gossip worker thread, by task",
    "rollbacks_total": "rollbacks to the last good state after a non-finite step",
}
"""Help text by metric name (without the `gossip_tts_` prefix)."""

FROM_START: tuple[str, ...] = (
    "exchanges_total", "exchanges_ok_total", "exchange_failures_total", "bytes_received_total", "bytes_sent_total",
    "hello_failures_total", "evictions_total", "joins_total", "joins_alone_total", "joins_refused_total",
    "published_total", "publish_failures_total", "mixes_total", "updates_applied_total", "snapshots_sent_total",
    "snapshots_received_total", "connections_refused_total",
)
"""Unlabelled counters created at 0 when a networked peer starts."""


class CounterSink(Protocol):
    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None: ...


def help_for(name: str) -> str:
    """The help text of `name`; one made from the name itself for a metric not listed here."""
    return HELP.get(name) or name.replace("_", " ")


def expose_from_start(metrics: CounterSink) -> None:
    """Create the counters a user queries (FROM_START, and refusals by every reason) at 0."""
    for name in FROM_START:
        metrics.inc(name, 0.0)
    for reason in RefusalReason:
        metrics.inc("frames_refused_total", 0.0, reason=reason.value)
