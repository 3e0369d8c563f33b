"""Typed, validated configuration of a simulation: the world each run sees, and the runs.

A scenario is a base world plus a list of runs; each run names a method (gossip, allreduce,
diloco, sparseloco, noloco) and may override any part of the world (`set`), e.g.
`gossip.clip = false` for a control arm. Every run's world is resolved and validated when the config is built, so
a typo fails before minutes of simulation, with the offending key named.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from simnet.attacks.trainer import AttackConfig
from simnet.world.churn import ChurnConfig
from simnet.world.cost import CostConfig
from simnet.world.data_config import DataConfig
from simnet.world.links import LinkConfig, PartitionConfig
from simnet.world.speed import SpeedConfig
from simnet.world.topology import TopologyConfig

METHODS = ("gossip", "allreduce", "diloco", "sparseloco", "noloco")
BOOTSTRAPS = ("topology", "one", "first")
GOSSIP_DEFAULTS = {"outbox_bytes": 4 * 2**20, "outbox_copies": float("inf"), "gossip_every": 1}
"""simnet keeps hundreds of peers in one process: a smaller outbox than a real peer's, bounded in
bytes alone (its models are far below where `outbox_copies` bounds a real peer's). A run that
sets no `gossip_every` publishes every step: the publish budget weighs measured seconds, and a
simulated peer's are the cost model's, not a measurement (a run may still pin its own)."""


@dataclass
class DiLoCoConfig:
    inner_steps: int = 8
    """H: local steps between outer steps."""
    outer_lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True

    def __post_init__(self) -> None:
        if self.inner_steps < 1 or not self.outer_lr > 0 or not 0 <= self.momentum < 1:
            raise ValueError("diloco needs inner_steps >= 1, outer_lr > 0, momentum in [0, 1)")


@dataclass
class SparseLoCoConfig:
    """SparseLoCo's message (Sarfi et al. 2025); its period and outer step are `diloco`'s."""

    topk: float = 0.02
    """Fraction of each pseudo-gradient's entries sent per outer step (the paper: 1–3%)."""
    ef_decay: float = 0.95
    """β of the error-feedback accumulator `a = β a + Δ` (1: classic error feedback)."""

    def __post_init__(self) -> None:
        if not 0 < self.topk <= 1 or not 0 <= self.ef_decay <= 1:
            raise ValueError("sparseloco needs topk in (0, 1] and ef_decay in [0, 1]")


@dataclass
class WorldConfig:
    n_peers: int = 8
    """Peers (processes). 1 only for `allreduce`: a single process training alone, no communication."""
    model: str = "mlp"
    """A name in simnet.world.models' registry (lsq, mlp, and whatever the CLI registered)."""
    model_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the model's factory and evaluator."""
    duration_s: float = 60.0
    """Simulated seconds a run lasts (at most)."""
    eval_every_s: float = 1.0
    """Simulated seconds between metric samples."""
    cost_warmup_s: float = 0.0
    """The simulator's cost per peer-step (timing.json) counts only the simulated time after
    this: when every peer starts at once, discovery is a one-off burst of hellos whose size
    grows with the table (each peer verifies up to `max_peers` others), not a running cost."""
    eval_peers: int = 16
    """Honest peers whose loss is evaluated per sample (a fixed random subset)."""
    target_loss: float | None = None
    """Time-to-target is the first sample whose mean loss is at or below this."""
    stop_at_target: bool = False
    """End a run once it has reached the target and run `tail_fraction` longer."""
    tail_fraction: float = 0.25
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    links: LinkConfig = field(default_factory=LinkConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    partitions: list[PartitionConfig] = field(default_factory=list)
    gossip: dict[str, Any] = field(default_factory=dict)
    """GossipConfig fields (compression, staleness, gossip_every, clip, ...)."""
    session: dict[str, Any] = field(default_factory=dict)
    """SessionConfig fields (request_timeout_s, max_in_flight, hello_every_s, ...): the
    same timeouts and cadences as a real peer's unless a scenario changes them."""
    bootstrap: str = "topology"
    """What each peer is told at start: `topology` (its topology neighbours, as mDNS on a
    LAN would say), `one` (a single random address) or `first` (peer 0's, as every user
    given the first peer's `--peer`); the rest comes by peer exchange."""
    cost: CostConfig = field(default_factory=CostConfig)
    churn: ChurnConfig = field(default_factory=ChurnConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    diloco: DiLoCoConfig = field(default_factory=DiLoCoConfig)
    """The period and outer step of diloco, sparseloco and noloco."""
    sparseloco: SparseLoCoConfig = field(default_factory=SparseLoCoConfig)
    data: DataConfig = field(default_factory=DataConfig)
    """A corpus the peers fetch from each other before they train (`shards = 0`: none)."""

    def __post_init__(self) -> None:
        if self.n_peers < 1:
            raise ValueError(f"n_peers must be >= 1, got {self.n_peers}")
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)) or not self.eval_every_s > 0:
            raise ValueError("duration_s and eval_every_s must be > 0")
        if not 0 <= self.cost_warmup_s < self.duration_s:
            raise ValueError(f"cost_warmup_s must be in [0, duration_s), got {self.cost_warmup_s}")
        if self.eval_peers < 1 or self.tail_fraction < 0:
            raise ValueError("eval_peers must be >= 1 and tail_fraction >= 0")
        if self.stop_at_target and self.target_loss is None:
            raise ValueError("stop_at_target needs a target_loss")
        bad = {"swarm", "allowed_keys"} & set(self.gossip)
        if bad:
            raise ValueError(f"gossip.{sorted(bad)[0]} is set by simnet itself")
        self.gossip_config()  # validates the fields and specs
        self.session_config()
        if self.bootstrap not in BOOTSTRAPS:
            raise ValueError(f"bootstrap must be one of {BOOTSTRAPS}, got {self.bootstrap!r}")
        if self.data.shards:
            if self.churn.mode != "none" or self.attack.kind != "none":
                raise ValueError("data: simnet models fetching a corpus without churn or attackers")
            if not all(0 <= i < self.n_peers for i in self.data.holders):
                raise ValueError(f"data.holders must be peer indices below n_peers = {self.n_peers}, got {self.data.holders}")

    def gossip_config(self) -> GossipConfig:
        known = {f.name for f in dataclasses.fields(GossipConfig)}
        unknown = set(self.gossip) - known
        if unknown:
            allowed = sorted(known - {"swarm", "allowed_keys"})
            raise ValueError(f"unknown gossip setting(s) {sorted(unknown)}; known: {allowed}")
        return GossipConfig(swarm="simnet", **{**GOSSIP_DEFAULTS, **self.gossip})

    def session_config(self) -> SessionConfig:
        known = {f.name for f in dataclasses.fields(SessionConfig)}
        unknown = set(self.session) - known - {"join"}
        if unknown or "join" in self.session:
            raise ValueError(f"unknown session setting(s) {sorted(unknown | ({'join'} & set(self.session)))}; "
                             f"known: {sorted(known - {'join'})} (joining is churn.fetch_state)")
        defaults, values = SessionConfig(), {}
        for name, value in self.session.items():  # a nested section (`partners`, `candidates`) is a table
            nested = getattr(defaults, name)
            if dataclasses.is_dataclass(nested) and isinstance(value, dict):
                fields = {f.name for f in dataclasses.fields(nested)}
                if unknown := sorted(set(value) - fields):
                    raise ValueError(f"unknown session.{name} setting(s) {unknown}; known: {sorted(fields)}")
                value = dataclasses.replace(nested, **value)
            values[name] = value
        return SessionConfig(**values)


@dataclass
class RunSpec:
    name: str
    method: str = "gossip"
    set: dict[str, Any] = field(default_factory=dict)
    """Overrides of the base world for this run (nested tables merge)."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"run name must be letters, digits, '-' or '_', got {self.name!r}")
        if self.method not in METHODS:
            raise ValueError(f"run {self.name!r}: method must be one of {METHODS}, got {self.method!r}")


@dataclass
class SimConfig:
    name: str
    runs: list[RunSpec]
    base: dict[str, Any] = field(default_factory=dict)
    """The world shared by all runs, as a (TOML) table; see WorldConfig."""
    description: str = ""
    compare: list[list[str]] = field(default_factory=list)
    """Pairs [a, b] of run names whose time-to-target and final-loss ratios a/b are reported."""
    seed: int = 0
    out_dir: Path | None = None
    """Where metrics.jsonl, summary.json and the plots go (None: nowhere)."""
    plots: bool = True
    progress_every_s: float = 3.0
    """Real seconds between progress lines on stderr."""
    max_real_s: float | None = None
    """Cut a run short after this many real seconds (None: no limit)."""
    worlds: dict[str, WorldConfig] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError(f"scenario {self.name!r} has no runs")
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names):
            raise ValueError(f"scenario {self.name!r}: run names must be unique, got {names}")
        for pair in self.compare:
            if len(pair) != 2 or not set(pair) <= set(names):
                raise ValueError(f"compare entry {pair!r} must name two runs of {names}")
        if self.progress_every_s <= 0 or (self.max_real_s is not None and self.max_real_s <= 0):
            raise ValueError("progress_every_s and max_real_s must be > 0")
        if self.out_dir is not None:
            self.out_dir = Path(self.out_dir)
        self.worlds = {}
        for run in self.runs:
            world = world_from_dict(merge(self.base, run.set), where=f"run {run.name!r}")
            if world.n_peers < 2 and run.method != "allreduce":
                raise ValueError(f"run {run.name!r}: n_peers = 1 (a single process) is an allreduce run; "
                                 f"{run.method} needs at least 2 peers")
            if run.method != "gossip" and (world.churn.mode != "none" or world.attack.kind != "none" or world.data.shards):
                raise ValueError(f"run {run.name!r}: the synchronous baselines model neither churn, attacks nor data")
            self.worlds[run.name] = world


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` merged in: tables merge key by key, anything else is replaced."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


_NESTED = {"speed": SpeedConfig, "links": LinkConfig, "topology": TopologyConfig, "churn": ChurnConfig,
           "attack": AttackConfig, "diloco": DiLoCoConfig, "sparseloco": SparseLoCoConfig, "cost": CostConfig, "data": DataConfig}


def build(cls: type, data: Any, where: str) -> Any:
    """Instantiate dataclass `cls` from a table, naming unknown keys and bad values."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a table, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def world_from_dict(data: dict[str, Any], where: str = "world") -> WorldConfig:
    data = dict(data)
    for key, cls in _NESTED.items():
        if key in data:
            data[key] = build(cls, data[key], f"{where}: [{key}]")
    if "partitions" in data:
        parts = data["partitions"]
        if not isinstance(parts, list):
            raise ValueError(f"{where}: partitions must be an array of tables")
        data["partitions"] = [build(PartitionConfig, p, f"{where}: [[partitions]]") for p in parts]
    return build(WorldConfig, data, where)
