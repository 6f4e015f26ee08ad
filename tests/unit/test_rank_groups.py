"""status.ranks as the operator writes it and every reader expands it: rank indexes as range strings (`0-3,7`),
ranks alike under one entry, older per-rank entries read as groups of one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from ringleader_api import MAX_REPLICAS, RankStatus, TrainingJobStatus, ranges, rank_entries


@given(st.sets(st.integers(0, 20_000), max_size=300))
def test_a_set_of_ranks_encoded_then_decoded_is_the_same_set(indexes: set[int]) -> None:
    text = ranges.encode(indexes)
    assert ranges.decode(text, MAX_REPLICAS) == sorted(indexes)
    assert ranges.encode(ranges.decode(text, MAX_REPLICAS)) == text  # one spelling per set


@pytest.mark.parametrize(
    ("text", "encoded"), [("", []), ("7", [7]), ("0-3,7", [0, 1, 2, 3, 7]), ("0-1,3-4", [0, 1, 3, 4])]
)
def test_range_strings_read_as_the_indexed_jobs_do(text: str, encoded: list[int]) -> None:
    assert ranges.decode(text, 100) == encoded and ranges.encode(encoded) == text


@pytest.mark.parametrize("text", ["3-1", "1,1", "2,1", "0-2,2", "a", "1-", "-1", "+1", " 1", "1,,2", "1-2-3", "٣"])
def test_a_range_string_encode_would_not_write_is_refused(text: str) -> None:
    with pytest.raises(ranges.RangeError):
        ranges.decode(text, 100)


def test_a_range_string_naming_more_ranks_than_allowed_is_refused_not_expanded() -> None:
    with pytest.raises(ranges.RangeError, match="more than 100000"):
        ranges.decode("0-999999999", MAX_REPLICAS)


def restarted(i: int) -> RankStatus:
    """A rank restarted `i % 5 + 1` times, each its own entry: its own back-off time."""
    return RankStatus(
        restarts=i % 5 + 1, pod_seen=True, last_reason="RankFailed", last_exit_code=1,
        last_message="failed: exit code 1 (the program's own exit code); restarted after its back-off",
        restart_after=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", last_replaced=f"2026-01-01T00:00:{i % 60:02d}Z",
    )  # fmt: skip


def test_a_status_of_10000_ranks_with_50_restarted_stays_under_20_kb() -> None:
    ranks = {f"worker-{i}": RankStatus(pod_seen=True) for i in range(10_000)}
    ranks |= {f"worker-{i}": restarted(i) for i in range(0, 10_000, 200)}
    status = TrainingJobStatus(ranks=ranks)
    written = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert len(json.dumps(written)) < 20_000
    assert len(written["ranks"]) == 51  # the healthy ranks in one entry, each restarted rank in its own
    assert TrainingJobStatus.model_validate(written).ranks == ranks


def test_ranks_alike_share_one_entry_and_default_ranks_none() -> None:
    ranks = {f"worker-{i}": RankStatus(pod_seen=True) for i in range(4)} | {"worker-4": RankStatus()}
    ranks |= {"ps-0": RankStatus(pod_seen=True), "worker-2": RankStatus(pod_seen=True, stops=1)}
    written = TrainingJobStatus(ranks=ranks).model_dump(by_alias=True, mode="json")["ranks"]
    assert written == {
        "ps-0": {"podSeen": True},
        "worker-0-1,3": {"podSeen": True},
        "worker-2": {"stops": 1, "podSeen": True},
    }
    assert TrainingJobStatus.model_validate({"ranks": written}).ranks == {
        k: v for k, v in ranks.items() if k != "worker-4"
    }


def test_an_older_operators_per_rank_status_keeps_every_restart_count() -> None:
    """What an operator before range keys wrote: one key per rank, every field."""
    old = {
        f"worker-{i}": {
            "restarts": i % 7, "stops": i % 3, "stalls": 0, "uncounted": i % 2, "straggles": 0, "podSeen": True,
            "lastReason": "RankFailed" if i % 7 else "", "lastMessage": f"worker {i} (pod j-worker-{i}) failed",
            "lastExitCode": 1 if i % 7 else None,
        }
        for i in range(2_000)
    }  # fmt: skip
    read = TrainingJobStatus.model_validate({"ranks": old}).ranks
    assert {k: (v.restarts, v.stops, v.uncounted) for k, v in read.items()} == {
        k: (v["restarts"], v["stops"], v["uncounted"]) for k, v in old.items()
    }
    again = TrainingJobStatus.model_validate(TrainingJobStatus(ranks=read).model_dump(by_alias=True, mode="json"))
    assert again.ranks == read


def test_corrupt_keys_are_left_out_rather_than_making_the_job_unreadable() -> None:
    groups = {"worker-0-1": {"restarts": 1}, "worker-x": {}, "nobody-0": {}, "worker-0-99999999": {}, "ps-": {}}
    assert rank_entries(groups) == {"worker-0": {"restarts": 1}, "worker-1": {"restarts": 1}}


def test_the_ranks_of_one_entry_share_one_frozen_instance() -> None:
    read = TrainingJobStatus.model_validate({"ranks": {"worker-0-9999": {"podSeen": True}, "worker-10000": {}}})
    assert len({id(rank) for rank in read.ranks.values()}) == 2  # validated once per entry, not per rank
    with pytest.raises(ValidationError):
        read.ranks["worker-3"].restarts = 1  # type: ignore[misc]  # would change all 10,000
    read.ranks["worker-3"] = read.ranks["worker-3"].model_copy(update={"restarts": 1})
    assert sum(rank.restarts for rank in read.ranks.values()) == 1


def test_an_entry_that_does_not_validate_is_left_out() -> None:
    read = TrainingJobStatus.model_validate({"ranks": {"worker-0-1": {"restarts": "many"}, "worker-2": {"stops": 1}}})
    assert list(read.ranks) == ["worker-2"] and read.ranks["worker-2"].stops == 1
