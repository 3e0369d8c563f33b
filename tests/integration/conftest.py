import shutil
import uuid
from pathlib import Path

import pytest

from tests.integration.peers import PeerProcess


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """The built-in corpus, split by speaker into one shard folder per peer."""
    from gossip_tts.data import ensure_builtin_corpus

    root = tmp_path_factory.mktemp("corpus")
    train, val = ensure_builtin_corpus(root / "builtin")
    shards = sorted(train.glob("*.tar"))
    out: dict[str, Path] = {"train": train, "val": val}
    for i, shard in enumerate(shards):
        d = root / f"shard{i}"
        d.mkdir()
        shutil.copy(shard, d / shard.name)
        out[f"shard{i}"] = d
    return out


@pytest.fixture
def swarm_name() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def spawn(tmp_path):
    """Start peers; whatever is still running at teardown (long-running peers a test left on
    purpose, or ones a failed test abandoned) is killed with its process group."""
    started: list[PeerProcess] = []

    def _spawn(name: str, *args: str) -> PeerProcess:
        p = PeerProcess(list(args), tmp_path / f"{name}.log")
        started.append(p)
        return p

    yield _spawn
    for p in started:
        p.kill()


def tiny_args(data: Path, ckpt: Path, *extra: str, steps: int = 200) -> list[str]:
    """A fast tiny-preset peer: one thread, a 384-frame clip limit, frequent logs."""
    return [
        "--preset", "tiny", "--device", "cpu", "--threads", "1", "--batch-size", "8", "--max-frames", "384",
        "--lr", "1e-3", "--data", str(data), "--checkpoint-dir", str(ckpt), "--max-steps", str(steps),
        "--log-every", "1", *extra,
    ]
