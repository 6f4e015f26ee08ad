"""Parameter-server pieces in one process: shard assignment, the raw-bytes wire format, one shard's modes."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.strategies.parameter_server.client import ShardClient, probe
from ringleader_trainer.strategies.parameter_server.layout import assign_shards, shard_parameters
from ringleader_trainer.strategies.parameter_server.shard_records import ASYNCHRONOUS, SYNCHRONOUS, Backups, ShardHooks
from ringleader_trainer.strategies.parameter_server.shards import ShardServer
from ringleader_trainer.transport import wire
from ringleader_trainer.transport.wire import Op, PeerLost
from torch import nn


@pytest.mark.parametrize(
    ("sizes", "shards", "expected"),
    [
        ([10], 1, [0]),
        ([10, 10], 2, [0, 1]),
        ([1, 100, 50, 49], 2, [1, 0, 1, 1]),  # 100 alone; 50 + 49 + 1 on the other
        ([5, 5, 5], 4, [0, 1, 2]),  # more shards than tensors: some stay empty
        ([3, 3, 3, 3], 2, [0, 1, 0, 1]),  # ties go to the lower index
    ],
)
def test_shards_are_balanced_by_size_and_deterministic(sizes: list[int], shards: int, expected: list[int]) -> None:
    assert assign_shards(sizes, shards) == expected


def test_wide_model_shards_within_one_tensor_of_balance() -> None:
    model = nn.Sequential(nn.Linear(1000, 300), nn.Linear(300, 300), nn.Linear(300, 10))
    loads = [sum(p.numel() for p in s) for s in shard_parameters(model, 2)]
    assert sum(loads) == sum(p.numel() for p in model.parameters())
    assert abs(loads[0] - loads[1]) <= max(p.numel() for p in model.parameters())


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(2)
    b.settimeout(2)
    yield a, b
    a.close()
    b.close()


def test_tensor_round_trip_is_raw_bytes(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    t = torch.arange(7, dtype=torch.float32)
    wire.send(a, Op.PUSH, 3, 42, wire.tensor_bytes(t))
    header = wire.recv_header(b)
    assert (header.op, header.worker, header.step, header.length) == (Op.PUSH, 3, 42, 28)
    assert header.flags == wire.Flag.NONE
    out = torch.empty(7)
    wire.recv_tensor_into(b, header, out)
    assert torch.equal(out, t)


def test_the_stop_flag_and_stop_at_travel_in_the_header(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    wire.send(a, Op.PUSH, 1, 5, flags=wire.Flag.STOP)
    wire.send(a, Op.STOP_AT, 1, 7)
    first, second = wire.recv_header(b), wire.recv_header(b)
    assert (first.op, first.flags) == (Op.PUSH, wire.Flag.STOP)
    assert (second.op, second.step, second.flags) == (Op.STOP_AT, 7, wire.Flag.NONE)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"XXXX" + bytes(24), "does not speak"),
        (wire.HEADER.pack(wire.MAGIC, wire.VERSION, 99, 0, 0, 0, 0), "unknown op 99"),
        (wire.HEADER.pack(wire.MAGIC, wire.VERSION, Op.PUSH, 0x8001, 0, 0, 0), "unknown flags 0x8001"),
    ],
)
def test_foreign_headers_are_rejected(pair: tuple[socket.socket, socket.socket], raw: bytes, message: str) -> None:
    a, b = pair
    a.sendall(raw)
    with pytest.raises(PeerLost, match=message):
        wire.recv_header(b)


def test_wrong_payload_size_and_silence_and_close_raise(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    wire.send(a, Op.PUSH, 0, 0, b"abcd")
    with pytest.raises(PeerLost, match="sent 4 bytes where 28 were expected"):
        wire.recv_tensor_into(b, wire.recv_header(b), torch.empty(7))
    b.settimeout(0.2)
    with pytest.raises(PeerLost, match=r"within 0\.2 s"):
        wire.recv_header(b)
    a.close()
    with pytest.raises(PeerLost, match="closed"):
        wire.recv_header(b)


def test_error_message_becomes_the_exception(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    wire.send_error(a, "shard 0 holds 10 values")
    with pytest.raises(PeerLost, match="shard 0 holds 10 values"):
        wire.expect(b, wire.recv_header(b), Op.PARAMS)


TOKEN = secrets.token_hex(32).encode()


def serve_one_shard(
    mode: str, workers: int, model: nn.Module, lr: float = 0.5, accept_timeout: float = 5, rejoin: bool = False
) -> tuple[ShardServer, socket.socket, threading.Thread]:
    rejections: list[str] = []
    server = ShardServer(
        0, list(model.parameters()), torch.optim.SGD(model.parameters(), lr=lr), workers, mode, None, 5, TOKEN,
        rejoin=rejoin, hooks=ShardHooks(reject=lambda peer, reason: rejections.append(reason)),
    )  # fmt: skip
    server.rejections = rejections  # type: ignore[attr-defined]
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        with contextlib.suppress(PeerLost):  # the test reads server.failure
            server.serve(listener, accept_timeout)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return server, listener, thread


def client_for(
    listener: socket.socket, worker: int, model: nn.Module, token: bytes = TOKEN, step: int = 0, resume: bool = False
) -> ShardClient:
    port = listener.getsockname()[1]
    return ShardClient([("127.0.0.1", port)], worker, shard_parameters(model, 1), step, 5, 5, token, resume=resume)


def test_a_lost_workers_place_is_given_back_and_the_round_waits_for_its_replacement() -> None:
    """Synchronous, 2 workers, rejoin: worker 0 pushes step 0 and waits; worker 1's connection is ended by a
    replacement's probe (its predecessor is gone); a second probe finds the place given back at clock 0; the
    replacement resumes there, pushes, the round completes with both gradients, and worker 0 hears that a
    replacement joined. A resume for a worker that is not lost is refused."""
    server_model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(server_model.weight)
    server, listener, thread = serve_one_shard(SYNCHRONOUS, 2, server_model, rejoin=True)
    address = [("127.0.0.1", listener.getsockname()[1])]
    models = [nn.Linear(1, 1, bias=False) for _ in range(3)]
    first, lost = client_for(listener, 0, models[0]), client_for(listener, 1, models[1])
    models[0].weight.grad = torch.full_like(models[0].weight, 1.0)
    waiting = threading.Thread(target=first.push_pull, args=(0,))
    waiting.start()
    assert probe(address, 1, TOKEN, 2) == [{"clock": 0, "lost": False, "rejoin": True}]
    with pytest.raises(PeerLost):  # the probe ended the predecessor's connection
        lost.push_pull(0)
    deadline = time.monotonic() + 5
    while (answer := probe(address, 1, TOKEN, 2)) != [{"clock": 0, "lost": True, "rejoin": True}]:
        assert time.monotonic() < deadline, answer
        time.sleep(0.05)
    replacement = client_for(listener, 1, models[2], resume=True)
    with pytest.raises(PeerLost, match="worker 1 is not lost"):
        client_for(listener, 1, nn.Linear(1, 1, bias=False), resume=True)
    models[2].weight.grad = torch.full_like(models[2].weight, 3.0)
    replacement.push_pull(0)
    waiting.join(10)
    assert first.rejoined and not replacement.rejoined
    first.done()
    replacement.done()
    thread.join(10)
    assert server.failure is None and server.stats.updates == 1
    assert float(server.flat[0]) == pytest.approx(-0.5 * 2.0)  # the mean of 1 and 3, once


def test_nothing_answers_a_probe_where_no_shard_serves() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    assert probe([("127.0.0.1", port)], 0, TOKEN, 1) is None


@pytest.mark.parametrize(("mode", "expected"), [(SYNCHRONOUS, -0.5 * 2.0), (ASYNCHRONOUS, -0.5 * 2.0)])
def test_one_step_from_two_workers(mode: str, expected: float) -> None:
    """Gradients 1 and 3: synchronous applies their mean once; asynchronous applies each scaled by 1/2. Either
    way the parameter moves by lr * 2 from 0."""
    server_model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(server_model.weight)
    server, listener, thread = serve_one_shard(mode, 2, server_model)
    models = [nn.Linear(1, 1, bias=False) for _ in range(2)]
    clients = [client_for(listener, w, m) for w, m in enumerate(models)]
    assert all(m.weight.item() == 0.0 for m in models)  # pulled the server's parameters at HELLO
    for m, g in zip(models, (1.0, 3.0), strict=True):
        m.weight.grad = torch.full_like(m.weight, g)
    pushes = [threading.Thread(target=c.push_pull, args=(0,)) for c in clients]
    for t in pushes:
        t.start()
    for t in pushes:
        t.join(10)
    for c in clients:
        c.done()
    thread.join(10)
    assert float(server.flat[0]) == pytest.approx(expected)
    assert server.stats.updates == (1 if mode == SYNCHRONOUS else 2)
    if mode == SYNCHRONOUS:  # both were released after the one update
        assert [m.weight.item() for m in models] == pytest.approx([expected, expected])


def test_a_worker_with_another_model_is_told_why_and_the_shard_serves_the_right_one() -> None:
    server, listener, thread = serve_one_shard(SYNCHRONOUS, 1, nn.Linear(4, 4))
    with pytest.raises(PeerLost, match="do all ranks build the same model"):
        client_for(listener, 0, nn.Linear(4, 5))
    client_for(listener, 0, nn.Linear(4, 4)).done()
    thread.join(10)
    assert not thread.is_alive() and server.failure is None
    assert server.stats.rejected == 1 and "do all ranks build the same model" in server.rejections[0]  # type: ignore[attr-defined]


def test_a_state_over_its_bound_is_refused_before_it_is_read(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    ps_backup.send_state(a, Op.MIRROR, 1, {"flat": torch.zeros(1000)})
    header = wire.recv_header(b)
    with pytest.raises(PeerLost, match=r"shard 1 would send a state of \d+ bytes \(at most 100\)"):
        ps_backup.recv_state(b, header, 100, "shard 1")


def test_a_lost_shard_serves_on_from_its_backup_and_its_workers_push_the_round_again() -> None:
    """Two synchronous shards backing each other up, two workers. Worker 0 pushes step 0 and waits (worker 1 has
    not pushed); shard 1 is lost. Its replacement, on the same address, finds its copy on shard 0 (`held`) and
    serves from it at clock 0; worker 0 takes its place back there and pushes step 0 again, worker 1 (whose
    connection died too) likewise, and the round completes once on each shard, with both gradients."""
    models = [nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)) for _ in range(3)]
    for m in models:  # the shards', worker 0's, worker 1's
        for p in m.parameters():
            nn.init.zeros_(p)
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    addrs = [("127.0.0.1", s.getsockname()[1]) for s in listeners]
    params = shard_parameters(models[0], 2)  # one layer's weight each
    optimizer = torch.optim.SGD(models[0].parameters(), lr=0.5)

    def start_shard(i: int, listener: socket.socket, restored: dict[str, Any] | None = None) -> ShardServer:
        other = (i + 1) % 2
        server = ShardServer(i, params[i], optimizer, 2, SYNCHRONOUS, None, 5, TOKEN, rejoin=True,
                             backups=Backups(other, addrs[other], other, params[other]))  # fmt: skip
        if restored is not None:
            server.restore(restored)

        def run() -> None:
            with contextlib.suppress(PeerLost):
                server.serve(listener, 5)

        threading.Thread(target=run, daemon=True).start()
        return server

    servers = [start_shard(i, listeners[i]) for i in range(2)]
    clients = [ShardClient(addrs, w, shard_parameters(models[w + 1], 2), 0, 5, 5, TOKEN, backups=True)
               for w in range(2)]  # fmt: skip
    deadline = time.monotonic() + 5
    while not (servers[0].replica and servers[0].replica.held):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for w, m in enumerate(models[1:]):
        for p in m.parameters():
            p.grad = torch.full_like(p, 1.0 + 2 * w)  # 1 and 3
    waiting = threading.Thread(target=clients[0].push_pull, args=(0,))
    waiting.start()
    time.sleep(0.3)  # worker 0's pushes are in
    servers[1]._fail("lost")  # its connections end, as a killed process's do
    listeners[1].close()
    assert ps_backup.held(addrs[0], 1, 0, TOKEN, 2)
    state = ps_backup.restore(addrs[0], 1, 0, TOKEN, 2, ps_backup.state_bound(servers[1].flat))
    assert state["clock"] == [0, 0]  # the round had not been applied anywhere
    servers[1] = start_shard(1, socket.create_server(addrs[1]), state)
    clients[1].push_pull(0)
    waiting.join(10)
    assert clients[0].healed == [1] and clients[1].healed == [1]
    for m in models[1:]:
        for p in m.parameters():
            assert torch.equal(p, torch.full((4, 4), -1.0))  # 0 - 0.5 * mean(1, 3), applied once
    assert [s.stats.updates for s in servers] == [1, 1]
    for c in clients:
        c.done()
