"""The mathematics of the swarm: staleness weights, public copies, mixing, synchronous baselines.

Pure torch functions and small state objects; no I/O, no clocks, no global randomness.
Sources: CHOCO-SGD (Koloskova et al. 2019), AD-PSGD (Lian et al. 2018), PipeMare
(Yang et al. 2021), FedAsync (Xie et al. 2019), ClippedGossip (He, Karimireddy & Jaggi
2022), DiLoCo (Douillard et al. 2023), linear step-size scaling (Goyal et al. 2017).
"""

from .mixing import (AdaptiveRadius, NeighbourRadius, clip, consensus_distance, difference, mix_delta,
                     mix_delta_of_copies, mix_diffs, mix_step, pull_scale, safe_distances, safe_norm)
from .public_copy import Compressor, NeighbourCopy, PublicCopy
from .staleness import (
    Constant,
    Exponential,
    Hinge,
    PipeMare,
    Polynomial,
    StalenessPolicy,
    StalenessSchedule,
    pair_lambda,
    parse_staleness,
)
from .step_scale import SwarmStepScale, effective_models
from .sync import DiLoCoOuter, allreduce_mean, allreduce_step

__all__ = [
    "AdaptiveRadius",
    "Compressor",
    "Constant",
    "DiLoCoOuter",
    "difference",
    "Exponential",
    "Hinge",
    "NeighbourCopy",
    "NeighbourRadius",
    "PipeMare",
    "Polynomial",
    "PublicCopy",
    "StalenessPolicy",
    "StalenessSchedule",
    "SwarmStepScale",
    "allreduce_mean",
    "allreduce_step",
    "clip",
    "consensus_distance",
    "effective_models",
    "mix_delta",
    "mix_delta_of_copies",
    "mix_diffs",
    "mix_step",
    "pair_lambda",
    "pull_scale",
    "safe_distances", "safe_norm",
    "parse_staleness",
]
