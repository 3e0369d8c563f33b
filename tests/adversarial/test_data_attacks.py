"""Hostile training data against real `gossip-tts peer` processes (tiny preset, 127.0.0.1).

Each attack states the figure it holds (SECURITY.md, "Training data"):
- memory: the victim's peak RSS (the kernel's ru_maxrss at exit) grows by at most 64 MB over
  the same run on clean data, and the same run with the bounds set huge grows by 300 MB or
  more (the control shows the attack is real);
- a stalled http shard: the peer exits within 10 s of SIGTERM while its read is stuck, and a
  shard deadline lets training go on past a source that drips forever (control: without it,
  no step at all);
- a poisoned checkpoint is never loaded nor overwritten: `--resume` takes the newest good one.

Attack tars are sparse files: their gigabytes of declared bodies take no disk.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from peer.local.checkpoint import CheckpointError, digest, load_checkpoint
from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess, last_step

pytestmark = pytest.mark.slow

MiB = 1 << 20
MB = 10**6
HUGE = str(1 << 40)
GROWTH_LIMIT = 64 * MB
CONTROL_GROWTH = 300 * MB


# ------------------------------------------------------------------ attack tars
def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(tarfile.GNU_FORMAT)


def sparse_tar(path: Path, members: list[tuple[str, int, bytes]]) -> Path:
    """A tar of (name, declared size, tar type) whose bodies are holes (zeros, no disk used)."""
    with open(path, "wb") as f:
        for name, size, kind in members:
            f.write(_header(name, size, kind))
            f.seek(size + (-size % 512), os.SEEK_CUR)
        f.write(bytes(1024))
    return path


def flood_tar(path: Path) -> Path:
    """24 members of one key: npy 128 MiB, ref.npy 128 MiB, json 64 MiB and 21 more of 64 MiB."""
    members = [("flood.npy", 128 * MiB, tarfile.REGTYPE), ("flood.ref.npy", 128 * MiB, tarfile.REGTYPE),
               ("flood.json", 64 * MiB, tarfile.REGTYPE)]
    members += [(f"flood.part{i:02d}", 64 * MiB, tarfile.REGTYPE) for i in range(21)]
    return sparse_tar(path, members)


def long_name_tar(path: Path, claimed: int) -> Path:
    """A GNU long-name member whose header claims `claimed` bytes of name."""
    return sparse_tar(path, [("././@LongLink", claimed, tarfile.GNUTYPE_LONGNAME), ("x.npy", 16, tarfile.REGTYPE)])


# ------------------------------------------------------------------ running the victim
def run_to_exit(p: PeerProcess, timeout: float) -> tuple[int, int]:
    """(exit code, peak RSS in bytes) of a peer that stops by itself, from the kernel's rusage."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(p.proc.pid, os.WNOHANG)
        if pid:
            p.proc.returncode = os.waitstatus_to_exitcode(status)
            return p.proc.returncode, usage.ru_maxrss * 1024
        time.sleep(0.1)
    p.kill()
    raise AssertionError(f"peer still running after {timeout} s:\n{p.text()[-3000:]}")


def solo_peer(tmp_path: Path, name: str, data: list[Path | str], *extra: str, env: dict[str, str] | None = None,
              steps: int = 20, ckpt: Path | None = None) -> PeerProcess:
    args = tiny_args(data[0], ckpt or tmp_path / name, "--solo", *extra, steps=steps)
    for more in data[1:]:
        args += ["--data", str(more)]
    return PeerProcess(args, tmp_path / f"{name}.log", env=env)


