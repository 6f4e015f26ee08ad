"""What the ranks of a job say to one another in the rendezvous store that worker 0 or the job's coordinator hosts:
which group is the current one (its incarnation), who came to it (and the quorum they ask for), whom the host named
its members, whether it is formed, and its news (a member lost, a rank waiting to join)."""

from __future__ import annotations

from typing import Any

INCARNATION_KEY = "ringleader/incarnation"
# Seconds a client gives one attempt to connect to the store (its host's name may still point at a lost pod).
CONNECT_SECONDS = 5.0
# Seconds between two beats of a rank's pulse (`pulse_key`), and between two looks of the coordinator at them.
PULSE_SECONDS = 1.0


def formed_key(incarnation: str) -> str:
    return f"ringleader/{incarnation}/formed"


def broken_key(incarnation: str) -> str:
    """Set when a member of `incarnation` is known lost: its ranks leave it (`GroupWatch`)."""
    return f"ringleader/{incarnation}/broken"


def news_key(incarnation: str) -> str:
    """What its members hear of `incarnation`: "lost" (a member is lost: leave it now, `broken_key` says why) or
    "joiner" (a rank outside a group of fewer than every rank waits to join: re-form at a step boundary)."""
    return f"ringleader/{incarnation}/news"


def roster_key(incarnation: str) -> str:
    """The members of `incarnation`, as its host decided them: their global ranks, comma-separated, in order."""
    return f"ringleader/{incarnation}/roster"


def candidates_key(incarnation: str) -> str:
    """The global ranks that came to `incarnation`, each followed by a comma, a rank once per process that came."""
    return f"ringleader/{incarnation}/candidates"


def quorum_key(incarnation: str) -> str:
    """The fewest members the ranks coming to `incarnation` ask for (the survivors of a loss, training short)."""
    return f"ringleader/{incarnation}/quorum"


def world_key(incarnation: str) -> str:
    """How many ranks the job that comes to `incarnation` has, as the ranks coming say (a resized job's pods are
    all made again for their new number)."""
    return f"ringleader/{incarnation}/world"


def arrivals_key(incarnation: str) -> str:
    """How many processes came to `incarnation` (each adds 1 after naming itself in `candidates_key`)."""
    return f"ringleader/{incarnation}/arrivals"


def pulse_key(rank: int) -> str:
    """A counter global rank `rank` adds 1 to every PULSE_SECONDS while it is in a group (its heartbeat), where the
    job has a coordinator: the coordinator tells a group broken when a member's pulse stops (a stopped process, a
    lost node: nothing else reports those). The coordinator makes it, at 0, for a member that has none yet."""
    return f"ringleader/pulse/{rank}"


def left_key(incarnation: str) -> str:
    """The global ranks that left `incarnation` for good (their training ended), each followed by a comma: their
    pulses stop, and they are not lost."""
    return f"ringleader/{incarnation}/left"


def next_key(incarnation: str) -> str:
    """Where the host names the group after `incarnation`: ranks waiting for it are woken by the store."""
    return f"ringleader/{incarnation}/next"


def tell_lost(store: Any, incarnation: str, reason: str) -> None:
    """Say in the store that a member of `incarnation` is lost: its members leave it at once (`GroupWatch`). The
    first reason told stays (the members leaving on it tell the group lost again, as "lost")."""
    store.compare_set(broken_key(incarnation), "", reason)
    store.set(news_key(incarnation), "lost")
