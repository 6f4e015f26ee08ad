"""`python -m ringleader_trainer --example digits-mlp`: the built-in examples (ringleader_trainer.train), each
training process forked by a supervisor that recovers in place (ringleader_trainer.recovery)."""

from ringleader_trainer.exitcodes import exit_now
from ringleader_trainer.recovery import supervise
from ringleader_trainer.train import main, preload

exit_now(supervise(main, preload))
