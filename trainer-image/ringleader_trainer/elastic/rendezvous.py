"""Rendezvous: every rank joins one process group (workers, then shards), within the rendezvous timeout, and
again after a recovery or a heal. Its failure is a RendezvousError (exit 200, retryable)."""

from __future__ import annotations

import contextlib
import datetime
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from ringleader_trainer.elastic.group_watch import GroupWatch, Rescuer, connection_port, open_sockets
from ringleader_trainer.elastic.store_keys import (
    CONNECT_SECONDS,
    INCARNATION_KEY,
    arrivals_key,
    candidates_key,
    formed_key,
    left_key,
    news_key,
    next_key,
    quorum_key,
    roster_key,
    tell_lost,
    world_key,
)
from ringleader_trainer.env import RankEnv
from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line
from ringleader_trainer.logs import log_json


class RendezvousError(TrainerError):
    """The master or a peer was not reachable within the rendezvous timeout."""

    exit_code = ExitCode.RENDEZVOUS_TIMEOUT


class TrainingEnded(TrainerError):
    """The job's training ended while this rank waited to join its group (a lost rank's replacement, or a survivor
    left out, that came after the others trained their last step): nothing is left to train, and the rank ends
    as done (exit 0). Before, it waited out the rendezvous timeout and failed, and a job waiting for every worker
    to succeed never did."""

    exit_code = ExitCode.OK


# Seconds a rank waits on the store for the next group before looking again (the wait ends as soon as the key is
# set; each slice that runs out makes torch's store log a warning, hence not every second).
WAIT_SLICE = 10.0
# With a quorum, the seconds the host waits after the last rank came before it forms the group of those there.
QUORUM_SETTLE_SECONDS = 0.5


