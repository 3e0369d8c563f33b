"""The catalogue of a peer's metrics (name, kind, help), and which exist at 0 from the start.

`Metrics` creates a metric on first use, with its help text from `CATALOGUE` here, the one place
a metric is described (promtool refuses a family without help, and Grafana shows it as the tooltip).
`expose_from_start` creates the counters a user is likely to query at 0, with their known
label values: a lone peer's `rate(gossip_tts_exchanges_total[5m])` or a refusals panel
should read 0, not "no data", before the first exchange.
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import RefusalReason

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
SUMMED = "summed"
"""Marks a counter simnet adds up over every peer of a run into the run's totals (`SIMNET_TOTALS`)."""

CATALOGUE: dict[str, tuple[str, ...]] = {
    "admitted_unverified_total": (
        COUNTER, "simnet sybil control: inbound exchanges admitted without verifying their address", SUMMED),
    "adopted_from_attacker_total": (
        COUNTER, "simnet: joins that adopted an attacker's state (joining must never do this)", SUMMED),
    "audio_seconds_total": (COUNTER, "seconds of audio trained on"),
    "bootstrap_retries_total": (COUNTER, "hellos sent again to a --peer address that had not answered", SUMMED),
    "boundary_seconds": (HISTOGRAM, "seconds of the step-boundary hooks (mixing, publish hand-over)"),
    "bytes_received_total": (COUNTER, "bytes of exchange bodies received"),
    "bytes_sent_total": (COUNTER, "bytes of exchange bodies sent"),
    "candidates_refused_total": (COUNTER, "discovered addresses dropped: too many unverified candidates", SUMMED),
    "clip_radius": (GAUGE, "self-centred clipping radius of the last mix"),
    "connections_refused_total": (COUNTER, "connections closed at once: their address, or all addresses together, held the most allowed"),
    "consensus_distance": (
        GAUGE, "RMS distance of what we serve as our state (the parameters at the last publish, or our "
               "bfloat16 public copy) and the neighbour copies we hold to their mean"),
    "copies_reset_total": (COUNTER, "neighbour copies dropped because they became non-finite", SUMMED),
    "data_bytes_received_total": (COUNTER, "corpus bytes downloaded from other peers"),
    "data_bytes_sent_total": (COUNTER, "corpus bytes uploaded to other peers (shards, manifests)"),
    "data_manifest_newest_version": (GAUGE, "the newest version of the signed manifest this peer has verified"),
    "data_shards_held": (GAUGE, "corpus shards this peer holds (own and cached)"),
    "data_shards_in_manifest": (GAUGE, "corpus shards in the manifest"),
    "diverged_total": (COUNTER, "simnet: honest peers stopped because their loss was not finite", SUMMED),
    "evictions_total": (COUNTER, "neighbours evicted as unreachable", SUMMED),
    "exchange_failures_total": (COUNTER, "exchanges we started that failed (refused, timed out, unreachable)", SUMMED),
    "exchanges_busy_total": (COUNTER, "exchanges we started that the partner answered busy (429): it rests until its "
                             "Retry-After", SUMMED),
    "exchange_seconds": (HISTOGRAM, "an exchange we started: request to verified reply"),
    "exchanges_ok_total": (COUNTER, "exchanges we started that ended in a verified reply", SUMMED),
    "exchanges_refused_joining_total": (COUNTER, "simnet: inbound exchanges refused while joining"),
    "exchanges_to_made_up_total": (COUNTER, "simnet: exchanges sent to an address no peer listens at", SUMMED),
    "exchanges_total": (COUNTER, "completed push-pull exchanges (either side)"),
    "exchanges_unticketed_total": (
        COUNTER, "exchanges that held no ticket of ours and pushed nothing (a first contact): answered with a ticket"),
    "forged_frames_total": (COUNTER, "simnet attackers: forged frames sent", SUMMED),
    "frames_refused_total": (COUNTER, "update frames refused, by the first check they failed"),
    "hello_bad_listen_total": (COUNTER, "hellos naming a listen address that does not parse"),
    "hello_failures_total": (COUNTER, "hellos we sent that got no verified answer", SUMMED),
    "hello_listen_mismatch_total": (COUNTER, "hellos answered by a peer signed for another address"),
    "http_refused_total": (COUNTER, "requests refused before reaching a handler"),
    "http_responses_total": (COUNTER, "HTTP answers sent, by status code"),
    "inbound_bad_listen_total": (COUNTER, "inbound exchanges naming a listen address that does not parse"),
    "joins_alone_total": (COUNTER, "joins that ended training from our own weights", SUMMED),
    "joins_refused_total": (
        COUNTER, "neighbour states refused on joining: they scored worse on our probe batch", SUMMED),
    "joins_total": (COUNTER, "joins that adopted a neighbour's state", SUMMED),
    "loss": (GAUGE, "training loss of the last step"),
    "manifests_refused_total": (
        COUNTER, "signed manifests refused (untrusted signer, bad signature, a replayed version, bytes not matching "
                 "the offer)"),
    "mfu": (GAUGE, "model FLOPs utilisation of the last step (TFLOP/s / the device's dense bf16 peak)"),
    "mix_clipped_total": (COUNTER, "mixed copies whose pull was clipped"),
    "mixed_staleness_steps": (
        HISTOGRAM, "staleness of each mixed copy: our local steps from its publication to the mixing reference"),
    "mixes_total": (COUNTER, "neighbour copies mixed into the parameters", SUMMED),
    "neighbour_age_seconds": (
        GAUGE, "age by our clock of the newest copy held of a neighbour: now - min(its timestamp, when it arrived)"),
    "neighbour_distance": (GAUGE, "distance of a neighbour's copy to our public copy at its last mix, by peer"),
    "neighbours": (GAUGE, "neighbour copies held"),
    "peak_mem_gib": (GAUGE, "most device memory allocated since start, GiB"),
    "peers_live": (GAUGE, "peers in the neighbour table not judged dead"),
    "publish_failures_total": (COUNTER, "updates that could not be published (e.g. non-finite parameters)", SUMMED),
    "published_total": (COUNTER, "compressed updates published", SUMMED),
    "rollbacks_total": (COUNTER, "rollbacks to the last good state after a non-finite step"),
    "samples_total": (COUNTER, "training examples consumed"),
    "shard_errors": (
        GAUGE, "data shards that failed or were abandoned since start (unreadable, stalled, past a deadline)"),
    "shard_source_failures_total": (COUNTER, "shard downloads a source left unfinished (the next source resumes them)"),
    "shards_fetched_total": (COUNTER, "shards downloaded, verified against the manifest and cached"),
    "shards_refused_total": (COUNTER, "shard downloads refused: bytes not matching the manifest"),
    "shards_served_total": (COUNTER, "shard uploads that reached the shard's last byte"),
    "skipped_samples": (GAUGE, "training samples skipped since start (corrupt, over a size limit, ...)"),
    "snapshots_received_total": (COUNTER, "exact public-copy snapshots received", SUMMED),
    "snapshots_sent_total": (COUNTER, "exact public-copy snapshots sent to fill a gap", SUMMED),
    "snapshots_to_made_up_total": (COUNTER, "simnet: state requests sent to an address no peer listens at", SUMMED),
    "snapshots_withheld_total": (COUNTER, "answers that carried no snapshot where the asker lacks our copy, by reason"),
    "states_resumed_total": (COUNTER, "/v1/state answers that sent only the bytes a broken transfer lacked "
                                      "(peer.net.state_resume)"),
    "step_scale": (GAUGE, "step-size multiplier for the swarm this peer mixes with"),
    "publish_period_steps": (GAUGE, "our steps per publish as measured: what the cadence aims at (publish_every_steps) "
                                    "at least, more where the node worker takes longer to publish "
                                    "(peer.core.cadence.PublishPeriod)"),
    "publish_every_steps": (GAUGE, "steps per publish the cadence aims at: gossip_every where pinned, else the fewest "
                                   "(a power of two) that keep the protocol within publish_budget"),
    "publish_budget": (GAUGE, "share of training time the protocol may take (publish_budget); 0: the cadence is "
                              "pinned by gossip_every"),
    "publish_protocol_seconds": (GAUGE, "protocol seconds per publish as the budget measures them: the training "
                                        "thread's mixing and parameter copies plus the node worker's CPU on gossip "
                                        "jobs (0: not measured, or pinned)"),
    "publish_step_seconds": (GAUGE, "seconds per training step as the publish budget measures them (0: not measured, "
                                    "or pinned)"),
    "partner_steps_taken_total": (
        COUNTER, "pulled partners whose own steps were taken (peer.core.partner_steps)", SUMMED),
    "partner_steps_clipped_total": (COUNTER, "partners' steps shortened to the bound our own steps set", SUMMED),
    "partner_steps_applied_total": (COUNTER, "step boundaries that added partners' steps to the parameters"),
    "step_seconds": (HISTOGRAM, "seconds of one local training step (forward, backward, optimiser)"),
    "steps": (GAUGE, "local training steps"),
    "sybil_requests_total": (COUNTER, "simnet sybil attackers: requests sent from made-up addresses", SUMMED),
    "leech_requests_total": (
        COUNTER, "simnet leech attackers: exchanges sent from fresh keys to be sent the model", SUMMED),
    "leech_bytes_total": (COUNTER, "simnet leech attackers: bytes of the answers they received", SUMMED),
    "leech_snapshots_total": (
        COUNTER, "simnet leech attackers: frames past the control frame in those answers", SUMMED),
    "partners_barren_total": (
        COUNTER, "partners replaced because their answers kept carrying nothing when they owed news", SUMMED),
    "accept_pauses_total": (
        COUNTER, "times accepting paused: benched addresses' connections came faster than NetConfig.benched_connections_per_s"),
    "connections_benched_total": (
        COUNTER, "connections closed unread: their address was refused too often (NetConfig.refusals_per_s)"),
    "partners_frozen_total": (
        COUNTER, "partners replaced because the step they claim stayed put for many of our publishes"),
    "partners_reinstated_total": (
        COUNTER, "partners replaced for giving nothing that may be partners again: a request of theirs brought news"),
    "tflops": (GAUGE, "model TFLOP/s of the last step (the model's own FLOP count / wall time)"),
    "update_gaps_total": (COUNTER, "updates that could not be applied in order", SUMMED),
    "updates_applied_total": (COUNTER, "neighbour updates applied to their public copies", SUMMED),
    "updates_duplicate_total": (COUNTER, "updates already held (resent or replayed)"),
    "worker_cpu_seconds_total": (
        COUNTER, "CPU seconds of the gossip worker (compress, sign, verify, decode, apply) by task"),
}
"""Every metric a peer (or simnet's) writes: name (without the `gossip_tts_` prefix) -> (kind,
help[, SUMMED]). `tests/unit/project/test_metric_catalogue.py` finds every name the code writes and fails on one
missing here, so a typo cannot make a new metric silently."""

