"""Checkpoints: the files of a step and how they are written, found and read back (`store`), what a strategy saves,
when, and which step every rank agrees to resume from (`training`), and state saved shard by shard (`sharded`)."""