@pytest.fixture(scope="module")
def clean_folder(corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("clean")
    for shard in sorted(Path(corpus["shard0"]).glob("*.tar")):
        shutil.copy(shard, folder / shard.name)
    return folder


@pytest.fixture(scope="module")
def clean_peak(clean_folder, tmp_path_factory) -> int:
    """Peak RSS of the run every attack is compared with: the same peer on clean data only."""
    tmp = tmp_path_factory.mktemp("baseline")
    code, peak = run_to_exit(solo_peer(tmp, "clean", [clean_folder]), 300)
    assert code == 0
    return peak


def report(what: str, peak: int, clean_peak: int) -> int:
    growth = peak - clean_peak
    print(f"{what}: peak RSS {peak / MB:.0f} MB, {growth / MB:+.0f} MB over the clean run ({clean_peak / MB:.0f} MB)")
    return growth


def attacked(clean_folder: Path, tmp_path: Path, attack: Path) -> Path:
    folder = tmp_path / f"data-{attack.stem}"
    folder.mkdir()
    for shard in clean_folder.glob("*.tar"):
        os.link(shard, folder / shard.name)
    attack.rename(folder / attack.name)
    return folder


# ------------------------------------------------------------------ memory
def test_a_key_of_24_members_of_64_mib_costs_no_memory(clean_folder, clean_peak, tmp_path):
    data = attacked(clean_folder, tmp_path, flood_tar(tmp_path / "flood.tar"))
    p = solo_peer(tmp_path, "victim", [data])
    code, peak = run_to_exit(p, 300)
    text = p.text()
    assert code == 0, text[-3000:]
    assert report("defended", peak, clean_peak) <= GROWTH_LIMIT
    assert re.search(r"skipped_too_large: shard \S*flood\.tar, key 'flood': .*max_sample_bytes", text), text[-3000:]
    assert re.search(r"^step \d+ .*skipped_samples [1-9]", text, re.M), text[-2000:]


def test_control_the_flood_with_bounds_set_huge_blows_memory(clean_folder, clean_peak, tmp_path):
    data = attacked(clean_folder, tmp_path, flood_tar(tmp_path / "flood.tar"))
    env = {"GOSSIP_TTS_DATA_MAX_SAMPLE_BYTES": HUGE, "GOSSIP_TTS_DATA_MAX_JSON_BYTES": HUGE}
    code, peak = run_to_exit(solo_peer(tmp_path, "control", [data], env=env), 300)
    assert code == 0
    assert report("control", peak, clean_peak) >= CONTROL_GROWTH


def test_a_1_gib_gnu_long_name_header_is_refused_unread(clean_folder, clean_peak, tmp_path):
    data = attacked(clean_folder, tmp_path, long_name_tar(tmp_path / "longname.tar", 1 << 30))
    p = solo_peer(tmp_path, "victim", [data])
    code, peak = run_to_exit(p, 300)
    text = p.text()
    assert code == 0, text[-3000:]
    assert report("defended", peak, clean_peak) <= GROWTH_LIMIT
    assert re.search(r"shard_errors: \S*longname\.tar: GNU long-name header at byte 0 claims 1073741824 bytes, "
                     r"over the max_header_bytes limit", text), text[-3000:]
    assert re.search(r"^step \d+ .*shard_errors [1-9]", text, re.M), text[-2000:]


def test_control_a_384_mib_long_name_with_bounds_set_huge_blows_memory(clean_folder, clean_peak, tmp_path):
    data = attacked(clean_folder, tmp_path, long_name_tar(tmp_path / "longname.tar", 384 * MiB))
    env = {"GOSSIP_TTS_DATA_MAX_HEADER_BYTES": HUGE}
    code, peak = run_to_exit(solo_peer(tmp_path, "control", [data], env=env), 300)
    assert code == 0
    assert report("control", peak, clean_peak) >= CONTROL_GROWTH


# ------------------------------------------------------------------ a shard server that stalls
class DripServer:
    """Serves `shard` at /a.tar: whole while `drip` is clear, else its first 4 KiB then one byte every `every_s`."""

    def __init__(self, shard: bytes, every_s: float = 10.0, drip: bool = False) -> None:
        self.shard, self.every_s = shard, every_s
        self.drip = threading.Event()
        if drip:
            self.drip.set()
        self.dripping = threading.Event()
        self.closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/a.tar":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.shard)))
                self.end_headers()
                try:
                    if not server.drip.is_set():
                        self.wfile.write(server.shard)
                        return
                    self.wfile.write(server.shard[:4096])
                    server.dripping.set()
                    for i in range(4096, len(server.shard)):
                        if server.closed.wait(server.every_s):
                            return
                        self.wfile.write(server.shard[i:i + 1])
                        self.wfile.flush()
                except OSError:  # the reader hung up
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/a.tar"

    def close(self) -> None:
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def drip_server(corpus):
    shard = next(Path(corpus["shard0"]).glob("*.tar")).read_bytes()
    servers: list[DripServer] = []

    def make(**kw: object) -> DripServer:
        servers.append(DripServer(shard, **kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _steps_stand_still(p: PeerProcess, seconds: float, timeout: float) -> int:
    """Wait until no new step line has come for `seconds`; the step it stands at."""
    deadline = time.monotonic() + timeout
    last, since = last_step(p.text()), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = last_step(p.text())
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return now
    raise AssertionError(f"steps never stood still for {seconds} s:\n{p.text()[-2000:]}")


def test_sigterm_stops_the_peer_within_10_s_while_its_shard_read_is_stuck(drip_server, tmp_path, swarm_name):
    server = drip_server()
    args = tiny_args(server.url, tmp_path / "ckpt", "--listen", "127.0.0.1:0", "--no-mdns", "--swarm", swarm_name,  # type: ignore[arg-type]
                     "--checkpoint-every", "1000", steps=100000)
    p = PeerProcess(args, tmp_path / "victim.log")
    try:
        p.wait_for(r"^step \d+ ", timeout=180)
        server.drip.set()  # every later pass over the shard hangs in the middle of its body
        assert server.dripping.wait(120), p.text()[-2000:]
        stuck_at = _steps_stand_still(p, seconds=5, timeout=120)  # the read is stuck and training waits on it
        t0 = time.monotonic()
        p.proc.send_signal(signal.SIGTERM)
        code = p.wait_exit(60)
        took = time.monotonic() - t0
        print(f"stopped {took:.1f} s after SIGTERM, stuck at step {stuck_at}")
        text = p.text()
        assert took <= 10, f"exit took {took:.1f} s after SIGTERM:\n{text[-2000:]}"
        assert code == 0, text[-2000:]
        stopped = int(re.search(r"stopped at step (\d+)", text).group(1))
        assert stopped >= stuck_at and load_checkpoint(tmp_path / "ckpt")[1]["step"] == stopped
    finally:
        p.kill()


def test_a_shard_deadline_lets_training_pass_a_source_that_drips_forever(drip_server, clean_folder, tmp_path):
    server = drip_server(drip=True)
    env = {"GOSSIP_TTS_DATA_SHARD_DEADLINE_S": "3"}
    p = solo_peer(tmp_path, "victim", [clean_folder, server.url], env=env, steps=30)
    code, _ = run_to_exit(p, 300)
    text = p.text()
    assert code == 0, text[-3000:]
    assert re.search(r"shard_timeouts: http://\S+/a\.tar: not read within 3 s \(shard_deadline_s\)", text), text[-3000:]
    assert re.search(r"^step \d+ .*shard_errors [1-9]", text, re.M), text[-2000:]


def test_control_without_a_deadline_the_dripping_source_holds_training(drip_server, clean_folder, tmp_path):
    server = drip_server(drip=True)
    p = solo_peer(tmp_path, "control", [server.url, clean_folder], env={"GOSSIP_TTS_DATA_SHARD_DEADLINE_S": "1e9"})
    try:
        assert server.dripping.wait(120)
        time.sleep(30)
        assert last_step(p.text()) == 0 and p.proc.poll() is None, p.text()[-2000:]
    finally:
        p.kill()


# ------------------------------------------------------------------ a poisoned checkpoint
def poisoned_copy(tensors: dict[str, torch.Tensor], meta: dict, step: int) -> bytes:
    """A well-formed checkpoint (valid digest, newer step) with 1,024 NaN among its weights."""
    tensors = {k: v.clone() for k, v in tensors.items()}
    name = next(k for k, v in tensors.items() if k.startswith("model.") and v.is_floating_point() and v.numel() >= 1024)
    tensors[name].view(-1)[:1024] = float("nan")
    meta_json = json.dumps({**meta, "step": step}, sort_keys=True)
    return save(tensors, metadata={"gossip_tts_meta": meta_json, "gossip_tts_digest": digest(tensors, meta_json)})


def test_resume_takes_the_newest_good_checkpoint_and_never_overwrites_it_with_poison(corpus, tmp_path):
    ckpt = tmp_path / "ckpt"
    first = solo_peer(tmp_path, "first", [corpus["shard0"]], "--checkpoint-every", "1000", steps=6, ckpt=ckpt)
    assert run_to_exit(first, 300)[0] == 0, first.text()[-2000:]
    good = (ckpt / "checkpoint.safetensors").read_bytes()
    poison = poisoned_copy(*load_checkpoint(ckpt), step=1000)
    os.replace(ckpt / "checkpoint.safetensors", ckpt / "checkpoint.1.safetensors")
    (ckpt / "checkpoint.safetensors").write_bytes(poison)
    # Control: the poison is a checkpoint in every respect but its values; only the finiteness check refuses it.
    with pytest.raises(CheckpointError, match="non-finite"):
        load_checkpoint(ckpt / "checkpoint.safetensors")

    second = solo_peer(tmp_path, "second", [corpus["shard0"]], "--checkpoint-every", "1000", "--resume", steps=10,
                       ckpt=ckpt)
    code, _ = run_to_exit(second, 300)
    text = second.text()
    assert code == 0, text[-3000:]
    assert re.search(r"skipped a checkpoint: checkpoint \S+checkpoint\.safetensors holds non-finite values", text), text
    assert re.search(r"resumed from \S+checkpoint\.1\.safetensors at step 6", text), text
    losses = [float(x) for x in re.findall(r"^step \d+ loss (\S+)", text, re.M)]
    assert losses and all(math.isfinite(x) for x in losses), losses
    assert "stopped at step 10" in text
    assert load_checkpoint(ckpt)[1]["step"] == 10  # the new newest is finite and ours
    assert (ckpt / "checkpoint.1.safetensors").read_bytes() == poison  # shifted down, never loaded or rewritten
    assert (ckpt / "checkpoint.2.safetensors").read_bytes() == good  # the good one is intact
