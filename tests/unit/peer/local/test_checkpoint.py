import os
import threading

import pytest
import torch

from peer.local.checkpoint import BackgroundCheckpointer, CheckpointError, checkpoint_path, load_checkpoint, save_checkpoint


def test_round_trip_keeps_tensors_and_meta(tmp_path):
    tensors = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.tensor([1, 2], dtype=torch.uint8)}
    save_checkpoint(tmp_path, tensors, {"step": 7, "name": "x"})
    back, meta = load_checkpoint(tmp_path)
    assert meta == {"step": 7, "name": "x"}
    assert torch.equal(back["a"], tensors["a"]) and torch.equal(back["b"], tensors["b"])


def test_crash_mid_write_leaves_last_good_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"w": torch.ones(3)}, {"step": 1})

    def exploding_replace(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", exploding_replace)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, {"w": torch.zeros(3)}, {"step": 2})
    monkeypatch.undo()
    back, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 1 and torch.equal(back["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.safetensors"]  # no temp file left


def test_truncated_or_foreign_file_is_refused_clearly(tmp_path):
    save_checkpoint(tmp_path, {"w": torch.ones(100)}, {"step": 1})
    path = checkpoint_path(tmp_path)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(path)
    from safetensors.torch import save_file

    save_file({"w": torch.ones(1)}, str(path))
    with pytest.raises(CheckpointError, match="not a gossip-tts checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nowhere")


def test_background_writer_keeps_newest_and_leaves_no_thread(tmp_path):
    writer = BackgroundCheckpointer(tmp_path)
    for step in range(20):
        writer.submit({"w": torch.full((1000,), float(step))}, {"step": step})
    writer.flush()
    _, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 19
    assert 1 <= writer.written <= 20
    assert not any(t.name == "checkpoint-writer" for t in threading.enumerate())
