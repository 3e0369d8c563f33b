"""One line naming the machine a benchmark ran on (these machines are shared and noisy)."""

from __future__ import annotations

import os
import platform

import torch


def describe() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"machine: {cpu}, {os.cpu_count()} logical CPUs, {gpu}, torch {torch.__version__}, "
            f"python {platform.python_version()}, load average {load:.1f}")
