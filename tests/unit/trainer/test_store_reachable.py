"""A rank reaching for a store that is not listening yet (its coordinator restarting) polls for it at a steady
pace (rendezvous.await_listening) instead of TCPStore's own exponential backoff, which could sleep past the moment
the store came back and leave the rank out of the group its peers formed meanwhile."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from ringleader_trainer.elastic import rendezvous

from tests.support.ranks import free_port


def test_a_store_that_starts_listening_late_is_reached() -> None:
    port = free_port()
    accepted = threading.Event()

    def listen_late() -> None:
        time.sleep(1.0)
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(10)
            conn, _ = server.accept()
            conn.close()
            accepted.set()

    thread = threading.Thread(target=listen_late)
    thread.start()
    rendezvous.await_listening(("127.0.0.1", port), 10.0)  # raises if no attempt after the first second got in
    thread.join(10)
    assert accepted.is_set()


def test_a_store_never_listening_is_a_timeout_naming_it() -> None:
    port = free_port()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port} accepted no connection within 0.5 s"):
        rendezvous.await_listening(("127.0.0.1", port), 0.5)
    assert time.monotonic() - start < 5.0  # the wait is bounded by its seconds, not by a backoff
