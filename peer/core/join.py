"""Joining a running swarm, as a small state machine of its own.

A fresh peer waits for a first known peer, asks the known peers for their step (a hello
each), fetches the state of the furthest along, falls back to the next when that fails,
and trains from its own weights when nobody is known, nobody answers or nobody is ahead.
The session owns one `Join`, feeds it what it hears and sends what it asks for; the
phases are `JoinPhase`. Pure and single-owner, like the session. The state a joiner
fetches is a snapshot signed as a state (`sign_state`, `read_state`): an exchange snapshot
or an update replayed to a joiner is refused. See docs/architecture.md.
"""

from __future__ import annotations

import enum
from typing import Callable

import torch

from peer.core.actions import Action, Count, FetchState, JoinDone, Log, SendHello
from peer.core.config import SessionConfig
from peer.core.ingest import published_at
from peer.core.state_seed import StateSource, public_copy_fields, source_of
from protocol import (
    FrameKind, FrameRefused, Identity, RefusalReason, VerifyPolicy, decode_frame, held_dtype, make_snapshot_frame,
    read_vector,
)
from protocol.messages import SNAPSHOT_TENSOR

STATE_KIND = "state"
"""The header mark of a snapshot served as a peer's state (GET /v1/state)."""


class JoinPhase(enum.Enum):
    WAITING = "waiting"  # for a known peer to ask, or for the time to ask again
    ASKING = "asking"  # hellos out to the known peers, for their step
    FETCHING = "fetching"  # the state of the furthest along requested
    DONE = "done"  # adopted a state, or training from our own weights


