"""Byzantine peers: a Trainer wrapper whose parameters — what GossipNode publishes — lie.

The attacker runs the real peer core over the real wire; only the vector its node reads
from the trainer is manipulated, so the attack travels in genuine signed frames and the
honest side defends with exactly the code it runs in production. The attacker still
trains honestly and mixes in what it receives (the mixing delta is applied to its honest
parameters), so it stays close to the swarm, as a careful adversary would.

Kinds (u = x − x₀ is the attacker's honest progress since the shared start x₀):
- sign_flip: publishes x₀ − s·u (its update with the sign flipped, scaled by s);
- scale: publishes x₀ + s·u (model-replacement style boosting);
- random: publishes x + s·ε·rms(x), ε ~ N(0, I) fresh at every read;
- alie: "A Little Is Enough" (Baruch et al. 2019): μ − z·σ of the copies it holds
  (its own and its neighbours'), coordinate-wise: small enough to pass distance checks;
- steer: radius steering: publishes x + d·e, e a fixed random unit direction, d starting at 1% of
  `scale`·||x|| and growing by `growth` at every read, so the attacker is always a little
  farther than last time: against a radius taken from a window of recent distances it owns
  the window and drags the radius (and its victims) along;
- nan: publishes NaN. The sender-side encoder refuses non-finite vectors, so the node
  never publishes; the attacker also appends a self-signed update frame full of NaN to
  every exchange body, which receivers' non-finite check must refuse (both are counted).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from peer.core.node import GossipNode
from peer.trainer import ParamSpec, StepStats, Trainer
from protocol import FrameHeader, FrameKind, IdentityCodec, TensorSpec, encode_frame, pack_bundle, unpack_bundle

KINDS = ("none", "sign_flip", "scale", "random", "alie", "nan", "steer")


@dataclass
class AttackConfig:
    kind: str = "none"
    """none | sign_flip | scale | random | alie | nan."""
    fraction: float = 0.0
    """Share of peers that attack (rounded to the nearest count), chosen by the seed."""
    peers: list[int] = field(default_factory=list)
    """Explicit attacker indices (instead of `fraction`)."""
    scale: float = 1.0
    """s of sign_flip / scale / random."""
    z: float = 1.0
    """z of ALIE."""
    growth: float = 1.25
    """steer: factor by which the published distance grows at every publish."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"attack.kind must be one of {KINDS}, got {self.kind!r}")
        if not 0 <= self.fraction < 1:
            raise ValueError(f"attack.fraction must be in [0, 1), got {self.fraction}")
        if any(p < 0 for p in self.peers):
            raise ValueError("attack.peers must be peer indices >= 0")
        self.peers = [int(p) for p in self.peers]

    def attackers(self, n: int, seed: int) -> set[int]:
        """Which peers attack (none when kind is 'none')."""
        if self.kind == "none":
            return set()
        if self.peers:
            return {p for p in self.peers if p < n}
        k = int(round(self.fraction * n))
        return set(random.Random(f"simnet-attackers:{seed}").sample(range(n), k))


class AttackTrainer:
    """Wraps an honest Trainer; `get_flat_params` returns the attack vector."""

    def __init__(self, inner: Trainer, cfg: AttackConfig, seed: int) -> None:
        self.inner, self.cfg = inner, cfg
        self.x0 = inner.get_flat_params()
        self.gen = torch.Generator().manual_seed(seed)
        self.peek: Callable[[], list[torch.Tensor]] = lambda: []
        self.armed = False
        """Off until the node is built: its public copy starts from the shared x₀ like everyone's."""
        self._shown: torch.Tensor | None = None
        self._steer: float | None = None
        self._direction: torch.Tensor | None = None

    # --- what gossip sees ------------------------------------------------------------
    def get_flat_params(self) -> torch.Tensor:
        x = self.inner.get_flat_params()
        if not self.armed:
            return x
        self._shown = self._attack(x)
        return self._shown.clone()

    def set_flat_params(self, flat: torch.Tensor) -> None:
        """Apply the mixing delta (new − what we showed) to the honest parameters."""
        if self._shown is None:
            self.inner.set_flat_params(flat)
            return
        delta = flat - self._shown
        delta = torch.where(torch.isfinite(delta), delta, torch.zeros_like(delta))
        self.inner.set_flat_params(self.inner.get_flat_params() + delta)
        self._shown = None

    def _attack(self, x: torch.Tensor) -> torch.Tensor:
        kind, s = self.cfg.kind, self.cfg.scale
        if kind == "sign_flip":
            return self.x0 - s * (x - self.x0)
        if kind == "scale":
            return self.x0 + s * (x - self.x0)
        if kind == "random":
            rms = float(x.pow(2).mean().sqrt()) or 1.0
            return x + s * rms * torch.randn(x.shape, generator=self.gen)
        if kind == "alie":
            stack = torch.stack([x] + [c for c in self.peek() if c.shape == x.shape])
            if len(stack) < 2:
                return x
            return stack.mean(0) - self.cfg.z * stack.std(0)
        if kind == "nan":
            return torch.full_like(x, float("nan"))
        if kind == "steer":
            if self._direction is None:
                e = torch.randn(x.shape, generator=self.gen)
                self._direction = e / e.norm()
                self._steer = s * (float(x.pow(2).mean().sqrt()) or 1.0) * x.numel() ** 0.5 * 0.01
            self._steer *= self.cfg.growth
            return x + min(self._steer, 1e30) * self._direction
        return x

    # --- honest delegation ------------------------------------------------------------
    @property
    def step_count(self) -> int:
        return self.inner.step_count

    def step(self) -> StepStats:
        return self.inner.step()

    def param_spec(self) -> ParamSpec:
        return self.inner.param_spec()

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return self.inner.state_tensors()

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.inner.load_state_tensors(tensors, meta)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # evaluation hooks of the wrapped trainer
        return getattr(self.inner, name)


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


def append_frame(body: bytes, frame: bytes, node: GossipNode) -> bytes:
    """The same bundle with one more frame at the end."""
    return pack_bundle(unpack_bundle(body, node.limits) + [frame])
