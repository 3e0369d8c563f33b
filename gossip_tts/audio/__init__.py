"""Audio codecs (waveform <-> latent frames), wav I/O, and packing clips into latent tars."""

from __future__ import annotations

from .base import Codec
from .io import read_wav, resample, write_wav
from .mel import MelCodec, MelConfig

CODECS = ("mel", "dac", "echo")


def load_codec(name: str, *, weights: str | None = None, device: str = "cpu") -> Codec:
    """Build a codec by the name shards record: "mel" (weight-free), "dac" or "echo" (extras).

    `weights` is a local weights file for codecs that have weights; without one, DAC
    downloads its own. The mel codec has none and refuses a path, so that a mistyped
    `--codec` does not silently ignore `--codec-weights`. `device` matters only to DAC:
    the mel codec's STFTs are cheap enough on CPU.
    """
    if name == "mel":
        if weights is not None:
            raise ValueError("the mel codec has no weights; drop --codec-weights or choose --codec dac")
        return MelCodec()
    if name == "dac":
        from .dac_codec import DacCodec, DacConfig

        return DacCodec(DacConfig(weights=weights, device=device))
    if name == "echo":
        from .echo_codec import EchoCodec, EchoCodecConfig

        return EchoCodec(EchoCodecConfig(weights=weights, device=device))
    raise ValueError(f"unknown codec {name!r}; choose one of: {', '.join(CODECS)}")


__all__ = ["CODECS", "Codec", "MelCodec", "MelConfig", "load_codec", "read_wav", "resample", "write_wav"]
