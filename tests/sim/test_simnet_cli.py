"""The CLI entry point: a scenario file in, a table and a summary line out, files written;
Ctrl+C keeps what was simulated; plots are skipped with a message without matplotlib."""

import builtins
import json

import pytest

from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from simnet.runs.cli_app import SimnetAppConfig, run
from simnet.runs.plots import write_plots
from simnet.world.models import register_model

SCENARIO = """
name = "tiny"
compare = [["gossip", "allreduce"]]
[world]
n_peers = 4
model = "lsq"
duration_s = 6.0
eval_every_s = 1.0
target_loss = 40.0
[world.gossip]
gossip_every = 2
compression = "int8"
[[runs]]
name = "gossip"
[[runs]]
name = "allreduce"
method = "allreduce"
[[runs]]
name = "diloco"
method = "diloco"
"""


def test_scenario_file_to_outputs(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO)
    summary = run(SimnetAppConfig(scenario=str(path), seed=2, out=tmp_path / "out"))
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("summary: ") and out[-2].startswith("timing: ")
    printed = json.loads(out[-1][len("summary: "):])
    assert printed == {k: v for k, v in summary.items() if k != "timing"}
    assert printed["seed"] == 2 and set(printed["runs"]) == {"gossip", "allreduce", "diloco"}
    assert summary["timing"]["runs"]["gossip"]["cpu_per_peer_step_s"] > 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert {r["run"] for r in rows} == {"gossip", "allreduce", "diloco"}
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == printed
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["tiny_bytes.png", "tiny_consensus.png", "tiny_loss.png", "tiny_staleness.png"]
    assert all((tmp_path / "out" / p).stat().st_size < 100_000 for p in pngs)


class Interrupting(LeastSquaresTrainer):
    """Raises KeyboardInterrupt (as Ctrl+C would) at its 30th step."""

    def step(self):
        if self.step_count == 30:
            raise KeyboardInterrupt
        return super().step()


def test_ctrl_c_keeps_what_was_simulated(tmp_path, capsys):
    register_model("interrupting-lsq", lambda i, n, seed: Interrupting(LeastSquaresConfig(shard=i, n_shards=n)))
    path = tmp_path / "stop.toml"
    text = SCENARIO.replace('model = "lsq"', 'model = "interrupting-lsq"')
    text = text.replace("duration_s = 6.0", "duration_s = 60.0")
    path.write_text(text)
    summary = run(SimnetAppConfig(scenario=str(path), out=tmp_path / "out", plots=False))
    assert summary["interrupted"] is True
    assert list(summary["runs"]) == ["gossip"]  # the later runs were skipped
    assert 0 < summary["runs"]["gossip"]["sim_time_s"] < 60
    assert (tmp_path / "out" / "metrics.jsonl").read_text().count("\n") >= 2
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("summary: ")


def test_plots_are_skipped_without_matplotlib(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    messages: list[str] = []
    assert write_plots(tmp_path, "x", [], messages.append) == []
    assert "skipping plots" in messages[0]


def test_unknown_scenario_is_a_clear_error():
    with pytest.raises(ValueError, match="built-in name"):
        run(SimnetAppConfig(scenario="no-such-scenario"))
