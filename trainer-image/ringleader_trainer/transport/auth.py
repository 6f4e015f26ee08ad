"""Peer authentication on the trainer's own ports (the parameter server's and the ring's): both ends prove they
hold the job's token, a per-job secret the operator writes into a Secret it owns and mounts in every rank
(RINGLEADER_TOKEN_FILE; docs/env-contract.md). The token itself never crosses the wire and is never logged.

The handshake runs first on every connection, before either protocol's own hello, on raw bytes:

    initiator -> acceptor   b"RLAU" version(u8) nonce_i(32)
    acceptor  -> initiator  nonce_a(32) HMAC(token, "acceptor"  | context | nonce_i | nonce_a)
    initiator -> acceptor               HMAC(token, "initiator" | context | nonce_a | nonce_i)

HMAC-SHA256, compared in constant time. `context` names what the connection is for (the shard, or the ring's
group, generation and link), so a proof made for one link is worthless on another; fresh nonces on both sides
make a recorded proof worthless on a new connection. This authenticates the peer, not the bytes that follow:
it keeps out whoever can reach the port without the token (a port scan, a probe, another tenant's pod), not
an attacker on the path between pods (use an encrypting CNI for that). Anything wrong ends in `AuthError`
with a message that discloses nothing but what failed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import struct
import time
from pathlib import Path

from ringleader_trainer.env import EnvError

MAGIC = b"RLAU"
VERSION = 1
NONCE = 32
MAC = hashlib.sha256().digest_size
OPENING = struct.Struct(f"<4sB{NONCE}s")
HANDSHAKE_SECONDS = 10.0  # a peer that has not finished the handshake by then is dropped
MIN_TOKEN_BYTES = 16
MAX_TOKEN_BYTES = 4096
TOKEN_FILE_VARIABLE = "RINGLEADER_TOKEN_FILE"


class AuthError(ConnectionError):
    """The peer did not prove it holds the job's token (or broke off the handshake)."""


def load_token(path: str | None = None) -> bytes:
    """The job's token from `path` (default: the file RINGLEADER_TOKEN_FILE names); EnvError naming the
    variable or the file when it is unset, unreadable, too short or too long."""
    path = os.environ.get(TOKEN_FILE_VARIABLE) if path is None else path
    if not path:
        raise EnvError(
            f"{TOKEN_FILE_VARIABLE} is not set: the parameter server and the ring authenticate their peers with "
            "the job's token (the operator mounts it; docs/env-contract.md)"
        )
    try:
        with Path(path).open("rb") as f:
            token = f.read(MAX_TOKEN_BYTES + 1).strip()
    except OSError as e:
        raise EnvError(f"{TOKEN_FILE_VARIABLE}={path}: cannot read the job's token: {e.strerror}") from e
    if not MIN_TOKEN_BYTES <= len(token) <= MAX_TOKEN_BYTES:
        raise EnvError(
            f"{TOKEN_FILE_VARIABLE}={path}: the job's token must be {MIN_TOKEN_BYTES}-{MAX_TOKEN_BYTES} bytes, "
            f"not {len(token)}"
        )
    return token


def _mac(token: bytes, label: bytes, context: bytes, first: bytes, second: bytes) -> bytes:
    # Lengths are fixed but the context's: prefix it with its length so no two (label, context) pairs collide.
    message = label + struct.pack("<I", len(context)) + context + first + second
    return hmac.new(token, message, hashlib.sha256).digest()


def _recv(sock: socket.socket, n: int, what: str, deadline: float | None = None) -> bytes:
    """`n` bytes; by `deadline` (monotonic) if given, so a peer dripping a byte at a time gains nothing."""
    buf = bytearray()
    while len(buf) < n:
        try:
            if deadline is not None:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(n - len(buf))
        except TimeoutError as e:
            limit = HANDSHAKE_SECONDS if deadline is not None else sock.gettimeout()
            raise AuthError(f"no {what} within {limit:g} s") from e
        except OSError as e:
            raise AuthError(f"connection failed during the handshake: {e}") from e
        if not chunk:
            raise AuthError(f"connection closed before the {what}")
        buf += chunk
    return bytes(buf)


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError as e:  # TimeoutError included
        raise AuthError(f"connection failed during the handshake: {e}") from e


def initiate(sock: socket.socket, token: bytes, context: bytes) -> None:
    """The connecting side: prove the token and check the acceptor does, under the socket's own timeout (the
    peer may still be starting up: its listener takes the connection before it answers)."""
    mine = secrets.token_bytes(NONCE)
    _send(sock, OPENING.pack(MAGIC, VERSION, mine))
    reply = _recv(sock, NONCE + MAC, "answer to the handshake")
    theirs, proof = reply[:NONCE], reply[NONCE:]
    if not hmac.compare_digest(proof, _mac(token, b"acceptor", context, mine, theirs)):
        raise AuthError("the peer did not prove it holds the job's token")
    _send(sock, _mac(token, b"initiator", context, theirs, mine))


def accept(sock: socket.socket, token: bytes, context: bytes) -> None:
    """The listening side: check the initiator proves the token, and prove it back, all within
    HANDSHAKE_SECONDS; the socket's timeout is restored after."""
    saved = sock.gettimeout()
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    try:
        magic, version, theirs = OPENING.unpack(_recv(sock, OPENING.size, "handshake", deadline))
        if magic != MAGIC or version != VERSION:
            raise AuthError("the peer does not speak Ringleader's handshake")
        mine = secrets.token_bytes(NONCE)
        _send(sock, mine + _mac(token, b"acceptor", context, theirs, mine))
        proof = _recv(sock, MAC, "proof of the job's token", deadline)
        if not hmac.compare_digest(proof, _mac(token, b"initiator", context, mine, theirs)):
            raise AuthError("the peer did not prove it holds the job's token")
    finally:
        sock.settimeout(saved)
