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

import math
from collections import deque
from typing import Callable, Protocol, runtime_checkable

import torch
from torch import Tensor

from .mixing import HALF_WIDTH, piece_for, safe_norm

__all__ = ["Compressor", "Increment", "PublicCopy", "NeighbourCopy"]


@runtime_checkable
class Increment(Protocol):
    """An update as the entries its codec kept (`protocol.SparseVector` is one): added to a copy
    without expanding it to the whole vector. A plain tensor works wherever one of these does."""

    numel: int

    def added_to(self, x: Tensor) -> Tensor:
        """x + the update as a new tensor; x is not written."""
        ...

    def add_into(self, x: Tensor) -> Tensor:
        """x += the update, in place, each entry rounded as `added_to` rounds it; returns x."""
        ...

    def norm(self) -> float:
        """Its Euclidean norm (finite for finite entries)."""
        ...

    def max_abs(self) -> float:
        """Its largest |entry| (inf where one is not finite)."""
        ...


Compressor = Callable[[Tensor], "Tensor | Increment"]
"""``compress(x) -> what the receiver will reconstruct``: a tensor shaped as ``x``, or an
`Increment` of as many entries."""


def _add(x: Tensor, q: "Tensor | Increment", name: str) -> Tensor:
    """x + q as a new tensor: a tensor q is added whole, an `Increment` by its kept entries."""
    if isinstance(q, Tensor):
        _check_same_shape(name, q, x)
        q = q.detach().to(device=x.device)
        if x.dtype in HALF_WIDTH:  # summed in float32, rounded once, as `Increment`s are
            return (x.to(torch.float32) + q).to(x.dtype)
        return x + q.to(dtype=x.dtype)
    if q.numel != x.numel():
        raise ValueError(f"{name}: {q.numel} entries do not match {x.numel()}")
    return q.added_to(x)


def _add_into(x: Tensor, q: "Tensor | Increment", name: str) -> Tensor:
    """x += q in place, bit for bit as `_add` computes it (a half-width x a piece at a time)."""
    if isinstance(q, Tensor):
        _check_same_shape(name, q, x)
        q = q.detach().to(device=x.device)
        if x.dtype not in HALF_WIDTH:
            return x.add_(q.to(dtype=x.dtype))
        fx, fq, piece = x.view(-1), q.reshape(-1), piece_for(x)
        for start in range(0, fx.numel(), piece):
            part = slice(start, start + piece)
            fx[part] = (fx[part].to(torch.float32) + fq[part]).to(x.dtype)
        return x
    if q.numel != x.numel():
        raise ValueError(f"{name}: {q.numel} entries do not match {x.numel()}")
    return q.add_into(x)


def _norm(q: "Tensor | Increment") -> float:
    """||q||: a tensor's by `safe_norm`, an `Increment`'s from its kept entries."""
    return safe_norm(q) if isinstance(q, Tensor) else q.norm()


def _max_abs(q: "Tensor | Increment") -> float:
    """The largest |entry| of q (inf where one is not finite)."""
    if not isinstance(q, Tensor):
        return q.max_abs()
    if q.numel() == 0:
        return 0.0
    low, high = torch.aminmax(q.detach())  # one pass, no |q| temporary
    low, high = float(low), float(high)
    return max(-low, high) if math.isfinite(low) and math.isfinite(high) else math.inf


def _check_same_shape(name: str, got: Tensor, want: Tensor) -> None:
    if got.shape != want.shape:
        raise ValueError(f"{name}: shape {tuple(got.shape)} does not match {tuple(want.shape)}")


def _in_pieces(op: Callable[[Tensor, Tensor], Tensor], x: Tensor, y: Tensor) -> Tensor:
    """``op(x, y)`` in place (``Tensor.sub_``, ``Tensor.add_``), a `PIECE` at a time: with a narrower
    ``y`` the widened piece, not a widened copy of the whole, is the temporary."""
    fx, fy, piece = x.reshape(-1), y.detach().reshape(-1), piece_for(x)
    for start in range(0, fx.numel(), piece):
        op(fx[start:start + piece], fy[start:start + piece])
    return x


def _finite_or_none(x: Tensor) -> Tensor | None:
    """`x`, or None where a sum overflowed: a steps sum that is not finite tells us nothing."""
    return x if math.isfinite(safe_norm(x)) else None