class Join:
    """Where joining stands: whom it asked, who answered with which step, what it fetches."""

    def __init__(self, cfg: SessionConfig, now: float) -> None:
        self.cfg = cfg
        self.phase = JoinPhase.WAITING
        self.wait_until = now + cfg.join_wait_s  # give up when no peer is known by then
        self.give_up_at = now + cfg.join_timeout_s  # give up when no known peer has answered by then
        self.ask_at = now  # when to ask the known peers (again)
        self.asked: dict[int, str] = {}  # hello token -> address
        self.answers: list[tuple[int, str]] = []  # (step, address), those not yet fetched
        self.claims: list[int] = []  # every step a known peer answered with
        self.fetching = 0  # token of the state request in flight
        self.fetching_from = ""  # its address
        self.unsent: dict[str, str] = {}  # address -> why a peer further along sent no state

    @property
    def done(self) -> bool:
        return self.phase is JoinPhase.DONE

    @property
    def waiting(self) -> bool:
        """Whether time alone (a tick, a newly found peer) can move it on."""
        return self.phase is JoinPhase.WAITING

    def deadline(self) -> float | None:
        """When waiting next has something to do; None in any other phase."""
        return max(self.ask_at, min(self.wait_until, self.give_up_at)) if self.waiting else None

    def hello_ended(self, token: int, address: str, step: int | None) -> bool:
        """A hello ended, with the peer's `step` if it answered; False when joining did not ask it."""
        if token not in self.asked:
            return False
        del self.asked[token]
        if step is not None:
            self.answers.append((step, address))
            self.claims.append(step)
        return True

    def counted_step(self, claimed: int) -> int:
        """The step a joiner counts on from when it adopts a state that claims `claimed`: at most the
        lower median of the steps the peers it asked answered with, so a minority claiming to be
        far ahead cannot set its schedule and `max_steps` (the probe decides adoption, not this)."""
        if not self.claims:
            return claimed
        ordered = sorted(self.claims)
        return min(claimed, ordered[(len(ordered) - 1) // 2])

    def fetch_ended(self, token: int, error: str | None = None) -> bool:
        """The state request `token` ended (`error`: why no state came); False when it is not the
        one joining waits for."""
        if token != self.fetching:
            return False
        if error is not None:
            self.unsent[self.fetching_from] = error
        self.fetching = 0
        return True

    def adopted(self) -> None:
        self.phase = JoinPhase.DONE

    def progress(self, now: float, *, step: int, known: list[str], pending: dict[str, int],
                 unreachable: dict[str, str], hello: Callable[[str], SendHello],
                 fetch: Callable[[str], FetchState]) -> list[Action]:
        """Move on as far as what is known allows. `known`: the addresses to ask, in order;
        `pending`: hellos already in flight (address -> token), whose answers count;
        `unreachable`: `--peer` addresses that failed, and why; `hello` and `fetch` make the
        requests (with the session's tokens)."""
        if self.phase is JoinPhase.WAITING:
            if not known and now >= self.wait_until or known and now >= self.give_up_at:
                self.phase = JoinPhase.DONE
                why = "no peer answered" if known else "no peer found"
                if unreachable:
                    why += " (" + "; ".join(f"{a}: {e}" for a, e in sorted(unreachable.items())) + ")"
                return [JoinDone(None), Count("joins_alone_total"),
                        Log(f"joining: {why}; training from our own weights")]
            if not known or now < self.ask_at:
                return []
            self.phase = JoinPhase.ASKING
            out: list[Action] = []
            for address in known[:self.cfg.join_max_asked]:
                if address in pending:  # already dialled to verify it: its answer will do
                    self.asked[pending[address]] = address
                    continue
                request = hello(address)
                self.asked[request.token] = address
                out.append(request)
            return out
        if self.phase is JoinPhase.ASKING and self.asked:
            return []
        if self.phase is JoinPhase.ASKING and not self.answers:  # nobody answered: ask again shortly
            self.phase, self.ask_at = JoinPhase.WAITING, now + self.cfg.join_retry_s
            return self.progress(now, step=step, known=known, pending=pending, unreachable=unreachable,
                                 hello=hello, fetch=fetch)
        if self.phase in (JoinPhase.ASKING, JoinPhase.FETCHING) and self.fetching == 0:
            ahead = sorted((a for a in self.answers if a[0] > step), key=lambda a: (-a[0], a[1]))
            self.answers = ahead[1:]
            if not ahead:
                self.phase = JoinPhase.DONE
                why = "no peer is further along"
                if self.unsent:  # some were, and could not send their state: say so, not that none was
                    why = "the peers further along sent no state (" + "; ".join(
                        f"{a}: {e}" for a, e in sorted(self.unsent.items())) + ")"
                return [JoinDone(None), Count("joins_alone_total"), Log(f"joining: {why}; training from our own weights")]
            self.phase = JoinPhase.FETCHING
            request = fetch(ahead[0][1])
            self.fetching, self.fetching_from = request.token, ahead[0][1]
            return [request]
        return []


def sign_state(identity: Identity, swarm: str, fingerprint: str, seq: int, step: int, now: float,
               vector: torch.Tensor, public: tuple[int, int] | None = None) -> bytes:
    """A signed, exact copy of `vector`, marked as the state a joiner may adopt; `public`: (our
    epoch, its seq) where `vector` is our public copy x̂ (`peer.core.state_seed`)."""
    fields = public_copy_fields(*public) if public is not None else {}
    return make_snapshot_frame(identity, swarm=swarm, fingerprint=fingerprint, seq=seq, step=step, timestamp=now,
                               vector=vector, extra={"kind": STATE_KIND, **fields})


def read_state(data: bytes, policy: VerifyPolicy, now: float) -> tuple[torch.Tensor, int, StateSource | None]:
    """Verify a state (`sign_state`); returns (parameters, the sender's step, whose public copy it
    is where it says). FrameRefused for any other frame, an update, an exchange snapshot or a state
    holding more than the parameters included."""
    frame = decode_frame(data, policy, now=now)
    if frame.header.kind != FrameKind.SNAPSHOT or frame.header.extra.get("kind") != STATE_KIND:
        raise FrameRefused(RefusalReason.BAD_HEADER, f"a {frame.header.kind.value} frame is not a signed state")
    if list(frame.parts) != [SNAPSHOT_TENSOR]:  # the model spec admits a steps tensor beside it
        raise FrameRefused(RefusalReason.BAD_HEADER, f"a state holds {SNAPSHOT_TENSOR!r} alone, "
                                                     f"not {sorted(frame.parts)[:3]}")
    h = frame.header
    source = source_of(h.extra, h.sender, h.step, published_at(h.timestamp, now), held_dtype(h))
    return read_vector(frame), h.step, source
