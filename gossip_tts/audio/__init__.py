"""Audio codecs (waveform <-> latent frames), wav I/O, and packing clips into latent tars.

Each name is imported when first asked for, so reading the codec names (`gossip_tts.audio.registry`,
which the CLI's `--help` lists) does not import torch with the codecs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_names

if TYPE_CHECKING:
    from .base import Codec
    from .io import read_wav, resample, write_wav
    from .mel import MelCodec, MelConfig
    from .registry import codec_names, load_codec

_HOME = {
    "Codec": "gossip_tts.audio.base", "MelCodec": "gossip_tts.audio.mel", "MelConfig": "gossip_tts.audio.mel",
    **dict.fromkeys(("read_wav", "resample", "write_wav"), "gossip_tts.audio.io"),
    **dict.fromkeys(("codec_names", "load_codec"), "gossip_tts.audio.registry"),
}
"""Each public name and the module that defines it."""

__all__ = list(_HOME)


__getattr__ = lazy_names(__name__, _HOME)