class Rendezvous:
    """This rank's way into the job's process group, kept for the life of the process: `join` forms the
    first group, and forms a new one after a peer was lost (healing: `leave` the broken group first).

    Worker 0 hosts the store, or the job's coordinator does (`RankEnv.rendezvous`, elastic/coordinator.py); the host
    names each group with a fresh id (an incarnation) and decides its members (`decide`); every rank builds the
    group under that prefix, and its first member marks it formed once all have joined. A rank joins only
    a group that is not formed yet and that it has not tried before, so a rank that reaches the store while
    its peers still train in the formed group waits there for the next one: a replacement rank waits while
    the survivors notice the loss and re-form (the host then names a new group), and a survivor reaching the
    previous worker 0's store before that process has gone waits for the store to go away, then reconnects
    to the new worker 0 and joins its group. Worker 0 does not retry: its failure to form the group is a
    rendezvous timeout (exit 200), and the others wait for its replacement. The store outlives each group:
    worker 0 keeps hosting it while its groups come and go. With a coordinator no rank hosts or decides: every
    rank is a client, retries within its rendezvous timeout, and worker 0's loss is like any other's (the
    survivors train on with a quorum; without one, the store's loss does not stop them reconnecting)."""

    def __init__(self, env: RankEnv, rendezvous_timeout: float, timeout: float) -> None:
        self.env, self.rendezvous_timeout, self.timeout = env, rendezvous_timeout, timeout
        self.tried: set[str] = set()
        self.store: Any = None  # the TCPStore: hosted by worker 0 (without a coordinator), a client elsewhere
        self.hosts = env.rendezvous is None and env.global_rank == 0  # this rank hosts the store and decides
        self.watch: GroupWatch | None = None  # of the group this rank is in
        self.left: GroupWatch | None = None  # of the group this rank left last: its connections are held open
        self.rescue: Rescuer | None = None  # given to each group's watch (the strategy's: elastic/rescue.py)
        self.roster: list[int] = []  # the global ranks in the group this rank is in, in their order there
        self._others = (env.master_port, env.metrics_port)  # local ports of connections no group of ours owns

    def join(self, quorum: int | None = None) -> None:
        """Join a new process group within the rendezvous timeout: of every rank; or, with `quorum`, of those that
        come within QUORUM_SETTLE_SECONDS of one another once at least `quorum` have, or at once when they are this
        rank's last group but one member (the survivors of a loss train on while the lost ranks are replaced).
        `roster` then names its members (global ranks, in order: a member's rank in the group is its place there;
        worker 0, when it hosts the store, is always first)."""
        env = self.env
        deadline = time.monotonic() + self.rendezvous_timeout
        named = waiting = False  # the host named this join's group; this rank said it waits for the next one
        enrolled: str | None = None  # the group this rank came to, told broken if forming it fails
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError(f"no group to join in {self.rendezvous_timeout:g} s")
                store = self._connect(remaining)
                if self.hosts and not named:
                    name_next(store)
                    named = True
                incarnation = store.get(INCARNATION_KEY).decode()
                if self._passed_by(store, incarnation):
                    if _ended(store, incarnation):
                        log_json(role=env.role, index=env.index, event="ended-before-joining", group=incarnation)
                        raise TrainingEnded(f"the job's training ended in group {incarnation} before this rank "
                                            "could join it")  # fmt: skip
                    if not waiting:
                        waiting = True
                        log_json(role=env.role, index=env.index, event="rendezvous-wait", group=incarnation)
                    # The group's ranks are re-forming it (the host names the next), or the host is going away
                    # (the next call fails, then reconnect).
                    with contextlib.suppress(dist.DistStoreError):  # this slice of the wait ended
                        store.wait([next_key(incarnation)], datetime.timedelta(seconds=min(WAIT_SLICE, remaining)))
                    continue
                self.tried.add(incarnation)
                enrolled = incarnation
                members = self._enrol(store, incarnation, quorum, deadline)
                if env.global_rank not in members:  # came after the host decided: taken in next time
                    _tell_outsider(store, incarnation, members, env.global_world_size)
                    enrolled = None
                    continue
                self._form(store, incarnation, members)
                return
            except (dist.DistError, RuntimeError, OSError, TimeoutError) as e:
                self._failed(e, enrolled, deadline)  # raises when this join is over
                enrolled, waiting = None, False
                time.sleep(0.5)

    def _passed_by(self, store: Any, incarnation: str) -> bool:
        """Whether the group `incarnation` is one this rank cannot join: tried already, or formed or decided
        without it (then this rank says it waits, once)."""
        roster = _roster(store, incarnation)
        outside = roster is not None and self.env.global_rank not in roster
        if incarnation in self.tried or outside or store.check([formed_key(incarnation)]):
            if incarnation not in self.tried:
                _tell_outsider(store, incarnation, roster, self.env.global_world_size)
                self.tried.add(incarnation)
            return True
        return False

    def _failed(self, e: BaseException, enrolled: str | None, deadline: float) -> None:
        """After a failed try: leave any half-made group, tell the group this rank came to that it did not form
        (the host names the next), and raise RendezvousError when this rank hosts the store or the time is up;
        otherwise forget the store (the host may be a new process by the next try)."""
        env = self.env
        if dist.is_initialized():
            dist.destroy_process_group()
        if enrolled is not None and self.store is not None:
            with contextlib.suppress(Exception):
                tell_lost(self.store, enrolled, "not formed")
        if self.hosts or time.monotonic() >= deadline:
            host, port = env.store_address
            raise RendezvousError(f"rendezvous with {host}:{port} as rank {env.global_rank} of "
                                  f"{env.global_world_size} failed within {self.rendezvous_timeout:g} s: "
                                  f"{one_line(e)}") from e  # fmt: skip
        log_json(role=env.role, index=env.index, event="rendezvous-retry", reason=one_line(e))
        self.store = None

    def _enrol(self, store: Any, incarnation: str, quorum: int | None, deadline: float) -> list[int]:
        """Say this rank comes to `incarnation` (asking for `quorum`); the roster its host decides (`decide`) once
        enough have."""
        me = self.env.global_rank
        store.set(world_key(incarnation), str(self.env.global_world_size))  # before it counts as come: the host
        if quorum is not None:  # reads these when the count changes
            store.set(quorum_key(incarnation), str(quorum))
        store.append(candidates_key(incarnation), f"{me},")
        store.add(arrivals_key(incarnation), 1)
        if self.hosts:
            decided = decide(store, incarnation, self.env.global_world_size, quorum, self.roster, deadline)
            store.set(roster_key(incarnation), ",".join(map(str, decided)))
            return decided
        while (roster := _roster(store, incarnation)) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the rendezvous named no members of group {incarnation} in time")
            with contextlib.suppress(dist.DistStoreError):  # this slice of the wait ended
                store.wait([roster_key(incarnation)], datetime.timedelta(seconds=WAIT_SLICE))
        return roster

    def _connect(self, remaining: float) -> Any:
        """The store, hosted here (worker 0) or reached as a client, its timeout what is left of the join's."""
        env = self.env
        if self.store is None:
            # A client gives each connection attempt a few seconds and then resolves the host's name again: while
            # its pod is replaced its name still points at the old address for a while, where a connect would
            # otherwise sit out the kernel's SYN retries (about 2 min).
            host, connect = self.hosts, min(CONNECT_SECONDS, remaining)
            if not host:
                await_listening(env.store_address, connect)
            self.store = dist.TCPStore(  # type: ignore[attr-defined]
                *env.store_address, env.global_world_size, is_master=host,
                timeout=datetime.timedelta(seconds=remaining if host else connect),
                wait_for_workers=False,
            )  # fmt: skip
        self.store.set_timeout(datetime.timedelta(seconds=remaining))
        return self.store

    def _form(self, store: Any, incarnation: str, roster: list[int]) -> None:
        """Build the group `incarnation` of `roster` (its first member marks it formed), and watch it."""
        env = self.env
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        before = open_sockets()
        dist.init_process_group(
            backend, store=dist.PrefixStore(f"ringleader/{incarnation}/", store),  # type: ignore[attr-defined]
            rank=roster.index(env.global_rank), world_size=len(roster),
            timeout=datetime.timedelta(seconds=self.timeout),
        )  # fmt: skip
        if roster[0] == env.global_rank:  # gloo connected it to every member: the group takes no one new from now on
            store.set(formed_key(incarnation), "1")
        self.roster = roster
        self.watch = GroupWatch(env, incarnation, self._connections_since(before), self.rescue)
        self._release_left()  # its members that are in this group have left it

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """Within: the process groups built on this rank's group (`dist.new_group`: a pipeline's, the workers')
        are watched with it, their connections shut down when it breaks. Every member builds them, in the same
        order, right after it joins."""
        before = open_sockets()
        yield
        if self.watch is not None:
            self.watch.add(self._connections_since(before))

    def _connections_since(self, before: set[int]) -> set[int]:
        """The connections this rank's groups opened since `before` was taken: not the store's (worker 0 accepts
        peers' store connections meanwhile) nor a metrics page's."""
        return {fd for fd in open_sockets() - before if connection_port(fd) not in (None, *self._others)}

    def leave(self) -> None:
        """Drop the process group a lost peer broke, keeping the store (`join` forms the next one), and tell its
        other members to leave it too: a rank waiting in a collective on a peer that is alive but has left
        would otherwise wait out the collective's timeout."""
        if self.watch is not None:
            self.watch.end()
            self.watch.tell(self.store)
            self._release_left()  # a group left before this one and not re-formed since (a join that failed)
            self.left, self.watch = self.watch, None
        if dist.is_initialized():
            retire(list(dist.distributed_c10d._world.pg_map), self.timeout)
            dist.destroy_process_group()

    def _release_left(self) -> None:
        if self.left is not None:
            self.left.release()
            self.left = None

    def depart(self) -> None:
        """Leave the process group for good, without a barrier and without telling anyone (a run whose end
        is known otherwise: the parameter servers hear DONE from every worker; the closing barrier). Where the
        job has a coordinator, this rank says it left, so that its pulse stopping is not taken for a loss."""
        self._release_left()
        if self.watch is not None:
            self.watch.release()  # no shutdown: the peers are leaving too, and may still be in the group
            if self.env.rendezvous is not None and self.store is not None:
                with contextlib.suppress(Exception):  # the coordinator may be gone already (the job ended)
                    self.store.append(left_key(self.watch.incarnation), f"{self.env.global_rank},")
            self.watch = None
        if dist.is_initialized():
            dist.destroy_process_group()


