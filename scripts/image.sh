#!/usr/bin/env bash
# `make image`: the agent's container image, built with podman from a context that
# holds only wheels (no network inside the build), and the Redis sidecar image the
# image test runs beside each agent.
#
#   BASE=...   a Debian 12 image with python3 + python3-venv. Unset: made here with
#              mmdebstrap from Debian's packages (localhost/stkrelay-base:bookworm),
#              since this machine reaches no image registry (docs/design.md §12).
#   IMAGE=...  the tag (default localhost/stkrelay:<version>, also :latest)
# Prints the image's size at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/podman.sh

version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
image=${IMAGE:-localhost/stkrelay:$version}
work=.image
mkdir -p "$work"

# Debian bases of the Essential packages (no apt) and PACKAGES, without docs, man pages or
# translations, merged /usr without the
# usrmerge package (which would pull in perl). Made once; `make clean` drops them.
debian_base() {  # TAG PACKAGES
  local tag=$1 packages=$2
  if ! stk_podman image exists "$tag"; then
    echo "image: making $tag from Debian's packages (mmdebstrap: $packages)"
    mmdebstrap --quiet --variant=essential --include="$packages" \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      bookworm "$work/base.tar" >/dev/null 2>&1
    stk_podman import -q "$work/base.tar" "$tag" >/dev/null
    rm -f "$work/base.tar"
  fi
}

base=${BASE:-}
if [ -z "$base" ]; then
  base=localhost/stkrelay-base:bookworm
  debian_base "$base" python3,python3-venv,passwd,tzdata
fi
# The sidecar: one redis-server per agent (docs/design.md §4: never shared), as compose runs it.
debian_base localhost/stkrelay-redis:bookworm redis-server

echo "image: wheels of requirements.lock and of stkrelay $version ($revision)"
rm -rf "$work/context" && mkdir -p "$work/context/wheels"
cp requirements.lock "$work/context/wheels/"
.venv/bin/python -m pip wheel -q --disable-pip-version-check -r requirements.lock \
  -w "$work/wheelhouse" 2>&1 | grep -v '^WARNING: Location' || true
cp "$work"/wheelhouse/*.whl "$work/context/wheels/"
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps . \
  -w "$work/context/wheels" 2>&1 | grep -v '^WARNING: Location' || true
rm -rf build stkrelay.egg-info

echo "image: podman build $image (base $base)"
stk_podman build -q --format docker -f docker/Dockerfile "${STK_ULIMITS[@]}" \
  --build-arg BASE="$base" --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -t "$image" -t localhost/stkrelay:latest "$work/context" >/dev/null
size=$(stk_podman image inspect --format '{{.Size}}' "$image")
echo "image: $image $(( size / 1000000 )) MB (base $base)"
