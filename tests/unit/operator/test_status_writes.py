"""How a round's status becomes its merge patch (status_writes.py): what the API server keeps after merging it is
exactly the new status, and a status that says nothing new is not written."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ringleader_api import RankStatus, TrainingJobStatus
from ringleader_operator import status_writes


@pytest.mark.parametrize(
    ("stored", "new", "dropped"),
    [
        ({"startTime": "t", "phase": "Suspended"}, {"phase": "Suspended"}, ["startTime"]),  # suspend clears it
        ({"progress": {"step": 1}, "phase": "Running"}, {"phase": "Running"}, []),  # the scraper's
        ({"ranks": {"worker-0": {}}}, {"ranks": {}}, []),  # ranks: entries removed by ranks_patch
    ],
    ids=["cleared", "progress-kept", "ranks-present"],
)
def test_dropped_keys(stored: dict[str, Any], new: dict[str, Any], dropped: list[str]) -> None:
    assert status_writes.dropped_keys(stored, new) == dropped


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies one to status (null removes a key)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def stored_form(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the API server keeps it: the CRD's defaults filled in (fields without one stay absent)."""
    return RankStatus.model_validate(entry).model_dump(by_alias=True, mode="json", exclude_none=True)


entries = st.builds(
    RankStatus,
    restarts=st.integers(0, 3),
    pod_seen=st.booleans(),
    avoid_node=st.none() | st.just("node-a"),
    last_reason=st.sampled_from(["", "RankRestarting"]),
    restart_after=st.none() | st.just("2026-01-01T00:00:00Z"),
    last_exit_code=st.none() | st.integers(0, 2),
)
keys = st.sampled_from(["worker-0", "worker-1", "worker-2-3", "ps-0"])


@settings(max_examples=300, deadline=None)
@given(stored=st.dictionaries(keys, entries), new=st.dictionaries(keys, entries))
def test_the_ranks_patch_leaves_the_stored_ranks_as_written(
    stored: dict[str, RankStatus], new: dict[str, RankStatus]
) -> None:
    """Whatever the API server holds, merging the patch leaves exactly the new entries (after defaulting): a
    field reset to its default or to none (podSeen false once a rank's pod is replaced, restartAfter cleared) is
    removed, not kept from the stored entry."""
    held = {key: stored_form(rank.model_dump(by_alias=True, mode="json")) for key, rank in stored.items()}
    written = {key: rank.model_dump(by_alias=True, mode="json", exclude_defaults=True) for key, rank in new.items()}
    merged = merge(held, status_writes.ranks_patch(held, written))
    assert {key: stored_form(entry) for key, entry in merged.items()} == {
        key: stored_form(entry) for key, entry in written.items()
    }


def test_a_replaced_ranks_pod_seen_is_removed_from_its_stored_entry() -> None:
    """The regression make test found: the default podSeen false was left out of the patch, the stored true
    stayed, and the next round counted the replaced pod's deletion as one more failure."""
    held = {"worker-1": stored_form({"podSeen": True})}
    patch = status_writes.ranks_patch(held, {"worker-1": {"restarts": 1, "restartAfter": "2026-01-01T00:00:00Z"}})
    assert patch["worker-1"]["podSeen"] is None
    assert merge(held, patch)["worker-1"].get("podSeen") is None


READ = {"phase": "Running", "ranks": {"worker-0": {"restarts": 1}}}


@pytest.mark.parametrize(
    ("stored", "new", "read", "want"),
    [
        (READ, READ, READ, None),  # as read: nothing to write
        (READ, {**READ, "phase": "Succeeded"}, READ, {"phase": "Succeeded", "ranks": {"worker-0": {"restarts": 1}}}),
        # a rank entry gone (grouped under another key now) is removed by null even when the rest is as read
        ({"ranks": {"worker-0": {}, "worker-1": {}}}, {"ranks": {"worker-0-1": {}}}, {"ranks": {"worker-0-1": {}}},
         {"ranks": {"worker-0": None, "worker-1": None, "worker-0-1": {}}}),
        # a top-level key the new status leaves out (a suspended job's startTime) is removed by null
        ({"startTime": "t", "phase": "Suspended"}, {"phase": "Suspended"}, {"phase": "Suspended"},
         {"phase": "Suspended", "ranks": {}, "startTime": None}),
        # a settled pendingLoss goes from the stored goodput; the scraper's progress is left alone
        ({"goodput": {"stepsLost": 0, "pendingLoss": {"step": 3}}, "progress": {"step": 9}},
         {"goodput": {"stepsLost": 3}}, {},
         {"goodput": {"stepsLost": 3, "pendingLoss": None}, "ranks": {}}),
    ],
    ids=["unchanged", "changed", "rank-gone", "key-dropped", "goodput-settled"],
)  # fmt: skip
def test_the_status_patch_names_what_goes_and_is_none_when_nothing_changed(
    stored: dict[str, Any], new: dict[str, Any], read: dict[str, Any], want: dict[str, Any] | None
) -> None:
    assert status_writes.status_patch(stored, new, lambda: read) == want


def test_the_status_read_is_encoded_only_when_the_patch_needs_it() -> None:
    """A rank entry or key gone decides alone: the status read (an encoding, costly at 10,000 ranks) is not asked."""
    asked: list[int] = []

    def read() -> dict[str, Any]:
        asked.append(1)
        return {}

    status_writes.status_patch({"ranks": {"worker-0": {}}}, {"ranks": {}}, read)
    assert asked == []
    status_writes.status_patch({"ranks": {"worker-0": {}}}, {"ranks": {"worker-0": {}}}, read)
    assert asked == [1]


def test_a_status_encoded_with_its_ranks_as_encoded_before_is_the_whole_encoding() -> None:
    status = TrainingJobStatus.model_validate({"ranks": {"worker-0-2": {"podSeen": True}}, "workers": "3/3"})
    whole = status_writes.status_json(status)
    assert status_writes.status_json(status, ranks=dict(whole["ranks"])) == whole
    assert status_writes.status_json(status, with_progress=True, ranks=dict(whole["ranks"])) == whole
