"""The gossip state of one peer: its public copy, outbox and neighbour copies. No I/O.

Thread contract: a `GossipNode` belongs to exactly one thread, its owner (the node worker
of a real peer, `peer.net.node_worker.NodeWorker`; simnet's event loop). Every method mutates
state and must be called from the owner only. The training thread never calls it: it reads
the `view_slot` (whose copies the owner writes only once no mix reads them, `peer.core.view`)
and `average.weights()`, and hands parameter copies to the owner to `publish`.

An exchange is push-pull in one request. Each side sends a control frame (its epoch, step, listen
address, the last seq it holds of the *other* side's public copy, tickets; see `peer.core.control`)
followed by the update frames the other lacks, or an exact snapshot when the gap can no longer be
filled from the outbox. The control frame names its receiver, the receiver's epoch and a ticket the
receiver issued (`protocol.replay.TicketBook`), and binds the frames after it by their signatures;
only then does the bundle change anything here: a recording made before our restart (a new epoch) or
used once (a spent ticket) is refused however many senders came between. A request without a live
ticket is answered with a fresh ticket and never a snapshot, and changes nothing: none of its frames
is decoded, and a first contact pushes on its second exchange. An answer carries our snapshot only
to a ticketed, verified asker, within a budget (`peer.core.snapshots`). Of a ticketed bundle, at
most a gap fill's worth of frames is decoded (`peer.core.ingest`). Updates apply strictly in seq
order; a new epoch of a neighbour voids its copy. See docs/architecture.md.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager

import torch

from async_opt import PublicCopy
from peer.core.average import SwarmAverage
from peer.core.control import Control, HeldTickets, make_control, read_control
from peer.core.gossip_config import GossipConfig
from peer.core.ingest import MAX_GAP_UPDATES, apply_frame, check_frame, dropped_unread, limits_for, screen
from peer.core.join import read_state, sign_state
from peer.core.metrics_sink import MetricsSink, NoMetrics
from peer.core.neighbour import ExchangeResult, Neighbour, copy_views, evict
from peer.core.outbox import Outbox
from peer.core.partner_steps import PartnerSteps
from peer.core.period_codec import PeriodCodecs
from peer.core.snapshots import AnswerBudget, SnapshotCache, snapshot_bytes
from peer.core.state_seed import OfferedStates, seed
from peer.core.view import ViewBuilder, ViewSlot
from protocol import (
    Frame, FrameHeader, FrameRefused, Identity, Limits, RefusalReason, TicketBook, VerifyPolicy, bundle_digest,
    decode_frame, epoch_from, flat_model_spec, make_step_update_frame, make_update_frame, SparseVector,
    model_fingerprint, next_epoch, pack_bundle, unpack_bundle,
)
from protocol.finite import all_finite
from protocol.frame import SIGNATURE_SIZE
from protocol.header import ParamSpec

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
        entropy: bytes | None = None,
        view_gate: AbstractContextManager[object] | None = None,  # `peer.core.view.ViewSlot`'s
        device: str = "cpu",  # where every copy lives (`peer.core.placement`)
    ) -> None:
        self.cfg = cfg
        self.identity = identity
        self.listen = listen
        self.metrics: MetricsSink = metrics or NoMetrics()
        self.numel = int(x0.numel())
        self.fingerprint = model_fingerprint(spec)
        self.codecs = PeriodCodecs(cfg.compression, cfg.gossip_every, cfg.per_period, self.numel, cfg.max_period_frame_bytes)
        self.limits = limits or limits_for(self.numel)
        self.policy = VerifyPolicy(
            swarm=cfg.swarm, fingerprint=self.fingerprint, allowed_keys=cfg.allowed_keys,
            max_clock_skew_s=cfg.max_clock_skew_s, limits=self.limits, model_spec=flat_model_spec(self.numel),
        )
        self.device = torch.device(device)
        x0 = x0.detach().to(self.device, torch.float32, copy=True)
        self.public = PublicCopy(x0, cfg.clip_own_window, dtype=cfg.copy_torch_dtype)
        self.last_x = x0 if cfg.keeps_parameters else None  # the exact parameters at the last publish, if kept
        self.outbox = Outbox(cfg.outbox_bound(x0.numel()), cfg.outbox_min_frames)
        self.neighbours: dict[bytes, Neighbour] = {}
        # A fresh epoch per start: others then know our public copy began anew, and nothing recorded for an
        # earlier run of ours is taken. A real peer passes random `entropy`; simnet and tests derive it reproducibly.
        seed = entropy if entropy is not None else identity.public_key + struct.pack(">d", now)
        self.tickets = TicketBook(identity.public_key, epoch_from(seed))
        self.held_tickets = HeldTickets()  # tickets others issued us: without one, a request pushes nothing
        self._control_seq = self._versions = self._public_version = self.step = 0
        self._writing: Neighbour | None = None  # whose copy `_ingest` may write in place now (busy in the view)
        self._state_cache: bytes | None = None
        self._snapshots = SnapshotCache()
        self.answers = AnswerBudget(cfg.answer_snapshot_every_s, cfg.answer_snapshots_per_min, cfg.max_neighbours, now)
        self.last_publish_bytes = 0  # size of the newest published update frame (simnet charges its signing)
        self._published_at: float | None = None
        self._views, self._offered = ViewBuilder(), OfferedStates()
        self.view_slot = ViewSlot(self._views.build(self.public.x_hat, [], None, ()), view_gate)
        self.average = SwarmAverage(cfg, self.device)  # the weights users get; other threads read `weights()`
        self.partner_steps = PartnerSteps(cfg.partner_steps, cfg.partner_step_clip, cfg.clip_own_window, cfg.max_neighbours,
                                          cfg.clip_power, self.codecs.period if cfg.per_period else None)
        """Our steps out, pulled partners' in; the training thread drains `partner_steps.inbox`."""

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    @property
    def epoch(self) -> int:
        """This run of our public copy, and the epoch our tickets belong to."""
        return self.tickets.epoch

    @property
    def snapshot_bytes(self) -> int:
        """The largest frame an honest peer of this model sends: what transfer deadlines grow with."""
        return snapshot_bytes(self.numel, self.partner_steps.enabled)

    # ------------------------------------------------------------------ own updates
    def publish(self, x: torch.Tensor, step: int, now: float, outside: torch.Tensor | None = None,
                scratch: bool = False) -> int:
        """CHOCO-SGD publish: q = C(x − x̂); x̂ += D(q); the signed frame goes to the outbox.

        `outside`: what mixing and partners' steps added to the parameters since the previous
        publish; with it (and `GossipConfig.partner_steps` on) the frame also carries our own
        steps (peer.core.partner_steps). `x` is handed over (`peer.boundary.PendingPublish` copies
        it): the node may keep it as `last_x`; no one may write it afterwards. `scratch`: `x` is
        the node's to write; where it keeps no parameters, the residual x − x̂ is taken in it. A
        bfloat16 `x` (`GossipConfig.handover_bfloat16`) is read as it is, a piece at a time.
        Raises ValueError (changing nothing) when `x` is not finite: the caller decides what that means.
        """
        half = x.dtype == torch.bfloat16 and not self.cfg.keeps_parameters
        x = x.detach().to(self.device, None if half else torch.float32)
        if not all_finite(x):
            raise ValueError(f"parameters at step {step} are not finite; nothing was published")
        self.step = int(step)
        seq = self.public.seq + 1
        frames: list[bytes] = []
        carried = self.partner_steps.to_send(x, self.last_x, outside)
        kw = dict(swarm=self.cfg.swarm, fingerprint=self.fingerprint, seq=seq, step=step, timestamp=now,
                  codec=self.codecs.published(step), extra={"epoch": self.epoch})

        def compress(delta: torch.Tensor) -> SparseVector:
            if carried is None:
                frame, recon = make_update_frame(self.identity, delta=delta, **kw)
            else:
                frame, recon, sent = make_step_update_frame(self.identity, delta=delta, own_step=carried, **kw)
                self.partner_steps.sent(carried, sent.dense())
            frames.append(frame)
            return recon

        spend = scratch and not self.cfg.keeps_parameters and self.cfg.error_feedback and carried is None
        # x̂ is written in place once no mix reads it; a spent x holds the parameters again for the average
        self.public.publish(x, compress, in_place=spend, restore=self.average.due(self.step),
                            before_write=lambda: self._publish_view(public_busy=True))
        self._versions = self._public_version = self._versions + 1
        if not self.cfg.error_feedback:
            # Control arm: forget the residual. Receivers' copies drift from x, our mixing reference is x.
            self.public.reset(x, self.public.seq)
        self.last_x, self._published_at = (x if self.cfg.keeps_parameters else None), now
        self._state_cache = None
        self._snapshots.forget()
        self.outbox.append(seq, frames[0])
        self.last_publish_bytes = len(frames[0])
        self.metrics.inc("published_total")
        self._publish_view()
        if not spend or self.average.due(self.step):
            self.average.update(x, self.view_slot.current, self.step)
        return seq

    def adopt(self, x: torch.Tensor, step: int) -> None:
        """Start our public copy afresh from `x`, a neighbour's state, at its `step` (`Trainer.adopt`);
        a state read by `read_state` that names its sender's x̂ also seeds our copy of that sender."""
        source = self._offered.take(x)
        x, self.step = x.detach().to(self.device, torch.float32, copy=True), int(step)
        self.public.reset(x, 0)
        self._versions = self._public_version = self._versions + 1
        self.last_x = x if self.cfg.keeps_parameters else None
        self._published_at = None
        self._state_cache = None
        self._snapshots.forget()
        self.tickets.renew(next_epoch(self.epoch))  # neighbours must drop what they held of our old public copy
        self.outbox.clear()
        for n in self.neighbours.values():
            n.acked_seq = -1
        self.partner_steps.reset()
        if source is not None and source.sender != self.identity.public_key:
            self._versions += 1
            seed(self._neighbour(source.sender), x, source, self._versions)
        self._publish_view()
        self.average.reset(x, self.step)

    def forget(self, key: bytes) -> None:
        """Drop a neighbour's copy (it was evicted)."""
        self.partner_steps.forget(key)
        if self.neighbours.pop(key, None) is not None:
            self._publish_view()

    # ------------------------------------------------------------------ exchanges
    def build_request(self, peer_key: bytes | None, now: float) -> bytes:
        """Body of POST /v1/exchange to the neighbour with this key (None: not yet known).

        Without a live ticket of theirs it carries only the control frame: they would take
        nothing else, and their answer brings a ticket for next time."""
        to_epoch, ticket = self.held_tickets.take(peer_key)
        frames = self._frames_for(peer_key, now, None) if ticket else []
        control = self._control_frame(peer_key, now, to_epoch=to_epoch, ticket=ticket,
                                      reply=self.tickets.issue(peer_key),
                                      offer=self.tickets.issue(peer_key), frames=frames)
        body = pack_bundle([control] + frames)
        self.metrics.inc("bytes_sent_total", len(body))
        return body

    def handle_request(self, body: bytes, now: float, *, address: str = "",
                       verified: Collection[bytes] = frozenset()) -> tuple[bytes, ExchangeResult]:
        """Serve POST /v1/exchange from `address`: ingest the requester's frames, answer with ours.

        FrameRefused for a body that is not a verified exchange, or one addressed to another
        peer. One without a live ticket of ours (a first contact, a recording) is answered,
        with a fresh ticket and never a snapshot, and applied not at all; `ExchangeResult.accepted`
        says which. `verified`: the keys whose listen address the session verified, the only
        ones an answer may carry our snapshot to (`peer.core.snapshots`)."""
        header, control, raw_frames = self._open(body, now)
        refusal = self.tickets.refusal(header)
        if refusal is RefusalReason.WRONG_RECEIVER:
            raise FrameRefused(refusal, f"addressed to {header.to.hex()[:16]}...")
        if refusal is None:
            self.tickets.spend(header)
        elif refusal is RefusalReason.NO_TICKET and not raw_frames:
            self.metrics.inc("exchanges_unticketed_total")
        else:
            self.metrics.inc("frames_refused_total", reason=refusal.value)
        if refusal is not None:  # its offer may serve our next request (a stale one costs a push, no more)
            self.held_tickets.keep(header.sender, control.epoch, control.offer, replace=False)
        result = self._ingest(header, control, raw_frames, now, accepted=refusal is None)
        frames = self._frames_for(result.sender, now, lambda gap_fill: self.answers.withheld(
            result.sender, ticketed=result.accepted, verified=verified, address=address, now=now, gap_fill=gap_fill))
        answer_control = self._control_frame(result.sender, now, to_epoch=control.epoch, ticket=control.reply, reply=0,
                                             offer=self.tickets.issue(result.sender), frames=frames)
        reply = pack_bundle([answer_control] + frames)
        self.metrics.inc("bytes_sent_total", len(reply))
        return reply, result

    def handle_response(self, body: bytes, now: float) -> ExchangeResult:
        """Ingest the answer to our request; FrameRefused unless it spends the `reply` ticket we sent."""
        header, control, raw_frames = self._open(body, now)
        self.tickets.spend(header)
        return self._ingest(header, control, raw_frames, now, accepted=True, pulled=True)

    # ------------------------------------------------------------------ joining
    def state_frame(self, now: float) -> bytes:
        """`served`, signed as our state (GET /v1/state): taken at a publish, so never a half-updated
        model; signed once per publish and served from that cache until the next one."""
        if self._state_cache is None:
            self._control_seq += 1
            public = None if self.last_x is not None else (self.epoch, self.public.seq)  # the x̂ served, named
            self._state_cache = sign_state(self.identity, self.cfg.swarm, self.fingerprint, self._control_seq,
                                           self.step, now, self.served, public)
        return self._state_cache

    @property
    def served(self) -> torch.Tensor:
        """What /v1/state serves: the exact parameters of the last publish where kept, else x̂."""
        return self.public.x_hat if self.last_x is None else self.last_x

    @property
    def state_cached(self) -> bool:
        """Whether `state_frame` would answer from its cache (no signing)."""
        return self._state_cache is not None

    @property
    def snapshot_cached(self) -> bool:
        """Whether a signed snapshot of our public copy is held for answers (`SnapshotCache`)."""
        return self._snapshots.held

    def read_state(self, data: bytes, now: float) -> tuple[torch.Tensor, int]:
        """Verify a /v1/state snapshot; returns (parameters, the sender's step). Only a snapshot
        signed as a state (`state_frame`) is one: an update or an exchange snapshot is refused."""
        x, step, source = read_state(data, self.policy, now)
        self._offered.remember(x, source)  # adopting `x` then seeds our copy of its sender
        return x, step

    # ------------------------------------------------------------------ internals
    def _publish_view(self, busy: frozenset[bytes] = frozenset(), public_busy: bool = False) -> None:
        """Publish a view of what we hold. One that marks copies `busy` (or x̂_i) returns once no mix
        reads an older view (`ViewSlot.settle`): those copies may then be written in place."""
        view = self._views.build(self.public.x_hat, copy_views(self.neighbours), self._published_at, tuple(self.public.moves),
                                 self._public_version, busy, public_busy)
        (self.view_slot.settle if busy or public_busy else self.view_slot.publish)(view)

    def _control_frame(self, peer_key: bytes | None, now: float, *, to_epoch: int, ticket: int, reply: int,
                       offer: int, frames: list[bytes]) -> bytes:
        """Our control frame to `peer_key`, spending its `ticket`, binding `frames` (sent after it)."""
        n = self.neighbours.get(peer_key) if peer_key else None
        control = Control(epoch=self.epoch, listen=self.listen, have_epoch=n.epoch if n else 0,
                          have_seq=n.copy.seq if n and n.copy.x_hat is not None else -1,
                          offer=offer, reply=reply, bundle=bundle_digest(frames))
        self._control_seq += 1
        return make_control(self.identity, control, swarm=self.cfg.swarm, fingerprint=self.fingerprint,
                            seq=self._control_seq, step=self.step, now=now, to=peer_key or b"", to_epoch=to_epoch,
                            ticket=ticket, limits=self.limits)

    def _frames_for(self, peer_key: bytes | None, now: float, withheld: Callable[[bool], str | None] | None,
                    ) -> list[bytes]:
        """The updates `peer_key` lacks, or our snapshot where the outbox cannot fill its gap,
        unless `withheld` (asked only then) names why not."""
        n, latest, gap_fill = self.neighbours.get(peer_key) if peer_key else None, self.public.seq, False
        if n is not None and n.acked_epoch == self.epoch and n.acked_seq >= 0:
            if n.acked_seq >= latest:
                return []
            frames = self.outbox.since(n.acked_seq)
            # A long gap costs more as updates than as one exact snapshot (to send, and to decode);
            # with partner steps on, both carry two vectors (a snapshot: our steps sum).
            ours = snapshot_bytes(self.numel, self.partner_steps.enabled, self.public.dtype)
            if frames is not None and len(frames) <= MAX_GAP_UPDATES and sum(map(len, frames)) < ours:
                return frames
            gap_fill = frames is not None  # a snapshot in place of updates we hold: no budget
        if withheld is not None and (reason := withheld(gap_fill)) is not None:
            self.metrics.inc("snapshots_withheld_total", reason=reason)
            return []
        self.metrics.inc("snapshots_sent_total")
        return [self._snapshots.frame(self.identity, swarm=self.cfg.swarm, fingerprint=self.fingerprint,
                                      epoch=self.epoch, seq=self.public.seq, step=self.step,
                                      x_hat=self.public.x_hat, now=now,
                                      steps=self.partner_steps.for_snapshot(self.numel))]

    def _open(self, body: bytes, now: float) -> tuple[FrameHeader, Control, list[bytes]]:
        """Unpack a bundle and verify its control frame: (its header, its fields, the other frames)."""
        self.metrics.inc("bytes_received_total", len(body))
        raw_frames = unpack_bundle(body, self.limits)  # raises FrameRefused on a malformed body
        if not raw_frames:
            raise FrameRefused(RefusalReason.TRUNCATED, "empty bundle")
        header = decode_frame(raw_frames[0], self.policy, now=now).header
        if header.sender == self.identity.public_key:
            raise FrameRefused(RefusalReason.BAD_HEADER, "frame from ourselves")
        return header, read_control(header), raw_frames[1:]

    def _ingest(self, header: FrameHeader, control: Control, raw_frames: list[bytes], now: float, *,
                accepted: bool, pulled: bool = False) -> ExchangeResult:
        """Apply a bundle whose control frame spent a ticket of ours (`accepted`; else none of its frames
        is decoded: `handle_request` counts them refused). `pulled`: an answer to our own exchange."""
        sender = header.sender
        if not accepted:
            return ExchangeResult(sender, control.listen, header.step, len(raw_frames) + 1, len(raw_frames), False)
        n = self._neighbour(sender)
        if control.epoch != n.epoch:  # a new run of that peer: whatever we held of it is void
            n.reset_copy(control.epoch)
            self.partner_steps.forget(sender)
        n.listen, n.step, n.last_heard = control.listen, header.step, now
        n.acked_epoch, n.acked_seq = control.have_epoch, control.have_seq
        self.held_tickets.keep(sender, control.epoch, control.offer)
        frames, refusals = screen(raw_frames, sender, bound=control.bundle == bundle_digest(raw_frames))
        for reason, count in Counter(refusals).items():
            self.metrics.inc("frames_refused_total", count, reason=reason)
        refused, news, self._writing = len(refusals), 0, None
        for raw in frames:
            try:  # signature and header first: a forged frame under a remembered signature is refused
                checked = check_frame(raw, self.policy, now, control.epoch)
                if (dropped := dropped_unread(n, raw, checked.header, self.metrics)) is None:
                    frame = checked.decode()  # then the copy it is added into, in place, leaves the mixer
                    if self._writing is not n and n.copy.x_hat is not None:
                        self._publish_view(busy=frozenset({sender}))
                        self._writing = n
                    news += self._apply(n, frame, raw[-SIGNATURE_SIZE:], now)
            except FrameRefused as exc:
                dropped = exc.reason.value
            if dropped:
                refused += 1
                self.metrics.inc("frames_refused_total", reason=dropped)
        if pulled and (taken := self.partner_steps.take_from(sender, n.copy.steps_hat, self.public.seq))[0]:
            self.metrics.inc("partner_steps_taken_total")
            self.metrics.inc("partner_steps_clipped_total", int(taken[1]))
        self._writing = None
        if news:
            self._versions += 1
            n.version = self._versions
        n.pulled = n.version if pulled and n.copy.x_hat is not None else n.pulled
        self._publish_view()
        self.metrics.inc("exchanges_total")
        return ExchangeResult(sender, control.listen, header.step, len(raw_frames) + 1, refused, True, news, n.owes(header.step))

    def _apply(self, n: Neighbour, frame: Frame, signature: bytes, now: float) -> bool:
        """Apply one verified frame to `n`'s copy (`peer.core.ingest.apply_frame`); True when it changed.
        A method so that simnet's control arms can believe what the core does not."""
        return apply_frame(n, frame, signature, now, self.partner_steps.enabled, self.metrics, in_place=n is self._writing,
                           device=self.device)

    def _neighbour(self, key: bytes) -> Neighbour:
        n = self.neighbours.get(key)
        if n is None:
            if len(self.neighbours) >= self.cfg.max_neighbours:
                self.partner_steps.forget(evict(self.neighbours))
            n = self.neighbours[key] = Neighbour()
        self.metrics.set("neighbours", len(self.neighbours))
        return n
