"""What a `Session` asks its driver to do. Plain values: a driver performs them, decides nothing.

Every request action carries a `token`; the driver reports its outcome with the same token
(`Session.exchange_done`, `hello_done`, `state_done`), a timeout included, so the session
always learns how a request ended.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Publish:
    """Compress, sign and queue the newest parameter copy the training thread handed over."""


@dataclass(frozen=True)
class Exchange:
    """POST /v1/exchange to `address` (the neighbour's key, if known, is `peer_id`)."""

    token: int
    address: str
    peer_id: str


@dataclass(frozen=True)
class SendHello:
    """GET /v1/hello from `address`; verify it and report the `Hello` (or the error)."""

    token: int
    address: str


@dataclass(frozen=True)
class FetchState:
    """GET /v1/state from `address`; verify it, keep it under `token`, report its step."""

    token: int
    address: str


@dataclass(frozen=True)
class Adopt:
    """Load the state fetched under `token` into the trainer and restart our public copy from it."""

    token: int
    address: str
    step: int


@dataclass(frozen=True)
class JoinDone:
    """Joining is over: start training (and accepting exchanges)."""

    adopted_from: str | None


@dataclass(frozen=True)
class Forget:
    """Drop what the node holds of this peer (it was evicted; its key is known: the session
    emits none for a peer it never learnt the key of)."""

    peer_id: str
    address: str


@dataclass(frozen=True)
class Log:
    """A line for the operator."""

    message: str
    level: str = "info"


@dataclass(frozen=True)
class Count:
    """Add `value` to the counter `name` (with optional labels as sorted pairs)."""

    name: str
    value: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


Action = Publish | Exchange | SendHello | FetchState | Adopt | JoinDone | Forget | Log | Count
