"""Dense tensor codecs: fp32 (identity), fp16, bf16, int8 with per-block scales.

Each codec maps a 1-D float32 or bfloat16 vector (`protocol.codec_input`) to named numpy arrays
for the wire and back; a bfloat16 vector gives the arrays its float32 widening gives.
`compress` returns the reconstruction by running `decompress` on the very arrays it
packed (the sparse codecs skip decoding the indices they just chose), so the sender's
error feedback (CHOCO-SGD public copy, Koloskova et al. 2019) matches what receivers
rebuild bit for bit. These codecs also encode the kept values of the sparse codecs
(`codecs_sparse`).
"""

from __future__ import annotations

import numpy as np
import torch

from .codec_input import CodecInput
from .errors import CodecError
from .sparse import SparseVector

__all__ = ["CodecBase", "IdentityCodec", "FP16Codec", "BF16Codec", "Int8Codec",
           "Layout", "codec_input", "check_layout", "check_numel"]

Layout = dict[str, tuple[np.dtype, int]]  # packed array name -> (dtype, length)

_FP16_MAX = 65504.0
_BF16_MAX = float(torch.finfo(torch.bfloat16).max)
_INT8_PIECE = 1 << 18
"""Entries int8 encodes at a time (whole blocks): 1 MiB of float32, in a core's cache."""


