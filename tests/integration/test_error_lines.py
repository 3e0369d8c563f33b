"""Every mistake a user can make at run time ends in one line naming the problem and the fix.

A table of the mistakes a newcomer makes (pointing --data at raw-audio tars, a taken port, a
damaged checkpoint, an existing run, a wrong key file, ...): each is fed to the real CLI
and its output must hold exactly one `Error:` line, carrying the words of the problem and
of the fix, with no traceback and no click usage banner above it.
"""

from __future__ import annotations

import io
import socket
import tarfile
from pathlib import Path
from typing import Callable

import pytest
import torch
from click.testing import CliRunner

from gossip_tts.cli import logs
from gossip_tts.cli.main import main
from peer.local.checkpoint import save_checkpoint

PEER = ["peer", "--preset", "tiny", "--device", "cpu", "--no-mdns", "--listen", "127.0.0.1:0", "--max-steps", "1"]
SOLO = ["peer", "--solo", "--preset", "tiny", "--device", "cpu", "--max-steps", "1"]


def raw_audio_tars(d: Path) -> Path:
    """A tar of wav + txt pairs: what someone's own recordings look like before `pack`."""
    d.mkdir()
    with tarfile.open(d / "audio-000.tar", "w") as tar:
        for i in range(3):
            for name, data in ((f"{i}.wav", b"RIFF" + bytes(400)), (f"{i}.txt", b"hello")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return d


def junk(path: Path, data: bytes = b"not what it should be") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def held_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def existing_run(tmp: Path) -> None:
    save_checkpoint(tmp / "runs" / "s1", {"w": torch.zeros(2)}, {"step": 8, "train_config": {"preset": "tiny"}})


# name -> (arguments given tmp_path and the corpus, words of the problem, words of the fix)
Case = Callable[[Path, dict], list[str]]
CASES: dict[str, tuple[Case, list[str], list[str]]] = {
    "--data at raw-audio tars": (
        lambda t, c: SOLO + ["--checkpoint-dir", "none", "--data", str(raw_audio_tars(t / "raw"))],
        ["no latent sample", "raw-audio tars"], ["gossip-tts pack"]),
    "--data at a missing folder": (
        lambda t, c: SOLO + ["--checkpoint-dir", "none", "--data", str(t / "nope")],
        ["does not exist"], ["folder of latent tars"]),
    "--data at a folder without tars": (
        lambda t, c: SOLO + ["--checkpoint-dir", "none", "--data", str((t / "empty").mkdir() or t / "empty")],
        ["holds no .tar shard"], ["gossip-tts pack"]),
    "an existing run in the default folder": (
        lambda t, c: existing_run(t) or SOLO + ["--swarm", "s1"],
        ["already holds a checkpoint"], ["--resume", "--overwrite", "--checkpoint-dir"]),
    "an existing run in a given folder": (
        lambda t, c: save_checkpoint(t / "run1", {"w": torch.zeros(2)}, {"step": 45, "train_config": {"preset": "tiny"}})
        and SOLO + ["--checkpoint-dir", str(t / "run1"), "--data", str(c["shard0"])],
        ["already holds a checkpoint (step 45"], ["--resume", "--overwrite"]),
    "--resume a damaged checkpoint": (
        lambda t, c: junk(t / "ck" / "checkpoint.safetensors") and SOLO + [
            "--checkpoint-dir", str(t / "ck"), "--resume", "--data", str(c["shard0"])],
        ["cannot --resume", "unreadable"], ["move the damaged", "--checkpoint-dir"]),
    "--resume a checkpoint of another preset": (
        lambda t, c: save_checkpoint(t / "ck", {"w": torch.zeros(2)}, {"step": 3, "train_config": {"preset": "small"}})
        and SOLO + ["--checkpoint-dir", str(t / "ck"), "--resume"],
        ["preset small"], ["pass --preset small"]),
    "--listen at a port in use": (
        lambda t, c: PEER[:-4] + ["--checkpoint-dir", "none", "--listen", f"127.0.0.1:{c['held_port']}"],
        ["port is in use"], ["pick another port"]),
    "--data swarm: with a hash that is not one": (
        lambda t, c: PEER + ["--checkpoint-dir", "none", "--data", "swarm:zz"], ["'swarm:zz'", "64 lowercase hex digits"], []),
    "--key at a file that is not a key": (
        lambda t, c: SOLO + ["--checkpoint-dir", "none", "--data", str(c["shard0"]), "--key", str(junk(t / "k"))],
        ["malformed"], ["gossip-tts keygen"]),
    "--init-from a file that is not a checkpoint": (
        lambda t, c: SOLO + ["--checkpoint-dir", "none", "--data", str(c["shard0"]), "--init-from", str(junk(t / "x"))],
        ["unreadable"], []),
    "--config that is not TOML": (
        lambda t, c: ["peer", "--config", str(junk(t / "c.toml", b"[train\nlr=")), "--print-config"],
        ["not valid TOML"], ["line 1"]),
    "--config with an unknown section": (
        lambda t, c: ["peer", "--config", str(junk(t / "c.toml", b"[nosuch]\nx = 1\n")), "--print-config"],
        ["unknown section [nosuch]"], ["known: peer"]),
    "--compression that does not parse": (
        lambda t, c: ["peer", "--compression", "topk:2", "--print-config"], ["topk"], []),
    "--peer that is not HOST:PORT": (
        lambda t, c: ["peer", "--peer", "nonsense", "--print-config"], ["'nonsense' is not 'HOST:PORT'"], []),
    "--resume with checkpoints off": (
        lambda t, c: ["peer", "--resume", "--checkpoint-dir", "none", "--print-config"],
        ["--resume needs a checkpoint directory"], []),
    "eval at raw-audio tars": (
        lambda t, c: ["eval", "--checkpoint", c["trained"], "--data", str(raw_audio_tars(t / "raw"))],
        ["no readable latent sample"], ["gossip-tts pack"]),
    "eval of a folder without a checkpoint": (
        lambda t, c: ["eval", "--checkpoint", str((t / "e").mkdir() or t / "e"), "--data", str(c["val"])],
        ["no checkpoint"], []),
    "synthesize with a reference that is not audio": (
        lambda t, c: ["synthesize", "--checkpoint", c["trained"], "--text", "hi", "--out", str(t / "o.wav"),
                      "--reference", str(junk(t / "r.wav")), "--steps", "1"],
        ["cannot read audio file"], []),
    "pack of a folder that is not LJSpeech-style": (
        lambda t, c: ["pack", str((t / "src").mkdir() or t / "src"), str(t / "out")],
        ["metadata.csv not found"], ["LJSpeech-style folder"]),
    "manifest of a folder without tars": (
        lambda t, c: ["manifest", str((t / "m").mkdir() or t / "m")], ["holds no .tar shard"], []),
    "manifest --version without --sign": (
        lambda t, c: ["manifest", str(c["val"]), "--version", "3"], ["--version needs --sign"], []),
    "keygen over an existing file": (
        lambda t, c: ["keygen", "--out", str(junk(t / "k"))], ["already exists"], ["another --out"]),
    "status of a closed port": (
        lambda t, c: ["status", f"127.0.0.1:{closed_port()}", "--timeout", "2"],
        ["connection refused"], ["'listening on' line"]),
    "import-echo of a file that is not safetensors": (
        lambda t, c: ["import-echo", str(junk(t / "w.bin")), "--out", str(t / "eo")],
        ["not a safetensors file"], ["model.safetensors"]),
    "simnet of an unknown scenario": (
        lambda t, c: ["simnet", "--scenario", "nosuch", "--no-plots"], ["unknown scenario 'nosuch'"], ["built-in name"]),
    # what click refuses while parsing: no usage banner either, and the help that lists the options
    "a flag's value that is not a number": (
        lambda t, c: ["peer", "--gossip-every", "x"], ["'--gossip-every'", "'x' is not a valid integer"],
        ["gossip-tts peer --help"]),
    "an option that does not exist": (
        lambda t, c: ["peer", "--bogus"], ["No such option '--bogus'"], ["gossip-tts peer --help"]),
    "a mistyped option": (
        lambda t, c: ["peer", "--max-step", "5"], ["No such option '--max-step'"], ["'--max-steps'"]),
    "a value that is not one of the choices": (
        lambda t, c: ["peer", "--device", "quantum"], ["'quantum' is not one of"], ["'cpu'", "gossip-tts peer --help"]),
    "a command that does not exist": (
        lambda t, c: ["peek"], ["No such command 'peek'"], ["gossip-tts --help"]),
    "an option of the command given to the group": (
        lambda t, c: ["--max-steps", "5", "peer"], ["No such option '--max-steps'"], ["gossip-tts --help"]),
    "a command without its arguments": (
        lambda t, c: ["pack"], ["Missing argument 'SRC_DIR'"], ["gossip-tts pack --help"]),
    "a flag without its value": (
        lambda t, c: ["eval", "--checkpoint"], ["'--checkpoint' requires an argument"], ["gossip-tts eval --help"]),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus) -> str:
    ckpt = tmp_path_factory.mktemp("trained") / "ck"
    result = CliRunner().invoke(main, SOLO[:-1] + ["2", "--batch-size", "2", "--data", str(corpus["shard0"]),
                                                   "--checkpoint-dir", str(ckpt)])
    logs.reset()
    assert result.exit_code == 0, result.output
    return str(ckpt)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in [v for v in __import__("os").environ if v.startswith("GOSSIP_TTS_") and v != "GOSSIP_TTS_CACHE"]:
        monkeypatch.delenv(var)
    yield tmp_path
    logs.reset()


@pytest.mark.parametrize("name", list(CASES))
def test_each_mistake_ends_in_one_line_naming_problem_and_fix(name, in_tmp, corpus, trained):
    make_args, problem, fix = CASES[name]
    holder, port = held_port()
    try:
        result = CliRunner().invoke(main, make_args(in_tmp, {**corpus, "trained": trained, "held_port": port}))
    finally:
        holder.close()
    out = result.output
    assert result.exit_code not in (0, None) and isinstance(result.exception, SystemExit), (result.exception, out)
    assert "Traceback" not in out and "Usage:" not in out and "Try '" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and out.rstrip().endswith(errors[0]), out  # one line, and the last one
    for words in problem + fix:
        assert words in errors[0], (words, errors[0])


def test_a_refused_dial_is_named_as_refused_not_as_aiohttp_text():
    import asyncio

    import aiohttp

    from peer.net.errors import describe_failure

    async def dial(port: int) -> str:
        async with aiohttp.ClientSession() as client:
            try:
                await client.get(f"http://127.0.0.1:{port}/v1/hello")
            except aiohttp.ClientError as exc:
                return describe_failure(exc)
        return "answered"

    assert asyncio.run(dial(closed_port())) == "connection refused (nothing listens on that port)"


def test_a_peer_flag_at_a_closed_port_names_the_address_and_the_reason(in_tmp, corpus):
    port = closed_port()
    result = CliRunner().invoke(main, PEER + ["--checkpoint-dir", "none", "--data", str(corpus["shard0"]),
                                              "--peer", f"127.0.0.1:{port}"],
                                env={"GOSSIP_TTS_SESSION_JOIN_TIMEOUT_S": "3"})
    assert result.exit_code == 0, result.output
    assert f"WARNING cannot reach --peer 127.0.0.1:{port}: connection refused" in result.output, result.output
    assert f"joining: no peer answered (127.0.0.1:{port}: connection refused" in result.output, result.output
    assert f"found peer 127.0.0.1:{port} via static" not in result.output  # it was never found


def test_every_command_answers_a_mistyped_option_in_one_line():
    """Not only the commands of the table: each one, with an option it does not have."""
    for name in main.commands:
        result = CliRunner().invoke(main, [name, "--no-such-option"])
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert result.exit_code == 2 and "Usage:" not in result.output, (name, result.output)
        assert errors == [f"Error: No such option '--no-such-option'; see 'gossip-tts {name} --help'"], result.output
