"""What `gossip-tts simnet` runs: load a scenario, override seed and output folder, simulate.

The click command only builds a `SimnetAppConfig` and calls `run`; models that live in
the application (tts-tiny) are registered by importing `gossip_tts.apps.simnet_models` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SimnetAppConfig:
    scenario: str = "stragglers"
    """A built-in scenario name (stragglers, wan, churn, byzantine, scale, bootstrap, data, tts) or a TOML file."""
    seed: int = 0
    """Seeds everything: identities, data, speeds, links, churn, attackers."""
    out: Path | None = None
    """Folder for metrics.jsonl, summary.json, timing.json and the PNG plots (None: print only)."""
    plots: bool = True
    max_real_s: float | None = None
    """Cut each run short after this many real seconds."""
    progress_every_s: float = 3.0

    def __post_init__(self) -> None:
        if not self.scenario:
            raise ValueError("scenario must be a built-in name or a .toml file")
        if self.out is not None:
            self.out = Path(self.out)
        if self.max_real_s is not None and self.max_real_s <= 0:
            raise ValueError(f"max_real_s must be > 0, got {self.max_real_s}")
        if self.progress_every_s <= 0:
            raise ValueError(f"progress_every_s must be > 0, got {self.progress_every_s}")


def run(cfg: SimnetAppConfig) -> dict:
    """Simulate the scenario; prints the table and the `summary:` line, returns the summary dict."""
    from simnet.runs.scenario import load_scenario  # here, not at the top: it imports torch, and
    from simnet.runs.sim import run as run_scenario  # `simnet --help` reads this module's defaults

    sim_cfg = load_scenario(
        cfg.scenario, seed=cfg.seed, out_dir=cfg.out, plots=cfg.plots, max_real_s=cfg.max_real_s,
        progress_every_s=cfg.progress_every_s,
    )
    return run_scenario(sim_cfg)
