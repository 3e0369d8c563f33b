"""simnet_seeds' tuning grid: what `--variant` sets in a copy of the gossip run, what `--runs` keeps,
and the figures read from a seed's summary."""

from __future__ import annotations

import math
import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import simnet_seeds  # noqa: E402
from simnet_figures import mean_model_ratio, read_figure  # noqa: E402
from simnet_variants import parse_variant, with_variants  # noqa: E402

from simnet.runs.scenario import scenario_from_dict  # noqa: E402


def test_a_variant_reads_toml_values_bare_words_and_specs_with_commas() -> None:
    got = parse_variant("session.pulls_per_publish=4; gossip.step_scale_power=0.5;gossip.clip=false;"
                        "gossip.compression=fp32;gossip.staleness=pipemare:K=2000,gamma=0.3;duration_s=30")
    assert got == {"session": {"pulls_per_publish": 4},
                   "gossip": {"step_scale_power": 0.5, "clip": False, "compression": "fp32",
                              "staleness": "pipemare:K=2000,gamma=0.3"},
                   "duration_s": 30}
    assert type(got["session"]["pulls_per_publish"]) is int


@pytest.mark.parametrize("bad, says", [("pulls_per_publish", "is not [SECTION.]FIELD=VALUE"),
                                       ("a.b.c=1", "is not [SECTION.]FIELD=VALUE"),
                                       ("gossip.=1", "is not [SECTION.]FIELD=VALUE"),
                                       ("gossip.clip=[1", "neither a TOML value nor a bare word"),
                                       ("gossip=1;gossip.clip=true", "both as a section and as a value")])
def test_a_malformed_variant_is_refused_naming_the_part(bad: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace(".]", r".\]")):
        parse_variant(bad)


def test_variants_copy_the_gossip_run_and_merge_over_its_own_settings() -> None:
    gossip = {"name": "gossip", "method": "gossip",
              "set": {"session": {"pulls_per_publish": 1}, "gossip": {"gossip_every": 4}}}
    data = {"name": "t", "runs": [{"name": "single", "method": "allreduce"}, gossip]}
    out = with_variants(data, [parse_variant("session.max_in_flight=8;gossip.step_scale_max=2;duration_s=9")])
    assert [r["name"] for r in out["runs"]] == ["single", "gossip", "variant1"]
    assert out["runs"][-1]["set"] == {"session": {"pulls_per_publish": 1, "max_in_flight": 8},
                                      "gossip": {"gossip_every": 4, "step_scale_max": 2}, "duration_s": 9}
    assert gossip["set"] == {"session": {"pulls_per_publish": 1}, "gossip": {"gossip_every": 4}}, "the run was changed"
    with pytest.raises(ValueError, match="no 'gossip' run to vary"):
        with_variants({"name": "t", "runs": []}, [{"duration_s": 9}])


def test_a_misspelt_field_is_named_by_the_scenario_loader() -> None:
    data = with_variants(simnet_seeds.scenario_data("single"), [parse_variant("gossip.step_scal=2")])
    with pytest.raises(ValueError, match="step_scal"):
        scenario_from_dict(data, "single", seed=0)


def test_runs_keeps_the_named_runs_the_reference_and_the_variants() -> None:
    kept = simnet_seeds.scenario_table("single", [parse_variant("gossip.step_scale=2")], ["gossip"])
    assert [r["name"] for r in kept["runs"]] == ["single", "gossip", "variant1"]
    assert kept["compare"] == [["gossip", "single"]]
    assert [r["name"] for r in simnet_seeds.select_runs(kept, "single", ["gossip"])["runs"]] == ["single", "gossip"]
    with pytest.raises(ValueError, match="gosip not in scenario 'single'"):
        simnet_seeds.scenario_table("single", [], ["gosip"])
    with pytest.raises(ValueError, match="step_scal"):
        simnet_seeds.scenario_table("single", [parse_variant("gossip.step_scal=2")], None)


def test_figures_of_runs_left_out_read_none_and_the_mean_model_ratio_is_exact() -> None:
    summary = {"runs": {"gossip": {"final_loss": 0.72, "final_loss_of_mean": 0.70},
                        "single": {"final_loss": 0.70, "sim_time_s": 60.0, "time_to_target_s": 33.0}}}
    assert mean_model_ratio("gossip", "single")(summary, {}) == pytest.approx(1.0)
    summary["runs"]["gossip"]["final_loss_of_mean"] = math.inf
    assert mean_model_ratio("gossip", "single")(summary, {}) == math.inf
    by_name = {f.name: f for f in simnet_seeds.FIGURES["single"]}
    assert read_figure(by_name["alone/single final loss"], summary, {}) is None
    names = [f.name for f in simnet_seeds.variant_figures("single", ["gossip.step_scale=2"])]
    assert names == ["variant1 [gossip.step_scale=2]: time to target / D",
                     "variant1 [gossip.step_scale=2]/single final loss",
                     "variant1 [gossip.step_scale=2]'s mean model/single final loss"]


def test_world_settings_reach_every_run_the_reference_included() -> None:
    from simnet.runs.config import merge

    data = simnet_seeds.scenario_table("single", [parse_variant("gossip.step_scale=2")], ["gossip"],
                                       world=parse_variant("model_args.samples_per_shard=64;duration_s=9", "--world"))
    assert data["world"]["model_args"] == {"heterogeneity": 0.0, "samples_per_shard": 64}, "the world's own kept"
    assert data["world"]["duration_s"] == 9
    single = next(r for r in data["runs"] if r["name"] == "single")
    assert merge(data["world"], single["set"])["model_args"] == {"heterogeneity": 0.0, "samples_per_shard": 64,
                                                                 "n_shards": 8, "held_shards": 8}
    assert simnet_seeds.scenario_data("single")["world"]["model_args"] == {"heterogeneity": 0.0}, "the table was changed"
    with pytest.raises(ValueError, match="--world 'model_args': 'model_args' is not"):
        parse_variant("model_args", "--world")
    with pytest.raises(ValueError, match="'duration_s' is not a table"):
        simnet_seeds.scenario_table("single", world={"duration_s": {"x": 1}})
    with pytest.raises(ValueError, match="gossip.*pull_onl"):
        simnet_seeds.scenario_table("single", world=parse_variant("gossip.pull_onl=false", "--world"))


def test_every_defended_attack_the_worst_figure_reads_is_a_run_of_the_byzantine_scenario() -> None:
    """`worst_ratio` skips a run missing from a summary (so `--runs` may pick a subset): a run
    renamed in byzantine.toml but not in DEFENDED_ATTACKS would drop out of the figure unseen."""
    data = simnet_seeds.scenario_data("byzantine")
    names = {run["name"] for run in data["runs"]}
    assert set(simnet_seeds.DEFENDED_ATTACKS) <= names, set(simnet_seeds.DEFENDED_ATTACKS) - names
    world = data["world"].get("attack", {}).get("kind", "none")  # what a run without its own attack meets
    attacked = {run["name"] for run in data["runs"]
                if run.get("set", {}).get("attack", {}).get("kind", world) != "none"}
    assert set(simnet_seeds.DEFENDED_ATTACKS) <= attacked  # no control without an attack counted as one
