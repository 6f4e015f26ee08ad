"""The rank book (rankbook.py): kept up to date by the pods that changed, it equals a full recount under any order
of pod events, and a plan made with it (looking only at the ranks that changed or are not settled) is the plan made
without it, whatever the pods do between rounds."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from ringleader_api import LABEL_JOB, Role
from ringleader_operator.changelog import PodDelta
from ringleader_operator.observed import own_ranks
from ringleader_operator.podcache import Grouped, PodCache
from ringleader_operator.rankbook import Observations, RankBook
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.round_state import _counts

from .builders import TEMPLATE, after, job, pod

PHASES = ["Pending", "Running", "Succeeded", "Failed"]
# Mostly running, not being deleted: a job whose rounds find most ranks settled (the book's usual case).
LIKELY = st.sampled_from(["Running"] * 5 + PHASES)
RANKS = [(Role.PS, 0), (Role.PS, 1), *((Role.WORKER, i) for i in range(5))]
EXTRA = [(Role.PS, 2), (Role.WORKER, 5)]  # ranks the job does not have: their pods are deleted
DESIRED = RANKS[:-1]  # the ranks a round asks are up (RankBook.down): one of them fewer than the pods'

# A pod event: which rank's pod, and what becomes of it (None: it is deleted outright).
states = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "phase": LIKELY,
            "ready": st.booleans(),
            "deleting": st.sampled_from([False] * 4 + [True]),
            "exit_code": st.sampled_from([None, 1, 137]),
            "attempt": st.sampled_from([None, 0, 1, 2]),
            "workers": st.sampled_from([None] * 6 + [5, 3]),  # of a world the job may no longer run (it resizes)
        }
    ),
)
events = st.lists(st.tuples(st.sampled_from(RANKS), states), max_size=12)
any_events = st.lists(st.tuples(st.sampled_from(RANKS * 3 + EXTRA), states), max_size=12)


class Pods:
    """The job's pods as the API server has them: each change is a new resourceVersion; and as the operator's pod
    cache has them, kept by the watch's events (its index says what changed since a round's revision)."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.made: dict[str, int] = {}  # each name's pods made so far: a pod made again has another uid
        self.cache = PodCache(LABEL_JOB)
        self.cache.index = Grouped(LABEL_JOB)

    def put(self, x: dict[str, Any]) -> None:
        self.version += 1
        name = x["metadata"]["name"]
        if name not in self.by_name:
            self.made[name] = self.made.get(name, 0) + 1
        made = {"uid": f"uid-{name}-{self.made[name]}", "resourceVersion": str(self.version), "namespace": "ns"}
        x["metadata"] |= made
        x["metadata"]["ownerReferences"] = [{"kind": "TrainingJob", "name": "j", "uid": "u", "controller": True}]
        self.by_name[name] = x
        assert self.cache.index is not None
        self.cache.index.put(x)

    def remove(self, name: str) -> None:
        if self.by_name.pop(name, None) is not None:
            assert self.cache.index is not None
            self.cache.index.remove(("ns", name))

    def since(self, seen: Observations) -> PodDelta | None:
        """What the cache says changed since the revision `seen` holds."""
        return self.cache.job_pods_since("ns", "j", 0.0, seen.revision)[1]

    def apply(self, rank: tuple[Role, int], state: dict[str, Any] | None) -> None:
        role, index = rank
        if state is None:
            self.remove(f"j-{role.value}-{index}")
            return
        code = state["exit_code"] if state["phase"] == "Failed" else None
        x = pod(role, index, state["phase"], exit_code=code, deleting=state["deleting"], ready=state["ready"],
                attempt=state["attempt"])  # fmt: skip
        if state["workers"] is not None:
            x["metadata"].setdefault("annotations", {})["ringleader.dev/workers"] = str(state["workers"])
        self.put(x)

    def listed(self) -> list[dict[str, Any]]:
        return list(self.by_name.values())