HELP: dict[str, str] = {name: entry[1] for name, entry in CATALOGUE.items()}
"""Help text by metric name."""

SIMNET_TOTALS: tuple[str, ...] = tuple(name for name, entry in CATALOGUE.items() if SUMMED in entry[2:])
"""The counters simnet sums over every peer of a run (`simnet.runs.swarm.GossipSim.totals`)."""

FROM_START: tuple[str, ...] = (
    "exchanges_total", "exchanges_ok_total", "exchange_failures_total", "bytes_received_total", "bytes_sent_total",
    "hello_failures_total", "evictions_total", "joins_total", "joins_alone_total", "joins_refused_total",
    "published_total", "publish_failures_total", "mixes_total", "updates_applied_total", "snapshots_sent_total",
    "snapshots_received_total", "connections_refused_total",
)
"""Unlabelled counters created at 0 when a networked peer starts."""


class CounterSink(Protocol):
    def inc(self, name: str, value: float = 1.0, **labels: str) -> None: ...


def help_for(name: str) -> str:
    """The help text of `name`; one made from the name itself for a metric not listed here."""
    return HELP.get(name) or name.replace("_", " ")


def expose_from_start(metrics: CounterSink) -> None:
    """Create the counters a user queries (FROM_START, and refusals by every reason) at 0."""
    for name in FROM_START:
        metrics.inc(name, 0.0)
    for reason in RefusalReason:
        metrics.inc("frames_refused_total", 0.0, reason=reason.value)
