"""A parameter-server shard's backup on the next shard (primary/backup, opt-in: `spec.parameterServer.backup`).

Shard i keeps a copy of its state (parameters, optimizer state, every worker's clock) on shard (i+1) % P:

- `BackupLink` (on shard i) opens an authenticated connection to shard i+1 as a slot of its own (HELLO with
  "backup_of"), sends its whole state (MIRROR), then forwards every update it applies (UPDATE: the gradient it
  applied and the clocks it moved) and waits for the backup's ACK before any worker is answered: a worker never
  sees parameters its shard's backup lacks. The gradient, not the result, is sent: one copy of the shard's
  size a step, which the backup applies with the same optimizer to the same values, so its copy stays equal to
  the primary's. A backup lost is linked again (and sent the whole state again) as soon as its replacement
  serves; meanwhile the shard trains on without one.
- `Replica` (on shard i+1) holds the copy and applies what the link forwards, under a lock of its own (two
  shards backing each other up never wait on each other's lock).
- `restore` (in shard i's replacement) asks shard i+1 for the copy (HELLO with "restore"): the replacement
  serves from it, every worker takes its place back there (`ShardClient` retries a lost shard), and a worker
  whose push the lost shard had not applied pushes it again. Nothing is read from a checkpoint, and the copy is
  read with `torch.load(weights_only=True)` after its size is bounded (healing.decode).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ringleader_trainer.elastic import healing
from ringleader_trainer.transport import auth, wire
from ringleader_trainer.transport.wire import Flag, Op, PeerLost, context

RELINK_SECONDS = 0.5  # between two attempts to reach a lost backup's replacement
SLACK_BYTES = 1 << 20  # a state's plain values beside its tensors


def state_bound(flat: torch.Tensor) -> int:
    """The most bytes a shard's whole state may take on the wire: its values, up to seven optimizer slots of the
    same size, and slack (a peer cannot make this rank allocate more)."""
    return 8 * flat.numel() * flat.element_size() + SLACK_BYTES


def whole_state(
    flat: torch.Tensor, optimizer: torch.optim.Optimizer, clock: Iterable[int], done: Iterable[int]
) -> dict[str, Any]:
    """A shard's whole state as a backup keeps and sends it: values, optimizer state, every worker's clock and
    the workers done."""
    return {"flat": flat.clone(), "optimizer": optimizer.state_dict(), "clock": list(clock), "done": sorted(done)}


def send_state(sock: socket.socket, op: Op, shard: int, state: dict[str, Any]) -> None:
    data = healing.encode(state)
    wire.send(sock, op, shard, 0, wire.tensor_bytes(data))


def recv_state(sock: socket.socket, header: wire.Header, bound: int, sender: str) -> dict[str, Any]:
    """A state `send_state` sent, its size checked against `bound` before anything is allocated."""
    if not 0 < header.length <= bound:
        raise PeerLost(f"{sender} would send a state of {header.length} bytes (at most {bound})")
    data = torch.empty(header.length, dtype=torch.uint8)
    wire.recv_exact(sock, wire.tensor_bytes(data))
    try:
        return healing.decode(data, 0)
    except healing.HealError as e:
        raise PeerLost(f"{sender} sent a state that cannot be read") from e


class Replica:
    """The copy of shard `of`'s state this shard keeps: `flat`, an optimizer over it, every worker's clock."""

    def __init__(self, of: int, buffers: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.optim.Optimizer]]):
        """`buffers()` builds the shard's flat values, its gradient buffer and the optimizer over them (as the
        primary does: `ps.ShardServer`)."""
        self.of = of
        self.flat, self.grad, self.optimizer = buffers()
        self.lock = threading.Lock()
        self.clock: list[int] = []
        self.done: list[int] = []
        self.held = False  # a whole state was received (before that there is nothing to restore from)
        self.link: socket.socket | None = None  # the primary's connection now

    def state(self) -> dict[str, Any]:
        with self.lock:
            return whole_state(self.flat, self.optimizer, self.clock, self.done)

    def serve(self, conn: socket.socket) -> None:
        """Take the primary's whole state, then its updates, until it says DONE (PeerLost when it is lost)."""
        self.link = conn
        header = wire.recv_header(conn)
        wire.expect(conn, header, Op.MIRROR)
        state = recv_state(conn, header, state_bound(self.flat), f"shard {self.of}")
        with self.lock:
            load(state, self.flat, self.optimizer)
            self.clock, self.done, self.held = list(state["clock"]), list(state["done"]), True
        wire.send(conn, Op.ACK, 0, 0)
        while True:
            header = wire.recv_header(conn)
            wire.expect(conn, header, Op.UPDATE, Op.DONE)
            if header.op == Op.DONE:
                return
            with self.lock:
                wire.recv_tensor_into(conn, header, self.grad)
                self.optimizer.step()
                if header.flags & Flag.ROUND:  # a synchronous round: every worker's clock
                    self.clock = [header.step] * len(self.clock)
                elif 0 <= header.worker < len(self.clock):
                    self.clock[header.worker] = header.step
                else:
                    raise PeerLost(f"shard {self.of} forwarded an update of worker {header.worker}")
            wire.send(conn, Op.ACK, 0, 0)

    def hand_over(self, conn: socket.socket, probe: bool) -> None:
        """Answer shard `of`'s replacement, after ending the lost primary's link (which a node lost never
        closes): with STATE {"held"} (`probe`), else with the copy; PeerLost when no whole state was received."""
        stale = self.link
        if stale is not None:
            with contextlib.suppress(OSError):
                stale.shutdown(socket.SHUT_RDWR)
        if probe:
            wire.send_json(conn, Op.STATE, 0, 0, {"held": self.held})
        elif not self.held:
            raise PeerLost(f"the backup of shard {self.of} holds no state yet")
        else:
            send_state(conn, Op.MIRROR, self.of, self.state())