class PublicCopy:
    """Own public copy ``x̂_i`` with CHOCO-SGD error feedback (Koloskova et al. 2019, Alg. 1).

    ``x̂_i`` starts equal to ``x0``: every peer starts from the same initialisation or from
    a snapshot, so neighbours can start from the same value. ``seq`` counts publications.
    ``publish`` replaces ``x_hat`` instead of writing into it, so a tensor handed to another
    thread stays valid, unless its caller says when the tensor may be written (`before_write`).

    ``moves`` holds ``||q_rec||``, how far ``x̂`` moved, at each of the last ``moves_window``
    publications: how far an honest copy moves in one publish period, known without any
    neighbour (it bounds the clip radius before enough neighbours are known,
    ``NeighbourRadius``).

    ``dtype`` is the precision ``x̂`` is held in (default: ``x0``'s). In bfloat16 every copy of it,
    ours and each neighbour's, costs half of float32: an update is summed in float32 and rounded
    once to bfloat16 on both sides alike, so the copies still agree bit for bit, and what the
    rounding leaves out of ``x̂`` stays in the residual ``x − x̂`` and is sent later, as any other
    part of it the codec dropped.
    """

    def __init__(self, x0: Tensor, moves_window: int = 16, dtype: torch.dtype | None = None) -> None:
        if moves_window < 1:
            raise ValueError(f"moves_window must be >= 1, got {moves_window}")
        self.dtype = dtype or x0.dtype
        self.x_hat: Tensor = x0.detach().to(self.dtype, copy=True)
        self.seq: int = 0
        self.moves: deque[float] = deque(maxlen=moves_window)

    def publish(self, x: Tensor, compress: Compressor, in_place: bool = False, restore: bool = False,
                before_write: Callable[[], None] | None = None) -> "tuple[int, Tensor | Increment]":
        """Publish one compressed update: ``q_rec = compress(x - x̂)``; ``x̂ += q_rec``; ``seq += 1``.

        ``compress`` must return exactly what receivers will reconstruct (encode then
        decode). Returns ``(seq, q_rec)`` with the new sequence number. ``in_place``: ``x`` is
        the caller's to spend and holds the residual ``x − x̂`` (of the x̂ before this call)
        afterwards, instead of a new vector the size of the model; with ``restore`` it holds the
        parameters again once compressed (`restore`, from the x̂ it started from).
        ``before_write``: x̂ is written in place, once this returns (it makes sure no one reads
        x̂ meanwhile); None replaces x̂ by a new tensor, so readers of the old one are unaffected.
        """
        _check_same_shape("publish: x", x, self.x_hat)
        q_rec = compress(_in_pieces(Tensor.sub_, x.detach(), self.x_hat) if in_place else self.residual(x))
        if in_place and restore:
            self.restore(x, self.x_hat)
        if before_write is None:
            self.x_hat = _add(self.x_hat, q_rec, "publish: compress(x - x_hat)")
        else:
            before_write()
            _add_into(self.x_hat, q_rec, "publish: compress(x - x_hat)")
        self.seq += 1
        move = _norm(q_rec)
        if math.isfinite(move):
            self.moves.append(move)
        return self.seq, q_rec

    @staticmethod
    def restore(residual: Tensor, x_hat: Tensor) -> Tensor:
        """``residual + x_hat`` written into ``residual``: the parameters a ``publish(in_place=True)``
        spent, from the x̂ it started from. Equal to them up to the rounding of the subtraction:
        exact where x̂ is within a factor two of x (Sterbenz), elsewhere within a unit in the last
        place of the larger of the two."""
        _check_same_shape("restore: x_hat", x_hat, residual)
        _in_pieces(Tensor.add_, residual.detach(), x_hat)
        return residual

    def residual(self, x: Tensor) -> Tensor:
        """Return the error-feedback residual ``x - x̂`` that has not been sent yet (CHOCO-SGD)."""
        _check_same_shape("residual: x", x, self.x_hat)
        if x.dtype == self.x_hat.dtype:
            return x.detach() - self.x_hat
        # x̂ widened into the result's own buffer first: a mixed-dtype subtraction would allocate
        # a widened copy of x̂ as well
        out = self.x_hat.to(torch.promote_types(x.dtype, self.x_hat.dtype), copy=True)
        return torch.sub(x.detach(), out, out=out)

    def reset(self, x_hat: Tensor, seq: int) -> None:
        """Replace ``x̂`` (rounded to ``dtype``) and ``seq``, e.g. after loading a snapshot (CHOCO-SGD
        state restore). ``moves`` stay: they measure our own training, which the jump is not."""
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        self.x_hat = x_hat.detach().to(self.dtype, copy=True)
        self.seq = int(seq)


