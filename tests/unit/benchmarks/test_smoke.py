"""Every script in benchmarks/ runs at a tiny size and exits cleanly, so a benchmark that stops
running when the code under it changes fails a test rather than the next measurement.

The scripts that train the head-to-head MLP read `vs_workloads.MLPWorkload`'s defaults (1.1M
parameters, batch 1024); here that class is swapped for one with a 16-unit hidden layer and
batch 32, so their every code path runs in about a second. Scripts that start peer processes,
download or read data from outside the repository take ten seconds or more and are marked slow
(.ci/run); a GPU script is run on its CPU-only paths. Library modules the scripts import are
covered by the scripts that use them.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.paths import REPO

BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))
import vs_workloads  # noqa: E402


@dataclasses.dataclass(frozen=True)
class TinyMLP(vs_workloads.MLPWorkload):
    hidden: int = 16
    batch_size: int = 32
    eval_samples: int = 64


# script -> (arguments, text its output must hold); run in this process
FAST: dict[str, tuple[list[str], str]] = {
    "adam_partner_gradients": (["--steps", "9", "--seeds", "0", "--every", "2"], "result: "),
    "average_sampling": (["--steps", "20", "--seeds", "0", "--checks", "10,20"], "ratio: "),
    "averaging_probe": (["--steps", "8", "--seeds", "0"], "ratio: "),
    "cadence": (["--periods", "4", "--seeds", "0", "--duration", "1", "--length", "1"], "ratio: "),
    "codec": (["--delta-source", "synthetic", "--numel", "20000", "--repeats", "1"], "summary: "),
    "device_check": (["--device", "cpu", "--presets", "tiny", "--steps", "1", "--judge-clips", "0",
                      "--budget-s", "0"], "summary: "),
    "device_gossip": (["--device", "cpu", "--sizes", "70001"], "codec parity: every frame the same bits"),
    "lockstep_peers": (["--peers", "2", "--steps", "8", "--seeds", "0", "--no-late"], "result: "),
    "offload_step": (["--preset", "tiny", "--adamw", "for-loop", "--chunk-mib", "0.25", "--repeats", "2"], "summary: "),
    "protocol_cost": (["--sizes", "1000,10000", "--repeats", "1"], "[world.cost]"),
    "protocol_digest": (["--sizes", "676", "--codecs", "int8"], "676"),
    "publish_cycle": (["--sizes", "10000", "--periods", "2", "--train-steps", "2"], "worker"),
    "scale": (["--sizes", "60000", "--held", "2", "--periods", "2"], "extrapolated (not measured)"),
    "simnet_seeds": (["--scenario", "stragglers", "--seeds", "0", "--runs", "gossip", "--world", "duration_s=4.0",
                      "--variant", "session.pulls_per_publish=1"], "ratio: "),
    "steering_fallback": (["--periods", "5"], "own_moves"),
    "step_boundary": (["--sizes", "10000", "--boundaries", "2", "--step-seconds", "0.005"], "p50"),
    "swarm_data_seed": (["--peers", "3", "--shards", "4", "--shard-mb", "1", "--seeds", "0"], "seed"),
    "train_throughput": (["--presets", "tiny", "--steps", "1", "--batch-size", "2", "--max-frames", "256",
                          "--device", "cpu", "--threads", "1"], "tiny"),
}
# further runs of a script that has more than one mode
FAST_MORE: dict[str, tuple[str, list[str], str]] = {
    "codec --selection": ("codec", ["--selection", "--selection-sizes", "20000", "--repeats", "1"], "summary: "),
    "protocol_digest --topk": ("protocol_digest", ["--topk", "1000"], "1000"),
    "averaging_probe --straggler": ("averaging_probe", ["--straggler", "--steps", "8", "--seeds", "0"], "straggler"),
    "device_check without a GPU": ("device_check", [], "no CUDA GPU here"),
    "device_gossip without a GPU": ("device_gossip", [], "no CUDA GPU here"),
}
# script -> (arguments, text its output must hold); a process of its own, slow
SLOW: dict[str, tuple[list[str], str]] = {
    "gossip_overhead": (["--preset", "tiny", "--phases", "2", "--steps-per-phase", "2", "--batch-size", "2",
                         "--max-frames", "256"], "summary: "),
    "shard_serving": (["--preset", "tiny", "--clients", "1", "--phases", "2", "--steps-per-phase", "2", "--shards", "1",
                       "--shard-mb", "1", "--batch-size", "2", "--max-frames", "256", "--client-seconds", "60"], "ratio"),
    "joiner_first_mix": (["simnet", "--seeds", "0"], "first_mix_s"),
    "peer_memory": (["--preset", "tiny", "--after-step", "2", "--alone", "2", "--gossip", "3"], "added_copies"),
    # every arm on the TTS workload: tests/integration/test_bench_head_to_head.py
    "vs_ddp": (["--peers", "2", "--budget", "3", "--evals", "1", "--plot", "", "--arms", "single,ddp,gossip,alone"],
               "ratio: "),
}
SLOW_MORE: dict[str, tuple[str, list[str], str]] = {
    "joiner_first_mix processes": ("joiner_first_mix", ["processes", "--runs", "1"], "first_mix_s"),
}
# imported by the scripts above and run through them: vs_ddp runs vs_common, vs_gossip_peer, vs_load,
# vs_report and vs_workloads; simnet_seeds runs simnet_figures and simnet_variants; codec runs codec_selection;
# lockstep_peers runs lockstep_arms
LIBRARIES = {"machine", "vs_common", "vs_gossip_peer", "vs_load", "vs_report", "vs_workloads", "simnet_figures",
             "simnet_variants", "codec_selection", "lockstep_arms", "proc_memory"}
# the two with a test of their own below
OWN = {"echo_faithful", "vs_hivemind"}
VOICE = REPO.parent / "shared" / "data" / "ljspeech-mini"


def run_here(script: str, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    """Run benchmarks/`script`.py as __main__ in this process with `argv`; its stdout."""
    monkeypatch.setattr(vs_workloads, "MLPWorkload", TinyMLP)
    monkeypatch.setattr(sys, "argv", [str(BENCH / f"{script}.py"), *argv])
    threads = torch.get_num_threads()  # several scripts pin one thread for their timings
    try:
        runpy.run_path(str(BENCH / f"{script}.py"), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), f"{script} exited {exc.code}"
    finally:
        torch.set_num_threads(threads)
    return capsys.readouterr().out


def run_process(script: str, argv: list[str], timeout: float = 400) -> str:
    out = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *argv], capture_output=True, text=True,
                         timeout=timeout, cwd=REPO)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout


def test_every_script_in_benchmarks_has_a_smoke_run():
    scripts = {p.stem for p in BENCH.glob("*.py")}
    covered = set(FAST) | set(SLOW) | LIBRARIES | OWN
    assert scripts - covered == set(), "add a smoke run for these to FAST or SLOW above (or LIBRARIES)"
    assert covered - scripts == set(), "no such script"


@pytest.mark.parametrize("run", sorted([*FAST, *FAST_MORE]))
def test_a_script_runs_at_a_tiny_size(run, monkeypatch, capsys, tmp_path):
    script, argv, expected = (run, *FAST[run]) if run in FAST else FAST_MORE[run]
    if script == "device_check":
        argv = [*argv, "--json", str(tmp_path / "report.json")] if argv else argv
        monkeypatch.delenv("OUT", raising=False)
    out = run_here(script, argv, monkeypatch, capsys)
    assert expected in out, out[-3000:]


def test_device_check_trains_a_preset_on_the_cpu():
    """The part of device_check.py that needs no GPU to run: one preset trained and timed."""
    import device_check
    from gossip_tts.data import ensure_builtin_corpus

    threads = torch.get_num_threads()
    try:
        row = device_check.train_run("tiny", [str(ensure_builtin_corpus()[0])], 1, 2, 256, device="cpu")
    finally:
        torch.set_num_threads(threads)
    assert row["losses_finite"] and row["samples_per_s"] > 0 and row["peak_mem_gib"] is None


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted([*SLOW, *SLOW_MORE]))
def test_a_script_with_processes_runs_at_a_tiny_size(run):
    script, argv, expected = (run, *SLOW[run]) if run in SLOW else SLOW_MORE[run]
    assert expected in run_process(script, argv)


@pytest.mark.slow
def test_vs_hivemind_reports_its_arms_failed_when_hivemind_cannot_be_installed(tmp_path):
    """Installing hivemind needs the network; with a venv that cannot be made, its arms must be
    reported failed, saying why, and the other arms still run (the script's own promise)."""
    out = run_process("vs_hivemind", ["--venv", "/dev/null/venv", "--peers", "2", "--budget", "3", "--evals", "1"])
    assert "FAILED" in out and "venv" in out
    ratio = json.loads(out.strip().splitlines()[-1].removeprefix("ratio: "))
    assert ratio["loss_gossip_over_alone"] is not None


@pytest.mark.slow
@pytest.mark.skipif(not VOICE.is_dir(), reason=f"echo_faithful.py measures on the voice example's data, not here: {VOICE}")
def test_echo_faithful_runs_at_a_tiny_size(tmp_path):
    out = run_process("echo_faithful", ["--voice", str(VOICE), "--seeds", "0", "--preset", "tiny", "--base-steps", "1",
                                        "--steps", "1", "--warmup-steps", "0", "--held-out", "2", "--batch-size", "2",
                                        "--synth-steps", "2", "--out", str(tmp_path)])
    assert "ratio: " in out
