"""`gossip-tts --help` answers without importing torch (importing it costs seconds)."""

import subprocess
import sys

import pytest

from tests.paths import REPO

PROBE = """
import sys
from click.testing import CliRunner
from gossip_tts.cli.main import main
for args in (["--help"], ["simnet", "--help"], ["peer", "--help"], ["status", "--help"], ["pack", "--help"], ["eval", "--help"],
             ["keygen", "--help"], ["synthesize", "--help"], ["manifest", "--help"], ["import-echo", "--help"],
             ["judge", "--help"]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
print("torch" in sys.modules)
"""


def test_help_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "a module imported by gossip_tts.cli.main imports torch at module level"


def test_simnet_help_names_every_built_in_scenario():
    from pathlib import Path

    from click.testing import CliRunner

    import simnet
    from gossip_tts.cli.main import main

    out = " ".join(CliRunner().invoke(main, ["simnet", "--help"]).output.split())
    names = [p.stem for p in (Path(simnet.__file__).parent / "scenarios").glob("*.toml")]
    assert len(names) >= 9
    assert all(name in out for name in names), (names, out)


MISTYPED = """
import sys
from click.testing import CliRunner
from gossip_tts.cli.main import main
for args in (["--listen", "nonsense"], ["--peer", "nonsense"], ["--listen", "127.0.0.1:99999"], ["--peer", "a:b"]):
    result = CliRunner().invoke(main, ["peer", *args])
    assert result.exit_code == 2 and "Error: --" in result.output, (args, result.output)
print("torch" in sys.modules)
"""


def test_a_mistyped_listen_or_peer_address_is_answered_before_torch_loads():
    out = subprocess.run([sys.executable, "-c", MISTYPED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "checking --listen/--peer imported torch: they wait seconds for it"


IMPORTS = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print("torch" in sys.modules)
"""
CLI_MODULES = sorted(f"gossip_tts.cli.{p.stem}" for p in (REPO / "gossip_tts" / "cli").glob("*.py") if p.stem != "__init__")
CONFIGS = ["gossip_tts.apps.peer_config", "gossip_tts.apps.synth_config", "gossip_tts.apps.eval_config",
           "gossip_tts.audio.pack_config", "gossip_tts.cli.status", "simnet.runs.cli_app", "gossip_tts.train.weights",
           "gossip_tts.model.guidance", "gossip_tts.judge.config"]
"""The configs whose defaults `--help` reads, and the names its choices come from."""


def _imports_torch(*modules: str) -> bool:
    out = subprocess.run([sys.executable, "-c", IMPORTS, *modules], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_no_module_of_the_cli_layer_nor_a_config_it_reads_imports_torch():
    assert len(CLI_MODULES) >= 10
    assert not _imports_torch(*CLI_MODULES, *CONFIGS), "a module of gossip_tts/cli or a config its --help reads imports torch"


@pytest.mark.parametrize("module", ["gossip_tts.apps.peer_app", "gossip_tts.apps.synth_app"])
def test_the_probe_sees_an_app_that_imports_torch(module):
    """The control: what a command runs may import torch, and the probe says so."""
    assert _imports_torch(module)
