"""How a reconcile round's status becomes the merge patch it writes, pure.

A round writes status with a JSON merge patch (reconciler.py): keys it leaves out are kept, so what the new
status drops must be named with null, and `progress` is left to the progress scraper (neither may overwrite the
other's newer value with a stale copy). The patch is computed against the status as stored, and nothing is
written when it says nothing new."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from ringleader_api import ConditionType, JobPhase, Reason, TrainingJobStatus

from .conditions import set_condition
from .observed import utcnow


def status_json(
    status: TrainingJobStatus, with_progress: bool = False, ranks: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Status as a reconcile round writes it: everything but `progress`, which the scraper writes while the job
    runs, so neither can overwrite the other's newer value with a stale copy (merge patches leave absent keys
    alone); `with_progress` for the round that finishes the job (its final step, which no scrape can see).
    `ranks`: status.ranks as encoded before, where these are the same entries (grouping 10,000 ranks again was
    most of a round that wrote a starting job's counts); None encodes them."""
    exclude = ({"progress"} if not with_progress else set()) | ({"ranks"} if ranks is not None else set())
    out = status.model_dump(by_alias=True, mode="json", exclude_none=True, exclude=exclude or None)
    if ranks is not None:
        out["ranks"] = ranks
    return out


def same_status(new: TrainingJobStatus, old: TrainingJobStatus, ranks_as_read: bool) -> bool:
    """`new == old`, with status.ranks taken as equal without comparing its entries where the round left them as
    read (`ranks_as_read`: 10,000 entries are most of a steady round's comparison)."""
    return all(
        getattr(new, name) == getattr(old, name)
        for name in type(new).model_fields
        if not (ranks_as_read and name == "ranks")
    )


def ranks_patch(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """status.ranks as a merge patch that turns the `stored` entries into `new` ones. A merge patch keeps what it
    does not name, and the entries leave out fields at their defaults (or none), so each stored field a kept entry
    leaves out is removed by null (the API server then puts back the CRD's default), and so is each entry that
    is gone (its ranks are grouped under another key now)."""
    patch: dict[str, Any] = dict(new)
    for key, old in stored.items():
        entry = new.get(key)
        if entry is None:
            patch[key] = None
        elif isinstance(old, Mapping) and isinstance(entry, Mapping):
            patch[key] = with_removals(old, entry)
    return patch


def with_removals(stored: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`new` as a merge patch over `stored`: each key `stored` has and `new` leaves out removed by null."""
    return {**dict.fromkeys(stored.keys() - new.keys()), **new}


def dropped_keys(stored: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The top-level status keys the API server holds that the new status leaves out (a start time a suspended
    job clears, a field an older operator wrote), but not `progress`, the scraper's. Top level only: every field
    of it that the CRD defaults has a default in the model too, so it is never left out, while nested entries
    leave out what the API server fills in again (ranks_patch removes those by null, but they are no change)."""
    return [key for key in stored if key not in new and key != "progress"]


def status_patch(
    stored_status: Mapping[str, Any], new_status: dict[str, Any], read: Callable[[], dict[str, Any]]
) -> dict[str, Any] | None:
    """The merge patch that turns `stored_status` (as the API server holds it) into `new_status` (status_json of
    the planned status), or None when it would change nothing: no rank entry or top-level key is gone and
    `new_status` equals the status the round read (`read()`, asked only when needed: an encoding costs)."""
    stored = stored_status.get("ranks") or {}
    grouped = new_status.get("ranks", {})
    dropped = dropped_keys(stored_status, new_status)
    if not (stored.keys() - grouped.keys()) and not dropped and new_status == read():
        return None
    patch = {**new_status, "ranks": ranks_patch(stored, grouped)}
    patch |= dict.fromkeys(dropped)  # removed by null: a merge patch keeps what it does not name
    if isinstance(kept := stored_status.get("goodput"), Mapping) and "goodput" in patch:
        patch["goodput"] = with_removals(kept, patch["goodput"])  # a settled pendingLoss
    return patch


def invalid_spec_status(status: TrainingJobStatus, generation: int, message: str) -> dict[str, Any]:
    """`status` turned Failed with reason InvalidSpec, as the JSON a reconcile round writes."""
    failed = status.model_copy(deep=True)
    failed.conditions = set_condition(
        failed.conditions, ConditionType.FAILED, True, Reason.INVALID_SPEC, message, utcnow(), generation
    )
    failed.phase = JobPhase.FAILED
    return status_json(failed)


def unparsable_status(obj: Mapping[str, Any], error: ValidationError) -> tuple[str, dict[str, Any]]:
    """For a job the models cannot read (`error`): the message naming the first field at fault, and its status
    turned Failed with InvalidSpec (what of the old status still parses kept), as the JSON a round writes."""
    first = error.errors()[0]
    message = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    try:
        old = TrainingJobStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        old = TrainingJobStatus()
    generation = int((obj.get("metadata") or {}).get("generation", 0))
    return message, invalid_spec_status(old, generation, message)


def status_read(
    written: tuple[str, dict[str, Any]] | None,
    status: TrainingJobStatus,
    version: str | None,
    with_progress: bool,
    ranks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """status_json of the status a round read (`status`, at resourceVersion `version`): what this process wrote
    (`written`: the version its write made, and what it encoded), while that is the version read, else encoded
    (with its `ranks` as encoded before, if given)."""
    if written is not None and not with_progress and version is not None and written[0] == version:
        return written[1]
    return status_json(status, with_progress=with_progress, ranks=ranks)
