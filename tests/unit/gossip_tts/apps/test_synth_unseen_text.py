"""synthesize names, in one warning line, the characters whose bytes the model's training texts never held."""

from __future__ import annotations

from dataclasses import asdict

import torch

from gossip_tts.audio import MelCodec
from gossip_tts.model import EchoDiT, model_config
from gossip_tts.apps.synth_app import run
from gossip_tts.apps.synth_config import SynthConfig
from gossip_tts.apps.text_coverage import unseen_characters, unseen_warning
from gossip_tts.train.trainer import MODEL_PREFIX
from peer.local.checkpoint import save_checkpoint


def _checkpoint(path, **meta):
    codec = MelCodec()
    cfg = model_config("tiny", codec.latent_dim)
    torch.manual_seed(0)
    model = EchoDiT(cfg)
    info = {"codec": codec.name, "latent_dim": codec.latent_dim, "frame_rate": codec.frame_rate}
    save_checkpoint(path, {MODEL_PREFIX + k: v for k, v in model.state_dict().items()},
                    {"model_config": asdict(cfg), "step": 1, "codec": info, **meta})
    return path


def _speak(tmp_path, checkpoint, text: str) -> list[str]:
    warnings: list[str] = []
    run(SynthConfig(checkpoint=checkpoint, text=text, out=tmp_path / "out.wav", steps=1, seconds=0.2),
        emit=lambda line: None, warn=warnings.append)
    assert (tmp_path / "out.wav").exists()
    return warnings


def test_emoji_cjk_and_hebrew_get_one_line_naming_them(tmp_path):
    ckpt = _checkpoint(tmp_path / "ck", text_bytes=sorted(set(b"Hello there, said she.")))
    warnings = _speak(tmp_path, ckpt, "Hello 😀 你好 שלום, there")
    assert len(warnings) == 1, warnings
    for named in ("'😀' (U+1F600)", "'你' (U+4F60)", "'好' (U+597D)", "'ש' (U+05E9)"):
        assert named in warnings[0], warnings
    assert "'H'" not in warnings[0] and "never taught to say them" in warnings[0]


def test_text_the_model_was_trained_on_gets_no_warning(tmp_path):
    ckpt = _checkpoint(tmp_path / "ck", text_bytes=sorted(set("café".encode())))
    assert _speak(tmp_path, ckpt, "A café, please.") == []


def test_a_checkpoint_without_the_record_is_taken_to_know_printable_ascii():
    assert unseen_characters("plain ASCII, with digits 42!\n", None) == []
    assert unseen_characters("naïve", None) == ["ï"]
    assert unseen_warning("x\x1b[2J", None) is not None and "'\\x1b'" in unseen_warning("x\x1b[2J", None)


def test_a_long_list_is_cut_with_a_count():
    line = unseen_warning("".join(chr(0x4E00 + i) for i in range(12)), [])
    assert line is not None and line.count("(U+") == 8 and "and 4 more" in line
