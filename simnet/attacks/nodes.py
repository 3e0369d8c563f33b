"""The node classes attacking peers and control arms run: `GossipNode` with one thing changed.

Each overrides only what its attack (or its control arm) is about; everything else is the
production node, so what it sends is genuine, signed and well formed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Collection

import torch

from peer.core.control import make_control, read_control
from peer.core.node import ExchangeResult, GossipNode
from protocol import (
    Frame, FrameHeader, FrameKind, IdentityCodec, TensorSpec, bundle_digest, decode_frame, encode_frame, pack_bundle,
    unpack_bundle,
)


class FutureClockNode(GossipNode):
    """An attacker's node whose frames claim a time `lead_s` ahead; it reads what it receives on the true clock.

    It overrides every place the node stamps a frame with `now` (publish, state, the control
    frame, snapshots for a gap); ingestion keeps the true clock, so what it receives still
    passes its own skew check.
    """

    def __init__(self, *args: Any, lead_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lead_s = lead_s

    def publish(self, x: torch.Tensor, step: int, now: float, outside: torch.Tensor | None = None,
                scratch: bool = False) -> int:
        return super().publish(x, step, now + self.lead_s, outside, scratch)

    def state_frame(self, now: float) -> bytes:
        return super().state_frame(now + self.lead_s)

    def _control_frame(self, peer_key: bytes | None, now: float, *args: Any, **kwargs: Any) -> bytes:
        return super()._control_frame(peer_key, now + self.lead_s, *args, **kwargs)

    def _frames_for(self, peer_key: bytes | None, now: float, *args: Any, **kwargs: Any) -> list[bytes]:
        return super()._frames_for(peer_key, now + self.lead_s, *args, **kwargs)


class TimestampTrustingNode(GossipNode):
    """Control arm of `future`: takes a frame's claimed timestamp as when it was published.

    The core keeps min(claimed, received), so a claim from the future buys no freshness;
    this node believes the claim, so such a copy counts as never stale.
    """

    def _apply(self, n: Any, frame: Frame, signature: bytes, now: float) -> bool:
        before = n.published_at
        changed = super()._apply(n, frame, signature, now)
        if changed and n.copy.x_hat is not None:
            claimed = frame.header.timestamp
            n.published_at = claimed if frame.header.kind == FrameKind.SNAPSHOT else max(before, claimed)
        return changed


class JoinLiarNode(GossipNode):
    """Serves /v1/state as its parameters plus noise, signed, claiming step `claim_step`."""

    def __init__(self, *args: Any, claim_step: int, noise: float, generator: torch.Generator, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claim_step, self.noise, self.generator = claim_step, noise, generator

    @property
    def state_cached(self) -> bool:
        return False

    def state_frame(self, now: float) -> bytes:
        """The production state frame, built over the lie (a fresh draw of noise each time)."""
        honest, step, served = self.last_x, self.step, self.served.float()
        rms = float(served.pow(2).mean().sqrt()) or 1.0
        self.last_x = served + self.noise * rms * torch.randn(served.shape, generator=self.generator)
        self.step, self._state_cache = self.claim_step, None
        try:
            return super().state_frame(now)
        finally:
            self.last_x, self.step, self._state_cache = honest, step, None


class NanForgingNode(GossipNode):
    """The NaN attacker's node: it appends a self-signed NaN update to every exchange body it sends.

    It appends the frame and signs its control frame again to bind it, as any sender may bind
    what it likes: receivers then decode the frame and refuse it for its values (`non_finite`),
    not for being unbound, or drop it unread where it cannot follow the copy they hold of us (a
    gap). It forges only into bodies that spend a ticket: of a first contact the receiver decodes
    nothing. Each forged body counts `forged_frames_total`.
    """

    def build_request(self, peer_key: bytes | None, now: float) -> bytes:
        return self._forged(super().build_request(peer_key, now), now)

    def handle_request(self, body: bytes, now: float, *, address: str = "",
                       verified: Collection[bytes] = frozenset()) -> tuple[bytes, ExchangeResult]:
        data, result = super().handle_request(body, now, address=address, verified=verified)
        return self._forged(data, now), result

    def _forged(self, body: bytes, now: float) -> bytes:
        frames = unpack_bundle(body, self.limits)
        header = decode_frame(frames[0], self.policy, now).header
        if not header.ticket:
            return body
        frames = frames[1:] + [forge_non_finite_update(self, now)]
        control = dataclasses.replace(read_control(header), bundle=bundle_digest(frames))
        rebound = make_control(self.identity, control, swarm=header.swarm, fingerprint=header.fingerprint,
                               seq=header.seq, step=header.step, now=header.timestamp, to=header.to,
                               to_epoch=header.to_epoch, ticket=header.ticket, limits=self.limits)
        self.metrics.inc("forged_frames_total")
        return pack_bundle([rebound, *frames])


def forge_non_finite_update(node: GossipNode, now: float) -> bytes:
    """An update frame full of NaN, correctly signed by the node's own key.

    It bypasses the sender-side check of `make_update_frame` (an attacker is not bound to
    use the honest encoder); receivers must refuse it on their own.
    """
    delta = torch.full((node.numel,), float("nan"))
    packed, _ = IdentityCodec().compress(delta)
    header = FrameHeader(
        swarm=node.cfg.swarm, fingerprint=node.fingerprint, sender=node.identity.public_key,
        kind=FrameKind.UPDATE, seq=node.public.seq + 1, step=node.step, timestamp=now,
        codec="identity", tensors=(TensorSpec("delta", (node.numel,), "float32"),), extra={"epoch": node.epoch},
    )
    return encode_frame(node.identity, header, {f"delta/{k}": v for k, v in packed.items()}, node.limits)


class EmptyAnswerNode(GossipNode):
    """A partner-slot sybil's node: every request and every answer carries its signed control
    frame (a ticket, its step) and no frame of its copy, however far behind the other side is."""

    def _frames_for(self, peer_key: bytes | None, now: float, withheld: Any) -> list[bytes]:
        return []