class NeighbourCopy:
    """Reconstruction ``x̂_j`` of a neighbour's public copy (CHOCO-SGD, Koloskova et al. 2019).

    Updates are applied strictly in order: ``apply_update`` accepts ``seq == self.seq + 1``
    only. Before the first snapshot, ``x_hat`` is ``None`` and every update is a gap.
    Like :class:`PublicCopy` it writes into ``x_hat`` only when its caller says the tensor may
    be written (``apply_update(in_place=True)``) and the sum cannot overflow; otherwise each
    change makes a new ``x_hat``, so a reader holding the old one never sees a half-applied
    update.

    Attributes:
        x_hat: the reconstruction, or ``None`` until a snapshot arrives.
        seq: sequence number of the last publication applied.
        step: the neighbour's own step count at that publication.
        steps_hat: the neighbour's own training steps summed since its run began, as it
            published them (``async_opt.partner_steps``), or ``None`` where its frames carry none.
            Kept beside ``x_hat`` by the same rules, so what it stepped between two of our reads
            is their difference however the copy was filled in between (updates or a snapshot).
        magnitude: an upper bound on ``x_hat``'s largest |entry|: the snapshot's, plus each
            update's largest since, with float rounding's worst case. While it stays far below
            the dtype's largest number no sum of finite updates can have overflowed, so the
            receiver need not look (`certainly_finite`); a neighbour sending huge finite values
            only makes it look.
    """

    def __init__(self) -> None:
        self.x_hat: Tensor | None = None
        self.steps_hat: Tensor | None = None
        self.seq: int = 0
        self.step: int = 0
        self.magnitude: float = 0.0

    @property
    def certainly_finite(self) -> bool:
        """True when ``x_hat`` is set and `magnitude` proves every entry finite. False says
        nothing either way: the caller checks the entries (after an update, where it wrote)."""
        if self.x_hat is None:
            return False
        # |fl(a + b)| <= (|a| + |b|)(1 + eps) < max while the bound is below max / 2
        return self.magnitude < torch.finfo(self.x_hat.dtype).max / 2

    @property
    def has_state(self) -> bool:
        """True once a snapshot has been set."""
        return self.x_hat is not None

    def apply_update(self, seq: int, q_rec: "Tensor | Increment", step: int,
                     steps: "Tensor | Increment | None" = None, in_place: bool = False) -> bool:
        """Apply ``x̂_j ← x̂_j + q_rec`` if ``seq == self.seq + 1`` (in-order CHOCO-SGD update).

        Returns ``True`` when the copy is consistent afterwards: the update was applied, or
        it was a duplicate (``seq <= self.seq``) and was ignored. Returns ``False`` on a gap
        (``seq > self.seq + 1``) or when no snapshot has been set; the caller should then
        fetch a snapshot and call :meth:`set_snapshot`. ``steps``: the publication's own
        training steps, added to ``steps_hat`` (an update without them leaves it as it is).
        ``in_place``: no one reads ``x_hat`` now, so the update may be added into it, which it is
        where the sum is certainly finite (`certainly_finite` after it); one that might overflow
        makes a new tensor, and the caller that finds it so drops it with the old one intact.
        """
        if self.x_hat is None or seq > self.seq + 1:
            return False
        if seq <= self.seq:
            return True
        magnitude = (self.magnitude + _max_abs(q_rec)) * (1 + torch.finfo(self.x_hat.dtype).eps)
        if in_place and magnitude < torch.finfo(self.x_hat.dtype).max / 2:
            _add_into(self.x_hat, q_rec, "apply_update: q_rec")
        else:
            self.x_hat = _add(self.x_hat, q_rec, "apply_update: q_rec")
        self.magnitude = magnitude
        if self.steps_hat is not None and steps is not None:
            self.steps_hat = _finite_or_none(_add(self.steps_hat, steps, "apply_update: steps"))
        self.seq = int(seq)
        self.step = max(self.step, int(step))
        return True

    def set_snapshot(self, seq: int, x_hat: Tensor, step: int, steps: Tensor | None = None) -> None:
        """Replace ``x̂_j`` by an exact snapshot published at ``seq`` and neighbour step ``step``
        (and ``steps_hat`` by ``steps``, the sum of its own steps the snapshot carries, if any)."""
        if seq < 0:
            raise ValueError(f"seq must be >= 0, got {seq}")
        if steps is not None:
            _check_same_shape("set_snapshot: steps", steps, x_hat)
        self.x_hat = x_hat.detach().clone()
        self.magnitude = _max_abs(self.x_hat)
        self.steps_hat = None if steps is None else _finite_or_none(steps.detach().clone())
        self.seq = int(seq)
        self.step = int(step)
