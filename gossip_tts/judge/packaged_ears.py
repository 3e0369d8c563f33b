"""The `[judge]` extra's listeners, all with their weights inside their wheels (nothing downloads):

- words: pocketsphinx's en-us acoustic model, dictionary and language model;
- voice: resemblyzer's GE2E speaker encoder (cosine of its L2-normalised embeddings);
- quality: DNSMOS (speechmos's ONNX models on onnxruntime), its overall (OVRL) score.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .ears import EAR_RATE, Ears, missing_extra

LISTENING_PACKAGES = ("pocketsphinx", "resemblyzer", "speechmos", "onnxruntime", "torch", "librosa", "webrtcvad",
                      "numpy")
"""The distributions whose versions can move an answer (the three models and what runs or feeds them)."""

HOW_THEY_LISTEN = 1
"""Raise it when this module changes how a clip is heard (decoder settings, trimming, scaling), so
answers kept on disk from before are not reused."""

_MIN_VOICED_SAMPLES = EAR_RATE // 10
"""Below this much audio left after resemblyzer's silence trimming, the untrimmed clip is embedded
instead (noise and silence can trim to nothing, and the encoder needs some frames)."""


def _import(name: str):
    import importlib

    try:
        with warnings.catch_warnings():  # webrtcvad's pkg_resources import warns about its deprecation
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except ImportError as exc:
        raise missing_extra(exc.name or name) from exc


class PackagedEars(Ears):
    """pocketsphinx + resemblyzer + DNSMOS on the CPU, loaded once and reused for every clip."""

    name = "pocketsphinx en-us / resemblyzer / DNSMOS"

    def __init__(self) -> None:
        pocketsphinx = _import("pocketsphinx")
        resemblyzer = _import("resemblyzer")
        dnsmos = _import("speechmos.dnsmos")
        _import("onnxruntime")
        self._asr = pocketsphinx
        self._encoder = resemblyzer.VoiceEncoder(device="cpu", verbose=False)
        self._trim = resemblyzer.preprocess_wav
        models = os.path.dirname(os.path.abspath(dnsmos.__file__))
        self._mos = dnsmos.DNSMOS(os.path.join(models, "dnsmos_models", "sig_bak_ovr.onnx"),
                                  os.path.join(models, "dnsmos_models", "model_v8.onnx"))

    def identity(self) -> str:
        return packaged_identity()

    def transcribe(self, wav: np.ndarray) -> str:
        pcm = (np.clip(wav, -1.0, 1.0) * 32767.0).astype(np.int16).tobytes()
        # A fresh decoder per clip: one carries state (cepstral means and more) from an utterance into
        # the next, which would make a clip's transcript depend on the clips decoded before it.
        decoder = self._asr.Decoder(samprate=EAR_RATE, loglevel="FATAL")
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr if hyp is not None else ""

    def embed(self, wav: np.ndarray) -> np.ndarray:
        voiced = self._trim(np.asarray(wav, dtype=np.float32))
        if voiced.size < _MIN_VOICED_SAMPLES:
            voiced = np.asarray(wav, dtype=np.float32)
        return np.asarray(self._encoder.embed_utterance(voiced), dtype=np.float64)

    def quality(self, wav: np.ndarray) -> float:
        return float(self._mos(np.clip(wav, -1.0, 1.0).astype(np.float32), EAR_RATE, False)["ovrl_mos"])


def packaged_identity() -> str:
    """`PackagedEars().identity()` without loading a model: this module's listening revision, the
    ear rate and the installed versions of `LISTENING_PACKAGES`."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    versions = " ".join(f"{name}={installed(name)}" for name in LISTENING_PACKAGES)
    return f"{PackagedEars.name} r{HOW_THEY_LISTEN} {EAR_RATE} Hz min-voiced {_MIN_VOICED_SAMPLES}; {versions}"
