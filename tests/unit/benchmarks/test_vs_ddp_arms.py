"""vs_ddp's arm selection and gossip variants: which arms `--arms` keeps, what `--variant` sets."""

from __future__ import annotations

import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import vs_ddp  # noqa: E402


def _arms() -> list:
    kinds = [*vs_ddp.ARM_KINDS, vs_ddp.VARIANT]
    return [vs_ddp.Arm(kind, f"arm {i}", lambda group, run_dir: 0) for i, kind in enumerate(kinds)]


def test_arms_are_selected_by_their_kind_and_every_variant_stays() -> None:
    kept = vs_ddp.select_arms(_arms(), "single, gossip,alone")
    assert [arm.kind for arm in kept] == ["single", "gossip", "alone", vs_ddp.VARIANT]
    assert [arm.kind for arm in vs_ddp.select_arms(_arms(), "ddp-straggler")] == ["ddp-straggler", vs_ddp.VARIANT]


def test_an_unknown_arm_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(SystemExit, match=r"unknown \['gosip'\]; choose from single, ddp"):
        vs_ddp.select_arms(_arms(), "single,gosip")


def test_a_variant_parses_numbers_booleans_and_specs_with_commas() -> None:
    fields = vs_ddp.gossip_fields("gossip_every=4;pull_only=false;step_scale=2;staleness=pipemare:K=2000,gamma=0.3")
    assert fields == {"gossip_every": 4, "pull_only": False, "step_scale": 2.0, "staleness": "pipemare:K=2000,gamma=0.3"}
    assert type(fields["gossip_every"]) is int and type(fields["step_scale"]) is float


@pytest.mark.parametrize("bad", ["gossip_evry=4", "gossip_every", "gossip_every=4;nonsense=1"])
def test_a_variant_naming_no_field_is_refused_with_its_name(bad: str) -> None:
    with pytest.raises(SystemExit, match="not a GossipConfig field"):
        vs_ddp.gossip_fields(bad)


def test_a_variant_value_of_the_wrong_type_is_refused_with_its_field() -> None:
    with pytest.raises(SystemExit, match="gossip_every: expected an integer"):
        vs_ddp.gossip_fields("gossip_every=4.5")
