"""The gossip-tts wire: identities, signed frames, tensor codecs, limits, receiver tickets.

Pure code: no sockets, no tasks, no clocks, no global randomness. Time, seeds and keys
are passed in, so the same code runs in a real peer, in simnet and in unit tests.
"""

from .codecs import (BF16Codec, CodecBase, FP16Codec, IdentityCodec, Int8Codec, SparseCodec,
                     TensorCodec, parse_codec)
from .errors import CodecError, FrameRefused, RefusalReason
from .frame import (PREFIX_SIZE, Frame, VerifiedFrame, codec_seed, decode_frame, encode_frame,
                    peek_frame_length, peek_frame_sender, verify_frame)
from .header import FrameHeader, FrameKind, TensorSpec
from .identity import Identity, verify_signature
from .limits import Limits, VerifyPolicy
from .messages import (bundle_digest, flat_model_spec, held_dtype, make_control_frame, make_snapshot_frame,
                       make_step_update_frame, make_update_frame, model_fingerprint, model_spec_of, pack_bundle,
                       read_vector, unpack_bundle)
from .replay import TicketBook, epoch_from, next_epoch
from .sparse import SparseVector

__all__ = [
    "BF16Codec", "CodecBase", "CodecError", "FP16Codec", "Frame", "FrameHeader", "FrameKind",
    "FrameRefused", "Identity", "IdentityCodec", "Int8Codec", "Limits", "PREFIX_SIZE",
    "RefusalReason", "SparseCodec", "SparseVector", "TensorCodec", "TensorSpec", "TicketBook", "VerifiedFrame", "VerifyPolicy",
    "bundle_digest", "codec_seed", "decode_frame", "encode_frame", "epoch_from", "flat_model_spec",
    "held_dtype", "make_control_frame", "make_snapshot_frame", "make_step_update_frame", "make_update_frame", "model_fingerprint",
    "model_spec_of", "next_epoch", "pack_bundle", "parse_codec", "peek_frame_length", "peek_frame_sender",
    "read_vector", "unpack_bundle", "verify_frame", "verify_signature",
]
