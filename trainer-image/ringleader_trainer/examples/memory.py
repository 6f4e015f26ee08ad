"""This process's memory, as the built-in examples report it (`done` events) and bench/sharded_bench.py reads
it: on a GPU the CUDA allocator's bytes, on the CPU the resident set from /proc (its peak is the kernel's
high-water mark, VmHWM)."""

from __future__ import annotations

from pathlib import Path

import torch


def _status_bytes(field: str) -> int:
    """A `kB` line of /proc/self/status in bytes; 0 where there is no /proc (not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def in_use(device: torch.device) -> int:
    """Bytes held now: tensors on `device` if it is a GPU, else the process's resident memory."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    return _status_bytes("VmRSS")


def peak(device: torch.device) -> int:
    """The most bytes held at once so far, as `in_use` counts them."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return _status_bytes("VmHWM")
