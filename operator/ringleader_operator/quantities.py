"""Kubernetes resource quantities and what a pod requests, pure. Parsed here: kubernetes_asyncio has no parser,
and the synchronous client's would add 126 MB to the operator image for one function."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

GPU = "nvidia.com/gpu"
PODS = "pods"
# Resources compared, in the order a shortage is reported and pods are sorted: scarce accelerators first.
ORDER = (GPU, "cpu", "memory")
_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
    "E": Decimal("1e18"), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip

Resources = dict[str, Decimal]
_LONGEST_FIRST = sorted((s for s in _SUFFIXES if s), key=len, reverse=True)  # "Mi" before "M"


MAX_QUANTITY = Decimal(2**63)  # Kubernetes' own limit on a quantity's value


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("500m", "2Gi", "1e3", 4) as a number; ValueError names the bad value: not a
    string or number, not a quantity, not finite, or beyond what Kubernetes can hold."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{str(value)[:40]!r} is not a Kubernetes quantity")
    text = str(value).strip()
    number, suffix = text, ""
    for s in _LONGEST_FIRST:
        if text.endswith(s):
            number, suffix = text[: -len(s)], s
            break
    try:
        parsed = Decimal(number)
        if not parsed.is_finite() or abs(parsed) > MAX_QUANTITY:
            raise InvalidOperation
        return parsed * _SUFFIXES[suffix]
    except InvalidOperation:
        raise ValueError(f"{text[:40]!r} is not a Kubernetes quantity") from None


def format_quantity(value: Decimal) -> str:
    """A quantity as Kubernetes accepts it: whole numbers plain, fractions in milli-units ("1500m")."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


def add(into: Resources, more: Mapping[str, Decimal], sign: int = 1) -> None:
    """`into` += sign * `more`, per resource."""
    for k, v in more.items():
        into[k] = into.get(k, Decimal(0)) + sign * v


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    # A resource with a limit and no request is requested at its limit (the API server defaults it so).
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: parse_quantity(v) for k, v in merged.items()}


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod: its containers' requests, or the largest init container's
    where that is more, plus the pod overhead and one pod slot."""
    total: Resources = {}
    for c in spec.get("containers") or []:
        add(total, _container_requests(c))
    for c in spec.get("initContainers") or []:
        for k, v in _container_requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    add(total, {k: parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    total[PODS] = total.get(PODS, Decimal(0)) + 1
    return total
