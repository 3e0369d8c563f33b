"""The network side's threads yield the core to training where the two contend.

A peer's event loop (HTTP, the session) and its node worker (verifying, decoding, publishing)
share the training thread's cores. What strangers send, honest or not, is paid there, and on a
saturated core each second of it is a second of training lost. Raising those threads' nice value
makes the kernel's scheduler give training the core first: at nice 10 a runnable network thread
gets about a tenth of a core training also wants, all of one that is idle. Linux keeps a nice
value per thread, and a thread starts with its creator's, so setting it on the event loop's thread
before it runs covers the executor threads it starts (the node worker). Elsewhere (macOS, Windows:
priorities are per process) nothing is changed and the reason is returned.
"""

from __future__ import annotations

import os
import sys
import threading

NICE_MAX = 19
"""The largest nice value: the kernel's floor of priority."""


def lower_this_thread(nice: int) -> str | None:
    """Raise the calling thread's nice value by `nice` (capped at NICE_MAX); None when done or
    `nice` is 0, else why it was not (for one start-up line)."""
    if nice == 0:
        return None
    if not sys.platform.startswith("linux"):
        return f"network_nice {nice} not applied: thread priorities are per process on {sys.platform}"
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(NICE_MAX, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:
        return f"network_nice {nice} not applied: {exc}"
    return None
