"""Rank 0's Prometheus metrics (docs/env-contract.md): what the operator copies into status.progress.

`TrainerMetrics.serve(port)` starts the HTTP endpoint on worker 0; `update()` sets the gauges after each
logging interval. Other ranks create the object too (cheap) but never serve it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest, start_http_server

# The names the operator reads (ringleader_operator.progress); a test holds both sides together.
STEP = "ringleader_trainer_step"
LOSS = "ringleader_trainer_loss"
SAMPLES_PER_SECOND = "ringleader_trainer_samples_per_second"
LAST_CHECKPOINT_STEP = "ringleader_trainer_last_checkpoint_step"
CHECKPOINT_SECONDS = "ringleader_trainer_checkpoint_seconds"
STEP_SECONDS = "ringleader_trainer_step_seconds"
TOTAL_STEPS = "ringleader_trainer_total_steps"


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

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def update(self, step: int, loss: float, samples_per_second: float, step_seconds: float | None = None) -> None:
        self.step.set(step)
        self.loss.set(loss)
        self.samples_per_second.set(samples_per_second)
        if step_seconds is not None:
            self.step_seconds.set(step_seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
