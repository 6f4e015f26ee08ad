#!/usr/bin/env bash
# Builds the dev cluster's binaries from the Go module proxy into the cache, each only when it is missing:
#   $RINGLEADER_CACHE/kubernetes-<v>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
#   $RINGLEADER_CACHE/realnode-<v>/{kubelet,kube-proxy,cri-sweep,pause}   $RINGLEADER_CACHE/coredns-<v>/coredns
#   $RINGLEADER_CACHE/registry-<v>/registry
#   $RINGLEADER_CACHE/etcd-<v>/etcd   $RINGLEADER_CACHE/kwok-<v>/{kwok,kwokctl}   $RINGLEADER_CACHE/helm-<v>/helm
#   $RINGLEADER_CACHE/kueue-<v>/{kueue,crds/,webhook.yaml} (the manager; its CRDs and webhooks from its module),
#   with --kueue only (`make dev-cluster KUEUE=1`, `make test`): the demo does not run Kueue
#   $RINGLEADER_CACHE/kube-router-<v>/kube-router (NetworkPolicy on the real node), with --netpol only
# A cold build (empty Go caches) took 622 s on 2 cores (kube-apiserver alone 307 s); warm runs return at once.
set -euo pipefail

with_kueue=0 with_netpol=0 registry_only=0
for arg in "$@"; do
  case "$arg" in
    --kueue) with_kueue=1 ;;
    --netpol) with_netpol=1 ;;
    --registry-only) registry_only=1 ;;
    *) echo "build-binaries: unknown argument $arg (usage: build-binaries.sh [--kueue] [--netpol] [--registry-only])" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${RINGLEADER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringleader}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

mkdir -p "$cache"

say() { printf '[build] %s\n' "$*" >&2; }
die() { printf 'build-binaries: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "no Go toolchain on PATH: install Go >= 1.24 (go.dev/dl; Debian's golang-go is older) and run again"
gover=$(go env GOVERSION | sed 's/^go//')
case "$gover" in 1.2[4-9]*|1.[3-9]*) ;; *) die "Go $gover is too old: Go >= 1.24 is needed to build Kubernetes ${KUBE_VERSION}" ;; esac

# Every build goes to a temp dir that is moved into place only when it finished, so an interrupted build
# never leaves a half-filled cache directory that looks complete.
have() { local dir=$1; shift; for b in "$@"; do [ -x "$dir/$b" ] || return 1; done; }
start_timer() { t0=$(date +%s); }
took() { echo "$(( $(date +%s) - t0 ))s"; }

