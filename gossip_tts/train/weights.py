"""Which of a checkpoint's weights a load takes, named without torch: synthesize's and eval's
configs check the choice and the CLI offers it while `--help` imports nothing heavy."""

from __future__ import annotations

WEIGHTS = ("average", "live")
"""The peer's averaged weights (peer.core.average; the live ones where a checkpoint has none,
such as one written without gossip) or the live parameters as they trained."""


def check_weights(weights: str) -> None:
    """Refuse a `--weights` value that is not one of WEIGHTS."""
    if weights not in WEIGHTS:
        raise ValueError(f"--weights must be one of {WEIGHTS}, got {weights!r}")
