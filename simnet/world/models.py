"""The model registry: what each simulated peer trains.

simnet never imports the TTS application; the CLI layer registers its models here
(`gossip_tts.apps.simnet_models` adds "tts-tiny"). A factory builds peer i's Trainer as
`factory(peer_index, n_peers, seed, **model_args)` (any `Trainer`; a joiner judges an offered state with its `probe_better` where its capabilities declare one); every peer must start from the same initial parameters. An optional evaluator, `evaluator(n_peers, seed, **model_args)`,
returns a function scoring any flat parameter vector on data shared by the whole swarm;
without one, simnet reports each peer's recent training loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer, make_shard
from peer.trainer import Trainer
from simnet.world.mlp_trainer import MLPConfig, MLPEvaluator, MLPTrainer



Factory = Callable[..., Trainer]
Evaluator = Callable[[torch.Tensor], float]


@dataclass(frozen=True)
class ModelEntry:
    factory: Factory
    evaluator: Callable[..., Evaluator] | None = None


_REGISTRY: dict[str, ModelEntry] = {}


def register_model(name: str, factory: Factory, evaluator: Callable[..., Evaluator] | None = None) -> None:
    """Make `name` available to scenarios (re-registering a name replaces it)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    _REGISTRY[name] = ModelEntry(factory, evaluator)


def get_model(name: str) -> ModelEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = " (the CLI registers 'tts-tiny' by importing gossip_tts.apps.simnet_models)" if name.startswith("tts") else ""
        raise ValueError(f"unknown model {name!r}; registered: {sorted(_REGISTRY)}{hint}") from None


def registered() -> list[str]:
    return sorted(_REGISTRY)


# --- built-in models ----------------------------------------------------------------------
def _lsq_config(peer_index: int, n_peers: int, seed: int, **kw: Any) -> LeastSquaresConfig:
    kw.setdefault("problem_seed", seed)
    return LeastSquaresConfig(shard=peer_index, n_shards=n_peers, seed=seed * 100_003 + peer_index, **kw)


def lsq_factory(peer_index: int, n_peers: int, seed: int, **kw: Any) -> Trainer:
    """Least squares over heterogeneous shards: each peer's optimum is shifted."""
    return LeastSquaresTrainer(_lsq_config(peer_index, n_peers, seed, **kw))


def lsq_evaluator(n_peers: int, seed: int, **kw: Any) -> Evaluator:
    """The global objective: the mean of every shard's loss."""
    cfg = _lsq_config(0, n_peers, seed, **kw)
    parts = [make_shard(cfg, s) for s in range(n_peers)]
    a = torch.cat([p[0] for p in parts])
    b = torch.cat([p[1] for p in parts])
    return lambda w: 0.5 * float(((a @ w - b) ** 2).mean())


def _mlp_config(peer_index: int, n_peers: int, seed: int, **kw: Any) -> MLPConfig:
    kw.setdefault("problem_seed", seed)
    kw.setdefault("n_shards", n_peers)  # more: a single process given several peers' shards (held_shards)
    return MLPConfig(shard=peer_index, seed=seed, **kw)


def mlp_factory(peer_index: int, n_peers: int, seed: int, **kw: Any) -> Trainer:
    """A two-layer MLP learning a shared teacher from input-shifted shards."""
    return MLPTrainer(_mlp_config(peer_index, n_peers, seed, **kw))


def mlp_evaluator(n_peers: int, seed: int, **kw: Any) -> Evaluator:
    return MLPEvaluator(_mlp_config(0, n_peers, seed, **kw))


register_model("lsq", lsq_factory, lsq_evaluator)
register_model("mlp", mlp_factory, mlp_evaluator)
