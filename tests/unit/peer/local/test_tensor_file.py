"""Checkpoint files written a tensor at a time: safetensors reads back every dtype and shape a
checkpoint holds, and what is written is each tensor's own memory, not a copy of it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load

from peer.local.tensor_file import write_safetensors


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(3, 5, generator=g), "b.bias": torch.randn(7, generator=g).to(torch.bfloat16),
        "half": torch.randn(4, generator=g).half(), "step": torch.tensor(12, dtype=torch.int64),
        "scalar": torch.tensor(1.5), "empty": torch.zeros(0, 3), "mask": torch.tensor([True, False, True]),
        "codes": torch.arange(-4, 4, dtype=torch.int8), "ids": torch.arange(9, dtype=torch.int32).reshape(3, 3),
        "bytes": torch.arange(5, dtype=torch.uint8), "wide": torch.randn(2, generator=g, dtype=torch.float64),
        "short": torch.arange(3, dtype=torch.int16),
    }


def test_safetensors_reads_back_every_dtype_shape_and_the_metadata(tmp_path) -> None:
    written = tensors()
    path = tmp_path / "t.safetensors"
    with open(path, "wb") as f:
        write_safetensors(f, written, {"b": "2", "a": "1"})
    read = load(path.read_bytes())
    assert set(read) == set(written)
    for name, t in written.items():
        assert read[name].dtype == t.dtype and read[name].shape == t.shape and torch.equal(read[name], t), name
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"a": "1", "b": "2"}
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert header_len % 8 == 0  # padded, as the library pads it


class Recorder(io.RawIOBase):
    """A file that keeps the address of each buffer handed to `write`."""

    def __init__(self) -> None:
        self.addresses: list[int] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data)
        self.addresses.append(np.frombuffer(view, np.uint8).__array_interface__["data"][0] if view.nbytes else 0)
        return view.nbytes


def test_each_tensor_is_written_from_its_own_memory() -> None:
    big = {"a": torch.randn(1000), "b": torch.randn(50, 20).to(torch.bfloat16)}
    f = Recorder()
    write_safetensors(f, big, {})
    assert f.addresses[-2:] == [big["a"].data_ptr(), big["b"].data_ptr()]  # after the length and the header


def test_a_tensor_it_cannot_name_or_read_in_place_is_refused() -> None:
    with pytest.raises(ValueError, match="no safetensors name"):
        write_safetensors(io.BytesIO(), {"c": torch.zeros(2, dtype=torch.complex64)}, {})
    with pytest.raises(ValueError, match="contiguous"):
        write_safetensors(io.BytesIO(), {"t": torch.randn(4, 4).t()}, {})
