"""The default `pytest` run: quick suites first, and one Ctrl+C (or SIGTERM) ends it.

Each case runs a small pytest in a subprocess (on test files written here, with
tests/conftest.py loaded as a plugin), so what is checked is what pytest does with the hook
and the fixture.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def run_pytest(*args: str, plugin: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """pytest on `args` from the repository's root; `plugin`: tests/conftest.py loaded for files outside tests/."""
    loaded = ["-p", "tests.conftest"] if plugin else []
    return subprocess.run([sys.executable, "-m", "pytest", *loaded, "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_the_unit_tests_come_first_then_sim_integration_adversarial():
    files = ["tests/adversarial/test_victim_peer.py", "tests/integration/test_cli_logging.py",
             "tests/sim/test_simnet_cli.py", "tests/unit/project/test_docs_links.py"]
    result = run_pytest("--collect-only", "-q", "-m", "slow or not slow", *files, plugin=False)
    assert result.returncode == 0, result.stdout + result.stderr
    order = [line.split("/")[1] for line in result.stdout.splitlines() if line.startswith("tests/") and "::" in line]
    firsts = [suite for i, suite in enumerate(order) if suite not in order[:i]]
    assert firsts == ["unit", "sim", "integration", "adversarial"], order


def test_ctrl_c_swallowed_by_the_code_under_test_still_stops_the_run_with_its_summary(tmp_path: Path):
    (tmp_path / "test_swallow.py").write_text(
        "import os, signal, time\n\n"
        "def test_a_loop_that_stops_gracefully_on_ctrl_c():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "    except KeyboardInterrupt:\n"
        "        pass  # as the training loop does: stop after this step\n\n"
        "def test_the_next_one():\n"
        "    pass\n")
    result = run_pytest("-q", str(tmp_path / "test_swallow.py"))
    out = result.stdout
    assert "Interrupted: Ctrl+C during a test" in out and "1 passed" in out, out
    assert result.returncode == 2, out


def test_a_sigterm_handler_a_test_leaves_is_put_back(tmp_path: Path):
    (tmp_path / "test_handler.py").write_text(
        "import signal\n\n"
        "def test_installs_a_handler_and_leaves_it():\n"
        "    signal.signal(signal.SIGTERM, lambda signum, frame: None)\n"
        "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n\n"
        "def test_the_next_one_finds_them_as_they_were():\n"
        "    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n"
        "    assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL)  # Ctrl+C raises\n")
    result = run_pytest("-q", str(tmp_path / "test_handler.py"))
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout
