"""`gossip-tts judge` around its ears: which clips and controls are scored, what is printed, and
the errors a user sees. The ears here are a stand-in, so none of this needs the [judge] extra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gossip_tts.audio import write_wav
from gossip_tts.cli.main import main
from gossip_tts.judge import EAR_RATE, JudgeConfig, judge, run
from gossip_tts.judge.clips import noise_like, read_folder
from tests.unit.judge_helpers import LoudnessEars


def _tone(freq: float, seconds: float, sr: int = 22050, level: float = 0.3) -> np.ndarray:
    return (level * np.sin(2 * np.pi * freq * np.arange(int(sr * seconds)) / sr)).astype(np.float32)


def _folder(root: Path, clips: dict[str, tuple[str, np.ndarray]]) -> Path:
    (root / "wavs").mkdir(parents=True)
    (root / "metadata.csv").write_text("".join(f"{k}|{text}\n" for k, (text, _) in clips.items()), encoding="utf-8")
    for key, (_, wav) in clips.items():
        write_wav(root / "wavs" / f"{key}.wav", wav, 22050)
    return root


@pytest.fixture
def folders(tmp_path):
    judged = _folder(tmp_path / "generated", {"a": ("Loud!", _tone(200, 0.5)), "b": ("loud", _tone(300, 0.7)),
                                              "c": ("loud", _tone(400, 0.3, level=0.01))})
    real = _folder(tmp_path / "real", {"a": ("other text", _tone(220, 0.5)), "b": ("x", _tone(330, 0.6)),
                                       "z": ("not judged", _tone(500, 0.2))})
    return judged, real


def test_judge_scores_the_folder_its_real_clips_their_codec_round_trip_and_noise(folders, tmp_path):
    judged, real = folders
    lines: list[str] = []
    report = run(JudgeConfig(folder=judged, real=real, references=[real / "wavs" / "a.wav"], plot=tmp_path / "p.png"),
                 lines.append, ears=LoudnessEars())
    assert [s.name for s in report.sets] == ["generated", "real", "mel codec", "noise"]
    by_name = {s.name: s for s in report.sets}
    assert [c.key for c in by_name["real"].clips] == ["a", "b"]  # only the judged ids; z is not judged
    assert [c.key for c in by_name["noise"].clips] == ["a", "b", "c"]
    assert by_name["generated"].wer == pytest.approx(1 / 3)  # c is too quiet to be heard
    assert by_name["real"].wer == 0.0  # real clips are scored against the judged folder's texts
    assert by_name["generated"].clips[0].similarity is not None
    doc = json.loads(lines[-1].removeprefix("judge: "))
    assert lines[-1].startswith("judge: ")
    assert doc["wer"] == pytest.approx(1 / 3, abs=1e-4) and set(doc) >= {"wer", "cer", "similarity", "dnsmos", "controls"}
    assert set(doc["controls"]) == {"real", "mel codec", "noise"}
    assert (tmp_path / "p.png").stat().st_size > 0
    assert [line.split()[0] for line in lines[1:4]] == ["a", "b", "c"]  # the per-clip table has every clip


def test_progress_is_told_per_clip_of_every_set_as_it_is_scored(folders, tmp_path):
    judged, real = folders
    told: list[str] = []
    report_lines: list[str] = []
    run(JudgeConfig(folder=judged, real=real, plot_enabled=False), report_lines.append, ears=LoudnessEars(), tell=told.append)
    assert [line.split(" (")[0] for line in told] == [
        "scoring generated: 1/3 a", "scoring generated: 2/3 b", "scoring generated: 3/3 c",
        "scoring real: 1/2 a", "scoring real: 2/2 b", "scoring mel codec: 1/2 a", "scoring mel codec: 2/2 b",
        "scoring noise: 1/3 a", "scoring noise: 2/3 b", "scoring noise: 3/3 c"], told
    assert "WER 1.00" in told[2] and not any(line.startswith("scoring") for line in report_lines)


def test_progress_goes_to_stderr_so_stdout_stays_the_report(folders, capsys):
    judged, _ = folders
    run(JudgeConfig(folder=judged, plot_enabled=False), ears=LoudnessEars())
    out, err = capsys.readouterr()
    assert "scoring generated: 3/3 c" in err and "scoring noise: 3/3 c" in err, err
    assert "scoring" not in out and out.splitlines()[-1].startswith("judge: {"), out


def test_codec_round_trip_keeps_each_clip_about_as_long(folders):
    judged, real = folders
    ears = LoudnessEars()
    report = judge(JudgeConfig(folder=judged, real=real, plot_enabled=False), ears)
    assert [len(s.clips) for s in report.sets] == [3, 2, 2, 3]
    real_lengths = [c.wav.size for c in read_folder(real)][:2]
    codec_lengths = ears.heard[5:7]  # heard in order: judged (3), real (2), then the codec's two clips
    assert all(abs(h - n) <= 0.05 * EAR_RATE for h, n in zip(codec_lengths, real_lengths))


def test_no_references_means_no_similarity(folders):
    judged, _ = folders
    report = judge(JudgeConfig(folder=judged, plot_enabled=False), LoudnessEars())
    assert [s.name for s in report.sets] == ["generated", "noise"]
    assert report.judged.similarity is None and report.judged.overall()["similarity"] is None


def test_noise_floor_is_seeded(folders):
    clips = read_folder(folders[0])
    first, again, other = noise_like(clips, 0), noise_like(clips, 0), noise_like(clips, 1)
    assert all(np.array_equal(a.wav, b.wav) for a, b in zip(first, again))
    assert not np.array_equal(first[0].wav, other[0].wav)
    assert [c.wav.size for c in first] == [c.wav.size for c in clips]


def test_bad_input_gets_one_clear_error(folders, tmp_path):
    judged, real = folders
    (tmp_path / "empty" / "wavs").mkdir(parents=True)
    (tmp_path / "empty" / "metadata.csv").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no usable clips"):
        judge(JudgeConfig(folder=tmp_path / "empty"), LoudnessEars())
    stranger = _folder(tmp_path / "stranger", {"q": ("x", _tone(100, 0.2))})
    with pytest.raises(ValueError, match="none of the judged clips' ids"):
        judge(JudgeConfig(folder=judged, real=stranger), LoudnessEars())
    write_wav(judged / "wavs" / "b.wav", np.zeros(0, dtype=np.float32), 22050)
    with pytest.raises(ValueError, match="b.wav: empty audio"):
        judge(JudgeConfig(folder=judged), LoudnessEars())
    with pytest.raises(ValueError, match="unknown codec"):
        JudgeConfig(folder=judged, codec="mp3")


def test_missing_extra_is_one_line_naming_it(folders, monkeypatch):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)  # import fails as if not installed
    result = CliRunner().invoke(main, ["judge", str(folders[0])])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: gossip-tts judge needs the [judge] extra (pocketsphinx is not installed): pip install 'gossip-tts[judge]'"]


def test_a_second_judge_of_the_same_ids_recalls_the_controls_and_gives_the_same_figures(folders, private_cache):
    judged, real = folders

    class CountingEars(LoudnessEars):
        heard = 0

        def transcribe(self, wav):
            CountingEars.heard += 1
            return super().transcribe(wav)

    cfg = JudgeConfig(folder=judged, real=real, plot_enabled=False)
    first, told = judge(cfg, CountingEars()), []
    heard_first, CountingEars.heard = CountingEars.heard, 0
    second = judge(cfg, CountingEars(), told.append)
    assert (private_cache / "judge-heard.json").is_file()
    assert CountingEars.heard == len(read_folder(judged))  # the judged clips only: the controls were recalled
    assert heard_first > CountingEars.heard and any("control clips heard before" in line for line in told)
    assert [s.overall() for s in second.sets] == [s.overall() for s in first.sets]


def test_control_with_remember_off_every_run_hears_its_controls_and_keeps_nothing(folders, private_cache):
    judged, real = folders
    cfg = JudgeConfig(folder=judged, real=real, plot_enabled=False, remember=False)
    judge(cfg, LoudnessEars())
    told: list[str] = []
    judge(cfg, LoudnessEars(), told.append)
    assert not (private_cache / "judge-heard.json").exists()
    assert not any("heard before" in line for line in told)
