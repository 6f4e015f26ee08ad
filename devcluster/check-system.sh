#!/usr/bin/env bash
# Checks (and, as root on Debian, installs) the system tools the dev cluster needs, one line per problem.
set -euo pipefail
missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null && command -v setpriv >/dev/null || missing+=(util-linux)
command -v mount >/dev/null || missing+=(mount)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# The real node (RINGLEADER_REAL_NODE=0 leaves it out): containerd, runc, the CNI plugins, buildah and debootstrap
# for images, openssl for the node's certificate, a static busybox for the node's test image, iptables for
# kube-proxy, ipset for kube-router.
if [ "${RINGLEADER_REAL_NODE:-1}" != 0 ]; then
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v iptables-save >/dev/null || missing+=(iptables)
  command -v ipset >/dev/null || missing+=(ipset)  # kube-router's NetworkPolicy sets (make dev-cluster NETPOL=1)
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || missing+=(busybox-static)  # static: no ldd
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[deps] installing ${missing[*]} (apt-get, about 20 s)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
      echo "apt-get could not install ${missing[*]}: check that its package repositories are reachable" >&2
      exit 1
    fi
  else
    echo "missing system packages: ${missing[*]} (install them, e.g. apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case "$pyver" in 3.1[1-9]) ;; *) echo "Python $pyver found; Python >= 3.11 is needed" >&2; exit 1 ;; esac
command -v go >/dev/null || { echo "no Go toolchain on PATH: install Go >= 1.24 to build the control plane" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "the dev cluster's process node needs root (network namespaces): run as root" >&2; exit 1; }
