"""The parameter-server strategy (`strategy`), its shards and the workers' client of them (`shards`), and each
shard's primary/backup replication (`backup`)."""
