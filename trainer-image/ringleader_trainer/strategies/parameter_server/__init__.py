"""Parameter server: the model's parameters sharded over the PS ranks; workers push gradients, pull parameters.

Each shard (`shards.ShardServer`) owns whole parameter tensors, assigned by `assign_shards` so shards hold about the
same number of values, and applies the optimizer the user configured to them:

- synchronous: one update per step from the mean of all workers' gradients, summed in worker order (so a run
  is reproducible); every worker waits for that update.
- asynchronous: each push is applied on arrival, scaled by 1/workers so that one push from every worker
  moves the parameters as far as one synchronous step (the same learning rate works under both); the
  pusher gets the parameters as they are then.
- bounded-staleness: as asynchronous, but a worker more than `max_staleness` steps ahead of the slowest
  unfinished worker waits until the slowest catches up.

A stop (elastic/stopping.py) travels with the exchange, and shard 0 decides the step: a worker asked to stop sets
Flag.STOP on its pushes; another shard asked to stop sets it on its replies, and the workers pass it on to
shard 0 with their next push. Shard 0, once it knows, names the step every worker stops at (STOP_AT, sent
before its next PARAMS to each worker): in synchronous mode the round just completed, which every worker
has reached; otherwise one past the furthest clock, which no worker can have passed (each pushes to shard 0
first and reads every reply before its next push). Workers behind it do not train on up to it (a worker far
behind would take it past its pod's grace period): each stops as soon as it hears the step and saves as of
it, skipping the steps between (ParameterServerStrategy.stop_step). Once a worker has finished, no step is
named: the others finish too. Workers that stop say DONE with Flag.STOP; the shard then checkpoints at that
step and its strategy ends it as stopped.

Workers talk to every shard through `client.ShardClient` over the raw-bytes protocol of `wire`, each connection
opened by `auth`'s handshake (both ends prove the job's token). A shard admits connections through a `Gate`:
until every worker's slot is claimed by a proven peer, connections that fail the handshake or the hello, or
claim a taken slot, are dropped and logged, and the shard keeps accepting.

A lost worker stops no shard (`rejoin`, the default; elastic/healing.py for the other strategies): its slot is given
back and the shards keep serving the others (asynchronous and bounded-staleness workers train on; a synchronous
round waits for the lost worker's push). Its replacement asks every shard where it is (a probe: HELLO with
"probe", answered by STATE with this worker's clock) and takes its slot back at that clock (HELLO with
"resume"), receiving the parameters as they are: it redoes the step it was lost in, if its push had not
completed the round, with the same parameters and data. Shard 0 then tells every worker (Flag.REJOINED) that
the job continued. A lost worker not replaced within the timeout, a lost shard, or anything else ends everyone
with `PeerLost` (exit 201): the operator recreates the ranks and they resume from the newest checkpoint all of
them have, which keeps synchronous runs exact.


The package: the strategy (`strategy`), the shards (`shards`), the workers' client of them and the replacement's
probe (`client`), how parameters are split over the shards (`layout`), and each shard's primary/backup
replication (`backup`).
"""
