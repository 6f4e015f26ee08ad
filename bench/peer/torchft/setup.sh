#!/usr/bin/env bash
# Builds the torchft peer's virtualenv, only when missing or stale:
#   $RINGLEADER_CACHE/torchft-venv   (default $HOME/.cache/ringleader/torchft-venv)
# It holds torchft 0.2.0 and its pinned dependencies from requirements.txt, and reuses the project
# venv's torch through a .pth file pointing at the project venv's site-packages (no second torch
# download). Needs PyPI through pip's configured index; about 10 seconds.
#   RINGLEADER_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/ringleader)
#   RINGLEADER_VENV   the project venv whose torch is reused (default $RINGLEADER_CACHE/venv)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${RINGLEADER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringleader}
base=${RINGLEADER_VENV:-$cache/venv}
dir="$cache/torchft-venv"
req="$here/requirements.txt"
say() { printf '[torchft-setup] %s\n' "$*" >&2; }
die() { printf 'torchft setup: %s\n' "$*" >&2; exit 1; }

[ -x "$base/bin/python" ] || die "no project venv at $base (set RINGLEADER_VENV or create it first)"
base_site=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
  || die "cannot run $base/bin/python"
torch_version=$("$base/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
  || die "the project venv at $base has no importable torch"

# The stamp records what the venv was built from; a match plus a passing smoke test means up to date.
stamp_want="$(sha256sum "$req" | cut -d' ' -f1) $base_site $torch_version"

smoke() {
  "$dir/bin/python" - <<'EOF'
import sys
import torch, torchft
from torchft._torchft import LighthouseServer
from torch.distributed import is_gloo_available
major, minor = (int(v) for v in torch.__version__.split(".")[:2])
assert (major, minor) >= (2, 7), f"torchft 0.2.0 needs torch>=2.7, got {torch.__version__}"
assert is_gloo_available(), "torch has no gloo backend"
import opentelemetry._logs, opentelemetry.sdk._logs.export, opentelemetry.exporter.otlp.proto.http._log_exporter  # torchft.otel
s = LighthouseServer(bind="[::]:0", min_replicas=1)
s.shutdown()
print(f"torch {torch.__version__} from {torch.__file__}; torchft {torchft.__file__}", file=sys.stderr)
EOF
}

if [ -f "$dir/.ringleader-stamp" ] && [ "$(cat "$dir/.ringleader-stamp")" = "$stamp_want" ] \
   && [ -x "$dir/bin/torchft_lighthouse" ] && smoke 2>/dev/null; then
  say "up to date: $dir"
  exit 0
fi

t0=$SECONDS
trap 'rc=$?; [ $rc -eq 0 ] || printf "torchft setup: FAILED (exit %s); %s is incomplete and will be rebuilt on the next run\n" "$rc" "$dir" >&2' EXIT
say "building $dir (torch $torch_version reused from $base)"
rm -rf "$dir"
# Creating it from the project venv's interpreter gives the same Python build that torch was installed for.
"$base/bin/python" -m venv "$dir" || die "python -m venv $dir failed"
site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Appended to sys.path after the venv's own site-packages, so pinned packages here take precedence.
printf '%s\n' "$base_site" > "$site/ringleader-venv.pth"

say "installing requirements.txt (torchft 0.2.0 + opentelemetry, --no-deps)"
"$dir/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off -q \
  --no-deps -r "$req" || die "pip install -r $req failed (is PyPI reachable through pip's index?)"
say "checking the dependency set (pip check)"
"$dir/bin/python" -m pip check --disable-pip-version-check >&2 || die "pip check found broken requirements"
say "smoke test: import torch, torchft; start and stop a LighthouseServer"
smoke || die "smoke test failed: see the Python error above"
"$dir/bin/torchft_lighthouse" --version >/dev/null 2>&1 || die "torchft_lighthouse entry point does not run"

printf '%s\n' "$stamp_want" > "$dir/.ringleader-stamp"
say "built $dir in $(( SECONDS - t0 ))s; lighthouse: $dir/bin/torchft_lighthouse"
