"""What gossip adds to a real peer's memory: its peak RSS alone, then while it gossips with one
neighbour, in float32 copies of its model.

    python benchmarks/peer_memory.py [--preset 100m] [--after-step 10] [--alone 60] [--gossip 90]

A `gossip-tts peer --preset P` (built-in corpus, batch 4, one thread, default cadence) trains
alone to step `--after-step` and `--alone` seconds more (its publishes, outbox and averaged
weights run alone too): its peak RSS then is the control. Its peak is reset (Linux
`/proc/PID/clear_refs`), a second peer starts with `--peer` at it, adopts its state and both mix;
once both have mixed (its peak while the second joined), reset again, `--gossip` seconds more
(its peak while both gossip). Printed: each phase's peak (VmHWM) over the control's, in float32
copies of the model (4 bytes a parameter), and the joiner's own peak. Neither peer writes a
periodic checkpoint during the run (its own spike, not gossip's). The
issue's target: one neighbour adds at most 2 copies to a peer's peak. Results in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]  # this checkout's code
from machine import describe  # noqa: E402
from proc_memory import reset_peak, status_bytes  # noqa: E402

GIB = 2**30
NO_PERIODIC_CHECKPOINT_S = 10**6
"""`--checkpoint-every` for both peers: a periodic checkpoint (every 300 s by default) holds the
trainer's state and the averaged weights while it is written, a spike of its own that would land
in whichever phase its timer hits, alone or gossiping."""


def parameters(log: str) -> int:
    """The model's parameter count from the peer's "model P (N M params)" line."""
    match = re.search(r"\(([\d.]+)M params\)", log)
    if match is None:
        raise RuntimeError("the peer did not log its model size:\n" + log[-2000:])
    return int(float(match.group(1)) * 1e6)


def measure(tmp: Path, preset: str, after_step: int, alone_s: float, gossip_s: float) -> dict[str, float]:
    from joiner_first_mix import first_peer, metric_total, peer_args
    from tests.integration.peers import PeerProcess

    base = peer_args(tmp, f"peer-memory-{int(time.time())}", preset)

    def args(name: str, *extra: str) -> list[str]:  # no periodic checkpoint: see the module docstring
        return base(name, "--checkpoint-every", str(NO_PERIODIC_CHECKPOINT_S), *extra)

    a = first_peer(args, tmp, after_step)
    b = None
    try:
        print(f"alone past step {after_step}: {alone_s:g} s more…", file=sys.stderr)
        time.sleep(alone_s)
        copy = 4 * parameters(a.text())
        alone = status_bytes("VmHWM", a.proc.pid)
        if not reset_peak(a.proc.pid):
            print("cannot reset the peak here: the gossiping peak covers the whole run", file=sys.stderr)
        b = PeerProcess(args("b", "--peer", a.address), tmp / "b.log")
        b.wait_listening(300)
        deadline = time.monotonic() + 1800
        while not all(metric_total(p.address, "mixes_total") >= 1 for p in (a, b)):
            if time.monotonic() > deadline:
                raise RuntimeError("the two peers did not both mix:\n" + b.text()[-2000:])
            time.sleep(1.0)
        joining = status_bytes("VmHWM", a.proc.pid)
        separate = reset_peak(a.proc.pid)
        print(f"both mixed: {gossip_s:g} s more…", file=sys.stderr)
        time.sleep(gossip_s)
        steady = status_bytes("VmHWM", a.proc.pid)
        gossiping = max(joining, steady)
        return {"parameters": copy // 4, "alone_peak_gib": alone / GIB, "gossiping_peak_gib": gossiping / GIB,
                "added_copies": (gossiping - alone) / copy, "alone_peak_copies": alone / copy,
                "joining_added_copies": (joining - alone) / copy,
                "steady_added_copies": (steady - alone) / copy if separate else None,
                "joiner_peak_copies": status_bytes("VmHWM", b.proc.pid) / copy,
                "exchanges": metric_total(a.address, "exchanges_total")}
    finally:
        for p in (a, b):
            if p is not None:
                p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="100m")
    ap.add_argument("--after-step", type=int, default=10)
    ap.add_argument("--alone", type=float, default=60.0, help="seconds alone past --after-step (the control)")
    ap.add_argument("--gossip", type=float, default=90.0, help="seconds of gossip once both peers have mixed")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = measure(Path(tmp), opts.preset, opts.after_step, opts.alone, opts.gossip)
    print(describe())
    print(f"{opts.preset}: {out['parameters'] / 1e6:.1f}M parameters; peak alone {out['alone_peak_gib']:.2f} GiB "
          f"({out['alone_peak_copies']:.1f} copies), gossiping with one neighbour {out['gossiping_peak_gib']:.2f} GiB: "
          f"+{out['added_copies']:.2f} copies ({out['exchanges']:g} exchanges): +{out['joining_added_copies']:.2f} while "
          f"the second peer joined, +{out['steady_added_copies'] if out['steady_added_copies'] is None else round(out['steady_added_copies'], 2)} "
          f"once both had mixed; the joiner peaked at {out['joiner_peak_copies']:.1f} copies")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
