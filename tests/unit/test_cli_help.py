"""`gossip-tts --help` answers without importing torch (importing it costs seconds)."""

import subprocess
import sys

PROBE = """
import sys
from click.testing import CliRunner
from gossip_tts.cli import main
for args in (["--help"], ["peer", "--help"], ["status", "--help"], ["pack", "--help"], ["eval", "--help"], ["keygen", "--help"]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
print("torch" in sys.modules)
"""


def test_help_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "a module imported by gossip_tts.cli imports torch at module level"
