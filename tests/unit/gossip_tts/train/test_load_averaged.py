"""Synthesis and eval load a checkpoint's averaged weights by default (`average.*`, written by a
peer), the live ones on `--weights live`, and the live ones from a checkpoint without an average."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from gossip_tts.model import EchoDiT, model_config
from gossip_tts.train.load import load_model
from gossip_tts.train.trainer import MODEL_PREFIX
from peer.local.checkpoint import AVERAGE_PREFIX, CheckpointError, save_checkpoint

CPU = torch.device("cpu")


def _save(tmp_path, averaged: dict[str, torch.Tensor] | None):
    cfg = model_config("tiny", 8)
    torch.manual_seed(0)
    model = EchoDiT(cfg)
    tensors = {MODEL_PREFIX + k: v for k, v in model.state_dict().items()}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    if averaged is not None:
        tensors.update({AVERAGE_PREFIX + k: v for k, v in averaged.items()})
    save_checkpoint(tmp_path, tensors, {"model_config": asdict(cfg), "step": 7})
    return model, trainable


def test_the_averaged_weights_are_loaded_by_default_and_the_live_ones_on_request(tmp_path) -> None:
    live, names = _save(tmp_path, None)
    averaged = {n: torch.full_like(p, 0.25) for n, p in live.named_parameters() if n in names[:3]}
    _save(tmp_path, averaged)
    model, meta = load_model(tmp_path, CPU)
    state = model.state_dict()
    assert meta["weights"] == "average"
    for n in names[:3]:
        assert torch.equal(state[n], averaged[n])
    for n in names[3:6]:  # a parameter without an average keeps its live value
        assert torch.equal(state[n], live.state_dict()[n])
    model, meta = load_model(tmp_path, CPU, "live")
    assert meta["weights"] == "live" and torch.equal(model.state_dict()[names[0]], live.state_dict()[names[0]])


def test_a_checkpoint_without_an_average_loads_its_live_weights(tmp_path) -> None:
    live, names = _save(tmp_path, None)
    model, meta = load_model(tmp_path, CPU)
    assert meta["weights"] == "live" and torch.equal(model.state_dict()[names[0]], live.state_dict()[names[0]])


def test_an_average_of_something_that_is_not_a_parameter_is_refused(tmp_path) -> None:
    _save(tmp_path, {"no.such.weight": torch.zeros(2)})
    with pytest.raises(CheckpointError, match="not model parameters"):
        load_model(tmp_path, CPU)
    with pytest.raises(ValueError, match="weights must be"):
        load_model(tmp_path, CPU, "best")


def test_the_cli_offers_exactly_the_weights_load_model_knows() -> None:
    from gossip_tts.cli.main import main
    from gossip_tts.train.weights import WEIGHTS

    for command in ("synthesize", "eval"):
        (option,) = [p for p in main.commands[command].params if p.name == "weights"]
        assert tuple(option.type.choices) == WEIGHTS and option.default_shown() == "average"  # the config's default
