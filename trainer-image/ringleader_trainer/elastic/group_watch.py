"""A rank's watch over the process group it is in (`GroupWatch`): the group's connections shut down as soon as the
group is known broken, so a collective blocked in it fails at once; and the connections a group opened, told
apart from the store's and a metrics page's."""

from __future__ import annotations

import contextlib
import datetime
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ringleader_trainer.elastic.store_keys import (
    CONNECT_SECONDS,
    PULSE_SECONDS,
    broken_key,
    news_key,
    pulse_key,
    tell_lost,
)
from ringleader_trainer.env import RankEnv
from ringleader_trainer.exitcodes import one_line
from ringleader_trainer.logs import log_json
from ringleader_trainer.transport import ring_links

# Called once a broken group's connections are shut down: (when, Unix time; the event set when the rank leaves).
Rescuer = Callable[[float, threading.Event], None]


class GroupWatch:
    """Ends this rank's part in a process group as soon as the group is known broken, so that a collective
    blocked in it fails at once (and the rank heals or recovers) instead of after the collective's timeout; and
    raises `joiner` when a rank waits to join a group of fewer than every rank.

    A group is broken when one of its members is lost: a member that saw a collective fail says so in the
    store (`tell_lost`), and so does a rank that finds the group formed without it (the replacement of a lost
    member: the operator replaced its pod, as after a node's loss, where no connection ever reports the loss). A
    thread waits on the group's news with a connection of its own to the store and, once a loss is told (or
    the store, which worker 0 or the job's coordinator hosts, is gone), shuts the group's connections down for
    reading and holds them open (`_break`): gloo reads the end of each stream, fails every operation pending on
    it and closes its descriptor, while a peer's send still in flight to this rank completes into the connection,
    held open and drained (what arrives is read and dropped: `_drain`), instead of meeting a closed one.
    That matters because gloo's TCP transport never fails a send it has queued for writing when its connection
    fails (`Pair::signalException` passes over the unbound buffers of its queued writes): the send waits out the
    collective's timeout, and so does the rank. A send is queued when the socket cannot take it at once, and a
    write refused by a connection the peer closed is queued too, silently, until gloo notices the close: in a
    3-rank loop of allreduces broken at random moments, a rank was stuck in 4 of 42 breaks with each rank closing
    its connections as soon as it heard of the break, in none of 76 with them held open. For the same reason a
    connection on which this rank's gloo is itself still writing (its epoll waits for room to write: `writing`)
    is shut down only once that write completed, into the peer's drained connection, or after WRITING_SECONDS
    (a peer frozen with its buffers full). A rank leaving the group (`end`) ends them the same way; they are
    closed (`release`) once the rank's next group formed, when the peers' own watches have long told them; the
    ring's own links (`--allreduce ring`), opened after the group formed, are failed at the break. Shutting
    down, not closing, leaves gloo's threads their descriptors.

    Where the job has a coordinator, a second thread beats this rank's pulse (`pulse_key`) every PULSE_SECONDS
    while the watch lasts, on a connection of its own: the coordinator tells the group broken when a member's pulse
    stops. (Not the watching thread's: its wait would have to time out every beat, and c10d logs two warnings at
    each such timeout.)

    `rescue`, when given, is called on the watching thread once it shut a broken group's connections down, with
    the Unix time it did and `ended` (set when this rank leaves the group): the last resort for a rank stuck in
    the group anyway (elastic/rescue.py)."""

    SLICE = 30.0  # seconds of one wait on the store, between checks that the watch is still wanted
    DRAIN_SECONDS = 0.02  # between two rounds of draining the held connections
    WRITING_SECONDS = 2.0  # the longest a connection gloo is still writing on stays open for reading at a break

    def __init__(self, env: RankEnv, incarnation: str, sockets: set[int], rescue: Rescuer | None = None) -> None:
        self.env, self.incarnation, self.rescue = env, incarnation, rescue
        # Each descriptor with the socket it held when recorded: once gloo closes a connection (its peer was
        # lost) the number may be reused by another of this rank's connections, which must not be shut down.
        self.sockets = _identities(sockets)
        self.ended = threading.Event()
        self.joiner = threading.Event()  # a rank waits to join this group (of fewer than every rank)
        # Held while the connections are shut down, which happens once: after this rank leaves the group its
        # descriptors' numbers may be reused by the next group's connections.
        self.lock = threading.Lock()
        self.down = False  # the connections were shut down (the group is broken, or this rank left it)
        self.held: list[socket.socket] = []  # the connections shut down for reading, held open and drained
        # Connections gloo was still writing on at the break, each with its inode: shut down once that is done.
        self.writing: list[tuple[socket.socket, int]] = []
        self.writing_until = 0.0  # monotonic time after which those are shut down all the same
        self.released = threading.Event()
        self.drainer: threading.Thread | None = None
        self.thread = threading.Thread(target=self._run, name=f"group-watch-{incarnation[:8]}", daemon=True)
        self.thread.start()
        if env.rendezvous is not None:
            threading.Thread(target=self._beat, name=f"pulse-{incarnation[:8]}", daemon=True).start()

    def tell(self, store: Any) -> None:
        """Say in the store that this group is broken (where the store is still there to hear it)."""
        with contextlib.suppress(Exception):
            tell_lost(store, self.incarnation, "lost")

    def add(self, sockets: set[int]) -> None:
        """Watch these connections too (a group built on this one); shut down at once if it is already broken."""
        with self.lock:
            self.sockets |= _identities(sockets)
            if self.down:
                self._break()

    def end(self) -> None:
        """Stop watching (this rank leaves the group): its connections end here as at a break, held open until
        `release` so that a peer still finishing the exchange this rank completed sends into them (the rank tells
        the store the group is broken: the peers' watches end the group for them)."""
        with self.lock:
            self.ended.set()
            self._break()

    def release(self) -> None:
        """Stop watching, and close the connections a break or `end` held open, both ways (the peers read their
        end): once the next group formed, or when this rank leaves for good without shutting the group down (its
        peers leave too, and may still be in it)."""
        with self.lock:
            self.ended.set()
            self.released.set()
            for held in [*self.held, *(s for s, _ in self.writing)]:
                with contextlib.suppress(OSError):
                    held.shutdown(socket.SHUT_RDWR)
                held.close()
            self.held, self.writing = [], []

    def _run(self) -> None:
        env = self.env
        try:
            client = _client(env)
            key = news_key(self.incarnation)
            while not self.ended.is_set():
                try:
                    client.wait([key], datetime.timedelta(seconds=self.SLICE))
                except dist.DistStoreError as e:
                    if "timeout" not in str(e).lower():
                        raise
                    continue
                if key == broken_key(self.incarnation) or client.get(key) != b"joiner":
                    break
                self.joiner.set()  # from now on only a loss is news
                key = broken_key(self.incarnation)
        except Exception as e:  # the store is gone: so is worker 0, a member (or the coordinator: the group re-forms)
            reason = f"the store is unreachable: {one_line(e)}"
        else:
            reason = "a member was lost"
        with self.lock:
            if self.ended.is_set():
                return
            log_json(role=env.role, index=env.index, event="group-broken", group=self.incarnation, reason=reason)
            self._break()
            ring_links.fail_all(f"the process group broke: {reason}")  # built on this group (no other is yet)
        if self.rescue is not None:
            self.rescue(time.time(), self.ended)

    def _beat(self) -> None:
        """Add 1 to this rank's pulse every PULSE_SECONDS until the watch ends. A store gone is the watching
        thread's to report: this one just stops."""
        with contextlib.suppress(Exception):
            client, pulse = _client(self.env), pulse_key(self.env.global_rank)
            while True:
                client.add(pulse, 1)
                if self.ended.wait(PULSE_SECONDS):
                    return

    def _break(self) -> None:
        """Shut the watched connections down for reading, each held open by a second handle (`held`) so that gloo
        closing its descriptor does not close the connection under a peer's send, and drained; those gloo is
        still writing on wait for that to end (`writing`, shut down by `_drain`)."""
        busy = writing() if self.sockets else set()  # none left to shut: a rank leaving a group already broken
        for fd, inode in self.sockets.items():
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_ino != inode:
                    continue  # closed by gloo, and the number reused since
                held = _second_handle(fd)
                if inode in busy:
                    self.writing.append((held, inode))
                    self.writing_until = time.monotonic() + self.WRITING_SECONDS
                    continue
                self.held.append(held)
                held.shutdown(socket.SHUT_RD)
        self.sockets, self.down = {}, True
        if self.drainer is None and (self.held or self.writing) and not self.released.is_set():
            self.drainer = threading.Thread(target=self._drain, name=f"group-drain-{self.incarnation[:8]}", daemon=True)
            self.drainer.start()

    def _drain(self) -> None:
        """Until `release`: every DRAIN_SECONDS, read and drop what peers sent into the held connections (a send
        of theirs completes however large), and shut down for reading each connection gloo was writing on
        once that write is done, or WRITING_SECONDS passed."""
        while not self.released.wait(self.DRAIN_SECONDS):
            with self.lock:
                if self.writing:
                    busy, late = writing(), time.monotonic() >= self.writing_until
                    for held, inode in [w for w in self.writing if late or w[1] not in busy]:
                        self.writing.remove((held, inode))
                        self.held.append(held)
                        with contextlib.suppress(OSError):
                            held.shutdown(socket.SHUT_RD)
                for held in self.held:
                    _discard(held)


