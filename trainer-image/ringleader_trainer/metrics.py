"""Each rank's Prometheus metrics (docs/env-contract.md): worker 0's page is what the operator copies into
status.progress; every rank's page says where that rank is, which the operator reads when a job's progress
stalls, to name the rank that stopped first.

`TrainerMetrics.serve(port)` starts the HTTP endpoint (every rank calls it); `update()` sets the progress
gauges after each logging interval. The rank's own place (its step, and when it entered its current exchange
and left its last) is noted at every step and exchange (`reached`, `entered_exchange`, `left_exchange`): plain
attribute writes, read when the page is served (bench/stall_bench.py measures their cost against the step).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Gauge, generate_latest, start_http_server
from prometheus_client.core import GaugeMetricFamily

# The names the operator reads (ringleader_operator.progress); a test holds both sides together.
STEP = "ringleader_trainer_step"
LOSS = "ringleader_trainer_loss"
SAMPLES_PER_SECOND = "ringleader_trainer_samples_per_second"
LAST_CHECKPOINT_STEP = "ringleader_trainer_last_checkpoint_step"
CHECKPOINT_SECONDS = "ringleader_trainer_checkpoint_seconds"
STEP_SECONDS = "ringleader_trainer_step_seconds"
TOTAL_STEPS = "ringleader_trainer_total_steps"
RANK_STEP = "ringleader_trainer_rank_step"
EXCHANGE_STARTED = "ringleader_trainer_exchange_started_timestamp_seconds"
EXCHANGE_DONE = "ringleader_trainer_exchange_done_timestamp_seconds"
COMPUTE_SECONDS = "ringleader_trainer_compute_seconds"
STEP_TIMESTAMP = "ringleader_trainer_rank_step_timestamp_seconds"
COLLECTIVES_ENTERED = "ringleader_trainer_collectives_entered"
COLLECTIVES_COMPLETED = "ringleader_trainer_collectives_completed"
RESUMED_STEP = "ringleader_trainer_resumed_step"
RESUMED_TIMESTAMP = "ringleader_trainer_resumed_timestamp_seconds"
COMPUTE_SMOOTHING = 0.1  # weight of the newest step in the moving average: about the last 10 steps


class RankPlace:
    """Where this rank is and how fast it works, as the page shows it (a prometheus_client collector over plain
    values). `compute`: seconds per step spent outside exchanges (the step's wall time less the time it waited
    on peers), a moving average: what tells a straggler from the peers that wait for it."""

    def __init__(self) -> None:
        self.step = 0
        self.started = 0.0  # Unix time it entered the exchange it is in; 0: in none
        self.done = 0.0  # Unix time its last exchange completed
        self.compute = 0.0  # moving average; 0: no step timed yet
        self.step_at = 0.0  # Unix time the last step was noted
        self.waited = 0.0  # seconds waited in exchanges since then

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(RANK_STEP, "Optimizer steps this rank completed.", value=self.step)
        yield GaugeMetricFamily(
            EXCHANGE_STARTED,
            "Unix time this rank began waiting in the exchange it is in (a collective, a parameter-server round); "
            "0 while it is in none.",
            value=self.started,
        )
        yield GaugeMetricFamily(EXCHANGE_DONE, "Unix time this rank's last exchange completed.", value=self.done)
        yield GaugeMetricFamily(
            STEP_TIMESTAMP, "Unix time this rank completed its last step; 0: none yet in this process.",
            value=self.step_at,
        )  # fmt: skip
        yield GaugeMetricFamily(
            COMPUTE_SECONDS,
            "Seconds per step this rank works outside exchanges, a moving average over about 10 steps.",
            value=self.compute,
        )


# (process group, the last collective entered, the last seen complete): flightrecorder.read's groups.
CollectivesReader = Callable[[], Sequence[tuple[str, int, int]]]


class CollectivesPlace:
    """Each process group's place as torch's flight recorder says it (flightrecorder.py), read when the page
    is served: the numbers of the last collective this rank entered and saw complete, labelled by group."""

    def __init__(self, read: CollectivesReader) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            groups = self.read()
        except (RuntimeError, ValueError, TypeError, AttributeError, OSError):  # the recorder must not cost the page
            groups = []
        entered = GaugeMetricFamily(
            COLLECTIVES_ENTERED,
            "Sequence number of the last collective this rank entered in the process group (torch's flight "
            "recorder): a rank behind its group's others never reached the collective they wait in.",
            labels=["group"],
        )
        completed = GaugeMetricFamily(
            COLLECTIVES_COMPLETED,
            "Sequence number of the last collective this rank saw complete in the process group (-1: none).",
            labels=["group"],
        )
        for group, last_entered, last_completed in groups:
            entered.add_metric([group], last_entered)
            completed.add_metric([group], last_completed)
        yield entered
        yield completed


class TrainerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.step = Gauge(STEP, "Optimizer steps completed.", registry=self.registry)
        self.loss = Gauge(LOSS, "Latest training loss.", registry=self.registry)
        self.samples_per_second = Gauge(
            SAMPLES_PER_SECOND,
            "Training throughput over the last logging interval, all workers.",
            registry=self.registry,
        )
        self.last_checkpoint_step = Gauge(
            LAST_CHECKPOINT_STEP, "Step of the newest checkpoint.", registry=self.registry
        )
        # What the operator sizes the pods' grace period from (a stop saves within it).
        self.checkpoint_seconds = Gauge(
            CHECKPOINT_SECONDS, "Seconds the last checkpoint took to save.", registry=self.registry
        )
        self.step_seconds = Gauge(
            STEP_SECONDS, "Mean seconds per step over the last logging interval.", registry=self.registry
        )
        self.total_steps = Gauge(TOTAL_STEPS, "Steps the run is to take (0: not said).", registry=self.registry)
        # Where this rank's training last continued from: what the operator counts the steps a lost rank cost by.
        self.resumed_step = Gauge(
            RESUMED_STEP,
            "The step this rank's training continued from when it last started, resumed or healed (0: the start).",
            registry=self.registry,
        )
        self.resumed_at = Gauge(
            RESUMED_TIMESTAMP, "Unix time this rank's training last started, resumed or healed.", registry=self.registry
        )
        # Where this rank is (every rank, every step): what names the rank that stopped first when a job stalls.
        # Plain attributes read by a collector when the page is served, not gauges: a gauge's set() takes a lock
        # and cost about 2 % of a small model's step at three calls a step; an attribute costs nothing to note.
        self.place = RankPlace()
        self.registry.register(self.place)

    def watch_collectives(self, read: CollectivesReader) -> None:
        """Serve each process group's place (`read` at every page served: flightrecorder.read)."""
        self.registry.register(CollectivesPlace(read))

    def reached(self, step: int) -> None:
        """This rank completed optimizer step `step` (every step)."""
        place, now = self.place, time.time()
        if place.step_at:
            work = max(0.0, now - place.step_at - place.waited)
            place.compute = work if not place.compute else place.compute + COMPUTE_SMOOTHING * (work - place.compute)
        place.step, place.step_at, place.waited = step, now, 0.0

    def entered_exchange(self) -> None:
        """This rank now waits on its peers (a collective launched, a push sent): stamped once per exchange."""
        if not self.place.started:
            self.place.started = time.time()

    def left_exchange(self) -> None:
        """The exchange this rank waited in is complete."""
        place, now = self.place, time.time()
        if place.started:
            place.waited += now - place.started
        place.started, place.done = 0.0, now

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def resumed(self, step: int) -> None:
        """This rank's training continues from `step` (at its start, a resume or a heal): its step as of now."""
        self.step.set(step)
        self.place.step = step
        self.place.started = 0.0  # an exchange a lost peer failed is over (not one to be stuck in: elastic/rescue.py)
        self.resumed_step.set(step)
        self.resumed_at.set(time.time())

    def update(self, step: int, loss: float, samples_per_second: float, step_seconds: float | None = None) -> None:
        self.step.set(step)
        self.loss.set(loss)
        self.samples_per_second.set(samples_per_second)
        if step_seconds is not None:
            self.step_seconds.set(step_seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
