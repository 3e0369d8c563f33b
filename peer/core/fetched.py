"""States fetched while joining, held only as long as an adoption needs them.

Both drivers (`peer/net/driver.py`, `simnet/driver/sim_peer.py`) verify a fetched state and hand the
session its step and probe verdict (`Session.state_done`). Each state is a full fp32 copy
of the model, and a join may fetch several, so one outlives that verdict only if the
verdict adopts it (an `Adopt` naming its token), and only until the adoption step takes
it; a refused, not-ahead or late one is dropped at once. When joining ends (`JoinDone`) the
driver clears what is left.
"""

from __future__ import annotations

from typing import Sequence

import torch

from peer.core.actions import Action, Adopt


class FetchedStates:
    """Fetched states by `FetchState` token, for the driver's adoption step. One owner: the driver's thread."""

    def __init__(self) -> None:
        self._held: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._held)

    def judged(self, token: int, x: torch.Tensor, verdict: Sequence[Action]) -> list[Action]:
        """`verdict` is what `Session.state_done` returned for `x`, fetched under `token`: `x` is
        held for the adoption step only if the verdict adopts it. Returns the verdict, to perform."""
        actions = list(verdict)
        if any(isinstance(a, Adopt) and a.token == token for a in actions):
            self._held[token] = x
        return actions

    def take(self, token: int) -> torch.Tensor:
        """The state an `Adopt` names, no longer held here."""
        try:
            return self._held.pop(token)
        except KeyError:
            raise KeyError(f"no fetched state is held under token {token}") from None

    def clear(self) -> None:
        """Joining is over: nothing fetched is needed any more."""
        self._held.clear()
