"""Bandwidth-optimal ring allreduce over point-to-point sends between ring neighbours.

The flat tensor is cut into `world` segments (sizes may differ by one element). Reduce-scatter: in
`world - 1` steps each rank sends one segment to its right neighbour and adds the segment arriving from its
left, so afterwards rank r holds the full sum of segment (r + 1) mod world. All-gather: `world - 1` more steps
pass the finished segments around the ring. Each rank sends 2(N-1)/N of the data in all, independent of N,
which is the floor for any allreduce (Patarasuk and Yuan; Baidu's and Horovod's ring).

The segment a rank sends in step s + 1 is the one it received in step s, so the whole ring is one stream per
link: every chunk is forwarded as soon as it has arrived (and, in the reduce-scatter, been added), and the
sends run on another thread, so sending, receiving and adding all overlap. The bytes travel over the ring's
own TCP links (`ring_transport`), set up on the first call for a group and reused.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ringleader_trainer.transport.ring_links import link_for

# Of 256 KB to 4 MB, 1 MB chunks measured fastest at 16-256 MB (2 and 4 ranks): smaller ones pay more per-chunk
# Python work, larger ones start forwarding later.
DEFAULT_CHUNK_BYTES = 1 << 20
_NUMPY_DTYPES = {torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64}


def _add_(out: torch.Tensor, other: torch.Tensor) -> None:
    """out += other on the calling thread alone. torch's add is intra-op parallel, and its worker threads spin
    between one chunk's add and the next, taking the CPU the socket copies need: the ring measured 3-5x slower
    with it on 2 cores. numpy's add is single-threaded; dtypes numpy lacks (bfloat16) fall back to torch."""
    if out.dtype in _NUMPY_DTYPES:
        np.add(out.numpy(), other.numpy(), out=out.numpy())
    else:
        out.add_(other)


def ring_allreduce(
    tensor: torch.Tensor, group: dist.ProcessGroup | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> torch.Tensor:
    """Sum `tensor` over every rank of `group` (default: the world), in place; returns it. Same contract as
    `dist.all_reduce(tensor)` with op SUM: every rank of the group calls it with a tensor of the same shape and
    dtype, in the same order as its other ring allreduces on that group. A tensor on a GPU is summed through a
    host copy (the ring's links are TCP sockets) and holds the sum when this returns. The first call on a group
    connects its ranks (a collective); a rank calling with a different element count or dtype than its left
    neighbour raises `RingError`, as do timeouts (the process group's) and lost neighbours."""
    group = group or dist.distributed_c10d._get_default_group()
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise RuntimeError("ring allreduce called on a rank outside its process group")
    if world == 1 or tensor.numel() == 0:
        return tensor
    if tensor.device.type != "cpu":
        # .cpu() waits for the kernels that wrote the tensor; copy_ back is ordered before later kernels on the
        # current stream, and the synchronize makes the sum visible to other streams (DDP's) once we return.
        host = ring_allreduce(tensor.detach().cpu(), group, chunk_bytes)
        tensor.copy_(host.view_as(tensor))
        torch.cuda.current_stream(tensor.device).synchronize()
        return tensor
    link = link_for(group)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    link.exchange_header(flat)
    chunk_elems = max(1, chunk_bytes // flat.element_size())
    chunks = [torch.split(segment, chunk_elems) for segment in torch.tensor_split(flat, world)]
    scratch = torch.empty(min(chunk_elems, len(flat) // world + 1), dtype=flat.dtype)
    for chunk in chunks[rank]:
        link.send(chunk)
    steps = 2 * (world - 1)
    for step in range(steps):
        # Reduce-scatter steps add what arrives from the left; all-gather steps take it as it is.
        for chunk in chunks[(rank - step - 1) % world]:
            if step < world - 1:
                received = scratch[: chunk.numel()]
                link.recv_into(received)
                _add_(chunk, received)
            else:
                link.recv_into(chunk)
            if step < steps - 1:
                link.send(chunk)
    link.flush()  # the caller may overwrite the tensor once we return
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor
