"""PNG plots of a scenario (matplotlib, Agg backend): loss vs simulated time, consensus
distance, bytes sent per peer, staleness of mixed updates. Small on purpose (< 100 KB)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from simnet.runs.runner import RunRecord

FIGSIZE = (6.0, 3.6)
DPI = 80


def write_plots(out_dir: Path, scenario: str, records: list[RunRecord], emit: Callable[[str], None]) -> list[Path]:
    """Write the plots; returns their paths (none, with a message, if matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        emit("matplotlib is not installed: skipping plots (pip install 'gossip-tts[plot]')")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    ylims: dict[str, tuple[float, float]] = {}  # a figure's y range where a drawing chose one

    def series(rec: RunRecord, key: str, scale: float = 1.0) -> tuple[list[float], list[float]]:
        pts = [(r["t"], r[key] * scale) for r in rec.rows if r.get(key) is not None and math.isfinite(r[key])]
        return [p[0] for p in pts], [p[1] for p in pts]

    def figure(name: str, title: str, ylabel: str, draw: Callable, logy: bool = False) -> None:
        fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
        drew = draw(ax)
        limits = ylims.get(name)
        ax.set_title(f"{scenario}: {title}", fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if logy and drew:
            ax.set_yscale("log")
        if limits is not None:
            ax.set_ylim(*limits)
        if logy and drew and name == "loss":  # losses span less than a decade: plain numbers read better
            from matplotlib.ticker import FormatStrFormatter

            ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
            ax.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
        if drew:
            ax.legend(fontsize=7, frameon=False)
        fig.tight_layout()
        path = out_dir / f"{scenario}_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)

    def loss(ax) -> bool:
        target = None
        starts = [r.rows[0]["loss"] for r in records if r.rows and r.rows[0]["loss"] is not None]
        top = 3 * max((x for x in starts if math.isfinite(x)), default=math.inf)
        off_chart, low = False, math.inf
        for rec in records:
            t, y = series(rec, "loss")
            blew_up = any(v > top for v in y) or bool(rec.rows) and rec.rows[-1]["loss"] == math.inf
            off_chart |= blew_up
            low = min([low] + y)
            ax.plot(t, y, lw=1.2, label=rec.name + (" (diverged: off the chart)" if blew_up else ""))
            target = rec.world.target_loss if rec.world.target_loss is not None else target
        if off_chart and math.isfinite(top) and math.isfinite(low):
            ylims["loss"] = (0.9 * low, top)
        if target is not None:
            ax.axhline(target, color="k", ls="--", lw=0.8, label="target")
        ax.set_xlabel("simulated wall-clock (s)", fontsize=9)
        return bool(records)

    def consensus(ax) -> bool:
        drew = False
        for rec in records:
            if rec.method == "gossip":
                t, y = series(rec, "consensus")
                pts = [(a, b) for a, b in zip(t, y) if b > 0]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, label=rec.name)
                    drew = True
        ax.set_xlabel("simulated wall-clock (s)", fontsize=9)
        return drew

    def traffic(ax) -> bool:
        for rec in records:
            t, y = series(rec, "bytes_per_peer", 1e-6)
            ax.plot(t, y, lw=1.2, label=rec.name)
        ax.set_xlabel("simulated wall-clock (s)", fontsize=9)
        return bool(records)

    def staleness(ax) -> bool:
        drew = False
        for rec in records:
            if rec.method == "gossip" and rec.staleness:
                top = max(1.0, quantile_99(rec.staleness))
                ax.hist([min(s, top) for s in rec.staleness], bins=40, histtype="step", lw=1.2, label=rec.name)
                drew = True
        ax.set_xlabel("staleness of mixed copies (local steps)", fontsize=9)
        return drew

    figure("loss", "loss vs simulated time", "loss", loss, logy=True)
    figure("consensus", "consensus distance (honest peers)", "mean squared distance", consensus, logy=True)
    figure("bytes", "bytes sent per peer", "MB", traffic)
    figure("staleness", "staleness histogram", "mixes", staleness)
    return paths


def quantile_99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]
