"""Which frames of an exchange bundle a node decodes, and which decoded ones it may apply.

Decoding is the costly part of an exchange: the signature hashes every byte, and applying an
update, however few entries it keeps, makes a new model-sized copy (copies are never written in
place: another thread may be reading them), so a frame of a few hundred bytes costs a
model-sized allocation and pass. Every check that needs no decoding therefore comes
first: whether the control frame binds the frames, the signer each frame's fixed prefix
names, repeats of one frame. Then at most `MAX_GAP_UPDATES` frames of one bundle are decoded:
the most an honest peer sends (`GossipNode._frames_for` sends one snapshot for a longer gap),
so a bundle costs no more than an honest gap fill, whatever it holds. Each of those has its
signature and header checked before its payload is read (`check_frame`), and one that cannot
change the copy we hold of its sender (`unchanging`: a resent update, a replayed snapshot) is
dropped there. The caller counts every frame refused here (`frames_refused_total{reason}`).
"""

from __future__ import annotations

import torch

from async_opt import NeighbourCopy
from peer.core.metrics_sink import MetricsSink
from peer.core.neighbour import Neighbour
from protocol import (
    PREFIX_SIZE, Frame, FrameHeader, FrameKind, FrameRefused, Limits, RefusalReason, VerifiedFrame, VerifyPolicy,
    held_dtype, peek_frame_sender, verify_frame,
)
from protocol.frame import SIGNATURE_SIZE
from protocol.messages import BUNDLE_HEAD, SNAPSHOT_TENSOR, STEP_TENSOR, UPDATE_TENSOR, bundle_spans

FRAME_OVERHEAD = 2048  # prefix, canonical header, safetensors index, signature: well under this


def published_at(timestamp: float, now: float) -> float:
    """When a frame stamped `timestamp` and received `now` counts as published: its stamp, one
    after its arrival mirrored about it, so a claim from the future buys no freshness."""
    return min(timestamp, 2 * now - timestamp)


def limits_for(numel: int) -> Limits:
    """Frame limits sized to this model: a frame of two exact fp32 vectors fits (a snapshot with its
    sender's steps sum; an update with its steps), plus a control frame; anything much larger is
    refused before it is read (the protocol defaults admit 1e9 params)."""
    snapshot = 4 * numel + (1 << 20)
    return Limits(max_frame_bytes=2 * snapshot, max_decompressed_bytes=2 * snapshot)


MAX_GAP_UPDATES = 32
"""Update frames one bundle carries at most; a longer gap is filled with one exact snapshot.
Past this many, decoding the updates costs more than decoding a snapshot
(docs/benchmarks/peer.md#update-frames-against-a-snapshot)."""
DUPLICATE_FRAME = "duplicate_frame"
"""The refusal reason of a frame sent twice in one bundle (an honest bundle never repeats one)."""
STALE_SEQ = "stale_seq"
"""The refusal reason of a snapshot no newer than the copy we hold of its sender (`unchanging`)."""
DUPLICATE, GAP = "duplicate", "gap"
"""An update already held, or one that cannot follow the held copy (`unchanging`): honest, not refused."""
_TENSORS = {FrameKind.UPDATE: ([UPDATE_TENSOR], [UPDATE_TENSOR, STEP_TENSOR]),
            FrameKind.SNAPSHOT: ([SNAPSHOT_TENSOR], [SNAPSHOT_TENSOR, STEP_TENSOR])}
"""The tensors each kind of frame an exchange carries may hold, in order."""


def screen(raw_frames: list[bytes], sender: bytes, *, bound: bool) -> tuple[list[bytes], list[str]]:
    """(the frames worth decoding, in bundle order; the refusal reason of each of the others).

    `bound`: the control frame signed for exactly these frames (`protocol.bundle_digest`)."""
    if not bound:
        return [], [RefusalReason.UNBOUND_FRAME.value] * len(raw_frames)
    keep: list[bytes] = []
    refusals: list[str] = []
    seen: set[bytes] = set()
    for raw in raw_frames:
        try:
            signer = peek_frame_sender(raw)
        except FrameRefused as exc:
            refusals.append(exc.reason.value)
            continue
        signature = raw[-SIGNATURE_SIZE:]  # a signature stands for its whole frame
        if signer != sender:  # only the control frame's signer may push frames in its exchange
            refusals.append(RefusalReason.BAD_HEADER.value)
        elif signature in seen:
            refusals.append(DUPLICATE_FRAME)
        elif len(keep) >= MAX_GAP_UPDATES:
            refusals.append(RefusalReason.TOO_LARGE.value)
        else:
            seen.add(signature)
            keep.append(raw)
    return keep, refusals


def check_frame(raw: bytes, policy: VerifyPolicy, now: float, epoch: int) -> VerifiedFrame:
    """Signature and header of one screened frame, its payload unread: an update or a snapshot of
    the sender's `epoch` (the one its control frame names); FrameRefused for anything else, a frame
    without tensors included. `VerifiedFrame.decode` then does the costly part."""
    checked = verify_frame(raw, policy, now)
    h = checked.header
    if h.extra.get("epoch") != epoch:
        raise FrameRefused(RefusalReason.BAD_HEADER, "frame of another epoch than its control frame names")
    names = [t.name for t in h.tensors]
    if names not in _TENSORS.get(h.kind, ()):
        raise FrameRefused(RefusalReason.BAD_HEADER,
                           f"a {h.kind.value} frame with tensors {sorted(names)[:3]}: an exchange carries "
                           f"updates ({UPDATE_TENSOR!r}) or a snapshot ({SNAPSHOT_TENSOR!r}), each optionally with {STEP_TENSOR!r}")
    return checked


