"""The gossip-tts wire: identities, signed frames, tensor codecs, limits, receiver tickets.

Pure code: no sockets, no tasks, no clocks, no global randomness. Time, seeds and keys
are passed in, so the same code runs in a real peer, in simnet and in unit tests.

Each name is imported when first asked for, so reading the codec table (`protocol.codec_table`,
which the CLI's `--help` lists) does not import torch with the codecs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

if TYPE_CHECKING:
    from .codecs import (BF16Codec, CodecBase, FP16Codec, IdentityCodec, Int8Codec, SparseCodec, TensorCodec,
                         parse_codec)
    from .errors import CodecError, FrameRefused, RefusalReason
    from .frame import (PREFIX_SIZE, Frame, VerifiedFrame, codec_seed, decode_frame, encode_frame,
                        peek_frame_length, peek_frame_sender, verify_frame)
    from .header import FrameHeader, FrameKind, ParamSpec, TensorSpec
    from .identity import Identity, verify_signature
    from .limits import Limits, VerifyPolicy
    from .messages import (bundle_digest, flat_model_spec, held_dtype, make_control_frame, make_snapshot_frame,
                           make_step_update_frame, make_update_frame, model_fingerprint, model_spec_of, pack_bundle,
                           read_vector, unpack_bundle)
    from .replay import TicketBook, epoch_from, next_epoch
    from .sparse import SparseVector

_HOME = {
    **dict.fromkeys(("BF16Codec", "CodecBase", "FP16Codec", "IdentityCodec", "Int8Codec", "SparseCodec",
                     "TensorCodec", "parse_codec"), "protocol.codecs"),
    **dict.fromkeys(("CodecError", "FrameRefused", "RefusalReason"), "protocol.errors"),
    **dict.fromkeys(("PREFIX_SIZE", "Frame", "VerifiedFrame", "codec_seed", "decode_frame", "encode_frame",
                     "peek_frame_length", "peek_frame_sender", "verify_frame"), "protocol.frame"),
    **dict.fromkeys(("FrameHeader", "FrameKind", "ParamSpec", "TensorSpec"), "protocol.header"),
    **dict.fromkeys(("Identity", "verify_signature"), "protocol.identity"),
    **dict.fromkeys(("Limits", "VerifyPolicy"), "protocol.limits"),
    **dict.fromkeys(("bundle_digest", "flat_model_spec", "held_dtype", "make_control_frame", "make_snapshot_frame",
                     "make_step_update_frame", "make_update_frame", "model_fingerprint", "model_spec_of",
                     "pack_bundle", "read_vector", "unpack_bundle"), "protocol.messages"),
    **dict.fromkeys(("TicketBook", "epoch_from", "next_epoch"), "protocol.replay"),
    "SparseVector": "protocol.sparse",
}
"""Each public name and the module that defines it."""

__all__ = list(_HOME)


__getattr__ = lazy_names(__name__, _HOME)
