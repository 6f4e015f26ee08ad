"""Admission on a listening port the trainer opens: connections are accepted until every slot is claimed by a
peer whose handshake succeeded; anything else (a port scan, a probe, a peer without the job's token, a second
claim on a taken slot, a connection that says nothing) is dropped and reported, and the port keeps accepting.

Each connection's handshake runs on its own thread under its own timeout (auth.HANDSHAKE_SECONDS), so a silent
connection holds up no one. At most `max_pending` handshakes run at once: a new connection beyond them evicts
the oldest pending one (a flood of silent connections churns through the slots while a real peer's handshake,
milliseconds long, completes). The whole wait is bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable

from ringleader_trainer.transport.auth import AuthError
from ringleader_trainer.transport.wire import PeerLost

MAX_PENDING = 32
MAX_REPORTED = 10  # rejections reported one by one; later ones are only counted


class Refused(ConnectionError):
    """A handshake saw a peer it will not take (the message says why, naming no secret)."""


class Answered(Exception):
    """A handshake answered a proven peer that claims no slot (a probe): its connection closes, unreported."""


class Gate:
    """`run(slots, deadline, admitted)` accepts on `listener` until slots 0..slots-1 are all claimed (with
    `keep_open`, on until `stop()`: a slot given back by `release` is claimed again by the next proven peer, a
    lost worker's replacement).

    `handshake(conn)` authenticates a new connection and returns the slot it claims, or raises AuthError,
    PeerLost or Refused to have it dropped, or Answered once it has served a probe. `admitted(conn, slot)` is
    then called on that connection's thread (it may serve the connection there for as long as it likes).
    `on_reject(peer, reason)` hears of the first MAX_REPORTED rejections; `rejected` counts them all."""

    def __init__(
        self,
        listener: socket.socket,
        handshake: Callable[[socket.socket], int],
        on_reject: Callable[[str, str], None],
        max_pending: int | None = None,
    ) -> None:
        self.listener, self.handshake, self.on_reject = listener, handshake, on_reject
        self.max_pending = MAX_PENDING if max_pending is None else max_pending
        self.claimed: set[int] = set()
        self.ever_claimed: set[int] = set()  # slots claimed at least once (the deadline is for the others)
        self.rejected = 0
        self.admitted: list[threading.Thread] = []  # the threads of claimed slots, recorded as they claim
        self._pending: dict[int, socket.socket] = {}  # connections in their handshake, oldest first
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()

    def run(
        self,
        slots: int,
        deadline: float,
        admitted: Callable[[socket.socket, int], None],
        stop: Callable[[], bool] = lambda: False,
        keep_open: bool = False,
    ) -> None:
        """Return once every slot is claimed (with `keep_open`, only once `stop()` is true) or `stop()` is true;
        TimeoutError naming the slots never claimed past the deadline."""
        # epoll, not select(): select() refuses descriptors past 1023, and a rank of a large job holds thousands
        # (gloo's full mesh, a shard's workers).
        events = selectors.DefaultSelector()
        events.register(self.listener, selectors.EVENT_READ)
        events.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._lock:
                    if len(self.claimed) >= slots and not keep_open:
                        return
                    all_came = len(self.ever_claimed) >= slots
                if stop():
                    return
                remaining = 1.0 if all_came else deadline - time.monotonic()
                if remaining <= 0:
                    missing = sorted(set(range(slots)) - self.ever_claimed)
                    raise TimeoutError(f"no proven peer for {_ranges(missing)} ({len(missing)} of {slots})")
                ready = {key.fd for key, _ in events.select(min(remaining, 1.0))}
                if self._wake_r in ready:
                    os.read(self._wake_r, 64)
                if self.listener.fileno() in ready:
                    self._accept(slots, admitted)
        finally:
            events.close()
            with self._lock:  # under the lock: a claiming thread writes to the pipe only while it is open
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    def _accept(self, slots: int, admitted: Callable[[socket.socket, int], None]) -> None:
        """Take a connection off the listener and start its handshake on a thread of its own; with `max_pending`
        handshakes already in flight, the oldest is dropped."""
        try:
            conn, addr = self.listener.accept()
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else "a peer"
        with self._lock:
            evicted = self._pending.pop(next(iter(self._pending))) if len(self._pending) >= self.max_pending else None
            self._pending[id(conn)] = conn
        if evicted is not None:  # its thread's handshake fails now and reports it
            with contextlib.suppress(OSError):
                evicted.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=self._admit, args=(conn, peer, slots, admitted), daemon=True).start()

    def release(self, slot: int) -> None:
        """Give `slot` back (its peer was lost): the next proven peer claiming it is admitted (`keep_open`)."""
        with self._lock:
            self.claimed.discard(slot)

    def _admit(
        self, conn: socket.socket, peer: str, slots: int, admitted: Callable[[socket.socket, int], None]
    ) -> None:
        try:
            try:
                slot, problem = self.handshake(conn), ""
            except (AuthError, PeerLost, Refused) as e:
                slot, problem = -1, str(e)
            except Answered:
                with self._lock:
                    self._pending.pop(id(conn), None)
                conn.close()
                return
            with self._lock:
                if self._pending.pop(id(conn), None) is None and not problem:  # evicted as its handshake ended
                    problem = "evicted by newer connections while in its handshake"
                taken = not problem and (slot in self.claimed or not 0 <= slot < slots)
                if not problem and not taken:
                    self.claimed.add(slot)
                    self.ever_claimed.add(slot)
                    self.admitted.append(threading.current_thread())
                    if len(self.claimed) >= slots and self._wake_w >= 0:
                        os.write(self._wake_w, b"x")  # run() returns now instead of at its next poll
            if problem or taken:
                conn.close()
                self._reject(peer, problem or f"slot {slot} is taken or out of range")
                return
            admitted(conn, slot)
        except BaseException:
            with self._lock:
                self._pending.pop(id(conn), None)
            conn.close()
            raise

    def _reject(self, peer: str, reason: str) -> None:
        with self._lock:
            self.rejected += 1
            report = self.rejected <= MAX_REPORTED
        if report:
            self.on_reject(peer, reason)


def _ranges(values: list[int]) -> str:
    """`0-3,7` for [0, 1, 2, 3, 7]."""
    out: list[str] = []
    for v in values:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)
