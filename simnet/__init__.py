"""simnet: many real gossip peers in one process over simulated links, deterministic from a seed.

Every peer runs the real peer core (`peer.core`: session, gossip node, neighbour table,
mixer; real signed frames, real codecs) through simnet's virtual-clock driver
(`simnet.driver.sim_peer`); simnet only supplies what a process and a network would: a virtual
clock, links with latency, bandwidth, loss and partitions, a speed model for compute, a
cost model for protocol work, churn, and Byzantine trainers. The synchronous
baselines (all-reduce, DiLoCo) run over the same speed model and links.

    from simnet import load_scenario, run
    summary = run(load_scenario("stragglers", seed=0, out_dir="out/"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_names

if TYPE_CHECKING:
    from simnet.runs.config import RunSpec, SimConfig, WorldConfig
    from simnet.runs.scenario import builtin_scenarios, load_scenario
    from simnet.runs.sim import run
    from simnet.world.models import register_model

_HOME = {
    **dict.fromkeys(("RunSpec", "SimConfig", "WorldConfig"), "simnet.runs.config"),
    **dict.fromkeys(("builtin_scenarios", "load_scenario"), "simnet.runs.scenario"),
    "run": "simnet.runs.sim", "register_model": "simnet.world.models",
}
"""Each public name and the module that defines it, imported when first asked for: the
`gossip-tts simnet --help` reads `simnet.runs.cli_app`'s defaults without importing torch."""

__all__ = list(_HOME)

__getattr__ = lazy_names(__name__, _HOME)
