"""`python -m ringleader_trainer --example digits-mlp`: the built-in examples (ringleader_trainer.examples.train), each
training process forked by a supervisor that recovers in place (ringleader_trainer.elastic.recovery)."""

from ringleader_trainer.elastic.recovery import supervise
from ringleader_trainer.examples.train import main, preload
from ringleader_trainer.exitcodes import exit_now

exit_now(supervise(main, preload))
