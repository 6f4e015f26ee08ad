"""The reconcile round's policies, pure: one module per decision, each a function of the `Round`.

In the order `reconcile.plan` applies them:

| module        | decides                                                                              |
|---------------|--------------------------------------------------------------------------------------|
| cleanup       | which pods of an ended job go (runPolicy.cleanPodPolicy)                             |
| outcome       | Created; Succeeded / Restarting / Running / Pending once the ranks are looked at     |
| saves         | status.progress's lastCheckpointStep from the exit records of ranks that stopped      |
| suspend       | runPolicy.suspend: delete every pod; resuming                                        |
| deadline      | runPolicy.activeDeadlineSeconds: fail the job and stop its pods                      |
| resize        | a changed worker count re-forms the whole world; ranks the job no longer has go     |
| restarts      | each rank: create its pod, count its pod's failure, restart it after its back-off    |
| stall         | runPolicy.progressDeadlineSeconds: Stalled (or Unknown), replace the rank stopped first |
| straggler     | runPolicy.stragglerThreshold: Straggler, replace a straggler once (Replace)           |

Then the job's gang backend admits the pods (gang_backends/: the operator's gate releases them together once
they fit, or they wait, failing past the timeout; a PodGroup scheduler or kube-scheduler places them), and:

| module        | decides                                                                              |
|---------------|--------------------------------------------------------------------------------------|
| goodput       | status.goodput: the time since the last change of phase, counted into its part       |
| ttl           | runPolicy.ttlSecondsAfterFinished: delete the ended job                              |
"""
