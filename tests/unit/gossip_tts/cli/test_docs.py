"""docs/cli.md is what `python -m gossip_tts.cli.docs` writes: the reference cannot drift from the code."""

from gossip_tts.cli.main import main
from gossip_tts.cli.docs import render
from tests.paths import REPO

DOC = REPO / "docs" / "cli.md"


def test_docs_cli_md_is_generated_from_the_commands():
    fresh = render(main)
    assert DOC.read_text(encoding="utf-8") == fresh, "docs/cli.md is stale: run `python -m gossip_tts.cli.docs > docs/cli.md`"
    assert "| `--batch-size INTEGER` | `16` | `[train] batch_size` |" in fresh  # the default comes from TrainConfig
    assert "`GOSSIP_TTS_SESSION_MAX_PEERS`" in fresh
