"""The judge's output: a per-clip table, a table of every set's overall figures, a plot, and
the last line `judge: {json}` that scripts read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from .score import SetScore

_COLUMNS = ("wer", "cer", "similarity", "dnsmos")
_HEARD_WIDTH = 60


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _printable(text: str) -> str:
    """What the ASR heard, reduced to printable ASCII and cut to a table cell."""
    clean = "".join(ch if " " <= ch <= "~" else "?" for ch in text)
    return clean if len(clean) <= _HEARD_WIDTH else clean[: _HEARD_WIDTH - 3] + "..."


def clip_table(scores: SetScore) -> list[str]:
    rows = [f"{'clip':<16} {'wer':>6} {'cer':>6} {'sim':>6} {'dnsmos':>6}  heard"]
    for c in scores.clips:
        rows.append(f"{c.key:<16} {c.words.rate:>6.3f} {c.chars.rate:>6.3f} {_figure(c.similarity):>6} "
                    f"{c.dnsmos:>6.3f}  {_printable(c.heard)}")
    return rows


def overall_table(sets: list[SetScore]) -> list[str]:
    width = max(12, *(len(s.name) for s in sets))
    rows = [f"{'set':<{width}} {'clips':>5} " + " ".join(f"{col:>10}" for col in _COLUMNS)]
    for s in sets:
        rows.append(f"{s.name:<{width}} {len(s.clips):>5} {s.wer:>10.3f} {s.cer:>10.3f} "
                    f"{_figure(s.similarity):>10} {s.dnsmos:>10.3f}")
    return rows


def json_line(judged: SetScore, controls: list[SetScore]) -> str:
    """`judge: {...}`: the judged set's overall figures, and each control's under "controls"."""
    doc: dict = dict(judged.overall())
    doc["controls"] = {s.name: s.overall() for s in controls}
    return "judge: " + json.dumps(doc, sort_keys=True)


def write_plot(sets: list[SetScore], path: Path, emit: Callable[[str], None]) -> Path | None:
    """One panel per figure, one bar per set; skipped with a message without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        emit("matplotlib is not installed: no plot (pip install 'gossip-tts[plot]')")
        return None
    fig, axes = plt.subplots(1, len(_COLUMNS), figsize=(3.2 * len(_COLUMNS), 3.4))
    names = [s.name for s in sets]
    limits = {"wer": (0, None), "cer": (0, None), "similarity": (0, 1), "dnsmos": (1, 5)}
    for ax, col in zip(axes, _COLUMNS):
        values = [s.overall()[col] for s in sets]
        ax.bar(range(len(sets)), [0.0 if v is None else v for v in values],
               color=["#4c72b0"] + ["#a0a0a0"] * (len(sets) - 1))
        ax.set_xticks(range(len(sets)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(col + (" (lower is better)" if col in ("wer", "cer") else ""), fontsize=9)
        ax.set_ylim(*limits[col])
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
