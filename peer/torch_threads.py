"""One torch thread for a stretch of small tensor work, and the caller's count back after it.

Small tensors gain nothing from torch's intra-op threads, and on a busy machine the extra ones
spin while they wait: the built-in corpus's per-clip work, simnet's runs (where one thread also
keeps reductions repeatable) and the unit and simulator tests run on one.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["one_torch_thread"]


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the body on one torch thread; the count before is restored however the body ends."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
