"""`python -m ringleader_trainer --example digits-mlp`: the built-in examples (ringleader_trainer.train)."""

from ringleader_trainer.train import main

raise SystemExit(main())
