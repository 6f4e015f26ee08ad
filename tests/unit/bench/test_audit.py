"""Counting one operator's requests in audit log lines (bench/audit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import audit

ME = "system:serviceaccount:bench-operators:ringleader"
OTHER = "system:serviceaccount:bench-operators:training-operator"


def event(user: str, verb: str, resource: str | None, sub: str = "", stage: str = "ResponseComplete") -> str:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})} if resource else None
    return json.dumps(
        {"user": {"username": user}, "verb": verb, "stage": stage, "requestURI": "/api/v1", "objectRef": ref}
    )


@pytest.mark.parametrize(
    ("lines", "total", "calls"),
    [
        ([], 0, {}),
        ([event(ME, "create", "pods")] * 3, 3, {"create pods": 3}),
        ([event(ME, "patch", "trainingjobs", "status"), event(OTHER, "create", "pods")], 1,
         {"patch trainingjobs/status": 1}),
        ([event(ME, "get", None)], 1, {"get /api/v1": 1}),  # discovery: no object, the URI names it
        ([event(ME, "watch", "pods", stage="ResponseStarted"), event(ME, "watch", "pods")], 1, {"watch pods": 1}),
        ([event(ME, "list", "pods", stage="Panic")], 1, {"list pods": 1}),
        (['{"user": {"username": "' + ME + '", "verb": "cre'], 0, {}),  # a line still being written
    ],
)  # fmt: skip
def test_count(lines: list[str], total: int, calls: dict[str, int]) -> None:
    got = audit.count(lines, ME)
    assert got.total == total
    assert dict(got.by_call) == calls
    assert sum(got.by_verb.values()) == total


def test_requests_counts_only_what_follows_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    assert audit.offset(log) == audit.Mark(0, 0)
    log.write_text(event(ME, "create", "pods") + "\n")
    mark = audit.offset(log)
    with log.open("a") as f:
        f.write(event(ME, "delete", "pods") + "\n" + event(ME, "delete", "pods") + "\n")
    assert audit.requests(log, mark, ME).as_dict() == {
        "total": 2, "by_verb": {"delete": 2}, "by_call": {"delete pods": 2}
    }  # fmt: skip


def test_requests_follow_the_log_across_a_rotation(tmp_path: Path) -> None:
    """The API server renames a full log to audit-<time>.log and starts a new one: what followed the mark in the
    rotated file and everything in the new one count, what preceded the mark does not."""
    log = tmp_path / "audit.log"
    log.write_text(event(ME, "create", "pods") + "\n")
    mark = audit.offset(log)
    with log.open("a") as f:
        f.write(event(ME, "delete", "pods") + "\n")
    log.rename(tmp_path / "audit-2026-11-25T19-43-12.496.log")
    (tmp_path / "audit-2026-11-24T10-00-00.000.log").write_text(event(ME, "get", "pods") * 3 + "\n")  # older
    log.write_text(event(ME, "patch", "pods") + "\n" + event(ME, "patch", "pods") + "\n")
    assert audit.requests(log, mark, ME).as_dict() == {
        "total": 3, "by_verb": {"delete": 1, "patch": 2}, "by_call": {"patch pods": 2, "delete pods": 1}
    }  # fmt: skip
