"""vs_ddp's arm selection and gossip variants: which arms `--arms` keeps, what `--variant` sets."""

from __future__ import annotations

import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import vs_ddp  # noqa: E402


@pytest.mark.parametrize("name, kind", [("single", "single"), ("ddp x4", "ddp"), ("ddp x4 straggler", "ddp-straggler"),
                                        ("gossip x2", "gossip"), ("gossip x2 straggler", "gossip-straggler"),
                                        ("alone x2", "alone"), ("gossip x2 [gossip_every=4]", "variant")])
def test_every_arm_name_has_the_kind_arms_selects_it_by(name: str, kind: str) -> None:
    assert vs_ddp.arm_kind(name) == kind
    assert kind in vs_ddp.ARM_KINDS or kind == "variant"


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