def unchanging(copy: NeighbourCopy, header: FrameHeader) -> str | None:
    """Why a verified frame cannot change `copy` (`DUPLICATE`, `GAP`, `STALE_SEQ`), or None: it is
    then dropped before its payload is read, so a replayed or re-signed frame costs a signature
    check, not a model-sized decode and apply. An update at or below the held seq is a duplicate
    (an honest partner resends one every period); one past the next seq, or with no copy to add
    to, a gap; a snapshot at or below the held seq is refused: it could only restore what we
    hold, or roll it back."""
    held = copy.x_hat is not None
    if header.kind is FrameKind.SNAPSHOT:
        return STALE_SEQ if held and header.seq <= copy.seq else None
    if held and header.seq <= copy.seq:
        return DUPLICATE
    return GAP if not held or header.seq > copy.seq + 1 else None


def dropped_unread(n: Neighbour, raw: bytes, header: FrameHeader, metrics: MetricsSink) -> str | None:
    """None where a verified frame may change `n`'s copy, else "" (a duplicate or gap: honest,
    counted in `metrics`, not refused) or why it is refused (`unchanging`)."""
    why = DUPLICATE if n.holds(raw[-SIGNATURE_SIZE:]) else unchanging(n.copy, header)
    if why in (DUPLICATE, GAP):
        metrics.inc("updates_duplicate_total") if why == DUPLICATE else metrics.inc("update_gaps_total")
        return ""
    return why


def apply_frame(n: Neighbour, frame: Frame, signature: bytes, now: float, keep_steps: bool,
                metrics: MetricsSink, in_place: bool = False, device: torch.device | None = None) -> bool:
    """Apply one verified frame that `dropped_unread` let through (`signature`: its last bytes) to
    `n`'s copy; True when the copy changed. `keep_steps`: whether a frame's steps sum is kept (a
    parameter-sized vector beside the copy, held only where we take partners' steps). `in_place`:
    no one reads the copy now, so an update may be added into it (`NeighbourCopy.apply_update`).
    `device`: where the node holds its copies (None: the CPU); a snapshot decoded on the host moves
    there, an update's kept entries as they are added."""
    h, parts = frame.header, frame.parts  # an update is added by the entries it keeps, never expanded
    steps = parts.get(STEP_TENSOR) if keep_steps else None
    stamped = published_at(h.timestamp, now)
    if h.kind == FrameKind.SNAPSHOT:  # exact, and finite as decoding checked
        n.copy.set_snapshot(h.seq, parts[SNAPSHOT_TENSOR].dense().to(device, held_dtype(h)), h.step,
                            None if steps is None else steps.dense().to(device))
        n.published_at = stamped
        metrics.inc("snapshots_received_total")
        return True
    update = parts[UPDATE_TENSOR]
    n.copy.apply_update(h.seq, update, h.step, steps, in_place)  # the next in order: no other got through
    n.applied.append(signature)
    n.published_at = max(n.published_at, stamped)
    metrics.inc("updates_applied_total")
    if not n.copy.certainly_finite and not update.finite_where_set(n.copy.x_hat):
        # Each frame was finite, but their sum overflowed: nothing sane is left to mix.
        n.reset_copy(n.epoch)
        metrics.inc("copies_reset_total")
    return True


def open_frame(raw: bytes, policy: VerifyPolicy, now: float, epoch: int) -> Frame:
    """`check_frame`, then decode: a screened frame whole."""
    return check_frame(raw, policy, now, epoch).decode()


CONTROL_WORK = 0.25
"""An exchange's own work, in applied updates: its control frame's check and our signed answer
cost a small part of one model-sized pass."""
SNAPSHOT_PASSES = 3.0
"""Model-sized passes of decoding a frame the size of an fp32 snapshot, beside applying it: its
hash, its decompression, its finiteness check."""


def exchange_work(body: bytes | bytearray, model_bytes: int, limits: Limits) -> tuple[bytes, float]:
    """(the key the bundle's first frame names, unverified; the most work it can make the node
    do, in applied updates), read from the framing alone. Each frame the node may decode is one
    model-sized pass (an applied update copies the model) plus its bytes' share of
    `SNAPSHOT_PASSES`; a body that is no bundle costs `CONTROL_WORK` (the node refuses it unread).
    Charged before the node sees the exchange, so a key or address out of budget costs nothing."""
    try:
        spans = bundle_spans(body, limits)
    except FrameRefused:
        return b"", CONTROL_WORK
    decoded = spans[1:1 + MAX_GAP_UPDATES]
    passes = len(decoded) + SNAPSHOT_PASSES * sum(end - start for start, end in decoded) / max(1, model_bytes)
    return bundle_sender(body), CONTROL_WORK + passes


HEAD_BYTES = BUNDLE_HEAD + PREFIX_SIZE
"""The first bytes of a bundle, which name its first frame's sender (`bundle_sender`)."""


def bundle_sender(head: bytes | bytearray) -> bytes:
    """The key a bundle's first frame names, unverified, from its first `HEAD_BYTES`
    bytes (b"" when they are not a frame's prefix): the key an exchange is charged to can be
    known, and refused, before the rest of its body is read."""
    try:
        return peek_frame_sender(memoryview(head)[BUNDLE_HEAD:BUNDLE_HEAD + PREFIX_SIZE])
    except FrameRefused:
        return b""
