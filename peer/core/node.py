"""The gossip state machine of one peer: publish, exchange, mix. No sockets, no clock.

`GossipNode` is driven from two sides:
- the training thread calls `on_step_boundary` after every local step: it mixes in the
  news that arrived (CHOCO-SGD consensus step with staleness weights and self-centred
  clipping) and every `gossip_every` steps publishes a compressed update of its public copy;
- the network side (aiohttp in a real peer, simulated links in simnet) calls
  `build_request` / `handle_request` / `handle_response` with opaque bytes.
One lock guards all state; every critical section is short vector work.

An exchange is push-pull in one request. Each side sends a control frame (its epoch, step,
listen address, and the last seq it holds of the *other* side's public copy) followed by
the update frames the other lacks, or an exact snapshot when the gap can no longer be
filled from the outbox. Updates apply strictly in seq order, so a replayed or duplicated
update is harmless; control frames carry a strictly increasing seq and go through the
replay window. A restarted peer gets a new epoch, which resets what others hold of it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from async_opt import AdaptiveRadius, NeighbourCopy, PublicCopy, mix_step, parse_staleness
from peer.gossip.config import GossipConfig
from peer.gossip.outbox import Outbox
from peer.metrics import Metrics
from peer.trainer import ParamSpec, StepStats, Trainer
from protocol import (
    FrameHeader,
    FrameKind,
    FrameRefused,
    Identity,
    Limits,
    RefusalReason,
    ReplayWindow,
    VerifyPolicy,
    decode_frame,
    encode_frame,
    flat_model_spec,
    make_snapshot_frame,
    make_update_frame,
    model_fingerprint,
    pack_bundle,
    parse_codec,
    read_vector,
    unpack_bundle,
)


FRAME_OVERHEAD = 2048  # prefix, canonical header, safetensors index, signature: well under this


def limits_for(numel: int) -> Limits:
    """Frame limits sized to this model: one exact fp32 snapshot plus a control frame fits,
    anything much larger is refused before it is read (the protocol defaults admit 1e9 params)."""
    snapshot = 4 * numel + (1 << 20)
    return Limits(max_frame_bytes=2 * snapshot, max_decompressed_bytes=snapshot)


@dataclass
class Neighbour:
    """What this peer knows of one neighbour (keyed by public key)."""

    copy: NeighbourCopy = field(default_factory=NeighbourCopy)
    epoch: int = 0
    has_news: bool = False
    acked_epoch: int = 0  # our epoch the neighbour last reported holding
    acked_seq: int = -1  # our last update seq it holds (-1: nothing, send a snapshot)
    listen: str = ""
    step: int = 0
    last_heard: float = 0.0
    published_at: float = 0.0  # sender's timestamp of the newest frame applied


@dataclass
class ExchangeResult:
    sender: bytes
    listen: str
    frames_in: int
    refused: int


class GossipNode:
    def __init__(
        self,
        cfg: GossipConfig,
        identity: Identity,
        spec: ParamSpec,
        x0: torch.Tensor,
        *,
        clock: Callable[[], float],
        listen: str = "",
        metrics: Metrics | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.cfg = cfg
        self.identity = identity
        self.clock = clock
        self.listen = listen
        self.metrics = metrics or Metrics()
        self.numel = int(x0.numel())
        self.fingerprint = model_fingerprint(spec)
        self.codec = parse_codec(cfg.compression)
        self.schedule = parse_staleness(cfg.resolved_staleness)
        self.limits = limits or limits_for(self.numel)
        self.policy = VerifyPolicy(
            swarm=cfg.swarm,
            fingerprint=self.fingerprint,
            allowed_keys=cfg.allowed_keys,
            max_clock_skew_s=cfg.max_clock_skew_s,
            limits=self.limits,
            model_spec=flat_model_spec(self.numel),
        )
        self.public = PublicCopy(x0.detach().to(torch.float32).cpu())
        self.outbox = Outbox(cfg.outbox_bytes)
        self.radius = AdaptiveRadius(window=cfg.clip_window, q=cfg.clip_quantile, multiplier=cfg.clip_multiplier)
        self.replay = ReplayWindow()
        self.neighbours: dict[bytes, Neighbour] = {}
        # A fresh epoch per start: others then know our public copy began anew.
        self.epoch = max(1, int(clock() * 1e6))
        self._control_seq = self.epoch
        self.last_x = self.public.x_hat.clone()
        self.accepting = True  # a joining peer refuses exchanges until it has adopted a state
        self._step = 0
        self._last_boundary: float | None = None
        self.step_seconds = 0.0  # EMA of wall time per local step, to turn delays into steps
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ training side
    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    def on_step_boundary(self, trainer: Trainer, stats: StepStats | None = None, *, publish_now: bool = True) -> bool:
        """Mix news into the trainer's parameters; publish every `gossip_every` steps.

        Returns True when a publish was due (the caller then starts an exchange). With
        `publish_now=False` the caller publishes itself (a real peer compresses and signs
        off the training thread, from a parameter copy taken here at the boundary).
        """
        k = trainer.step_count
        now = self.clock()
        with self._lock:
            self._step = k
            if self._last_boundary is not None:
                dt = now - self._last_boundary
                self.step_seconds = dt if self.step_seconds == 0 else 0.9 * self.step_seconds + 0.1 * dt
            self._last_boundary = now
            news = [(key, n) for key, n in self.neighbours.items() if n.has_news and n.copy.x_hat is not None]
        if news:
            self._mix(trainer, news, k)
        if k % self.cfg.gossip_every != 0:
            return False
        if publish_now:
            self.publish(trainer.get_flat_params(), k)
        return True

    def _mix(self, trainer: Trainer, news: list[tuple[bytes, Neighbour]], k: int) -> None:
        x = trainer.get_flat_params()
        now = self.clock()
        with self._lock:
            pairs = []
            for key, n in news:
                n.has_news = False
                tau = self.staleness_steps(n, now)
                lam = self.schedule.lam(tau, max(k, 0))
                diff_norm = float(torch.linalg.vector_norm(n.copy.x_hat - self.public.x_hat))
                if math.isfinite(diff_norm):
                    self.radius.observe(diff_norm)
                self.metrics.observe("mixed_staleness_steps", tau)
                self.metrics.set("neighbour_distance", diff_norm, peer=key.hex()[:16])
                pairs.append((n.copy.x_hat, lam))
            rho = self.radius.radius if self.cfg.clip else None
            mixed = mix_step(x, self.public.x_hat, pairs, rho)
        trainer.set_flat_params(mixed)
        self.metrics.inc("mixes_total", len(pairs), help="neighbour copies mixed into the parameters")

    def staleness_steps(self, n: Neighbour, now: float) -> float:
        """Our local steps since the neighbour published what we hold: (now − its timestamp) / step time.

        Measured in our own steps, as PipeMare measures delay, so a fast peer discounts a
        slow link more than a slow peer does. Before the step time is known it is 0.
        """
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, now - n.published_at) / self.step_seconds

    def publish(self, x: torch.Tensor, step: int) -> int:
        """CHOCO-SGD publish: q = C(x − x̂); x̂ += D(q); the frame goes to the outbox."""
        with self._lock:
            frame_box: list[bytes] = []
            seq = self.public.seq + 1

            def compress(delta: torch.Tensor) -> torch.Tensor:
                frame, recon = make_update_frame(
                    self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=seq, step=step,
                    timestamp=self.clock(), codec=self.codec, delta=delta, extra={"epoch": self.epoch},
                )
                frame_box.append(frame)
                return recon

            self.public.publish(x.to(torch.float32), compress)
            if not self.cfg.error_feedback:
                # Control arm: forget the residual. Receivers' copies drift from our x, and
                # our mixing reference becomes x itself.
                self.public.x_hat = x.detach().to(torch.float32).clone()
            self.last_x = x.detach().to(torch.float32).clone()  # served by /v1/state to joining peers
            self.outbox.append(seq, frame_box[0])
            self.metrics.inc("published_total", help="compressed updates published")
            return seq

    # ------------------------------------------------------------------- network side
    def build_request(self, peer_key: bytes | None) -> bytes:
        """Body of POST /v1/exchange to the neighbour with this key (None: not yet known)."""
        with self._lock:
            frames = [self._control_frame(peer_key)] + self._frames_for(peer_key)
        body = pack_bundle(frames)
        self.metrics.inc("bytes_sent_total", len(body), help="bytes of exchange bodies sent")
        return body

    def handle_request(self, body: bytes) -> tuple[bytes, ExchangeResult]:
        """Serve POST /v1/exchange: ingest the requester's frames, answer with ours."""
        result = self._ingest(body)
        with self._lock:
            frames = [self._control_frame(result.sender)] + self._frames_for(result.sender)
        reply = pack_bundle(frames)
        self.metrics.inc("bytes_sent_total", len(reply))
        return reply, result

    def handle_response(self, body: bytes) -> ExchangeResult:
        return self._ingest(body)

    def state_frame(self) -> bytes:
        """A signed, exact copy of the parameters at the last publish (GET /v1/state, for a joining peer).

        Taken at a step boundary, so it is never a half-updated model.
        """
        with self._lock:
            x = self.last_x
            self._control_seq += 1
            return make_snapshot_frame(
                self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=self._control_seq,
                step=self._step, timestamp=self.clock(), vector=x.to(torch.float32), extra={"kind": "state"},
            )

    def read_state(self, data: bytes) -> tuple[torch.Tensor, int]:
        """Verify a /v1/state snapshot; returns (parameters, the sender's step)."""
        frame = decode_frame(data, self.policy, now=self.clock())
        return read_vector(frame), frame.header.step

    def adopt(self, x: torch.Tensor) -> None:
        """Start our public copy afresh from `x` (after joining from a neighbour's state)."""
        with self._lock:
            self.public.reset(x.detach().to(torch.float32).clone(), 0)
            self.last_x = x.detach().to(torch.float32).clone()
            self.epoch += 1  # neighbours must drop what they held of our old public copy
            self.outbox.clear()
            for n in self.neighbours.values():
                n.acked_seq = -1

    def consensus_distance(self, x: torch.Tensor) -> float:
        """RMS distance of our parameters to the mean of ours and the neighbour copies we hold."""
        with self._lock:
            copies = [n.copy.x_hat for n in self.neighbours.values() if n.copy.x_hat is not None]
            if not copies:
                return 0.0
            stack = torch.stack([x.to(torch.float32)] + copies)
        mean = stack.mean(0)
        return float(torch.sqrt(((stack - mean) ** 2).sum(1).mean()))

    @property
    def step(self) -> int:
        return self._step

    def next_control_seq(self) -> int:
        with self._lock:
            self._control_seq += 1
            return self._control_seq

    # ------------------------------------------------------------------------ helpers
    def _control_frame(self, peer_key: bytes | None) -> bytes:
        n = self.neighbours.get(peer_key) if peer_key else None
        extra: dict[str, Any] = {
            "epoch": self.epoch,
            "listen": self.listen,
            "have_epoch": n.epoch if n else 0,
            "have_seq": n.copy.seq if n and n.copy.x_hat is not None else -1,
        }
        self._control_seq += 1
        header = FrameHeader(
            swarm=self.cfg.swarm, fingerprint=self.fingerprint, sender=self.identity.public_key,
            kind=FrameKind.ACK, seq=self._control_seq, step=self._step, timestamp=self.clock(),
            codec="identity", tensors=(), extra=extra,
        )
        return encode_frame(self.identity, header, {}, self.limits)

    def _frames_for(self, peer_key: bytes | None) -> list[bytes]:
        n = self.neighbours.get(peer_key) if peer_key else None
        latest = self.public.seq
        if n is not None and n.acked_epoch == self.epoch and n.acked_seq >= 0:
            if n.acked_seq >= latest:
                return []
            frames = self.outbox.since(n.acked_seq)
            # A long gap costs more as updates than as one exact snapshot.
            if frames is not None and sum(map(len, frames)) < 4 * self.numel + FRAME_OVERHEAD:
                return frames
        self.metrics.inc("snapshots_sent_total", help="exact public-copy snapshots sent to fill a gap")
        return [
            make_snapshot_frame(
                self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=latest,
                step=self._step, timestamp=self.clock(), vector=self.public.x_hat, extra={"epoch": self.epoch},
            )
        ]

    def _ingest(self, body: bytes) -> ExchangeResult:
        """Verify and apply a bundle: a control frame, then updates or a snapshot."""
        self.metrics.inc("bytes_received_total", len(body), help="bytes of exchange bodies received")
        now = self.clock()
        raw_frames = unpack_bundle(body, self.limits)  # raises FrameRefused on a malformed body
        if not raw_frames:
            raise FrameRefused(RefusalReason.TRUNCATED, "empty bundle")
        control = decode_frame(raw_frames[0], self.policy, now=now, replay=self.replay)
        if control.header.kind != FrameKind.ACK:
            raise FrameRefused(RefusalReason.BAD_HEADER, "an exchange must start with a control frame")
        sender = control.header.sender
        if sender == self.identity.public_key:
            raise FrameRefused(RefusalReason.BAD_HEADER, "frame from ourselves")
        extra = control.header.extra
        refused = 0
        with self._lock:
            n = self._neighbour(sender)
            epoch = int(extra.get("epoch", 0))
            if epoch < n.epoch:
                raise FrameRefused(RefusalReason.BAD_HEADER, "control frame from an older run of this peer")
            if epoch > n.epoch:  # restarted peer: whatever we held of it is void
                n.copy, n.epoch = NeighbourCopy(), epoch
            n.listen = str(extra.get("listen", ""))[:256]
            n.step = control.header.step
            n.last_heard = now
            n.acked_epoch = int(extra.get("have_epoch", 0))
            n.acked_seq = int(extra.get("have_seq", -1))
        for raw in raw_frames[1:]:
            try:
                frame = decode_frame(raw, self.policy, now=now)
            except FrameRefused as exc:
                refused += 1
                self.metrics.inc("frames_refused_total", reason=exc.reason.value)
                continue
            if frame.header.sender != sender or int(frame.header.extra.get("epoch", -1)) != epoch:
                refused += 1
                self.metrics.inc("frames_refused_total", reason="bad_header")
                continue
            self._apply(sender, frame)
        self.metrics.inc("exchanges_total", help="completed push-pull exchanges (either side)")
        return ExchangeResult(sender, n.listen, len(raw_frames), refused)

    def _apply(self, sender: bytes, frame) -> None:
        vector = read_vector(frame)
        h = frame.header
        with self._lock:
            n = self.neighbours.get(sender)
            if n is None:
                return
            if h.kind == FrameKind.SNAPSHOT:
                if n.copy.x_hat is None or h.seq >= n.copy.seq:
                    n.copy.set_snapshot(h.seq, vector, h.step, self._step)
                    n.has_news = True
                    n.published_at = h.timestamp
                    self.metrics.inc("snapshots_received_total")
            elif h.seq <= n.copy.seq and n.copy.x_hat is not None:
                self.metrics.inc("updates_duplicate_total", help="updates already held (resent or replayed)")
            elif n.copy.apply_update(h.seq, vector, h.step, self._step):
                n.has_news = True
                n.published_at = max(n.published_at, h.timestamp)
                self.metrics.inc("updates_applied_total")
            else:
                self.metrics.inc("update_gaps_total", help="updates that could not be applied in order")

    def _neighbour(self, key: bytes) -> Neighbour:
        n = self.neighbours.get(key)
        if n is None:
            if len(self.neighbours) >= self.cfg.max_neighbours:
                oldest = min(self.neighbours, key=lambda k: self.neighbours[k].last_heard)
                del self.neighbours[oldest]
            n = self.neighbours[key] = Neighbour()
        self.metrics.set("neighbours", len(self.neighbours), help="neighbour copies held")
        return n

    def forget(self, key: bytes) -> None:
        with self._lock:
            self.neighbours.pop(key, None)
