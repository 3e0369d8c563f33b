"""Public copies: the CHOCO-SGD error-feedback state (Koloskova et al. 2019).

A peer *i* keeps ``x̂_i``, the copy of its parameters that every neighbour can
reconstruct from the compressed updates it has published. Publishing sends
``q = C(x - x̂_i)`` and adds what the receiver reconstructs to ``x̂_i``; the residual
``x - x̂_i`` that compression dropped stays behind and is sent in a later round. That is
the error feedback of CHOCO-SGD, with no buffer beyond ``x̂_i`` itself.

A neighbour's reconstruction ``x̂_j`` is a :class:`NeighbourCopy`: it applies updates in
sequence-number order and reports a gap so that the caller can fetch a snapshot.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["Compressor", "PublicCopy", "NeighbourCopy"]

Compressor = Callable[[Tensor], Tensor]
"""``compress(x) -> what the receiver will reconstruct`` (same shape as ``x``)."""


def _check_same_shape(name: str, got: Tensor, want: Tensor) -> None:
    if got.shape != want.shape:
        raise ValueError(f"{name}: shape {tuple(got.shape)} does not match {tuple(want.shape)}")


class PublicCopy:
    """Own public copy ``x̂_i`` with CHOCO-SGD error feedback (Koloskova et al. 2019, Alg. 1).

    ``x̂_i`` starts equal to ``x0``: every peer starts from the same initialisation or from
    a snapshot, so neighbours can start from the same value. ``seq`` counts publications.
    """

    def __init__(self, x0: Tensor) -> None:
        self.x_hat: Tensor = x0.detach().clone()
        self.seq: int = 0

    def publish(self, x: Tensor, compress: Compressor) -> tuple[int, Tensor]:
        """Publish one compressed update: ``q_rec = compress(x - x̂)``; ``x̂ += q_rec``; ``seq += 1``.

        ``compress`` must return exactly what receivers will reconstruct (encode then
        decode). Returns ``(seq, q_rec)`` with the new sequence number.
        """
        _check_same_shape("publish: x", x, self.x_hat)
        q_rec = compress(x.detach() - self.x_hat)
        _check_same_shape("publish: compress(x - x_hat)", q_rec, self.x_hat)
        q_rec = q_rec.to(dtype=self.x_hat.dtype, device=self.x_hat.device)
        self.x_hat.add_(q_rec)
        self.seq += 1
        return self.seq, q_rec

    def residual(self, x: Tensor) -> Tensor:
        """Return the error-feedback residual ``x - x̂`` that has not been sent yet (CHOCO-SGD)."""
        _check_same_shape("residual: x", x, self.x_hat)
        return x.detach() - self.x_hat

    def reset(self, x_hat: Tensor, seq: int) -> None:
        """Replace ``x̂`` and ``seq``, e.g. after loading a snapshot (CHOCO-SGD state restore)."""
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        self.x_hat = x_hat.detach().clone()
        self.seq = int(seq)


class NeighbourCopy:
    """Reconstruction ``x̂_j`` of a neighbour's public copy (CHOCO-SGD, Koloskova et al. 2019).

    Updates are applied strictly in order: ``apply_update`` accepts ``seq == self.seq + 1``
    only. Before the first snapshot, ``x_hat`` is ``None`` and every update is a gap.

    Attributes:
        x_hat: the reconstruction, or ``None`` until a snapshot arrives.
        seq: sequence number of the last publication applied.
        step: the neighbour's own step count at that publication.
        refreshed_at_k: the receiver's local step when ``x_hat`` last changed.
        velocity: EMA of ``x̂_j``'s change per neighbour step, for PipeMare weight
            prediction (Yang et al. 2021); ``None`` until a first snapshot.
    """

    def __init__(self, velocity_beta: float = 0.9) -> None:
        if not (0.0 <= velocity_beta < 1.0):
            raise ValueError(f"velocity_beta must be in [0, 1), got {velocity_beta!r}")
        self.velocity_beta = velocity_beta
        self.x_hat: Tensor | None = None
        self.seq: int = 0
        self.step: int = 0
        self.refreshed_at_k: int = 0
        self.velocity: Tensor | None = None

    @property
    def has_state(self) -> bool:
        """True once a snapshot has been set."""
        return self.x_hat is not None

    def _observe_change(self, delta: Tensor, step: int) -> None:
        assert self.velocity is not None
        steps = step - self.step
        if steps <= 0:
            return
        b = self.velocity_beta
        self.velocity.mul_(b).add_(delta, alpha=(1.0 - b) / steps)

    def apply_update(self, seq: int, q_rec: Tensor, step: int, k: int) -> bool:
        """Apply ``x̂_j += q_rec`` if ``seq == self.seq + 1`` (in-order CHOCO-SGD update).

        Returns ``True`` when the copy is consistent afterwards: the update was applied, or
        it was a duplicate (``seq <= self.seq``) and was ignored. Returns ``False`` on a gap
        (``seq > self.seq + 1``) or when no snapshot has been set; the caller should then
        fetch a snapshot and call :meth:`set_snapshot`.
        """
        if self.x_hat is None or seq > self.seq + 1:
            return False
        if seq <= self.seq:
            return True
        _check_same_shape("apply_update: q_rec", q_rec, self.x_hat)
        q = q_rec.detach().to(dtype=self.x_hat.dtype, device=self.x_hat.device)
        self.x_hat.add_(q)
        self._observe_change(q, step)
        self.seq = int(seq)
        self.step = max(self.step, int(step))
        self.refreshed_at_k = int(k)
        return True

    def set_snapshot(self, seq: int, x_hat: Tensor, step: int, k: int) -> None:
        """Replace ``x̂_j`` by an exact snapshot published at ``seq`` and neighbour step ``step``.

        The snapshot's change relative to the old copy also feeds the velocity EMA when the
        neighbour's step advanced.
        """
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        new = x_hat.detach().clone()
        if self.x_hat is None or self.velocity is None or self.x_hat.shape != new.shape:
            self.velocity = torch.zeros_like(new)
        else:
            self._observe_change(new - self.x_hat, step)
        self.x_hat = new
        self.seq = int(seq)
        self.step = int(step)
        self.refreshed_at_k = int(k)

    def staleness(self, k: int) -> int:
        """Local steps since ``x̂_j`` was last refreshed: ``max(0, k - refreshed_at_k)``."""
        return max(0, int(k) - self.refreshed_at_k)
