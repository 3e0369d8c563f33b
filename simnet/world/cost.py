"""What protocol work costs a simulated peer: CPU seconds charged to its timeline.

A real peer compresses, signs, verifies, decodes and applies on its node worker thread, and
mixes on its training thread. simnet runs that same code, but the virtual clock would
otherwise see it as free, which flatters gossip. The model: each operation costs a fixed
part plus a part per byte of frames it signs or verifies and per parameter it touches.
The defaults were measured on the real code by `python benchmarks/protocol_cost.py --sizes
100000,1000000,4000000 --repeats 3` (int8 updates) on the project's 2-core development
machine (AMD EPYC, torch 2.13 CPU, one torch thread, load average 2.6 from other work, so
the fixed part is on the high side); rerun it on your hardware and put its last line in a
scenario's `[world.cost]` to model that.
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
    (`peer.core.average`), per parameter. Measured at 5554b6c (load 1.5, 1M parameters, one
    thread): the default codec's publish 15.4 ns (`--compression topk:0.1+int8`), the averaged
    weights 0.45 + 1.15 ns per neighbour copy held (3.8 ns with 3 copies, 9.7 with 8), together
    19-25 ns; int8's publish alone, from which this default came, 24.5 ns."""
    apply_s_per_param: float = 2.6e-9
    """Decoding one received update or snapshot and adding it to a neighbour copy, per parameter."""
    mix_s_per_param: float = 3.5e-9
    """Mixing one neighbour copy into the parameters (training thread), per parameter."""
    enabled: bool = True
    """False charges nothing (the old, flattering model; for comparison only)."""

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