@settings(max_examples=150, deadline=None)
@given(st.lists(events, min_size=1, max_size=8))
def test_the_kept_book_equals_a_full_recount_under_any_order_of_pod_events(batches: list[list[Any]]) -> None:
    j = job(workers={"replicas": 5, "template": TEMPLATE}, parameterServers={"replicas": 2, "template": TEMPLATE})
    pods, seen, book = Pods(), Observations(), RankBook()
    before: dict[str, str] = {}
    for batch in batches:
        for rank, state in batch:
            pods.apply(rank, state)
        observed, _ = own_ranks(j, pods.listed(), seen)
        changed = book.update(observed)
        recount = RankBook.recount(observed)
        assert book.state() == recount.state()
        assert book.down(DESIRED) == set(DESIRED) - recount.up  # kept between updates for the same ranks
        for role in Role:  # the counts status shows, as a recount of the pods gives them
            counts = _counts(observed, role, 0)
            assert [counts.active, counts.ready, counts.succeeded, counts.failed] == book.counts.get(role, [0] * 4)
        now = {x["metadata"]["name"]: x["metadata"]["resourceVersion"] for x in pods.listed()}
        moved = {name for name in now.keys() | before.keys() if now.get(name) != before.get(name)}
        assert changed == {p for p in RANKS if f"j-{p[0].value}-{p[1]}" in moved}  # the ranks whose pods changed
        before = now


@settings(max_examples=150, deadline=None)
@given(st.lists(any_events, min_size=1, max_size=8))
def test_observations_kept_by_the_caches_deltas_equal_a_full_reading_under_any_order_of_pod_events(
    batches: list[list[Any]],
) -> None:
    """Rounds that read only what the pod cache says changed since their last (podcache.PodDelta) observe the
    same ranks, in the same order, and the same foreign pods, as a reading of every pod; their book equals a
    full recount. Pods are deleted and made again under their names, and pods of ranks the job lacks come."""
    j = job(workers={"replicas": 5, "template": TEMPLATE}, parameterServers={"replicas": 2, "template": TEMPLATE})
    pods, seen, book = Pods(), Observations(), RankBook()
    for batch in batches:
        for rank, state in batch:
            pods.apply(rank, state)
        delta = pods.since(seen)
        observed, foreign = own_ranks(j, pods.listed(), seen, delta)
        assert (observed, foreign) == own_ranks(j, pods.listed())
        book.update(observed, seen.changed, seen.ranks)
        assert book.state() == RankBook.recount(observed).state()


