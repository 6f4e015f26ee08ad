"""`python -m ringleader_trainer --example digits-mlp`: the built-in examples (ringleader_trainer.train)."""

from ringleader_trainer.exitcodes import exit_now
from ringleader_trainer.train import main

exit_now(main())
