"""A rank's watch over its process group (elastic/group_watch.py), on real connections and a real store: once the
group is told broken, or its rank leaves it, it ends the group's connections for reading here and holds them open,
so a peer's send in flight still completes (gloo never fails a send it queued on a connection that then failed: the
rank would wait out the collective's timeout); the peers read the end once the connections are released; and it
calls the rescue once it shut a broken group down, but not after its rank left the group."""

from __future__ import annotations

import datetime
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist
from ringleader_trainer.elastic.group_watch import GroupWatch, writing
from ringleader_trainer.elastic.store_keys import tell_lost


def _store_and_env() -> tuple[Any, Any]:
    """A rendezvous store hosted here, and the part of a worker's environment a group watch reads."""
    store: Any = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=10)
    )
    env = SimpleNamespace(
        role="worker", index=1, global_rank=1, rendezvous=None, store_address=("127.0.0.1", store.port)
    )
    return store, env


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP connection: this rank's end (as gloo holds it) and a peer's."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname(), timeout=5)
        ours, _ = server.accept()
    ours.settimeout(5)
    yield ours, peer
    ours.close()
    peer.close()


def _ended(ours: socket.socket, how: str) -> tuple[Any, GroupWatch]:
    """A watch over `ours` (and the store it watches), done with it: its group told broken, or its rank left it."""
    store, env = _store_and_env()
    watch = GroupWatch(env, "g", {ours.fileno()})
    if how == "broken":
        tell_lost(store, "g", "lost")
        watch.thread.join(10)
        assert not watch.thread.is_alive()
    else:
        watch.end()
    assert watch.down
    return store, watch


@pytest.mark.parametrize("how", ["broken", "left"])
def test_a_connection_ends_here_takes_a_peer_s_send_and_ends_there_once_released(
    connection: tuple[socket.socket, socket.socket], how: str
) -> None:
    ours, peer = connection
    _store, watch = _ended(ours, how)
    assert ours.recv(1) == b""  # gloo reads the end of the stream: every operation pending on it fails
    ours.close()  # as gloo does once it failed the connection
    # A peer's sends in flight complete (before: closed under them, the second met a reset connection).
    peer.sendall(b"x" * 65536)
    time.sleep(0.2)
    peer.sendall(b"y" * 1024)
    peer.settimeout(0.5)
    with pytest.raises(TimeoutError):
        peer.recv(1)  # nothing ended yet on the peer's side: its own watch tells it of the break
    watch.release()  # the next group formed, or the rank leaves for good
    assert watch.held == []
    peer.settimeout(5)
    try:
        ended = peer.recv(1) == b""
    except ConnectionResetError:  # this end closed with the peer's bytes unread
        ended = True
    assert ended


def test_a_group_watch_calls_the_rescue_once_it_shut_a_broken_group_down() -> None:
    store, env = _store_and_env()
    called: list[tuple[float, threading.Event]] = []
    watch = GroupWatch(env, "g", set(), lambda shut_at, left: called.append((shut_at, left)))
    before = time.time()
    tell_lost(store, "g", "lost")
    watch.thread.join(10)
    assert not watch.thread.is_alive() and watch.down
    [(shut_at, left)] = called
    assert before <= shut_at <= time.time() and left is watch.ended


def test_a_group_watch_does_not_call_the_rescue_after_its_rank_left_the_group() -> None:
    store, env = _store_and_env()
    called: list[float] = []
    watch = GroupWatch(env, "g", set(), lambda shut_at, left: called.append(shut_at))
    watch.end()
    tell_lost(store, "g", "lost")
    watch.thread.join(10)
    assert not watch.thread.is_alive() and called == []


def test_a_held_connection_takes_a_peer_s_send_however_large(connection: tuple[socket.socket, socket.socket]) -> None:
    """What a peer sends into a held connection is read and dropped: a send of 64 MB completes (before, the
    connection's buffers took about 4 MB and the peer's send waited there, as gloo's would until its timeout)."""
    ours, peer = connection
    _store, watch = _ended(ours, "broken")
    ours.close()  # as gloo does once it read the end of the stream
    peer.settimeout(10)
    peer.sendall(b"x" * (64 << 20))
    watch.release()


def test_writing_names_the_sockets_an_epoll_waits_on_for_room_to_write(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = connection
    inodes = {s: os.fstat(s.fileno()).st_ino for s in (ours, peer)}
    with select.epoll() as poll:
        poll.register(ours, select.EPOLLIN | select.EPOLLOUT)  # as gloo while it has a write queued
        poll.register(peer, select.EPOLLIN)
        found = writing()
        assert inodes[ours] in found and inodes[peer] not in found
        poll.modify(ours, select.EPOLLIN)  # its queue written
        assert inodes[ours] not in writing()


@pytest.mark.parametrize("done", ["written", "too late"])
def test_a_connection_gloo_still_writes_on_is_shut_down_once_written_or_too_late(
    connection: tuple[socket.socket, socket.socket], done: str
) -> None:
    """A connection this rank's gloo is still writing on at a break (its epoll waits for room to write) stays
    open for reading until that write is done, or WRITING_SECONDS passed: shut down at once, gloo would fail the
    connection with the write queued and never complete it (the rank stuck until the collective's timeout)."""
    ours, peer = connection
    store, env = _store_and_env()
    with select.epoll() as poll:
        poll.register(ours, select.EPOLLIN | select.EPOLLOUT)  # standing in for gloo's, a write queued
        watch = GroupWatch(env, "g", {ours.fileno()})
        watch.WRITING_SECONDS = 60.0 if done == "written" else 0.5
        tell_lost(store, "g", "lost")
        watch.thread.join(10)
        assert watch.down and len(watch.writing) == 1
        ours.settimeout(0.3)
        peer.sendall(b"z")
        assert ours.recv(1) == b"z"  # still read here: its pending receives go on
        if done == "written":
            poll.modify(ours, select.EPOLLIN)
        ours.settimeout(5)
        assert ours.recv(1) == b""  # then shut down for reading: they fail
        assert watch.writing == [] and len(watch.held) == 1
    watch.release()
