"""`run(SimConfig)`: simulate every run, then report (table, summary line, JSONL, plots)."""

from __future__ import annotations

from typing import Callable

from simnet.runs.config import SimConfig
from simnet.runs.plots import write_plots
from simnet.runs.report import build_summary, build_timing, clean, dumps, table, write_outputs
from simnet.runs.runner import run_records, stderr


def run(cfg: SimConfig, *, emit: Callable[[str], None] = stderr, echo: Callable[[str], None] = print) -> dict:
    """Run the scenario; returns the summary (what the seed determines) with a `timing` key added.

    Progress goes to `emit` (stderr); the table and the final `summary: {...}` line go to
    `echo` (stdout). Ctrl+C stops early: what ran so far is still reported and written.
    """
    records, interrupted = run_records(cfg, emit)
    summary = build_summary(cfg, records, interrupted)
    timing = build_timing(cfg, records)
    if cfg.out_dir is not None:
        write_outputs(cfg.out_dir, records, summary, timing)
        if cfg.plots:
            for path in write_plots(cfg.out_dir, cfg.name, records, emit):
                emit(f"wrote {path}")
    echo(table(summary, timing))
    echo(f"timing: {dumps(timing)}")
    echo(f"summary: {dumps(summary)}")
    return {**clean(summary), "timing": clean(timing)}
