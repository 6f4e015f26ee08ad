"""Peer authentication on the trainer's ports: the handshake (transport/auth.py) accepts only a peer holding the job's
token, for this connection's purpose, with fresh nonces; the parameter-server shard and the ring keep accepting
past bare, silent, garbage, unproven and duplicate connections until every slot is claimed by a proven peer."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ringleader_trainer.env import EnvError
from ringleader_trainer.strategies.parameter_server.shard_records import SYNCHRONOUS
from ringleader_trainer.strategies.ring import ring_allreduce
from ringleader_trainer.transport import auth, gate
from ringleader_trainer.transport.auth import AuthError
from torch import nn

from tests.integration.trainer.test_ps_wire import TOKEN, client_for, serve_one_shard
from tests.support.ranks import run_ranks

OTHER = secrets.token_hex(32).encode()


def both_ends(
    initiator: Callable[[socket.socket], None], acceptor: Callable[[socket.socket], None]
) -> tuple[BaseException | None, BaseException | None]:
    """Run the two sides on a connected pair; the exception each raised (None if it succeeded)."""
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    out: list[BaseException | None] = [None, None]

    def run(i: int, side: Callable[[socket.socket], None], sock: socket.socket) -> None:
        try:
            side(sock)
        except BaseException as e:
            out[i] = e
        finally:
            sock.close()  # as the trainer does on a failed handshake: the other side sees EOF

    threads = [
        threading.Thread(target=run, args=(0, initiator, a)),
        threading.Thread(target=run, args=(1, acceptor, b)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out[0], out[1]


def test_both_ends_holding_the_token_for_the_same_purpose_succeed() -> None:
    assert both_ends(lambda s: auth.initiate(s, TOKEN, b"x"), lambda s: auth.accept(s, TOKEN, b"x")) == (None, None)


@pytest.mark.parametrize(
    ("initiator_token", "initiator_context"), [(OTHER, b"x"), (TOKEN, b"y")], ids=["other-token", "other-purpose"]
)
def test_another_token_or_purpose_is_refused_on_both_sides(initiator_token: bytes, initiator_context: bytes) -> None:
    mine, theirs = both_ends(
        lambda s: auth.initiate(s, initiator_token, initiator_context), lambda s: auth.accept(s, TOKEN, b"x")
    )
    # The initiator checks the acceptor's proof first: it refuses and hangs up, so the acceptor sees no proof.
    assert isinstance(mine, AuthError) and "did not prove it holds the job's token" in str(mine)
    assert isinstance(theirs, AuthError) and "connection closed before the proof" in str(theirs)


def test_a_replayed_proof_is_refused() -> None:
    """Record a real initiator's messages, then replay them on a new connection: the acceptor's fresh nonce
    makes the recorded proof wrong."""
    recorded: list[bytes] = []

    def recording_initiator(sock: socket.socket) -> None:
        real_send = sock.sendall

        class Tap:
            def __getattr__(self, name: str) -> object:
                return getattr(sock, name)

            def sendall(self, data: bytes) -> None:
                recorded.append(bytes(data))
                real_send(data)

        auth.initiate(Tap(), TOKEN, b"x")  # type: ignore[arg-type]

    assert both_ends(recording_initiator, lambda s: auth.accept(s, TOKEN, b"x")) == (None, None)
    opening, proof = recorded

    def replayer(sock: socket.socket) -> None:
        sock.sendall(opening)
        sock.recv(auth.NONCE + auth.MAC)
        sock.sendall(proof)

    _, theirs = both_ends(replayer, lambda s: auth.accept(s, TOKEN, b"x"))
    assert isinstance(theirs, AuthError) and "did not prove" in str(theirs)


@pytest.mark.parametrize(
    ("send", "message"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(40), "does not speak Ringleader's handshake"),
        (b"", "connection closed before the handshake"),
    ],
    ids=["garbage", "bare-connect"],
)
def test_a_stranger_is_refused_without_learning_anything(send: bytes, message: str) -> None:
    got: list[bytes] = []

    def stranger(sock: socket.socket) -> None:
        if send:
            sock.sendall(send)
            got.append(sock.recv(1024))

    _, theirs = both_ends(stranger, lambda s: auth.accept(s, TOKEN, b"x"))
    assert isinstance(theirs, AuthError) and message in str(theirs)
    assert got in ([], [b""])  # nothing was sent back to it


def test_a_silent_peer_is_dropped_after_the_handshake_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "HANDSHAKE_SECONDS", 0.3)
    _, theirs = both_ends(lambda s: time.sleep(1), lambda s: auth.accept(s, TOKEN, b"x"))
    assert isinstance(theirs, AuthError) and "no handshake within 0.3 s" in str(theirs)


def test_a_peer_dripping_its_opening_is_dropped_at_the_handshake_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte every 0.1 s keeps each read alive; the handshake's whole deadline still ends it."""
    monkeypatch.setattr(auth, "HANDSHAKE_SECONDS", 0.5)

    def drip(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            for b in auth.OPENING.pack(auth.MAGIC, auth.VERSION, bytes(auth.NONCE)):
                sock.sendall(bytes([b]))
                time.sleep(0.1)

    started = time.monotonic()
    _, theirs = both_ends(drip, lambda s: auth.accept(s, TOKEN, b"x"))
    assert isinstance(theirs, AuthError) and "no handshake within 0.5 s" in str(theirs)
    assert time.monotonic() - started < 3.5  # the dripper needs 3.7 s for its 37 bytes


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read the job's token"), ("short", "must be 16-4096 bytes, not 5")],
    ids=["missing", "too-short"],
)
def test_a_bad_token_file_is_a_one_line_environment_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EnvError, match=f"RINGLEADER_TOKEN_FILE={path}: .*{message}"):
        auth.load_token(str(path))
    with pytest.raises(EnvError, match="RINGLEADER_TOKEN_FILE is not set"):
        auth.load_token("")


