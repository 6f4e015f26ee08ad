#!/usr/bin/env bash
# Builds Kubeflow's training-operator (the control-plane benchmark's peer) from the Go module proxy into the
# cache, with the CRDs and RBAC rules that ship in its module, only when missing:
#   $RINGLEADER_CACHE/training-operator-<v>/{training-operator,crds/,rbac/,webhook.yaml}
# About 2 minutes on 2 cores with warm Go caches of the dev cluster's builds.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${RINGLEADER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringleader}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod"
dir="$cache/training-operator-$TRAINING_OPERATOR_VERSION"
say() { printf '[build] %s\n' "$*" >&2; }

if [ -x "$dir/training-operator" ] && [ -d "$dir/crds" ] && [ -d "$dir/rbac" ] && [ -f "$dir/webhook.yaml" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "build-training-operator: no Go toolchain on PATH" >&2; exit 1; }
module=github.com/kubeflow/training-operator
say "building training-operator $TRAINING_OPERATOR_VERSION (about 2 minutes)"
t0=$SECONDS
tmp=$(mktemp -d "$cache/.training-operator.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "$module/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  sleep 5
  kill -0 "$pid" 2>/dev/null && [ $(( (SECONDS - t0) % 30 )) -lt 5 ] && say "still building training-operator ($(( SECONDS - t0 ))s)"
done
wait "$pid"
mv "$tmp/training-operator.v1" "$tmp/training-operator"
src=$(go mod download -json "$module@$TRAINING_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || { echo "build-training-operator: go mod download found no source for $module" >&2; exit 1; }
mkdir -p "$tmp/crds" "$tmp/rbac"
cp "$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$tmp/crds/"
cp "$src/manifests/base/rbac/role.yaml" "$tmp/rbac/"
cp "$src/manifests/base/webhook/manifests.yaml" "$tmp/webhook.yaml"
chmod -R u+w "$tmp"
rm -rf "$dir"; mv "$tmp" "$dir"; trap - EXIT
say "built training-operator in $(( SECONDS - t0 ))s into $dir"
