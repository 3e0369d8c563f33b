"""The mathematics of the swarm: staleness weights, public copies, mixing, robust merge.

Pure torch functions and small state objects; no I/O, no clocks, no global randomness.
Sources: CHOCO-SGD (Koloskova et al. 2019), AD-PSGD (Lian et al. 2018), PipeMare
(Yang et al. 2021), FedAsync (Xie et al. 2019), ClippedGossip (He, Karimireddy & Jaggi
2022), coordinate-wise median and trimmed mean (Yin et al. 2018), Zeno (Xie et al. 2019),
DiLoCo (Douillard et al. 2023).
"""

from .config import MixConfig
from .mixing import AdaptiveRadius, clip, consensus_distance, mix_step, predict_weights
from .public_copy import Compressor, NeighbourCopy, PublicCopy
from .robust import ProbeAudit, coordinate_median, probe_audit, trimmed_mean
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
from .sync import DiLoCoOuter, allreduce_mean, allreduce_step

__all__ = [
    "AdaptiveRadius",
    "Compressor",
    "Constant",
    "DiLoCoOuter",
    "Exponential",
    "Hinge",
    "MixConfig",
    "NeighbourCopy",
    "PipeMare",
    "Polynomial",
    "ProbeAudit",
    "PublicCopy",
    "StalenessPolicy",
    "StalenessSchedule",
    "allreduce_mean",
    "allreduce_step",
    "clip",
    "consensus_distance",
    "coordinate_median",
    "mix_step",
    "pair_lambda",
    "parse_staleness",
    "predict_weights",
    "probe_audit",
    "trimmed_mean",
]
