"""Room claimed by admission before the cluster shows it (claims.py): a claim stands in for its pod until the view
catches up or it expires; a job's own claims are left out of its own decisions."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.claims import CLAIM_SECONDS, Claims

A, B = ("ns", "a"), ("ns", "b")


def pod(name: str, rv: int | None, gated: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if rv is not None:
        meta["resourceVersion"] = str(rv)
    spec = {"schedulingGates": [{"name": "ringleader.dev/gang"}]} if gated else {}
    return {"metadata": meta, "spec": spec}


def view(pods: list[dict[str, Any]]) -> dict[str, tuple[str | None, bool]]:
    return {p["metadata"]["name"]: (p["metadata"].get("resourceVersion"), bool(p["spec"])) for p in pods}


@pytest.mark.parametrize(
    ("seen", "claimed", "now", "exclude", "want", "kept"),
    [
        # -> the view as (resourceVersion, gated) per pod, and whether the claim is kept
        ([], pod("a-0", None), 1.0, B, {"a-0": (None, False)}, True),  # created by a's writes, not seen yet
        ([pod("a-0", 5)], pod("a-0", None), 1.0, B, {"a-0": ("5", False)}, False),  # seen: the view wins, claim goes
        ([pod("a-0", 5, gated=True)], pod("a-0", 5), 1.0, B, {"a-0": ("5", False)}, True),  # being released
        ([pod("a-0", 6)], pod("a-0", 5), 1.0, B, {"a-0": ("6", False)}, False),  # the release landed
        ([], pod("a-0", None), 1.0, A, {}, True),  # a's own decision does not count a's claims
        ([], pod("a-0", None), CLAIM_SECONDS + 0.5, B, {}, False),  # a write that never landed: room comes back
    ],
    ids=["created-unseen", "created-seen", "ungated-unseen", "ungated-seen", "own-claims-left-out", "expired"],
)
def test_overlay(
    seen: list[dict[str, Any]], claimed: dict[str, Any], now: float, exclude: tuple[str, str],
    want: dict[str, tuple[str | None, bool]], kept: bool,
) -> None:  # fmt: skip
    claims = Claims()
    claims.claim(A, [claimed], 0.0)
    assert view(claims.overlay(seen, now, exclude)) == want
    assert bool(claims.by_pod) is kept


def test_a_gone_jobs_claims_give_their_room_back_at_once() -> None:
    claims = Claims()
    claims.claim(A, [pod("a-0", None), pod("a-1", None)], 0.0)
    claims.claim(B, [pod("b-0", None)], 0.0)
    claims.release(A)  # its pods were created and deleted before any admission saw them
    assert view(claims.overlay([], 1.0)) == {"b-0": (None, False)}
