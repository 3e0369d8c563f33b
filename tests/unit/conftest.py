import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Small matmuls run faster on one thread, and much faster on a shared, busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