def _client(env: RankEnv) -> Any:
    """A connection of its own to the rendezvous store (a client's waits and adds take turns on one)."""
    return dist.TCPStore(  # type: ignore[attr-defined]
        *env.store_address, is_master=False, wait_for_workers=False, timeout=datetime.timedelta(seconds=CONNECT_SECONDS)
    )


def open_sockets() -> set[int]:
    """This process's open socket descriptors (none where /proc is not there)."""
    found = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                    found.add(int(name))
    return found


def _identities(fds: set[int]) -> dict[int, int]:
    """Each still open descriptor of `fds` with its socket's inode (unique while the socket lives)."""
    found = {}
    for fd in fds:
        with contextlib.suppress(OSError):
            found[fd] = os.fstat(fd).st_ino
    return found


def connection_port(fd: int) -> int | None:
    """The local port of a TCP connection; None for anything else (a listening socket: gloo's listener must
    stay open, its accept() failing would end the process)."""
    with contextlib.suppress(OSError), _second_handle(fd) as s:
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return None
        address = s.getsockname()
        return address[1] if isinstance(address, tuple) else None
    return None


def writing() -> set[int]:
    """The inodes of the sockets an epoll instance of this process waits on for room to write (EPOLLOUT): gloo's
    TCP transport asks for that only while it has a write queued (`Pair::handleReadWrite` drops it once the queue
    is empty). Read from /proc/self/fdinfo of each epoll descriptor (none where /proc is not there)."""
    found = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError, ValueError):
                if os.readlink(f"/proc/self/fd/{name}") != "anon_inode:[eventpoll]":
                    continue
                with open(f"/proc/self/fdinfo/{name}") as info:
                    for line in info:  # "tfd: 12 events: 1d data: ... pos:0 ino:310a45 sdev:9" (hex)
                        fields = line.split()
                        if not fields or fields[0] != "tfd:" or "events:" not in fields:
                            continue
                        events = int(fields[fields.index("events:") + 1], 16)
                        inode = next((f[4:] for f in fields if f.startswith("ino:")), None)
                        if events & select.EPOLLOUT and inode is not None:
                            found.add(int(inode, 16))
    return found


DISCARD_CHUNK = 1 << 20
DISCARD_BYTES = 64 << 20  # read at most this much from one connection each round (3 GB/s at DRAIN_SECONDS)


def _discard(held: socket.socket) -> None:
    """Read and drop what has arrived on a held connection (up to DISCARD_BYTES a call)."""
    for _ in range(DISCARD_BYTES // DISCARD_CHUNK):
        try:
            if not held.recv(DISCARD_CHUNK, socket.MSG_DONTWAIT):
                return  # nothing left: a connection shut down for reading reads as ended while empty
        except OSError:  # nothing arrived (EAGAIN), or the connection is gone
            return


def _second_handle(fd: int) -> socket.socket:
    """A socket object on a duplicate of `fd` (a context manager): closing it leaves `fd`, gloo's, open."""
    return socket.socket(fileno=os.dup(fd))
