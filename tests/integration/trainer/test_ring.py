"""Our ring allreduce equals gloo's all_reduce for world sizes 2-5, sizes that do not divide evenly,
empty and one-element tensors, several dtypes, non-contiguous input and chunking; its links are reused, and
mismatched calls and silent neighbours raise `RingError`, and a caller blocked on a silent neighbour is woken when its
group breaks (`fail_all`)."""

from __future__ import annotations

import datetime
import gc
import threading
import time
import weakref

import pytest
import torch
import torch.distributed as dist
from ringleader_trainer.strategies.ring import ring_allreduce
from ringleader_trainer.transport.ring_links import RingError, fail_all, link_for

from tests.support.ranks import run_ranks

SIZES = [0, 1, 2, 3, 5, 7, 64, 1000, 4099, 250_003]


def compare_on_rank(rank: int, world: int) -> None:
    gen = torch.Generator().manual_seed(1234 + rank)
    for size in SIZES:
        for dtype in (torch.float32, torch.float64, torch.int64):
            # Tiny chunks exercise the chunk pipeline; large ones the one-chunk path.
            for chunk_bytes in (64, 1 << 20) if size < 10_000 else (1 << 16,):
                if dtype == torch.int64:
                    t = torch.randint(-1000, 1000, (size,), generator=gen, dtype=dtype)
                else:
                    t = torch.randn(size, generator=gen, dtype=dtype)
                expected = t.clone()
                dist.all_reduce(expected)
                got = ring_allreduce(t, chunk_bytes=chunk_bytes)
                assert got is t
                torch.testing.assert_close(
                    t, expected, rtol=1e-5, atol=1e-5, msg=f"size {size} {dtype} chunk {chunk_bytes} on rank {rank}"
                )
    # Non-contiguous input (a transposed matrix) is reduced in place as well.
    m = torch.randn(13, 7, generator=gen).t()
    expected = m.clone()
    dist.all_reduce(expected)
    ring_allreduce(m, chunk_bytes=100)
    torch.testing.assert_close(m, expected, rtol=1e-5, atol=1e-5)
    if world == 4:
        # Ranks 1..3 as a sub-group: the point-to-point sends inside it must use global ranks.
        group = dist.new_group([1, 2, 3])
        t = torch.full((10,), float(rank))
        if isinstance(group, dist.ProcessGroup):  # ranks outside the group get a placeholder
            ring_allreduce(t, group=group)
            assert torch.equal(t, torch.full((10,), 6.0))
        dist.barrier()


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_ring_equals_gloo_all_reduce(world: int) -> None:
    """World 4 also checks a sub-group."""
    run_ranks(world, compare_on_rank)


def edge_cases_on_rank(rank: int, world: int) -> None:
    # bfloat16 has no numpy dtype: the add falls back to torch. Small integers are exact in it.
    t = torch.full((1000,), float(rank + 1), dtype=torch.bfloat16)
    ring_allreduce(t)
    assert torch.equal(t, torch.full((1000,), 6.0, dtype=torch.bfloat16))
    # The links are set up once per group and reused.
    link = link_for(dist.distributed_c10d._get_default_group())
    ring_allreduce(torch.ones(5))
    assert link_for(dist.distributed_c10d._get_default_group()) is link
    # Ranks that disagree on the tensor fail with a clear error instead of exchanging garbage: ranks 0 and 1
    # see a different header from their left neighbour, and rank 2 sees rank 1 hang up, long before the
    # group's 60 s timeout.
    start = time.monotonic()
    with pytest.raises(RingError, match="mismatch" if rank < 2 else "closed the connection"):
        ring_allreduce(torch.ones(11 if rank == 0 else 10))
    assert time.monotonic() - start < 10
    # A neighbour that never calls: the caller times out after the group's timeout, with a clear error.
    quick = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=2))
    if isinstance(quick, dist.ProcessGroup):  # ranks 0 and 1
        ring_allreduce(torch.ones(3), group=quick)
    if rank == 0:
        assert isinstance(quick, dist.ProcessGroup)
        with pytest.raises(RingError, match="within 2 s"):
            ring_allreduce(torch.ones(3), group=quick)
    # A failed link does not keep its group alive: once destroyed, the group goes, and gloo's threads with it
    # (left running, they can abort the process in the interpreter's teardown).
    failing = dist.new_group([0, 1, 2])
    assert isinstance(failing, dist.ProcessGroup)
    ring_allreduce(torch.ones(2), group=failing)
    with pytest.raises(RingError):
        ring_allreduce(torch.ones(3 if rank == 0 else 2), group=failing)
    released = weakref.ref(failing)
    dist.destroy_process_group(failing)
    del failing
    gc.collect()
    assert released() is None
    dist.barrier()


def test_ring_errors_and_reuse() -> None:
    run_ranks(3, edge_cases_on_rank)


def broken_on_rank(rank: int, world: int) -> None:
    # Rank 1 connects the links and then never calls again (a silent neighbour, as a stopped process is); rank 0,
    # blocked on it under a 60 s timeout, fails within seconds once its group watch says the group broke.
    group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=60))
    assert isinstance(group, dist.ProcessGroup)
    ring_allreduce(torch.ones(3), group=group)
    if rank == 0:
        threading.Timer(0.5, fail_all, ["the process group broke: a member was lost"]).start()
        start = time.monotonic()
        with pytest.raises(
            RingError, match="ring neighbour links shut down: the process group broke: a member was lost"
        ):
            ring_allreduce(torch.ones(3), group=group)
        assert time.monotonic() - start < 10
        with pytest.raises(RingError, match="unusable"):  # and the link stays failed
            ring_allreduce(torch.ones(3), group=group)
    dist.barrier()


def test_a_caller_blocked_on_a_silent_neighbour_fails_when_its_group_breaks() -> None:
    run_ranks(2, broken_on_rank)
