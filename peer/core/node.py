"""The gossip state of one peer: its public copy, outbox and neighbour copies. No I/O.

Thread contract: a `GossipNode` belongs to exactly one thread, its owner (the node worker
of a real peer, `peer.node_worker.NodeWorker`; simnet's event loop). Every method mutates
state and must be called from the owner only; none takes a lock. The training thread never
calls it: it reads the `view_slot` (immutable snapshots, see `peer.core.view`) and hands
parameter copies to the owner to `publish`. See docs/architecture.md.

An exchange is push-pull in one request. Each side sends a control frame (its epoch, step,
listen address, and the last seq it holds of the *other* side's public copy) followed by
the update frames the other lacks, or an exact snapshot when the gap can no longer be
filled from the outbox. Updates apply strictly in seq order, so a replayed or duplicated
update is harmless; control frames carry a strictly increasing seq and go through the
replay window. A restarted peer gets a new epoch, which resets what others hold of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from async_opt import NeighbourCopy, PublicCopy, safe_norm
from peer.core.gossip_config import GossipConfig
from peer.core.outbox import Outbox
from peer.core.view import CopyView, MixView, ViewSlot
from protocol import (
    Frame,
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
ParamSpec = dict[str, tuple[tuple[int, ...], str]]


class MetricsSink(Protocol):
    """Where the node counts what it did (peer.metrics.Metrics, or a test double)."""

    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None: ...

    def set(self, name: str, value: float, help: str = "", **labels: str) -> None: ...


class _NoMetrics:
    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None:
        pass

    def set(self, name: str, value: float, help: str = "", **labels: str) -> None:
        pass


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
    version: int = 0  # node-wide counter value when copy.x_hat last changed
    acked_epoch: int = 0  # our epoch the neighbour last reported holding
    acked_seq: int = -1  # our last update seq it holds (-1: nothing, send a snapshot)
    listen: str = ""
    step: int = 0
    last_heard: float = 0.0
    published_at: float = 0.0  # min(sender's timestamp, our receive time) of the newest frame applied


@dataclass(frozen=True)
class ExchangeResult:
    """What an ingested exchange body told us about its sender."""

    sender: bytes
    listen: str
    step: int
    frames_in: int
    refused: int


class GossipNode:
    """Publish, exchange, ingest; see the module docstring for the thread contract."""

    def __init__(
        self,
        cfg: GossipConfig,
        identity: Identity,
        spec: ParamSpec,
        x0: torch.Tensor,
        *,
        now: float,
        listen: str = "",
        metrics: MetricsSink | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.cfg = cfg
        self.identity = identity
        self.listen = listen
        self.metrics: MetricsSink = metrics or _NoMetrics()
        self.numel = int(x0.numel())
        self.fingerprint = model_fingerprint(spec)
        self.codec = parse_codec(cfg.compression)
        self.limits = limits or limits_for(self.numel)
        self.policy = VerifyPolicy(
            swarm=cfg.swarm, fingerprint=self.fingerprint, allowed_keys=cfg.allowed_keys,
            max_clock_skew_s=cfg.max_clock_skew_s, limits=self.limits, model_spec=flat_model_spec(self.numel),
        )
        x0 = x0.detach().to(torch.float32).cpu().clone()
        self.public = PublicCopy(x0)
        self.last_x = x0  # exact parameters at the last publish: what /v1/state serves
        self.outbox = Outbox(cfg.outbox_bytes)
        self.replay = ReplayWindow()
        self.neighbours: dict[bytes, Neighbour] = {}
        # A fresh epoch per start: others then know our public copy began anew.
        self.epoch = max(1, int(now * 1e6))
        self._control_seq = self.epoch
        self._versions = 0
        self.step = 0
        self._state_cache: bytes | None = None
        self.last_publish_bytes = 0
        """Size of the newest published update frame (simnet charges its signing)."""
        self._public_norm, self._public_norm_of = safe_norm(self.public.x_hat), self.public.x_hat
        self.view_slot = ViewSlot(MixView(self.public.x_hat, (), self._public_norm))

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    # ------------------------------------------------------------------ own updates
    def publish(self, x: torch.Tensor, step: int, now: float) -> int:
        """CHOCO-SGD publish: q = C(x − x̂); x̂ += D(q); the signed frame goes to the outbox.

        Raises ValueError (and changes nothing) when `x` is not finite: there is nothing
        sane to send, and the caller decides what that means.
        """
        x = x.detach().to(torch.float32)
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"parameters at step {step} are not finite; nothing was published")
        self.step = int(step)
        seq = self.public.seq + 1
        frames: list[bytes] = []

        def compress(delta: torch.Tensor) -> torch.Tensor:
            frame, recon = make_update_frame(
                self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=seq, step=step,
                timestamp=now, codec=self.codec, delta=delta, extra={"epoch": self.epoch},
            )
            frames.append(frame)
            return recon

        self.public.publish(x, compress)
        if not self.cfg.error_feedback:
            # Control arm: forget the residual. Receivers' copies drift from our x, and
            # our mixing reference becomes x itself.
            self.public.x_hat = x.clone()
        self.last_x = x.clone()
        self._state_cache = None
        self.outbox.append(seq, frames[0])
        self.last_publish_bytes = len(frames[0])
        self.metrics.inc("published_total", help="compressed updates published")
        self._publish_view()
        return seq

    def adopt(self, x: torch.Tensor) -> None:
        """Start our public copy afresh from `x` (after joining from a neighbour's state)."""
        x = x.detach().to(torch.float32).clone()
        self.public.reset(x, 0)
        self.last_x = x
        self._state_cache = None
        self.epoch += 1  # neighbours must drop what they held of our old public copy
        self.outbox.clear()
        for n in self.neighbours.values():
            n.acked_seq = -1
        self._publish_view()

    def forget(self, key: bytes) -> None:
        """Drop a neighbour's copy (it was evicted)."""
        if self.neighbours.pop(key, None) is not None:
            self._publish_view()

    # ------------------------------------------------------------------ exchanges
    def build_request(self, peer_key: bytes | None, now: float) -> bytes:
        """Body of POST /v1/exchange to the neighbour with this key (None: not yet known)."""
        body = pack_bundle([self._control_frame(peer_key, now)] + self._frames_for(peer_key, now))
        self.metrics.inc("bytes_sent_total", len(body), help="bytes of exchange bodies sent")
        return body

    def handle_request(self, body: bytes, now: float) -> tuple[bytes, ExchangeResult]:
        """Serve POST /v1/exchange: ingest the requester's frames, answer with ours."""
        result = self._ingest(body, now)
        reply = pack_bundle([self._control_frame(result.sender, now)] + self._frames_for(result.sender, now))
        self.metrics.inc("bytes_sent_total", len(reply))
        return reply, result

    def handle_response(self, body: bytes, now: float) -> ExchangeResult:
        return self._ingest(body, now)

    # ------------------------------------------------------------------ joining
    def state_frame(self, now: float) -> bytes:
        """A signed, exact copy of the parameters at the last publish (GET /v1/state).

        Taken at a step boundary, so never a half-updated model; signed once per publish
        and served from that cache until the next one.
        """
        if self._state_cache is None:
            self._control_seq += 1
            self._state_cache = make_snapshot_frame(
                self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=self._control_seq,
                step=self.step, timestamp=now, vector=self.last_x, extra={"kind": "state"},
            )
        return self._state_cache

    @property
    def state_cached(self) -> bool:
        """Whether `state_frame` would answer from its cache (no signing)."""
        return self._state_cache is not None

    def read_state(self, data: bytes, now: float) -> tuple[torch.Tensor, int]:
        """Verify a /v1/state snapshot; returns (parameters, the sender's step)."""
        frame = decode_frame(data, self.policy, now=now)
        return read_vector(frame), frame.header.step

    # ------------------------------------------------------------------ internals
    def _publish_view(self) -> None:
        copies = tuple(
            CopyView(key, n.version, n.copy.x_hat, n.published_at)
            for key, n in self.neighbours.items() if n.copy.x_hat is not None
        )
        if self._public_norm_of is not self.public.x_hat:  # once per public-copy change, on this thread
            self._public_norm, self._public_norm_of = safe_norm(self.public.x_hat), self.public.x_hat
        self.view_slot.publish(MixView(self.public.x_hat, copies, self._public_norm))

    def _control_frame(self, peer_key: bytes | None, now: float) -> bytes:
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
            kind=FrameKind.ACK, seq=self._control_seq, step=self.step, timestamp=now,
            codec="identity", tensors=(), extra=extra,
        )
        return encode_frame(self.identity, header, {}, self.limits)

    def _frames_for(self, peer_key: bytes | None, now: float) -> list[bytes]:
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
                step=self.step, timestamp=now, vector=self.public.x_hat, extra={"epoch": self.epoch},
            )
        ]

    def _ingest(self, body: bytes, now: float) -> ExchangeResult:
        """Verify and apply a bundle: a control frame, then updates or a snapshot."""
        self.metrics.inc("bytes_received_total", len(body), help="bytes of exchange bodies received")
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
        epoch = int(extra.get("epoch", 0))
        n = self.neighbours.get(sender)
        if n is not None and epoch < n.epoch:
            raise FrameRefused(RefusalReason.BAD_HEADER, "control frame from an older run of this peer")
        n = self._neighbour(sender)
        if epoch > n.epoch:  # restarted peer: whatever we held of it is void
            n.copy, n.epoch = NeighbourCopy(), epoch
        n.listen = str(extra.get("listen", ""))[:256]
        n.step = control.header.step
        n.last_heard = now
        n.acked_epoch = int(extra.get("have_epoch", 0))
        n.acked_seq = int(extra.get("have_seq", -1))
        refused = 0
        changed = False
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
            changed |= self._apply(n, frame, now)
        if changed:
            self._versions += 1
            n.version = self._versions
        self._publish_view()
        self.metrics.inc("exchanges_total", help="completed push-pull exchanges (either side)")
        return ExchangeResult(sender, n.listen, n.step, len(raw_frames), refused)

    def _apply(self, n: Neighbour, frame: Frame, now: float) -> bool:
        """Apply one verified frame to a neighbour copy; True when the copy changed."""
        vector = read_vector(frame)
        h = frame.header
        published_at = min(h.timestamp, now)  # a future timestamp buys no freshness
        if h.kind == FrameKind.SNAPSHOT:
            if n.copy.x_hat is not None and h.seq < n.copy.seq:
                return False
            n.copy.set_snapshot(h.seq, vector, h.step)
            n.published_at = published_at
            self.metrics.inc("snapshots_received_total")
        elif h.seq <= n.copy.seq and n.copy.x_hat is not None:
            self.metrics.inc("updates_duplicate_total", help="updates already held (resent or replayed)")
            return False
        elif n.copy.apply_update(h.seq, vector, h.step):
            n.published_at = max(n.published_at, published_at)
            self.metrics.inc("updates_applied_total")
        else:
            self.metrics.inc("update_gaps_total", help="updates that could not be applied in order")
            return False
        if not math.isfinite(safe_norm(n.copy.x_hat)):
            # Each frame was finite, but their sum overflowed: nothing sane is left to mix.
            n.copy = NeighbourCopy()
            self.metrics.inc("copies_reset_total", help="neighbour copies dropped because they became non-finite")
            return True
        return True

    def _neighbour(self, key: bytes) -> Neighbour:
        n = self.neighbours.get(key)
        if n is None:
            if len(self.neighbours) >= self.cfg.max_neighbours:
                oldest = min(self.neighbours, key=lambda k: self.neighbours[k].last_heard)
                del self.neighbours[oldest]
            n = self.neighbours[key] = Neighbour()
        self.metrics.set("neighbours", len(self.neighbours), help="neighbour copies held")
        return n
