"""`gossip-tts --help` answers without importing torch (importing it costs seconds)."""

import subprocess
import sys

PROBE = """
import sys
from click.testing import CliRunner
from gossip_tts.cli.main import main
for args in (["--help"], ["simnet", "--help"], ["peer", "--help"], ["status", "--help"], ["pack", "--help"], ["eval", "--help"], ["keygen", "--help"]):
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
