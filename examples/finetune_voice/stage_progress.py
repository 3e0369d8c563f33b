"""Progress for the example's stages: an estimate before each starts, a line every few seconds.

A stage that prints nothing for minutes looks hung; one that says up front "about 4 min"
and then "step 40/150, ~2 min left" does not. Estimates start from seconds per unit of work
measured on the reference machine; once a stage has run, later ones are scaled by how much
slower or faster this machine was than the reference so far (a CPU score taken before any
work misjudges a shared machine whose load comes and goes), and a line says the time to the
end re-estimated so: an opening estimate cannot know the load to come, the lines after it can
follow it.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

REFERENCE_SECONDS = {
    ("tiny", "base_step"): 0.12, ("tiny", "finetune_step"): 1.4, ("tiny", "synth_step"): 0.6, ("tiny", "eval"): 12.0,
    ("small", "base_step"): 1.1, ("small", "finetune_step"): 7.0, ("small", "synth_step"): 2.0, ("small", "eval"): 20.0,
    ("any", "pack_clip"): 0.2, ("any", "process"): 5.0, ("any", "speak_clip"): 5.0,
    ("any", "hear_clip"): 24.0,
}
"""Seconds on the reference machine (2 AMD EPYC cores, load average 8-9, the example run under
`nice -n 10`, torch 2.13 CPU): one base step (batch 8, the built-in corpus's short clips), one
fine-tuning step of two peers side by side on whole voice clips, one sampler step, one eval
(process included), one clip packed, one start of a gossip-tts process (importing torch), one
held-out sentence spoken for the judge (the checkpoint loaded; its sampler steps counted apart),
one clip heard by the judge's three listeners (their loading spread over the clips)."""

LAST_PACE_WEIGHT_S = 60.0
"""Reference seconds the last run's pace counts for beside this run's finished stages: it sets the
opening estimate, and this run's own measurements outweigh it once its first stages are done."""

STEP_RE = re.compile(r"step (\d+) loss ([0-9.]+)")
EVERY_S = 5.0


class Estimator:
    """Seconds a stage should take here: the reference table times this machine's pace so far."""

    def __init__(self, preset: str, last_pace: float | None = None) -> None:
        self.preset = preset
        self.last_pace = last_pace
        """This machine's pace in its last run (real over reference seconds), if one was kept."""
        self._said = 0.0  # reference seconds of the stages finished
        self._took = 0.0  # their real seconds

    @property
    def slowdown(self) -> float:
        """Real over reference seconds: this run's finished stages, beside the last run's pace."""
        said, took = self._said, self._took
        if self.last_pace is not None:
            said, took = said + LAST_PACE_WEIGHT_S, took + LAST_PACE_WEIGHT_S * self.last_pace
        return took / said if said > 0 and took > 0 else 1.0

    @property
    def measured(self) -> float | None:
        """Real over reference seconds of this run's finished stages alone (None before the first)."""
        return self._took / self._said if self._said > 0 and self._took > 0 else None

    def reference(self, kind: str, count: float) -> float:
        per = REFERENCE_SECONDS.get((self.preset, kind)) or REFERENCE_SECONDS.get(("any", kind))
        return (per if per is not None else REFERENCE_SECONDS[("small", kind)]) * count

    def finished(self, reference_s: float, took_s: float) -> None:
        """A stage estimated at `reference_s` on the reference machine took `took_s` here."""
        self._said += reference_s
        self._took += took_s

    def to_the_end(self, planned: dict[str, float], after: str | None) -> float:
        """Seconds the stages after `after` (all of them for None) should take at this run's pace so far."""
        names = list(planned)
        later = names if after is None else names[names.index(after) + 1 :]
        return sum(planned[name] for name in later) * self.slowdown

    def eta(self, planned: dict[str, float], after: str, elapsed_s: float) -> str:
        """The line after a stage: the time to the end, re-estimated from the pace measured so far."""
        left = self.to_the_end(planned, after)
        return (f"      ~{minutes(left)} to the end, ~{minutes(elapsed_s + left)} in all (the rest of the plan at "
                f"{self.slowdown:.2f}x the reference pace, as measured so far)")


def _paces(path: Path) -> dict:
    try:
        kept = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def read_last_pace(path: Path, preset: str) -> float | None:
    """The pace `save_pace` kept for this preset, or None (no file, another layout, another preset)."""
    pace = _paces(path).get(preset)
    return float(pace) if isinstance(pace, (int, float)) and pace > 0 else None


def save_pace(path: Path, preset: str, pace: float) -> None:
    """Keep this run's pace for the next run's opening estimate (one number per preset)."""
    kept = _paces(path)
    kept[preset] = round(pace, 3)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(kept, sort_keys=True) + "\n", encoding="utf-8")


def plan_stages(est: Estimator, *, clips: int, peers: int, base_steps: int, steps: int, synth_steps: int,
                spoken_clips: int, heard_clips: int) -> dict[str, float]:
    """Reference seconds of each stage, in the order they run; a stage that will not run (a given
    base: base_steps 0; no judge extra: no clips spoken or heard) plans 0, so the total promises
    only what the run will do."""
    return {
        "pack": est.reference("pack_clip", clips) + est.reference("process", peers + 1),
        "base": est.reference("base_step", base_steps) + est.reference("process", 1) if base_steps else 0.0,
        "fine-tune": est.reference("finetune_step", steps) + est.reference("process", peers + 1),
        "eval+sample": est.reference("eval", peers + 1) + est.reference("synth_step", synth_steps)
        + est.reference("process", 1),
        "judge": plan_judge(est, synth_steps, spoken_clips, heard_clips),
    }


def plan_judge(est: Estimator, synth_steps: int, spoken_clips: int, heard_clips: int) -> float:
    """Reference seconds of the judge: each clip spoken (its sampler steps apart), each clip heard."""
    return (est.reference("speak_clip", spoken_clips) + est.reference("synth_step", synth_steps * spoken_clips)
            + est.reference("hear_clip", heard_clips))


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def last_step(log: Path) -> tuple[int, float | None]:
    """The newest `step N loss X` of a peer's log (0, None before the first)."""
    found = STEP_RE.findall(log.read_text(errors="replace")) if log.exists() else []
    return (int(found[-1][0]), float(found[-1][1])) if found else (0, None)


def follow(procs: list[subprocess.Popen], logs: list[Path], total_steps: int, label: str,
           after_s: float = 0.0) -> list[int]:
    """Wait for every process, printing each one's step and loss, and the time left at the pace
    since the first step (start-up excluded), every EVERY_S; `after_s` (the later stages' estimate)
    adds the time to the end."""
    start = time.monotonic()
    next_line = start + EVERY_S
    first: tuple[float, int] | None = None
    while any(p.poll() is None for p in procs):
        time.sleep(0.2)
        if time.monotonic() < next_line:
            continue
        next_line += EVERY_S
        steps = [last_step(log) for log in logs]
        done, now = min(s for s, _ in steps), time.monotonic()
        if first is None and done > 0:
            first = (now, done)
        pace = (now - first[0]) / (done - first[1]) if first and done > first[1] else None
        left = (f", ~{minutes(pace * (total_steps - done))} left, ~{minutes(pace * (total_steps - done) + after_s)} "
                "to the end") if pace else ""
        parts = ", ".join(f"step {s}/{total_steps}" + (f" loss {loss:.3f}" if loss is not None else "")
                          for s, loss in steps)
        print(f"      {label}: {parts} ({minutes(now - start)}{left})", flush=True)
    return [p.returncode for p in procs]