def load(state: dict[str, Any], flat: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
    """Values and optimizer state from a shard's whole state (checked against `flat`'s size)."""
    values = state.get("flat")
    if not isinstance(values, torch.Tensor) or values.shape != flat.shape or values.dtype != flat.dtype:
        raise PeerLost(f"a shard's state does not hold {flat.numel()} {flat.dtype} values")
    flat.copy_(values)
    optimizer.load_state_dict(state["optimizer"])


class BackupLink:
    """Shard `shard`'s connection to its backup on shard `backup` at `addr`. `forward` is called under the
    shard's lock after each update; `whole()` (also under it) gives the state to send when a link opens."""

    def __init__(
        self, shard: int, backup: int, addr: tuple[str, int], token: bytes, timeout: float, numel: int,
        whole: Callable[[], dict[str, Any]], lock: threading.Condition, on_event: Callable[[str, str], None],
    ) -> None:  # fmt: skip
        self.shard, self.backup, self.addr, self.token, self.timeout = shard, backup, addr, token, timeout
        self.numel, self.whole, self.lock, self.on_event = numel, whole, lock, on_event
        self.sock: socket.socket | None = None
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._link, name=f"ps-backup-{shard}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def forward(self, grad: torch.Tensor, worker: int, clock: int, round_: bool) -> None:
        """Send the update just applied and wait for the backup's ACK; a backup lost is dropped (and linked
        again by the thread)."""
        if self.sock is None:
            return
        try:
            wire.send(self.sock, Op.UPDATE, worker, clock, wire.tensor_bytes(grad), Flag.ROUND if round_ else Flag.NONE)
            wire.expect(self.sock, wire.recv_header(self.sock), Op.ACK)
        except PeerLost as e:
            self._drop(str(e))

    def end(self) -> None:
        """Every worker is done: tell the backup (its slot's thread returns) and stop linking."""
        self.ended.set()
        with self.lock:
            sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(PeerLost):
                wire.send(sock, Op.DONE, 0, 0)
            sock.close()

    def _drop(self, why: str) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
            self.on_event("backup-lost", why)
            threading.Thread(target=self._link, name=f"ps-backup-{self.shard}", daemon=True).start()

    def _link(self) -> None:
        """Until linked (or ended): reach the backup, say what this is, send the whole state under the lock."""
        while not self.ended.is_set():
            sock = None
            try:
                sock = wire.connect(*self.addr, timeout=min(2.0, self.timeout), io_timeout=self.timeout)
                auth.initiate(sock, self.token, context(self.backup))
                wire.send_json(sock, Op.HELLO, 0, 0, {"shard": self.backup, "backup_of": self.shard,
                                                      "numel": self.numel})  # fmt: skip
                with self.lock:
                    if self.ended.is_set():
                        break
                    send_state(sock, Op.MIRROR, self.shard, self.whole())
                    wire.expect(sock, wire.recv_header(sock), Op.ACK)
                    self.sock, sock = sock, None
                self.on_event("backup-linked", f"shard {self.backup}")
                return
            except (OSError, auth.AuthError, PeerLost):
                time.sleep(RELINK_SECONDS)
            finally:
                if sock is not None:
                    sock.close()


def held(addr: tuple[str, int], shard: int, backup: int, token: bytes, timeout: float) -> bool:
    """Whether shard `backup` at `addr` serves and holds shard `shard`'s state (a lost shard's replacement asks
    before it joins anything; that shard stops taking updates from the lost shard's link). False when nothing
    listens there: the job is starting, or every rank is starting again. One attempt."""
    answer = ask(addr, backup, token, timeout, {"shard": backup, "restore": shard, "probe": True}, Op.STATE)
    return isinstance(answer, dict) and answer.get("held") is True


def restore(addr: tuple[str, int], shard: int, backup: int, token: bytes, timeout: float, bound: int) -> dict[str, Any]:
    """Shard `shard`'s state as shard `backup` at `addr` keeps it (after `held`), at most `bound` bytes on the
    wire; PeerLost when it cannot be had."""
    answer = ask(addr, backup, token, timeout, {"shard": backup, "restore": shard}, Op.MIRROR, bound=bound)
    if answer is None:
        raise PeerLost(f"shard {backup} at {addr[0]}:{addr[1]} did not hand over shard {shard}'s state")
    return answer


def ask(
    addr: tuple[str, int], shard: int, token: bytes, timeout: float, hello: dict[str, Any], op: Op,
    worker: int = 0, bound: int = 0,
) -> dict[str, Any] | None:  # fmt: skip
    """One question to shard `shard` at `addr` on a proven connection of its own (each step bounded by
    `timeout`): `hello` (HELLO from `worker`), then the answer `op` (STATE's JSON, or MIRROR's state of at most
    `bound` bytes); None when nothing listens there or no such answer comes."""
    try:
        sock = socket.create_connection(addr, timeout=timeout)
    except OSError:
        return None
    with sock:
        try:
            sock.settimeout(timeout)
            auth.initiate(sock, token, context(shard))
            wire.send_json(sock, Op.HELLO, worker, 0, hello)
            header = wire.recv_header(sock)
            wire.expect(sock, header, op)
            if op == Op.STATE:
                return wire.recv_json(sock, header)
            return recv_state(sock, header, bound, f"shard {shard}")
        except (OSError, auth.AuthError, PeerLost):
            return None
