"""After --resume the status page's loss curve spans the whole run, not just the steps since."""

from __future__ import annotations

from peer.local.loop import LoopConfig, run_loop
from peer.local.status_history import LossHistory
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer


def trainer() -> LeastSquaresTrainer:
    return LeastSquaresTrainer(LeastSquaresConfig(dim=8, samples_per_shard=32))


def test_a_resumed_run_keeps_the_curve_of_the_steps_before_it(tmp_path):
    first = LossHistory()
    run_loop(trainer(), LoopConfig(max_steps=40, checkpoint_dir=tmp_path, log_every_s=1e9), emit=lambda s: None,
             loss_history=first)
    before = first.points()
    resumed = LossHistory()
    run_loop(trainer(), LoopConfig(max_steps=70, checkpoint_dir=tmp_path, resume=True, log_every_s=1e9),
             emit=lambda s: None, loss_history=resumed)
    after = resumed.points()
    assert after[0][0] == before[0][0] == 1 and after[len(before) - 1][:2] == before[-1][:2]
    assert after[-1][0] == 70 and [p[0] for p in after] == sorted({p[0] for p in after})


def test_a_malformed_saved_curve_is_ignored():
    history = LossHistory()
    for saved in (None, {"points": [[2, 1.0, 0.0], [1, 1.0, 0.0]], "stride": 1}, {"points": "x", "stride": 1},
                  {"points": [[1, float("nan"), 0.0]], "stride": 1}, {"points": [], "stride": 0}):
        assert history.restore(saved) is False, saved
    assert history.points() == []
    assert history.restore({"points": [[1, 2.0, 5.0], [3, 1.5, 6.0]], "stride": 2})
    history.add(4, 1.0, 7.0)
    assert history.points()[:2] == [(1, 2.0, 5.0), (3, 1.5, 6.0)]
