"""The pieces of a multi-process peer that need no group: settings, torchrun's env, the launch
command, and the MFU arithmetic."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.apps.group_app import torchrun_argv
from gossip_tts.model import model_config, train_flops_per_sample
from gossip_tts.train.mfu import StepMeter, peak_tflops
from gossip_tts.train.parallel import ParallelConfig, is_follower, rank_seed, torchrun_env


def test_parallel_config_refuses_what_cannot_run():
    for bad in ({"nproc": 0}, {"strategy": "zero3"}, {"backend": "mpi"}, {"timeout_s": 0}):
        with pytest.raises(ValueError):
            ParallelConfig(**bad)


def test_torchrun_env_means_a_group_only_with_several_processes():
    assert torchrun_env({}) is None
    assert torchrun_env({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert torchrun_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (1, 4, 1)
    assert not is_follower({"RANK": "0", "WORLD_SIZE": "2"}) and is_follower({"RANK": "3", "WORLD_SIZE": "4"})
    assert rank_seed(5, 0) == 5 and len({rank_seed(5, r) for r in range(8)}) == 8


def test_launch_command_keeps_the_peer_flags_away_from_torchrun():
    cmd = torchrun_argv(4, ["peer", "--nproc", "4", "--preset", "tiny"])
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    # torchrun would take --nproc for its own --nproc-per-node: everything after "--" is ours
    assert cmd[5:] == ["-m", "gossip_tts", "--", "peer", "--nproc", "4", "--preset", "tiny"]


def test_step_meter_mfu_is_model_flops_over_time_over_peak():
    cfg = model_config("tiny", 128)
    times = iter([0.0, 2.0])
    meter = StepMeter(cfg, torch.device("cpu"), peak=0.5, clock=lambda: next(times))
    flops = meter.batch_flops(4, 100, 20, 32)
    assert flops == 4 * train_flops_per_sample(cfg, 100, 20, 32)
    extras = meter.extras(flops)
    assert extras["tflops"] == pytest.approx(flops / 2.0 / 1e12)
    assert extras["mfu"] == pytest.approx(extras["tflops"] / 0.5)
    assert "peak_mem_gib" not in extras  # no device memory figure on CPU


def test_peak_comes_from_the_flag_else_the_table_else_nowhere():
    assert peak_tflops(torch.device("cpu"), 123.0) == 123.0
    assert peak_tflops(torch.device("cpu")) is None
