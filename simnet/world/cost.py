"""What protocol work costs a simulated peer: CPU seconds charged to its timeline.

A real peer compresses, signs, verifies, decodes and applies on its node worker thread, and
mixes on its training thread. simnet runs that same code, but the virtual clock would
otherwise see it as free, which flatters gossip. The model: each operation costs a fixed
part plus a part per byte of frames it signs or verifies and per parameter it touches.
The defaults come from `python benchmarks/protocol_cost.py` on the real code, on the project's
development machine (docs/simnet.md#figures-behind-the-codes-defaults); rerun it on your
hardware and put its last line in a scenario's `[world.cost]` to model that.
Every scenario prints the model it ran with.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class CostConfig:
    op_s: float = 3.6e-3
    """Fixed cost of one node operation (Ed25519 sign or verify, headers, bookkeeping)."""
    sign_s_per_byte: float = 3.6e-9
    """Hashing and lz4 of frames we build, per byte."""
    verify_s_per_byte: float = 3.3e-9
    """Hashing and lz4 of frames we check, per byte."""
    publish_s_per_param: float = 2.6e-8
    """Compressing and reconstructing one published update, and updating the averaged weights
    (`peer.core.average`), per parameter: int8's publish, which covers the default codec's
    publish plus the averaged weights (docs/simnet.md#figures-behind-the-codes-defaults)."""
    apply_s_per_param: float = 2.6e-9
    """Decoding one received update or snapshot and adding it to a neighbour copy, per parameter."""
    mix_s_per_param: float = 3.5e-9
    """Mixing one neighbour copy into the parameters (training thread), per parameter."""
    enabled: bool = True
    """False charges nothing (a flattering model, for comparison only)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "enabled" and not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"cost.{name} must be a finite number >= 0, got {value!r}")

    def publish(self, numel: int, frame_bytes: int) -> float:
        return self._on(self.op_s + self.publish_s_per_param * numel + self.sign_s_per_byte * frame_bytes)

    def build(self, body_bytes: int) -> float:
        """Building (and signing) an exchange body or a state frame."""
        return self._on(self.op_s + self.sign_s_per_byte * body_bytes)

    def ingest(self, body_bytes: int, tensor_frames: int, numel: int) -> float:
        """Verifying a body and applying the tensor frames it held."""
        return self._on(self.op_s + self.verify_s_per_byte * body_bytes + self.apply_s_per_param * numel * tensor_frames)

    def mix(self, copies: int, numel: int) -> float:
        return self._on(self.mix_s_per_param * numel * copies)

    def describe(self) -> str:
        if not self.enabled:
            return "protocol cost model: off (protocol work takes no virtual time)"
        return ("protocol cost model: "
                f"{self.op_s * 1e6:.0f} us/op, sign {self.sign_s_per_byte * 1e9:.2f} ns/B, "
                f"verify {self.verify_s_per_byte * 1e9:.2f} ns/B, publish {self.publish_s_per_param * 1e9:.1f} ns/param, "
                f"apply {self.apply_s_per_param * 1e9:.1f} ns/param, mix {self.mix_s_per_param * 1e9:.1f} ns/param")

    def _on(self, seconds: float) -> float:
        return seconds if self.enabled else 0.0
