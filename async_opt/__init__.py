"""The mathematics of the swarm: staleness weights, public copies, mixing, synchronous baselines.

Pure torch functions and small state objects; no I/O, no clocks, no global randomness.
Sources: CHOCO-SGD (Koloskova et al. 2019), AD-PSGD (Lian et al. 2018), PipeMare
(Yang et al. 2021), FedAsync (Xie et al. 2019), ClippedGossip (He, Karimireddy & Jaggi
2022), DiLoCo (Douillard et al. 2023), SparseLoCo (Sarfi et al. 2025), linear step-size scaling (Goyal et al. 2017).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .mix_change import MixChange, mix_delta_of_copies
    from .mixing import (AdaptiveRadius, NeighbourRadius, clip, consensus_distance, difference, mix_delta,
                         mix_diffs, mix_step, pull_scale, safe_distances, safe_norm)
    from .public_copy import Compressor, NeighbourCopy, PublicCopy
    from .staleness import (Constant, Exponential, Hinge, PipeMare, Polynomial, StalenessPolicy, StalenessSchedule,
                            pair_lambda, parse_staleness)
    from .sparse_loco import ErrorFeedback, SparseMessage, kept, message_bytes, top_k_two_bit
    from .step_scale import SwarmStepScale, effective_models
    from .stochastic_round import stochastic_round_bf16
    from .sync import DiLoCoOuter, allreduce_mean, allreduce_step

_HOME = {
    **dict.fromkeys(("AdaptiveRadius", "NeighbourRadius", "clip", "consensus_distance", "difference", "mix_delta",
                     "mix_diffs", "mix_step", "pull_scale", "safe_distances", "safe_norm"), "mixing"),
    **dict.fromkeys(("MixChange", "mix_delta_of_copies"), "mix_change"),
    **dict.fromkeys(("Compressor", "NeighbourCopy", "PublicCopy"), "public_copy"),
    **dict.fromkeys(("Constant", "Exponential", "Hinge", "PipeMare", "Polynomial", "StalenessPolicy",
                     "StalenessSchedule", "pair_lambda", "parse_staleness"), "staleness"),
    **dict.fromkeys(("ErrorFeedback", "SparseMessage", "kept", "message_bytes", "top_k_two_bit"), "sparse_loco"),
    **dict.fromkeys(("SwarmStepScale", "effective_models"), "step_scale"),
    "stochastic_round_bf16": "stochastic_round",
    **dict.fromkeys(("DiLoCoOuter", "allreduce_mean", "allreduce_step"), "sync"),
}
"""Each public name and the module of this package defining it, imported when first asked for
(PEP 562): the staleness policies are plain Python, and the CLI reads their table
(`staleness.grammar`) without importing torch."""


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AdaptiveRadius",
    "Compressor",
    "Constant",
    "DiLoCoOuter",
    "ErrorFeedback",
    "difference",
    "Exponential",
    "Hinge",
    "NeighbourCopy",
    "NeighbourRadius",
    "PipeMare",
    "Polynomial",
    "PublicCopy",
    "StalenessPolicy",
    "SparseMessage",
    "StalenessSchedule",
    "SwarmStepScale",
    "allreduce_mean",
    "allreduce_step",
    "clip",
    "consensus_distance",
    "effective_models",
    "mix_delta",
    "mix_delta_of_copies",
    "MixChange",
    "mix_diffs",
    "mix_step",
    "pair_lambda",
    "pull_scale",
    "safe_distances", "safe_norm",
    "stochastic_round_bf16",
    "parse_staleness",
    "top_k_two_bit",
    "kept",
    "message_bytes",
]
