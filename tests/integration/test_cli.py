"""The CLI commands end to end in-process: keygen, peer --solo, eval, synthesize, and clear errors."""

import os
import re
import stat

import numpy as np
import soundfile as sf
from click.testing import CliRunner

from gossip_tts.cli.main import main


def test_keygen_writes_an_owner_only_key_and_refuses_to_overwrite(tmp_path):
    runner = CliRunner()
    key = tmp_path / "peer.key"
    result = runner.invoke(main, ["keygen", "--out", str(key)])
    assert result.exit_code == 0 and re.fullmatch(r"peer_id=[0-9a-f]{64}\n", result.output)
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    again = runner.invoke(main, ["keygen", "--out", str(key)])
    assert again.exit_code != 0 and "already exists" in again.output


def test_bad_flags_fail_with_one_clear_line(tmp_path, corpus):
    runner = CliRunner()
    result = runner.invoke(main, ["peer", "--solo", "--data", str(corpus["shard0"]), "--compression", "topk:2"])
    assert result.exit_code == 2 and "topk" in result.output and "Traceback" not in result.output
    result = runner.invoke(main, ["peer", "--resume", "--checkpoint-dir", "none"])
    assert result.exit_code == 2 and "resume needs a checkpoint directory" in result.output


def test_train_eval_synthesize(tmp_path, corpus):
    runner = CliRunner()
    ckpt = tmp_path / "ckpt"
    result = runner.invoke(main, ["peer", "--solo", "--preset", "tiny", "--device", "cpu", "--threads", "1", "--data",
                                  str(corpus["shard0"]), "--max-steps", "5", "--batch-size", "4", "--max-frames", "384",
                                  "--checkpoint-dir", str(ckpt)])
    assert result.exit_code == 0, result.output
    assert "stopped at step 5" in result.output
    result = runner.invoke(main, ["eval", "--checkpoint", str(ckpt), "--data", str(corpus["val"])])
    assert result.exit_code == 0, result.output
    first = float(re.search(r"eval_loss=([0-9.]+)\s*$", result.output).group(1))
    again = runner.invoke(main, ["eval", "--checkpoint", str(ckpt), "--data", str(corpus["val"])])
    assert float(re.search(r"eval_loss=([0-9.]+)", again.output).group(1)) == first  # deterministic
    out = tmp_path / "hello.wav"
    result = runner.invoke(main, ["synthesize", "--checkpoint", str(ckpt), "--text", "hello there", "--out", str(out),
                                  "--steps", "2", "--seconds", "0.5"])
    assert result.exit_code == 0, result.output
    wav, sr = sf.read(out)
    assert sr == 22050 and abs(len(wav) - sr // 2) < 600 and np.isfinite(wav).all()
