"""The built-in examples (`python -m ringleader_trainer --example ...`): their command line and training loop
(`train`), the data (`data`, `datasets/`), the models (`models`) and the memory probe (`memory`). The library
(`ringleader_trainer.strategy` and what it uses) never imports these."""
