"""The voice fine-tune example runs end to end on the LJSpeech clips (skipped without them)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytestmark = pytest.mark.slow  # the voice example end to end, minutes: run by .ci/run's slow section

ROOT = Path(__file__).resolve().parents[2]
VOICE = ROOT.parent / "shared" / "data" / "ljspeech-mini"


@pytest.mark.skipif(not (VOICE / "metadata.csv").exists(), reason=f"real speech clips not found at {VOICE}")
def test_finetune_voice_example_lowers_held_out_loss_and_writes_a_wav(tmp_path):
    out = tmp_path / "voice"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "finetune_voice" / "finetune_voice.py"), "--voice", str(VOICE),
         "--out", str(out), "--preset", "tiny", "--base-steps", "150", "--steps", "100", "--synth-steps", "8"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Every stage says up front how long it should take, then shows progress while it runs.
    assert re.search(r"^estimated: pack ~.*, base ~.*, fine-tune ~.*, eval\+sample ~.*; total ~", done.stdout, re.M)
    for stage in (r"^\[1/4\] .*\(~[0-9.]+ (s|min)\)$", r"^ +packed train0: ", r"^\[2/4\] .*\(~", r"^ +base: step \d+/150",
                  r"^\[3/4\] .*\(~", r"^ +peer0 \| peer1: step \d+/100 .*, step \d+/100", r"^\[4/4\] .*\(~"):
        assert re.search(stage, done.stdout, re.M), (stage, done.stdout)
    # Each stage's seconds, for curve.py.
    assert re.search(r'^stages: \{"pack": [0-9.]+, "base": [0-9.]+, "fine-tune": [0-9.]+, .*"total": ', done.stdout, re.M)
    m = re.search(r"held-out eval loss: base ([0-9.]+) -> fine-tuned (.+)", done.stdout)
    assert m, done.stdout
    before = float(m.group(1))
    after = [float(x) for x in m.group(2).split(", ")]
    # measured: base 1.551 -> 1.379, 1.335 (tiny, 150 base steps, 100 fine-tuning steps)
    assert len(after) == 2 and all(a < 0.95 * before for a in after), (before, after)
    wav, sr = sf.read(out / "finetuned.wav")
    assert sr == 22050 and len(wav) > sr and np.isfinite(wav).all() and np.abs(wav).max() > 0.01