PROBE_SECONDS = 0.2  # between two attempts to reach a store not listening yet


def await_listening(address: tuple[str, int], seconds: float) -> None:
    """Return once `address` accepts a TCP connection (closed at once), trying every PROBE_SECONDS for `seconds`;
    a TimeoutError naming the address after that. Before a TCPStore client: its own connect retries back off
    exponentially with jitter (a second try after 2 to 13 s here), so a rank asking while its coordinator restarts
    would miss the group formed soon after by the ranks that asked a moment later. Each attempt resolves the
    name again (a replaced pod's name points at its new address)."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            socket.create_connection(address, timeout=max(0.05, min(left, CONNECT_SECONDS))).close()
            return
        except OSError as e:
            if time.monotonic() + PROBE_SECONDS >= deadline:
                host, port = address
                raise TimeoutError(f"{host}:{port} accepted no connection within {seconds:g} s: {one_line(e)}") from e
        time.sleep(PROBE_SECONDS)


def retire(groups: list[Any], hold: float) -> threading.Thread:
    """Keep `groups` (a broken group, and those built on it) alive for `hold` seconds on a thread of their own,
    which then drops them: a process group's destructor joins its threads, and one may be held in a send gloo had
    queued when the group broke, until the collective's timeout (group_watch). Dropped on the training thread (by
    DDP's `_update_process_group`, where the reducer held the last reference), it stalled the heal, and the peers
    waiting on this rank, for up to that long; after `hold` (the collective's timeout) any such send has ended."""

    def drop() -> None:
        time.sleep(hold)
        groups.clear()  # the last references, unless a strategy still holds one: the destructors run here

    thread = threading.Thread(target=drop, name="retired-groups", daemon=True)
    thread.start()
    return thread


def decide(
    store: Any,
    incarnation: str,
    world: int | None,
    quorum: int | None,
    last: list[int],
    deadline: float,
    stop: threading.Event | None = None,
    settle: float = QUORUM_SETTLE_SECONDS,
) -> list[int]:
    """The members of `incarnation`, as its decider (worker 0, or the job's coordinator) names them: every rank of the
    `world` (None: the number the ranks that came say the job has) once all have come; with `quorum`, those that have
    come once at least `quorum` have and none has for `settle` seconds, or at once when those that came are the members
    of the `last` group but one, and nobody else (the survivors of one lost rank: nobody else is owed a wait, and the
    whole job stands still meanwhile; a rank from outside that group coming, a replacement to take in, leaves it to the
    settling time). Ranks are counted once each: a process that came and was then lost (the sibling of a lost rank in
    its pod, before its pod ended) leaves its rank named, and its replacement coming too must not make it count twice.
    TimeoutError at `deadline` (monotonic) without a group. Without `quorum` of its own, the decider takes the one a
    rank that came asked for (the survivors of a loss, re-forming; a first group and a recovery's ask for none). Returns
    early once `stop` is set."""
    arrivals, seen, since, asked, asked_world = 0, 0, time.monotonic(), quorum, world
    came: set[int] = set()
    before = set(last)
    while True:
        # The list is read again only when someone came (a counter's read is a few bytes; the list grows with the
        # world).
        if (now_arrived := int(store.add(arrivals_key(incarnation), 0))) != arrivals:
            if asked_world is None:
                world = _said(store, world_key(incarnation))
            arrivals, came = now_arrived, _came(store, incarnation, world or 0)
            if asked is None:
                quorum = _said(store, quorum_key(incarnation))
        if world is not None and len(came) >= world:
            break
        now = time.monotonic()
        if len(came) != seen:
            seen, since = len(came), now
        settled = now - since >= settle or (came < before and len(came) == len(before) - 1)
        if quorum is not None and seen >= quorum and settled:
            break
        if now >= deadline:
            raise TimeoutError(f"{seen} of {world} ranks came to group {incarnation}")
        if stop is not None and stop.is_set():
            break  # the decider is stopping: what it returns is never used
        time.sleep(0.02)
    return sorted(came)


def _roster(store: Any, incarnation: str) -> list[int] | None:
    """The members the host decided for `incarnation`; None until it has."""
    if not store.check([roster_key(incarnation)]):
        return None
    return _ranks(store.get(roster_key(incarnation)))


def _ended(store: Any, incarnation: str) -> bool:
    """Whether every member of `incarnation` left it for good (`Rendezvous.depart`: their training ended), so that
    no group will follow it. Only the ranks of a job with a coordinator say they left."""
    roster = _roster(store, incarnation)
    return roster is not None and set(roster) <= left(store, incarnation)


def left(store: Any, incarnation: str) -> set[int]:
    """The global ranks that said they left `incarnation` for good (`Rendezvous.depart`)."""
    if not store.check([left_key(incarnation)]):
        return set()
    return set(_ranks(store.get(left_key(incarnation))))


def _said(store: Any, key: str) -> int | None:
    """The number the ranks that came wrote at `key` (the world, a quorum asked for); None if none did."""
    if not store.check([key]):
        return None
    raw = store.get(key).decode()
    return int(raw) if raw.isdigit() else None


def _came(store: Any, incarnation: str, world: int) -> set[int]:
    """The distinct ranks of the job that have come to `incarnation` so far."""
    return {r for r in _ranks(store.get(candidates_key(incarnation))) if r < world}


def _ranks(raw: bytes) -> list[int]:
    """Global ranks as the store holds them, comma-separated (anything else left out)."""
    return [int(r) for r in raw.decode().split(",") if r.isdigit()]


def _tell_outsider(store: Any, incarnation: str, roster: list[int] | None, world: int) -> None:
    """A rank outside `incarnation` says so: to a group of every rank, one of its members is lost (this rank
    replaces it); to a group of fewer, one more rank waits to join it."""
    if roster is not None and len(roster) < world:
        store.compare_set(news_key(incarnation), "", "joiner")
    else:
        tell_lost(store, incarnation, "replaced")


def name_next(store: Any) -> str:
    """The host names the group it forms next, and tells those waiting in the previous group which it is."""
    new = uuid.uuid4().hex
    if store.check([INCARNATION_KEY]):
        store.set(next_key(store.get(INCARNATION_KEY).decode()), new)
    store.set(INCARNATION_KEY, new)
    return new
