#!/usr/bin/env bash
# Installs what stkrelay needs on a fresh Debian machine with Python 3.11:
# system packages (redis-server, faketime, ...) from Debian, then the venv with
# the pinned runtime (requirements.lock) and test (requirements-dev.lock)
# dependencies. Idempotent; one line per step, saying what it installs (or that
# nothing was missing), so a long install is never silent.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "bootstrap: $*"; }

say "checking Debian's packages"

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v faketime >/dev/null || need+=(faketime)
command -v setpriv >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v arping >/dev/null || need+=(iputils-arping)
command -v chromium >/dev/null || need+=(chromium)
command -v fusermount3 >/dev/null || need+=(fuse3)  # the faulty share of the hung-share tests
command -v smbd >/dev/null || need+=(samba)  # a real SMB server on loopback for the smb:// tests (tests/samba.py)
command -v systemd-analyze >/dev/null || need+=(systemd)  # `systemd-analyze verify` of packaging/*.service
command -v etcd >/dev/null || need+=(etcd-server)  # a real 3-member etcd cluster in the LEASE_STORE=etcd tests
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v keepalived >/dev/null || need+=(keepalived)  # real VRRP for the gate tests (tests/test_netns_gate.py)
command -v docker-compose >/dev/null || need+=(docker-compose)  # `docker-compose config` of docker/compose.yaml
command -v podman >/dev/null || need+=(podman)  # `make image` / `make image-test` (docs/design.md §12)
command -v runc >/dev/null || need+=(runc)  # podman's runtime here (crun fails on hybrid cgroups)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)  # the image's Debian base, made here: no registry
command -v promtool >/dev/null || need+=(prometheus)  # `promtool test rules` of packaging/prometheus/ (the service is not started)
command -v msgfmt >/dev/null || need+=(gettext)  # `make messages`: the panel's catalogues (locale/)
command -v spin >/dev/null || need+=(spin)  # `make verify`: SPIN checks the pool's model (verify/pool.pml; gcc compiles its verifier)
fc-list :lang=zh-tw 2>/dev/null | grep -q . || need+=(fonts-noto-cjk)  # Chromium draws the zh-Hant panel
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  say "apt-get update"
  apt-get update -qq
  for pkg in "${need[@]}"; do
    say "installing $pkg (Debian)"
    apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
  done
else
  say "Debian's packages: nothing missing"
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 is required (python3.11 not found)" >&2; exit 1; }

stamp=.venv/.requirements.sha
want=$(cat requirements.lock requirements-dev.lock | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || { say "creating .venv with $PY"; "$PY" -m venv .venv; }
  say "installing $(grep -c '==' requirements-dev.lock) pinned packages into .venv (requirements-dev.lock)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.lock
  echo "$want" > "$stamp"
else
  say ".venv: up to date with the lock files"
fi
say "done"
