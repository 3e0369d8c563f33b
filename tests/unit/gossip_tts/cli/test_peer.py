"""`gossip-tts peer` before training: settings from flags/env/file, errors naming flags, checks that fail at once."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from click.testing import CliRunner

from gossip_tts.cli import logs, settings
from gossip_tts.cli.main import main, peer
from gossip_tts.cli.options import config_options
from gossip_tts.cli.preflight import DirectoryLock
from peer.local.checkpoint import save_checkpoint


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in [v for v in __import__("os").environ if v.startswith("GOSSIP_TTS_") and v != "GOSSIP_TTS_CACHE"]:
        monkeypatch.delenv(var)
    yield
    logs.reset()


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["peer", *args], env=env)


def test_every_section_and_flag_names_a_real_config_field():
    app_fields = {f.name for f in dataclasses.fields(settings.section_class(settings.APP_SECTION))}
    for name, _ in settings.sections():
        assert dataclasses.is_dataclass(settings.section_class(name)), name
        assert name == settings.APP_SECTION or name in app_fields, f"the app config has no field {name!r}"
    options = config_options(peer)
    assert len(options) > 30
    for param in options:
        section, field = settings.key_of(str(param.field))
        assert field in settings.section_fields(section), f"{param.opts[0]} -> {param.field}"


def test_print_config_resolves_flag_over_env_over_file_and_reads_back(tmp_path):
    conf = tmp_path / "run.toml"
    conf.write_text("[train]\nbatch_size = 2\nlr = 0.01\nthreads = 3\n[session]\nmax_peers = 9\n")
    env = {"GOSSIP_TTS_TRAIN_LR": "0.02", "GOSSIP_TTS_TRAIN_BATCH_SIZE": "5"}
    result = invoke("--config", str(conf), "--batch-size", "7", "--print-config", env=env)
    assert result.exit_code == 0, result.output
    text = result.output
    for line in ("batch_size = 7  # --batch-size", "lr = 0.02  # GOSSIP_TTS_TRAIN_LR", "threads = 3  #",
                 "max_peers = 9  #", 'checkpoint_dir = "runs/default"  # default: runs/<swarm>', "preset = \"small\"\n"):
        assert line in text, line
    printed = tmp_path / "printed.toml"
    printed.write_text(text)
    again = invoke("--config", str(printed), "--print-config")
    assert again.exit_code == 0, again.output
    strip = lambda t: [line.split("  #")[0] for line in t.splitlines()[2:]]  # noqa: E731 (sources differ, values not)
    assert strip(again.output) == strip(text)


@pytest.mark.parametrize("args, env, message", [
    (["--batch-size", "0"], {}, "--batch-size must be > 0, got 0"),
    (["--listen", "nonsense"], {}, "--listen: peer address 'nonsense' is not 'HOST:PORT'"),
    ([], {"GOSSIP_TTS_GOSSIP_GOSSIP_EVERY": "0"}, "GOSSIP_TTS_GOSSIP_GOSSIP_EVERY must be >= 1, or unset to let [gossip] publish_budget set it; got 0"),
    ([], {"GOSSIP_TTS_NET_LISTN": "x"}, "GOSSIP_TTS_NET_LISTN: unknown setting 'listn' in [net]"),
    (["--checkpoint-dir", "none", "--resume"], {}, "--resume needs a checkpoint directory"),
])
def test_errors_name_the_flag_or_variable(args, env, message):
    result = invoke(*args, "--print-config", env=env)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_fails_before_any_slow_work():
    result = invoke("--device", "cuda", "--preset", "tiny")
    assert result.exit_code == 2, result.output
    assert "--device cuda:" in result.output and "pass --device cpu or auto" in result.output
    assert "corpus" not in result.output and "building the model" not in result.output


def test_resuming_another_preset_names_it(tmp_path):
    save_checkpoint(tmp_path / "ck", {"w": torch.zeros(2)}, {"step": 3, "train_config": {"preset": "tiny"}})
    result = invoke("--resume", "--checkpoint-dir", str(tmp_path / "ck"), "--preset", "small", "--device", "cpu")
    assert result.exit_code == 2 and "this checkpoint is preset tiny; pass --preset tiny" in result.output, result.output


def test_default_checkpoint_dir_is_never_silently_overwritten(tmp_path):
    save_checkpoint(tmp_path / "runs" / "s1", {"w": torch.zeros(2)}, {"step": 8, "train_config": {"preset": "tiny"}})
    result = invoke("--swarm", "s1", "--preset", "tiny", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "runs/s1 already holds a checkpoint (step 8, preset tiny); pass --resume" in result.output


def test_a_given_checkpoint_dir_that_holds_a_run_is_never_silently_started_over(tmp_path):
    save_checkpoint(tmp_path / "run1", {"w": torch.zeros(2)}, {"step": 45, "train_config": {"preset": "tiny"}})
    result = invoke("--checkpoint-dir", "run1", "--preset", "tiny", "--device", "cpu", "--solo", "--max-steps", "1",
                    "--data", str(tmp_path / "missing"))  # without the check, it would stop on the missing data
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "run1 already holds a checkpoint (step 45, preset tiny)" in error[0], result.output
    assert "--resume" in error[0] and "--overwrite" in error[0], error


def test_overwrite_starts_over_in_a_folder_that_holds_a_run(tmp_path):
    save_checkpoint(tmp_path / "run1", {"w": torch.zeros(2)}, {"step": 45, "train_config": {"preset": "tiny"}})
    result = invoke("--checkpoint-dir", "run1", "--overwrite", "--preset", "tiny", "--device", "cpu", "--solo",
                    "--data", str(tmp_path / "missing"))  # past the check, the missing data stops it at once
    assert "already holds" not in result.output and "does not exist" in result.output, result.output
    assert "--overwrite: starting over in run1 (its checkpoint of step 45 is replaced" in result.output, result.output


def test_resume_and_overwrite_together_are_refused(tmp_path):
    result = invoke("--checkpoint-dir", "run1", "--overwrite", "--resume", "--device", "cpu", "--solo")
    assert result.exit_code == 2 and "--resume and --overwrite" in result.output, result.output


def test_the_built_in_corpus_line_is_said_only_when_it_is_built():
    from gossip_tts.apps.peer_config import PeerAppConfig
    from gossip_tts.cli.preflight import prepare_data

    prepare_data(PeerAppConfig(), lambda line: None)  # built here if this machine never built it
    again: list[str] = []
    cfg = prepare_data(PeerAppConfig(), again.append)
    assert cfg.train.sources and len(again) == 1 and again[0].startswith("no --data given: training on"), again


def test_a_checkpoint_dir_is_locked_by_one_peer(tmp_path):
    first = DirectoryLock(tmp_path / "ck")
    first.acquire()
    with pytest.raises(ValueError, match="in use by another gossip-tts peer.*--checkpoint-dir"):
        DirectoryLock(tmp_path / "ck").acquire()
    first.release()
    DirectoryLock(tmp_path / "ck").acquire()


def test_checkpoints_off_is_said_at_start_and_at_stop(tmp_path):
    result = invoke("--checkpoint-dir", "none", "--print-config")
    assert "# checkpoint_dir = (unset)  # --checkpoint-dir" in result.output, result.output
    result = invoke("--checkpoint-dir", "none", "--solo", "--device", "cpu", "--data", str(tmp_path / "missing"))
    assert result.exit_code != 0 and result.output.count("WARNING checkpoints are off") == 2, result.output
