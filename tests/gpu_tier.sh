#!/usr/bin/env bash
# The GPU tier, as a lent GPU machine runs it (one GPU, its image's torch, nothing fetched there): the trainer's
# tests written for CUDA (test_cuda.py), and those of the CPU tier whose ranks can share one GPU, which then run
# on CUDA tensors: the parameter server's (its bytes cross TCP through host memory; NCCL refuses two ranks of a
# communicator on one device, so allreduce's and local SGD's native cases cannot). What the image lacks
# (pydantic) travels as wheels in .whl (docs/development.md, "A lent GPU"). Usage: tests/gpu_tier.sh [LOG]
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
# On the environment, not only pytest's path: torchrun's children import the trainer too.
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}devcluster:api:operator:cli:trainer-image:."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
T=tests/integration/trainer
set -o pipefail
# --confcutdir: the dev cluster's fixtures (tests/conftest.py, which imports the Kubernetes client) stay out.
python3 -m pytest -p no:cacheprovider --confcutdir="$T" -n "${GPU_TIER_WORKERS:-6}" -rA --durations=10 \
  "$T/test_cuda.py" \
  "$T/test_stopping.py::test_sigterm_to_every_rank_saves_at_one_step_and_the_resumed_run_is_bit_identical[ps-synchronous]" \
  "$T/test_stopping.py::test_bounded_staleness_workers_stop_at_the_step_shard_0_names_when_another_shard_is_told" \
  "$T/test_stopping.py::test_an_asynchronous_stop_does_not_wait_for_a_worker_far_behind" \
  "$T/test_healing.py::test_a_killed_worker_takes_its_place_back_at_the_shards_and_no_one_else_stops" \
  "$T/test_healing.py::test_a_killed_shard_heals_from_its_backup_and_the_run_ends_bit_identical" \
  2>&1 | tee "${1:-/dev/null}"