def codec_input(x: torch.Tensor) -> CodecInput:
    """A 1-D float32 or bfloat16 tensor as the codecs read it, copied to the host where it lives
    elsewhere (a dense codec sends every entry, so every entry crosses; the sparse codecs select
    where the tensor lives instead: `SparseCodec.compress_where_held`). Anything else is a caller bug."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"codec input must be a torch.Tensor, got {type(x).__name__}")
    return CodecInput(x if x.device.type == "cpu" else x.detach().cpu())


def check_layout(packed: dict[str, np.ndarray], layout: Layout) -> dict[str, np.ndarray]:
    """Refuse packed arrays whose names, dtypes or lengths the codec could not produce."""
    if not isinstance(packed, dict) or set(packed) != set(layout):
        got = sorted(packed) if isinstance(packed, dict) else type(packed).__name__
        raise CodecError(f"packed arrays {got} != expected {sorted(layout)}")
    for name, (dtype, length) in layout.items():
        arr = packed[name]
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.shape != (length,):
            desc = (f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray)
                    else type(arr).__name__)
            raise CodecError(f"packed array {name!r} is {desc}, expected {dtype} ({length},)")
    return packed


def check_numel(numel: int) -> int:
    if not isinstance(numel, (int, np.integer)) or isinstance(numel, bool) or numel < 0:
        raise ValueError(f"numel must be an int >= 0, got {numel!r}")
    return int(numel)


def _to_fp16(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(-_FP16_MAX, _FP16_MAX).to(torch.float16)


def _to_bf16_bits(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(-_BF16_MAX, _BF16_MAX).to(torch.bfloat16).view(torch.int16)


class CodecBase:
    """Shared driver of every codec: subclasses define `layout`, `_encode` and `_unpack`."""

    spec: str = ""

    def layout(self, numel: int) -> Layout:
        raise NotImplementedError

    def _pack(self, v: "CodecInput | np.ndarray", seed: int) -> dict[str, np.ndarray]:
        """The packed arrays of `v` (a float32 array is read as it is)."""
        return self._encode(CodecInput.of(v), seed)

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        """A fresh, writable float32 array of length `numel`."""
        raise NotImplementedError

    def compress(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], torch.Tensor]:
        """(packed arrays, the exact tensor `decompress` will rebuild from them)."""
        packed, rebuilt = self.compress_sparse(x, seed)
        return packed, rebuilt.dense()

    def compress_sparse(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], SparseVector]:
        """`compress`, with the reconstruction as the entries it keeps (all of them here)."""
        v = codec_input(x)
        packed = self._encode(v, seed)
        return packed, self.decompress_sparse(packed, v.size, seed)

    def decompress(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> torch.Tensor:
        return self.decompress_sparse(packed, numel, seed).dense()

    def decompress_sparse(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> SparseVector:
        """`decompress` as the entries the codec keeps: what a receiver adds without expanding it."""
        numel = check_numel(numel)
        arrays = check_layout(packed, self.layout(numel))
        return SparseVector.of_dense(torch.from_numpy(self._unpack(arrays, numel, seed)))

    def packed_nbytes(self, numel: int) -> int:
        """Exact bytes of the packed arrays (before container and lz4)."""
        return sum(np.dtype(d).itemsize * n for d, n in self.layout(check_numel(numel)).values())

    def expected_ratio(self, numel: int) -> float:
        """fp32 bytes / packed bytes; 1.0 for an empty tensor."""
        nbytes = self.packed_nbytes(numel)
        return 4.0 * numel / nbytes if nbytes else 1.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class IdentityCodec(CodecBase):
    """Exact fp32: error 0. Used for snapshots, which must not drift."""

    spec = "identity"

    def layout(self, numel: int) -> Layout:
        return {"v": (np.dtype(np.float32), numel)}

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        return {"v": v.mapped(torch.clone, torch.float32).numpy()}

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        return packed["v"].astype(np.float32, copy=True)


class FP16Codec(CodecBase):
    """IEEE half precision, round to nearest even; values are clamped to ±65504.

    Error bound: |x - x̂| <= 2^-11 |x| for 2^-14 <= |x| <= 65504, <= 2^-25 below 2^-14.
    """

    spec = "fp16"

    def layout(self, numel: int) -> Layout:
        return {"v": (np.dtype(np.float16), numel)}

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        # torch's vectorised cast is several times faster than numpy's astype(float16)
        return {"v": v.mapped(_to_fp16, torch.float16).numpy()}

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        return packed["v"].astype(np.float32)


class BF16Codec(CodecBase):
    """bfloat16 (fp32 range, 8-bit mantissa), round to nearest even, sent as raw uint16 bits.

    Error bound: |x - x̂| <= 2^-8 |x| for normal x (|x| >= 2^-126).
    """

    spec = "bf16"

    def layout(self, numel: int) -> Layout:
        return {"v": (np.dtype(np.uint16), numel)}

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        return {"v": v.mapped(_to_bf16_bits, torch.int16).numpy().view(np.uint16).copy()}

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        return (packed["v"].astype(np.uint32) << np.uint32(16)).view(np.float32)


class Int8Codec(CodecBase):
    """Symmetric int8 with one fp32 scale per block of `block` values (default 256).

    Block-wise scales (as in Dettmers et al. 2022, 8-bit block-wise quantization) keep one
    outlier from flattening the resolution of the whole tensor.

    scale_b = max_{i in b} |x_i| / 127, q_i = round_half_even(x_i / scale_b).
    Error bound: |x_i - x̂_i| <= scale_b / 2 = max_b |x| / 254 (up to fp32 rounding).
    """

    def __init__(self, block: int = 256) -> None:
        if not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= 65536:
            raise ValueError(f"int8 block must be an int in [1, 65536], got {block!r}")
        self.block = block
        self.spec = "int8" if block == 256 else f"int8:block={block}"

    def layout(self, numel: int) -> Layout:
        return {"q": (np.dtype(np.int8), numel),
                "s": (np.dtype(np.float32), -(-numel // self.block))}

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        """Block scales and codes, a piece of whole blocks at a time, each written into the two
        arrays sent: the float32 temporaries of a pass are a piece's, not the vector's (at a dense
        publish of a large model they were three copies of it)."""
        n, b = v.size, self.block
        step = max(1, _INT8_PIECE // b) * b
        if n <= step:
            q, scale = self._pack_piece(torch.from_numpy(v.whole()))
            return {"q": q, "s": scale}
        q, scale = np.empty(n, np.int8), np.empty(-(-n // b), np.float32)
        for start, piece in v.pieces(step):
            codes, scales = self._pack_piece(torch.from_numpy(piece))
            q[start:start + codes.size] = codes
            scale[start // b:start // b + scales.size] = scales
        return {"q": q, "s": scale}

    def _pack_piece(self, piece: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(codes, scales) of a piece that starts on a block: scale = max |x| / 127 per block,
        code = x / scale rounded half to even; a partial last block is zero-padded, as a full one."""
        n, b = piece.numel(), self.block
        nblocks = -(-n // b)
        blocks = torch.nn.functional.pad(piece, (0, nblocks * b - n)).view(nblocks, b)
        scale = blocks.abs().amax(dim=1) / 127.0 if n else torch.zeros(0)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(blocks / safe[:, None]).clamp_(-127, 127).to(torch.int8)  # half to even
        return q.view(-1)[:n].numpy().copy(), scale.numpy()

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        q, s = packed["q"], packed["s"]
        if not (np.isfinite(s).all() and (s >= 0).all()):
            raise CodecError("int8 scales must be finite and >= 0")
        b = self.block
        out = np.zeros(s.size * b, np.float32)
        out[:numel] = q
        blocks = out.reshape(s.size, b)
        blocks *= s[:, None]
        return out[:numel]
