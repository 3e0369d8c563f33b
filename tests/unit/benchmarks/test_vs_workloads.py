"""The head-to-head benchmarks' TTS workload: the tiny preset on the built-in corpus, scored
exactly as `gossip-tts eval` scores it, loadable by a worker that has only torch."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import vs_common as vc  # noqa: E402
import vs_workloads as vw  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[vw.TTSWorkload, Path]:
    root = tmp_path_factory.mktemp("corpus") / "builtin"
    w = vw.prepare_tts(root.parent / "tensors.pt", cache_dir=root, n_speakers=2, clips_per_speaker=4,
                       val_clips_per_speaker=2)
    return w, root


def test_the_corpus_file_holds_every_clip_whole_and_loads_without_pickle(corpus) -> None:
    w, root = corpus
    saved = torch.load(w.data, weights_only=True)
    assert saved["train.latent"].shape[0] == 8 and saved["val.latent"].shape[0] == 4
    assert saved["train.latent"].shape[-1] == w.latent_dim == 128
    # The model's limits cover the longest clip and text of both splits: nothing is cut.
    assert w.max_frames == max(int(saved[f"{s}.latent_mask"].sum(1).max()) for s in ("train", "val"))
    assert w.max_text_bytes == max(int(saved[f"{s}.text_mask"].sum(1).max()) for s in ("train", "val"))
    assert int(saved["train.ref_mask"].sum(1).max()) <= 128


def test_workload_round_trips_through_the_workers_json_and_refuses_unknown_kinds(corpus) -> None:
    w, _ = corpus
    assert vw.load_workload(vw.workload_json(w)) == w
    assert vw.load_workload(vw.workload_json(vw.MLPWorkload(hidden=8))) == vw.MLPWorkload(hidden=8)
    with pytest.raises(ValueError, match="unknown workload kind 'cnn'"):
        vw.load_workload('{"kind": "cnn"}')
    with pytest.raises(ValueError, match="lr"):
        vw.TTSWorkload(data="x", latent_dim=8, max_frames=8, max_text_bytes=8, lr=0.0)


def test_held_out_loss_is_what_gossip_tts_eval_scores_on_the_val_clips(corpus) -> None:
    """The same number as the project's own evaluation: every val clip whole, collated from the tars."""
    from gossip_tts.data import CollateConfig, LatentStream, StreamConfig, collate
    from gossip_tts.model import eval_loss

    w, root = corpus
    model, task = w.build_model(), w.task(0)
    stream = LatentStream(StreamConfig(sources=[str(root / "val")], seed=0, shuffle_shards=False, shuffle_buffer=1, loop=False))
    samples = list(stream)
    stream.close()
    cfg = CollateConfig(max_frames=w.max_frames, max_ref_frames=128, max_text_bytes=w.max_text_bytes)
    with torch.no_grad():
        want = float(eval_loss(model, [collate(samples, cfg, np.random.default_rng(0))]))
    assert task.eval_loss(model) == pytest.approx(want, rel=1e-3)  # the file stores latents as float16
    assert w.task(1).eval_loss(model) == task.eval_loss(model)


def test_ranks_share_weights_and_held_out_clips_but_draw_their_own_batches(corpus) -> None:
    w, _ = corpus
    a, b = w.task(0), w.task(1)
    assert all(p.equal(q) for p, q in zip(w.build_model().parameters(), w.build_model().parameters()))
    ba, bb = a.batch(), b.batch()
    assert ba.size == bb.size == w.batch_size
    assert not (ba.latent.shape == bb.latent.shape and ba.latent.equal(bb.latent))
    # Trimmed to the batch's longest clip, reference and text: no column is padding only.
    for batch in (ba, bb):
        assert batch.latent_mask[:, -1].any() and batch.ref_mask[:, -1].any() and batch.text_mask[:, -1].any()
        assert batch.latent.dtype == torch.float32


def _drawn_clips(task: vw.TTSTask, train: dict, batches: int = 6) -> set[int]:
    """Which training clips (by index in the corpus file) a task's batches came from, by their text."""
    texts = [tuple(row[row != 0].tolist()) for row in train["train.text_ids"]]
    drawn = set()
    for _ in range(batches):
        for row in task.batch().text_ids:
            drawn.add(texts.index(tuple(row[row != 0].tolist())))
    return drawn


def test_with_parts_each_rank_draws_only_its_own_speakers_clips(corpus) -> None:
    """The split corpus: rank r holds block r % parts (the corpus writes the clips speaker by
    speaker, so 2 parts of 2 speakers are one speaker each); the held-out set stays whole."""
    w, _ = corpus
    saved = torch.load(w.data, weights_only=True)
    texts = [tuple(row[row != 0].tolist()) for row in saved["train.text_ids"]]
    assert len(set(texts)) == len(texts)  # the control: every clip is told apart by its text
    split = dataclasses.replace(w, parts=2)
    assert _drawn_clips(split.task(0), saved) <= {0, 1, 2, 3} and _drawn_clips(split.task(1), saved) <= {4, 5, 6, 7}
    assert _drawn_clips(split.task(2), saved) <= {0, 1, 2, 3}  # rank 2 of 2 parts holds part 0 again
    assert _drawn_clips(w.task(0), saved) & {4, 5, 6, 7} and _drawn_clips(w.task(0), saved) & {0, 1, 2, 3}
    assert split.task(1).eval_loss(w.build_model()) == w.task(0).eval_loss(w.build_model())
    assert vw.load_workload(vw.workload_json(split)) == split
    with pytest.raises(ValueError, match="cannot cut 8 training clips into 9 parts"):
        dataclasses.replace(w, parts=9).task(0)
    with pytest.raises(ValueError, match="parts"):
        dataclasses.replace(w, parts=0)


def _norm_at_step(w: vw.TTSWorkload) -> tuple[float, vc.Record]:
    """The gradient norm the optimiser sees in one `train_step` of a fresh model."""
    model, task = w.build_model(), w.task(0)
    opt = w.optimizer()(model.parameters())
    seen: list[float] = []
    real_step = opt.step

    def step_seeing_the_norm(*args, **kwargs):
        seen.append(float(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm()))
        return real_step(*args, **kwargs)

    opt.step = step_seeing_the_norm  # type: ignore[method-assign]
    rec = vc.Record(0)
    assert vc.train_step(model, opt, task, rec, w) > 0
    return seen[0], rec


def test_a_training_step_clips_the_gradient_where_the_workload_says_and_counts_clips(corpus) -> None:
    w, _ = corpus
    assert isinstance(w.optimizer()(w.build_model().parameters()), torch.optim.AdamW)
    unclipped, rec = _norm_at_step(dataclasses.replace(w, grad_clip=0.0))
    clipped, _ = _norm_at_step(dataclasses.replace(w, grad_clip=0.05))
    assert unclipped > 0.1  # the control: the same step's gradient, not clipped
    assert clipped == pytest.approx(0.05, rel=1e-4)
    assert rec.samples == w.batch_size and rec.steps == 1


def test_make_workload_builds_what_the_flag_names(tmp_path: Path) -> None:
    assert vw.make_workload("mlp", 3, tmp_path) == vw.MLPWorkload(seed=3)
    with pytest.raises(ValueError, match="unknown workload 'rnn'"):
        vw.make_workload("rnn", 0, tmp_path)
