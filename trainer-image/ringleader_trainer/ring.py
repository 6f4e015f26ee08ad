"""Bandwidth-optimal ring allreduce over torch.distributed point-to-point sends.

The flat tensor is cut into `world` segments (sizes may differ by one element). Reduce-scatter: in
`world - 1` steps each rank sends one segment to its right neighbour and adds the segment arriving from its
left, so afterwards rank r holds the full sum of segment (r + 1) mod world. All-gather: `world - 1` more steps
pass the finished segments around the ring. Each rank sends 2(N-1)/N of the data in all, independent of N,
which is the floor for any allreduce (Patarasuk and Yuan; Baidu's and Horovod's ring).

Each step's segment travels in chunks, all posted at once, and a chunk is added as soon as it has arrived,
so reduction overlaps the transfer of the chunks behind it. Timeouts are the process group's own.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# Measured on CPU over loopback: gloo point-to-point costs several milliseconds per message, so small
# chunks lose more to that than they win by overlapping the adds (bench/allreduce_bench.py).
DEFAULT_CHUNK_BYTES = 16 << 20


def _posted(work: dist.Work | None) -> dist.Work:
    if work is None:  # torch returns None only when this rank is not in the group
        raise RuntimeError("ring allreduce called on a rank outside its process group")
    return work


def _chunks(t: torch.Tensor, chunk_elems: int) -> list[torch.Tensor]:
    return list(torch.split(t, chunk_elems)) if t.numel() else []


def _exchange(
    send: torch.Tensor,
    recv: torch.Tensor,
    right: int,
    left: int,
    chunk_elems: int,
    group: dist.ProcessGroup | None,
    scratch: torch.Tensor | None,
) -> None:
    """Send `send` to the right neighbour while receiving the same-sized segment from the left: into
    `scratch` and then added to `recv` (reduce-scatter), or straight into `recv` (all-gather, scratch None).
    Both neighbours see segments of the same size, so an empty segment is skipped on both sides alike."""
    if send.numel() == 0 and recv.numel() == 0:
        return
    out_chunks = _chunks(send, chunk_elems)
    in_chunks = _chunks(recv, chunk_elems)
    accumulate = scratch is not None
    # One scratch buffer reused for every step: fresh buffers would cost page faults on every segment.
    buffers = _chunks(scratch[: recv.numel()], chunk_elems) if scratch is not None else in_chunks
    sends = [_posted(dist.isend(c, right, group=group)) for c in out_chunks]
    recvs = [_posted(dist.irecv(b, left, group=group)) for b in buffers]
    for target, buf, req in zip(in_chunks, buffers, recvs, strict=True):
        req.wait()
        if accumulate:
            target.add_(buf)
    for req in sends:
        req.wait()


def ring_allreduce(
    tensor: torch.Tensor, group: dist.ProcessGroup | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> torch.Tensor:
    """Sum `tensor` over every rank of `group`, in place; returns it. Same contract as
    `dist.all_reduce(tensor)` with op SUM: every rank must call it with a tensor of the same shape and dtype."""
    world = dist.get_world_size(group)
    if world == 1 or tensor.numel() == 0:
        return tensor
    rank = dist.get_rank(group)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    segments = list(torch.tensor_split(flat, world))
    chunk_elems = max(1, chunk_bytes // flat.element_size())
    right_rank, left_rank = (rank + 1) % world, (rank - 1) % world
    # Point-to-point calls take global ranks.
    right = dist.get_global_rank(group, right_rank) if group is not None else right_rank
    left = dist.get_global_rank(group, left_rank) if group is not None else left_rank
    scratch = torch.empty(segments[0].numel(), dtype=flat.dtype)  # the first segment is the largest
    for step in range(world - 1):  # reduce-scatter
        send_idx, recv_idx = (rank - step) % world, (rank - step - 1) % world
        _exchange(segments[send_idx], segments[recv_idx], right, left, chunk_elems, group, scratch)
    for step in range(world - 1):  # all-gather
        send_idx, recv_idx = (rank + 1 - step) % world, (rank - step) % world
        _exchange(segments[send_idx], segments[recv_idx], right, left, chunk_elems, group, None)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor
