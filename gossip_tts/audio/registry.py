"""The audio codecs a shard may record, by name: the one list that `load_codec`, the configs that
name a codec (pack, judge, held-out judging) and the CLI's `--codec` choices read.

Torch-free, so `gossip-tts --help` can list the names: each builder imports its codec when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from .base import Codec

__all__ = ["AudioCodec", "AUDIO_CODECS", "codec_names", "check_codec_name", "load_codec"]


@dataclass(frozen=True)
class AudioCodec:
    """One audio codec: the name shards record, and how to build it from a weights path and a device."""

    name: str
    build: Callable[[Optional[str], str], "Codec"]


def _mel(weights: Optional[str], device: str) -> "Codec":
    from .mel import MelCodec

    if weights is not None:
        raise ValueError("the mel codec has no weights; drop --codec-weights or choose --codec dac")
    return MelCodec()  # its STFTs are cheap enough on CPU


def _dac(weights: Optional[str], device: str) -> "Codec":
    from .dac_codec import DacCodec, DacConfig

    return DacCodec(DacConfig(weights=weights, device=device))


def _echo(weights: Optional[str], device: str) -> "Codec":
    from .echo_codec import EchoCodec, EchoCodecConfig

    return EchoCodec(EchoCodecConfig(weights=weights, device=device))


AUDIO_CODECS: tuple[AudioCodec, ...] = (AudioCodec("mel", _mel), AudioCodec("dac", _dac), AudioCodec("echo", _echo))
"""Every audio codec: "mel" (weight-free), "dac" and "echo" (extras)."""


def codec_names() -> tuple[str, ...]:
    """What a `codec` setting or `--codec` may name."""
    return tuple(codec.name for codec in AUDIO_CODECS)


def check_codec_name(name: str) -> str:
    """`name`, or a ValueError listing the choices."""
    if name not in codec_names():
        raise ValueError(f"unknown codec {name!r}; choose one of: {', '.join(codec_names())}")
    return name


def load_codec(name: str, *, weights: str | None = None, device: str = "cpu") -> "Codec":
    """Build a codec by the name shards record.

    `weights` is a local weights file for codecs that have weights; without one, DAC
    downloads its own. The mel codec has none and refuses a path, so that a mistyped
    `--codec` does not silently ignore `--codec-weights`. `device` matters only to DAC.
    """
    check_codec_name(name)
    return next(codec for codec in AUDIO_CODECS if codec.name == name).build(weights, device)