def evolve(pods: Pods, p: Any) -> None:
    """What the API server does with a round's plan: deleted pods go, created ones come (Pending)."""
    for name in [*p.delete_pods, *p.kill_pods, *p.force_delete_pods]:
        pods.remove(name)
    for created in p.create_pods:
        x = copy.deepcopy(created)
        x["status"] = {"phase": "Pending"}
        pods.put(x)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(
            any_events,
            st.integers(0, 40),
            st.sampled_from(["applied"] * 4 + ["conflict", "status only"]),
            st.sampled_from([5] * 5 + [4]),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_a_plan_with_the_book_is_the_plan_without_under_any_order_of_pod_events(
    rounds: list[tuple[list[Any], int, str, int]],
) -> None:
    spec: dict[str, Any] = {
        "workers": {"replicas": 5, "template": TEMPLATE},
        "parameterServers": {"replicas": 2, "template": TEMPLATE, "restartPolicy": "Always"},
        "runPolicy": {"backoffLimit": 100, "restartBackoff": {"baseSeconds": 5}},
    }
    pods, seen, status, clock = Pods(), Observations(), None, 0
    for batch, seconds, outcome, workers in rounds:
        for rank, state in batch:
            pods.apply(rank, state)
        clock += seconds
        spec["workers"]["replicas"] = workers  # scaled down now and then, and up again
        j = job(status=status, **spec)
        listed = pods.listed()
        with_book, without = (
            plan(Reading(j, listed, True, seen=seen, pod_delta=pods.since(seen)), after(clock)),
            plan(Reading(j, listed, True), after(clock)),
        )
        assert with_book == without
        # A conflict: the status write met a newer version, and the next round reads the old one. Status only: it was
        # written, and the pods' deletions and creations that follow it failed.
        if outcome != "conflict":
            status = without.status.model_dump(by_alias=True)
        if outcome == "applied":
            evolve(pods, without)


def test_a_delete_that_failed_after_the_status_was_written_is_planned_again_in_a_steady_round() -> None:
    """A steady round looks only at what changed; a pod whose deletion the last round planned but that is still
    there unchanged (the delete failed after the status write) is planned for deletion again all the same."""
    seen, spec = Observations(), {"workers": {"replicas": 2, "template": TEMPLATE}}
    pods = Pods()
    for rank in [(Role.WORKER, 0), (Role.WORKER, 1), (Role.WORKER, 2)]:  # worker 2: the job no longer has it
        pods.apply(rank, {"phase": "Running", "ready": True, "deleting": False, "exit_code": None, "attempt": 0,
                          "workers": None})  # fmt: skip
    first = plan(Reading(job(**spec), pods.listed(), True, seen=seen), after(0))
    assert first.delete_pods == ["j-worker-2"]
    again = plan(
        Reading(job(status=first.status.model_dump(by_alias=True), **spec), pods.listed(), True, seen=seen), after(1)
    )
    assert seen.book is not None and seen.book.ranks_after is not None  # a steady round
    assert again.delete_pods == ["j-worker-2"]
    # A failed rank's pod likewise: its replacement's back-off counted once, its old pod deleted again.
    pods.apply((Role.WORKER, 1), {"phase": "Failed", "ready": False, "deleting": False, "exit_code": 1, "attempt": 0,
                                  "workers": None})  # fmt: skip
    failed = plan(
        Reading(job(status=again.status.model_dump(by_alias=True), **spec), pods.listed(), True, seen=seen), after(2)
    )
    assert "j-worker-1" in failed.delete_pods and failed.status.replica_statuses["worker"].restarts == 1
    later = plan(
        Reading(job(status=failed.status.model_dump(by_alias=True), **spec), pods.listed(), True, seen=seen), after(3)
    )
    assert "j-worker-1" in later.delete_pods and later.status.replica_statuses["worker"].restarts == 1


def test_two_pods_of_one_name_empty_the_book_and_the_round_counts_afresh() -> None:
    pods = Pods()
    pods.apply((Role.WORKER, 0), {"phase": "Running", "ready": True, "deleting": False, "exit_code": None,
                                  "attempt": 0, "workers": None})  # fmt: skip
    j = job(workers={"replicas": 1, "template": TEMPLATE})
    observed, _ = own_ranks(j, pods.listed())
    book = RankBook.recount(observed)
    assert book.update([*observed, *observed]) is None and book.state() == RankBook().state()


def test_a_round_reads_only_the_pods_the_cache_says_changed_and_reads_whole_where_it_cannot_say() -> None:
    j = job(workers={"replicas": 5, "template": TEMPLATE}, parameterServers={"replicas": 2, "template": TEMPLATE})
    pods, seen = Pods(), Observations()
    running = {"phase": "Running", "ready": True, "deleting": False, "exit_code": None, "attempt": 0, "workers": None}
    for rank in RANKS:
        pods.apply(rank, running)

    def read() -> set[str] | None:
        own_ranks(j, pods.listed(), seen, pods.since(seen))
        return seen.changed

    assert read() is None and seen.revision is not None  # the first round reads every pod
    assert read() == set()  # nothing changed: nothing read
    pods.apply((Role.WORKER, 3), running | {"phase": "Failed", "exit_code": 1})
    assert read() == {"j-worker-3"}
    pods.apply((Role.WORKER, 3), None)
    assert read() == {"j-worker-3"}  # gone
    pods.apply((Role.WORKER, 3), running)
    assert read() == {"j-worker-3"}  # one new pod comes last, as in the index
    pods.apply((Role.WORKER, 3), None)
    pods.apply((Role.WORKER, 3), running)  # made again between two rounds: another uid, its place the index's
    assert read() is None
    pods.apply((Role.WORKER, 1), None)
    pods.apply((Role.WORKER, 2), None)
    assert read() == {"j-worker-1", "j-worker-2"}
    pods.apply((Role.WORKER, 2), running)
    pods.apply((Role.WORKER, 1), running)
    assert read() is None  # two new pods: their order is the index's