def test_the_shard_serves_its_workers_past_stray_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the real workers: a bare connect, a silent connection, garbage and a peer with another token; then
    worker 0, worker 0 again (proven, but a duplicate: refused) and worker 1. The shard serves a synchronous step
    for the two proven workers and counts the rest."""
    monkeypatch.setattr(auth, "HANDSHAKE_SECONDS", 3.0)
    server, listener, thread = serve_one_shard(SYNCHRONOUS, 2, nn.Linear(1, 1, bias=False))
    address = listener.getsockname()
    bare = socket.create_connection(address)
    bare.close()
    silent = socket.create_connection(address)  # held open, says nothing
    garbage = socket.create_connection(address)
    garbage.sendall(b"\x00" * 64)
    with pytest.raises(Exception, match="did not prove it holds the job's token"):
        client_for(listener, 1, nn.Linear(1, 1, bias=False), token=OTHER)
    started = time.monotonic()
    models = [nn.Linear(1, 1, bias=False) for _ in range(2)]
    first = client_for(listener, 0, models[0])
    assert time.monotonic() - started < 2.5  # the silent connection (dropped at 3 s) held up no one
    with pytest.raises(Exception, match="closed the connection"):
        client_for(listener, 0, nn.Linear(1, 1, bias=False))  # proven, but worker 0's slot is taken
    second = client_for(listener, 1, models[1])
    for m in models:
        m.weight.grad = torch.ones_like(m.weight)
    pushes = [threading.Thread(target=c.push_pull, args=(0,)) for c in (first, second)]
    for t in pushes:
        t.start()
    for t in pushes:
        t.join(10)
    first.done()
    second.done()
    thread.join(10)
    assert not thread.is_alive() and server.failure is None and server.stats.updates == 1
    garbage.settimeout(5)
    # Dropped without a word (a reset: it sent bytes no one read): no error message, nothing of the model.
    with contextlib.suppress(ConnectionResetError):
        assert garbage.recv(1024) == b""
    reasons = server.rejections  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while len(reasons) < 5 and time.monotonic() < deadline:  # the silent one is dropped at its own timeout
        time.sleep(0.05)
    silent.close()
    garbage.close()
    assert len(reasons) == 5 and server.stats.rejected >= 4, reasons
    assert sum("slot 0 is taken" in r for r in reasons) == 1
    assert sum("no handshake within 3 s" in r for r in reasons) == 1


def test_a_flood_of_silent_connections_does_not_lock_the_workers_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """More silent connections than handshakes may run at once (4 here): each new one evicts the oldest, so the
    workers' handshakes still get their turn, promptly."""
    monkeypatch.setattr(gate, "MAX_PENDING", 4)
    server, listener, thread = serve_one_shard(SYNCHRONOUS, 2, nn.Linear(1, 1, bias=False))
    flood = [socket.create_connection(listener.getsockname()) for _ in range(12)]
    started = time.monotonic()
    clients = [client_for(listener, w, nn.Linear(1, 1, bias=False)) for w in range(2)]
    assert time.monotonic() - started < 2  # not after a handshake timeout (10 s)
    for c in clients:
        c.done()
    thread.join(10)
    for f in flood:
        f.close()
    assert not thread.is_alive() and server.failure is None
    assert sum("connection failed during the handshake" in r or "closed before" in r
               for r in server.rejections) >= 8  # type: ignore[attr-defined]  # fmt: skip


def ring_past_strays(rank: int, world: int) -> None:
    """Rank 0 throws a silent connection, garbage and an unproven handshake at rank 1's ring port while the
    ring forms; the allreduce still sums, and rank 1 logs the strays."""
    group = dist.distributed_c10d._get_default_group()
    strays: list[socket.socket] = []
    if rank == 0:
        store = dist.distributed_c10d._get_default_store()
        host, port = store.get(f"ringleader/ring/{group.group_name}/0/1").decode().rsplit(":", 1)
        for payload in (None, b"\x00" * 64, "unproven"):
            s = socket.create_connection((host, int(port)), timeout=5)
            if payload == "unproven":
                with pytest.raises(AuthError):
                    auth.initiate(s, OTHER, b"whatever")
                s.close()  # as a refused initiator does
                continue
            if isinstance(payload, bytes):
                s.sendall(payload)
            strays.append(s)
    t = torch.full((1000,), float(rank + 1))
    ring_allreduce(t)
    assert torch.equal(t, torch.full((1000,), float(sum(range(1, world + 1)))))
    for s in strays:
        s.close()


def test_the_ring_forms_past_stray_connections(capfd: pytest.CaptureFixture[str]) -> None:
    run_ranks(3, ring_past_strays)
    out = capfd.readouterr().out
    assert out.count('"event": "ring-connection-rejected"') >= 2, out  # the silent one may outlast the setup
