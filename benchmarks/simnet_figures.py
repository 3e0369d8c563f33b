"""How a headline figure of `simnet_seeds.py` is read from one seed's summary, and whether it holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Figure:
    """One headline figure: how to read it from a seed's results, and its target if any."""

    name: str
    read: Callable[[dict, dict], float | None]
    """(summary, timing) -> value; None when the seed's results do not define it."""
    op: str | None = None
    """'<=', '>=' or '>': the value must be at or below / at or above / above `limit`."""
    limit: float | None = None

    def holds(self, value: float | None) -> bool | None:
        if self.op is None or self.limit is None:
            return None
        if value is None or math.isnan(value):
            return False
        if self.op == "<=":
            return value <= self.limit
        return value >= self.limit if self.op == ">=" else value > self.limit


def final_ratio(a: str, b: str, of: str = "final_loss") -> Callable[[dict, dict], float | None]:
    """summary `of` of run a (its `final_loss`, or `final_loss_of_mean`: its peers' mean model's)
    over run b's final_loss; infinite when run a diverged and b did not."""
    def read(summary: dict, _timing: dict) -> float | None:
        fa, fb = summary["runs"][a].get(of), summary["runs"][b]["final_loss"]
        if fa is None or fb is None or not math.isfinite(fb) or fb == 0:
            return None
        return math.inf if not math.isfinite(fa) else fa / fb
    return read


def worst_ratio(runs: tuple[str, ...], b: str) -> Callable[[dict, dict], float | None]:
    """The largest final_ratio(a, b) over `runs` (those present): the worst of several attacks
    against one control."""
    def read(summary: dict, timing: dict) -> float | None:
        ratios = [final_ratio(a, b)(summary, timing) for a in runs if a in summary["runs"]]
        known = [r for r in ratios if r is not None]
        return max(known) if known else None
    return read


def mean_model_ratio(a: str, b: str) -> Callable[[dict, dict], float | None]:
    """Run a's peers' mean model against run b: above final_ratio(a, b) by nothing when the peers
    agree, by what their disagreement costs when they do not."""
    return final_ratio(a, b, of="final_loss_of_mean")


def time_ratio(a: str, b: str) -> Callable[[dict, dict], float | None]:
    """time_to_target(a) / time_to_target(b); infinite when a never reached the target."""
    def read(summary: dict, _timing: dict) -> float | None:
        ta, tb = summary["runs"][a]["time_to_target_s"], summary["runs"][b]["time_to_target_s"]
        if tb is None or tb == 0:
            return None
        return math.inf if ta is None else ta / tb
    return read


def time_over_duration(run: str, ref: str) -> Callable[[dict, dict], float | None]:
    """time_to_target(run) / the simulated duration of run `ref`; infinite when run never reached it."""
    def read(summary: dict, _timing: dict) -> float | None:
        t, duration = summary["runs"][run]["time_to_target_s"], summary["runs"][ref]["sim_time_s"]
        if not duration:
            return None
        return math.inf if t is None else t / duration
    return read


def pair(key: str, name: str) -> Callable[[dict, dict], float | None]:
    """summary["ratios"][name][key], as build_summary computed it."""
    return lambda summary, _timing: summary["ratios"].get(name, {}).get(key)


def run_value(run: str, *path: str) -> Callable[[dict, dict], float | None]:
    """summary["runs"][run][path...]."""
    def read(summary: dict, _timing: dict) -> float | None:
        value: Any = summary["runs"][run]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return None if value is None else float(value)
    return read


def target_of(run: str) -> Callable[[dict, dict], float | None]:
    return lambda summary, _timing: summary["target_loss"].get(run)


def cost_ratio(name: str) -> Callable[[dict, dict], float | None]:
    return lambda _summary, timing: timing["cost_ratio"].get(name)


def load_average(_summary: dict, timing: dict) -> float | None:
    return timing.get("load_average")


def read_figure(fig: Figure, summary: dict, timing: dict) -> float | None:
    """A figure's value; None when it reads a run that `--runs` left out."""
    try:
        return fig.read(summary, timing)
    except KeyError:
        return None
