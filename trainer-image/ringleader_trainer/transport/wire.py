"""The parameter server's wire format: a fixed 28-byte header, then raw bytes. Never pickle.

    magic  b"RLPS"   4 bytes
    version          u8    (3)
    op               u8    (Op)
    flags            u16   (Flag: STOP, REJOINED, ROUND)
    worker           u32   the sending worker's index (servers echo it)
    step             i64   the worker's step (push) or the server's clock for that worker (reply)
    length           u64   payload bytes

Tensor payloads are the flat tensor's bytes in the sender's native order; both sides know the dtype and the
element count from the HELLO handshake, so a payload of any other length is a protocol error. HELLO and STATE
carry a small JSON object, ERROR a UTF-8 message, and MIRROR a shard's whole state in the checkpoint's format
(read with weights_only, its size bounded first: ps_backup). Every socket operation runs under the socket's
timeout, so a dead or wedged peer raises `PeerLost` instead of hanging.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any

import torch

from ringleader_trainer.exitcodes import ExitCode, TrainerError

MAGIC = b"RLPS"
VERSION = 3
HEADER = struct.Struct("<4sBBHIqQ")
MAX_JSON_BYTES = 1 << 16


class Op(IntEnum):
    HELLO = 1  # worker -> server: JSON {"shard", "numel", "dtype"}
    PARAMS = 2  # server -> worker: the shard's parameters
    PUSH = 3  # worker -> server: the shard's gradients for one step; answered by PARAMS
    DONE = 4  # worker -> server: this worker has finished; answered by DONE
    ERROR = 5  # either way: UTF-8 message, then the connection closes
    STOP_AT = 6  # shard 0 -> worker, before a PARAMS: stop at `step` (no payload); sent once
    STATE = 7  # server -> worker, answering a probe's HELLO: JSON {"clock", "lost"}; the connection then closes
    MIRROR = 8  # shard -> its backup, or backup -> the shard's replacement: the shard's whole state (ps_backup)
    UPDATE = 9  # shard -> its backup: the gradient it applied (worker, new clock); answered by ACK
    ACK = 10  # backup -> shard: MIRROR or UPDATE applied


class Flag(IntFlag):
    NONE = 0
    STOP = 1  # PUSH/DONE: this worker stops (elastic/stopping.py); PARAMS: a stop was asked for, agree on a step
    REJOINED = 2  # PARAMS from shard 0: a lost worker's replacement took its place since the last reply
    ROUND = 4  # UPDATE: a synchronous round, every worker's clock moved


class PeerLost(TrainerError, ConnectionError):
    """The peer closed the connection, timed out, or broke the protocol."""

    exit_code = ExitCode.PEER_LOST


@dataclass(frozen=True)
class Header:
    op: Op
    worker: int
    step: int
    length: int
    flags: Flag = Flag.NONE


def tensor_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor's memory as a flat uint8 tensor, without a copy (any dtype): what a wire carries,
    and where a receive writes."""
    return t.view(-1).view(torch.uint8)


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (`tensor_view`'s, for a socket)."""
    return tensor_view(t).numpy().data


def recv_exact(
    sock: socket.socket, view: memoryview, error: type[ConnectionError] = PeerLost, peer: str | None = None
) -> None:
    """Fill `view` from `sock`; `error` (naming `peer`, else the socket's address) on timeout, reset or EOF."""
    while view:
        try:
            n = sock.recv_into(view)
        except TimeoutError as e:
            raise error(f"no data from {peer or _peer(sock)} within {sock.gettimeout():g} s") from e
        except OSError as e:
            raise error(f"receiving from {peer or _peer(sock)}: {e}") from e
        if n == 0:
            raise error(f"{peer or _peer(sock)} closed the connection")
        view = view[n:]


def _peer(sock: socket.socket) -> str:
    try:
        name = sock.getpeername()
    except OSError:
        return "the peer"
    return f"{name[0]}:{name[1]}" if isinstance(name, tuple) else "the peer"  # a Unix socket has no address


def send(
    sock: socket.socket, op: Op, worker: int, step: int, payload: bytes | memoryview = b"", flags: Flag = Flag.NONE
) -> None:
    try:
        sock.sendall(HEADER.pack(MAGIC, VERSION, op, flags, worker, step, len(payload)))
        if len(payload):
            sock.sendall(payload)
    except TimeoutError as e:
        raise PeerLost(f"{_peer(sock)} did not take data within {sock.gettimeout()} s") from e
    except OSError as e:
        raise PeerLost(f"sending to {_peer(sock)} failed: {e}") from e


def send_json(sock: socket.socket, op: Op, worker: int, step: int, obj: dict[str, Any]) -> None:
    send(sock, op, worker, step, json.dumps(obj).encode())


def send_error(sock: socket.socket, message: str) -> None:
    """Best effort: the connection is about to close anyway."""
    with contextlib.suppress(PeerLost):
        send(sock, Op.ERROR, 0, 0, message.encode()[:MAX_JSON_BYTES])


def recv_header(sock: socket.socket) -> Header:
    raw = bytearray(HEADER.size)
    recv_exact(sock, memoryview(raw))
    magic, version, op, flags, worker, step, length = HEADER.unpack(raw)
    if magic != MAGIC or version != VERSION:
        raise PeerLost(f"{_peer(sock)} does not speak the parameter-server protocol v{VERSION}")
    if flags & ~int(Flag.STOP | Flag.REJOINED | Flag.ROUND):
        raise PeerLost(f"{_peer(sock)} sent unknown flags {flags:#x}")
    try:
        return Header(Op(op), worker, step, length, Flag(flags))
    except ValueError as e:
        raise PeerLost(f"{_peer(sock)} sent unknown op {op}") from e


def recv_small(sock: socket.socket, header: Header) -> bytes:
    """The payload of a JSON or ERROR message, bounded so a bad peer cannot make us allocate gigabytes."""
    if header.length > MAX_JSON_BYTES:
        raise PeerLost(f"{_peer(sock)} sent a {header.length}-byte {header.op.name} message")
    buf = bytearray(header.length)
    recv_exact(sock, memoryview(buf))
    return bytes(buf)


def recv_json(sock: socket.socket, header: Header) -> dict[str, Any]:
    try:
        obj = json.loads(recv_small(sock, header))
    except ValueError as e:
        raise PeerLost(f"{_peer(sock)} sent a malformed {header.op.name} message") from e
    if not isinstance(obj, dict):
        raise PeerLost(f"{_peer(sock)} sent a malformed {header.op.name} message")
    return obj


def recv_tensor_into(sock: socket.socket, header: Header, out: torch.Tensor) -> None:
    """Receive a tensor payload straight into `out` (contiguous); its size must match exactly."""
    view = tensor_bytes(out)
    if header.length != len(view):
        raise PeerLost(f"{_peer(sock)} sent {header.length} bytes where {len(view)} were expected")
    recv_exact(sock, view)


def expect(sock: socket.socket, header: Header, *ops: Op) -> None:
    """Raise PeerLost unless the message is one of `ops`; an ERROR message becomes the exception's text."""
    if header.op in ops:
        return
    if header.op == Op.ERROR:
        raise PeerLost(f"{_peer(sock)}: {recv_small(sock, header).decode(errors='replace')}")
    raise PeerLost(f"{_peer(sock)} sent {header.op.name} where {'/'.join(o.name for o in ops)} was expected")


def context(shard: int) -> bytes:
    """What a connection to shard `shard` is for, bound into its handshake's proofs."""
    return f"parameter-server/shard/{shard}".encode()


def connect(host: str, port: int, timeout: float, io_timeout: float) -> socket.socket:
    """Connect, retrying refusals and unresolvable names (the peer's pod may not be up yet) until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=min(5.0, timeout))
        except OSError as e:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"could not reach {host}:{port} within {timeout:g} s: {e}") from e
            time.sleep(0.2)
            continue
        sock.settimeout(io_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