# progress LABEL CMD...: runs CMD, saying every 30 s that LABEL is still going (Go itself is silent).
progress() {
  local label=$1 pid rc start=$SECONDS
  shift
  "$@" & pid=$!
  while ! wait_for_exit "$pid" 30; do say "still $label ($(( SECONDS - start ))s)"; done
  wait "$pid" && rc=0 || rc=$?
  return "$rc"
}
wait_for_exit() { # PID SECONDS: true once PID has exited, false if it still runs after SECONDS
  local i
  for ((i = 0; i < $2 * 5; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  return 1
}

# go install works directly for modules without local replace directives.
install_tools() { # DIR LDFLAGS PACKAGE@VERSION...
  local dir=$1 ld=$2 tmp
  shift 2
  tmp=$(mktemp -d "$cache/.install.XXXXXX")
  for pkg in "$@"; do GOBIN="$tmp" progress "building ${pkg%@*}" go install -trimpath -ldflags "$ld" "$pkg"; done
  rm -rf "$dir"; mv "$tmp" "$dir"
}

# The image registry the real node pulls from (ringleader_devcluster/registry.py), first and alone with
# --registry-only: `make demo` pushes its images there while the other builds run.
registry_dir="$cache/registry-$REGISTRY_VERSION"
if ! have "$registry_dir" registry; then
  say "building registry $REGISTRY_VERSION"
  start_timer
  install_tools "$registry_dir" "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
  say "built registry in $(took)"
fi
[ "$registry_only" = 0 ] || exit 0

kube_dir="$cache/kubernetes-$KUBE_VERSION"
minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
kube_ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ld="$kube_ld -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ld="$kube_ld -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
if ! have "$kube_dir" kube-apiserver kube-controller-manager kube-scheduler kubectl; then
  tmp=$(mktemp -d "$cache/.kubernetes.XXXXXX")
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    say "building $c $KUBE_VERSION"
    start_timer
    (cd "$here/go/kube" && progress "building $c" go build -trimpath -ldflags "$kube_ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c")
    say "built $c in $(took)"
  done
  rm -rf "$kube_dir"; mv "$tmp" "$kube_dir"
fi

# The real node's own programs: the kubelet, kube-proxy, cri-sweep (removes a runtime's pod sandboxes at
# teardown) and the sandbox (pause) program, all static.
node_dir="$cache/realnode-$KUBE_VERSION"
if ! have "$node_dir" kubelet kube-proxy cri-sweep pause; then
  tmp=$(mktemp -d "$cache/.realnode.XXXXXX")
  say "building kubelet and kube-proxy $KUBE_VERSION, cri-sweep and pause"
  start_timer
  for c in kubelet kube-proxy; do
    (cd "$here/go/kube" && progress "building $c" go build -trimpath -ldflags "$kube_ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c")
  done
  (cd "$here/go/kube" && progress "building cri-sweep" go build -trimpath -ldflags "-s -w" -o "$tmp/cri-sweep" ./cri-sweep)
  (cd "$here/go/pause" && go build -trimpath -ldflags "-s -w" -o "$tmp/pause" .)
  rm -rf "$node_dir"; mv "$tmp" "$node_dir"
  say "built the real node's programs in $(took)"
fi

etcd_dir="$cache/etcd-$ETCD_VERSION"
if ! have "$etcd_dir" etcd; then
  say "building etcd $ETCD_VERSION"
  start_timer
  tmp=$(mktemp -d "$cache/.etcd.XXXXXX")
  (cd "$here/go/etcd" && progress "building etcd" go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$etcd_dir"; mv "$tmp" "$etcd_dir"
  say "built etcd in $(took)"
fi

# CoreDNS answers the real node's pods for cluster.local (ringleader_devcluster/servicenet.py).
coredns_dir="$cache/coredns-$COREDNS_VERSION"
if ! have "$coredns_dir" coredns; then
  say "building coredns $COREDNS_VERSION"
  start_timer
  install_tools "$coredns_dir" "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
  say "built coredns in $(took)"
fi

kwok_dir="$cache/kwok-$KWOK_VERSION"
if ! have "$kwok_dir" kwok kwokctl; then
  say "building kwok and kwokctl $KWOK_VERSION"
  start_timer
  install_tools "$kwok_dir" \
    "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  say "built kwok in $(took)"
fi

# Kueue's manager, run outside the cluster like the control plane (ringleader_devcluster/kueue.py), and its CRDs,
# copied from the same module so the binary and the schemas cannot disagree.
kueue_dir="$cache/kueue-$KUEUE_VERSION"
if [ "$with_kueue" = 1 ] && ! have "$kueue_dir" kueue; then
  say "building kueue $KUEUE_VERSION (about 5 minutes on 2 cores with empty Go caches)"
  start_timer
  install_tools "$kueue_dir" "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  say "built kueue in $(took)"
fi
if [ "$with_kueue" = 1 ] && { [ ! -d "$kueue_dir/crds" ] || [ ! -f "$kueue_dir/webhook.yaml" ]; }; then
  mod=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod/config/components/crd/bases" ] || die "kueue $KUEUE_VERSION's module has no config/components/crd/bases"
  tmp=$(mktemp -d "$cache/.kueue-manifests.XXXXXX")
  mkdir "$tmp/crds"
  cp "$mod"/config/components/crd/bases/*.yaml "$tmp/crds/"
  cp "$mod/config/components/webhook/manifests.yaml" "$tmp/webhook.yaml"
  chmod -R u+w "$tmp"
  rm -rf "$kueue_dir/crds"
  mv "$tmp/crds" "$kueue_dir/crds"
  mv "$tmp/webhook.yaml" "$kueue_dir/webhook.yaml"
  rmdir "$tmp"
fi

# kube-router's network policy controller (ringleader_devcluster/netpol.py), through a wrapper module: the proxy
# serves the release but not every dependency version it names (go/kube-router/go.mod says which one is replaced).
router_dir="$cache/kube-router-$KUBE_ROUTER_VERSION"
if [ "$with_netpol" = 1 ] && ! have "$router_dir" kube-router; then
  say "building kube-router $KUBE_ROUTER_VERSION (a few minutes on 2 cores with empty Go caches)"
  start_timer
  tmp=$(mktemp -d "$cache/.kube-router.XXXXXX")
  (cd "$here/go/kube-router" && progress "building kube-router" go build -trimpath \
    -ldflags "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    -o "$tmp/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
  rm -rf "$router_dir"; mv "$tmp" "$router_dir"
  say "built kube-router in $(took)"
fi

helm_dir="$cache/helm-$HELM_VERSION"
if ! have "$helm_dir" helm; then
  say "building helm $HELM_VERSION"
  start_timer
  install_tools "$helm_dir" "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  say "built helm in $(took)"
fi
say "binaries ready under $cache"
