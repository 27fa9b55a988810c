#!/usr/bin/env bash
# Build slonkd's container images with buildah, without a daemon and without a registry.
#
#   container/build.sh [IMAGE...]     IMAGE in: base slonkd controller worker login mosquitto
#                                     (default: all)
#
# The base is a Debian root made by debootstrap (cached under ~/.cache/slonkd/rootfs/<suite>)
# and added to a FROM-scratch image named localhost/slonk/debian:<suite>. Every other
# Dockerfile takes it as the build argument BASE_IMAGE, so where a registry is reachable the
# same files build unchanged with BASE_IMAGE=debian:bookworm-slim (and SKIP_ROOTFS=1).
#
# Environment:
#   SUITE=bookworm            Debian suite of the base (Python must be >= 3.11)
#   PYTHON=...                Python with pip for the wheels, same version as the suite's
#                             (default: the repo's .venv, else python3)
#   DEBIAN_MIRROR=...         mirror for debootstrap (default: the host's apt source)
#   BASE_IMAGE=...            base of the images (default: localhost/slonk/debian:$SUITE)
#   TAG=dev                   tag of the built images (localhost/slonk/<image>:$TAG)
#   BUILDAH_STORAGE_DRIVER=vfs
#   LAYERS=false              true: cache intermediate layers between builds (with vfs
#                             every layer is a full copy: ~19 GB for these five images)
#   SLONKD_CACHE=~/.cache/slonkd
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
SUITE="${SUITE:-bookworm}"
TAG="${TAG:-dev}"
SLONKD_CACHE="${SLONKD_CACHE:-$HOME/.cache/slonkd}"
BASE_IMAGE="${BASE_IMAGE:-localhost/slonk/debian:$SUITE}"
driver="${BUILDAH_STORAGE_DRIVER:-vfs}"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

default_mirror() {
    local uri
    uri="$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
        | grep -v security | head -n1 | awk '{print $2}')"
    echo "${uri:-http://deb.debian.org/debian}"
}
DEBIAN_MIRROR="${DEBIAN_MIRROR:-$(default_mirror)}"

need_tools() {
    local missing=()
    command -v buildah >/dev/null || missing+=(buildah)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    if ((${#missing[@]})); then
        if [[ $(id -u) -ne 0 ]]; then
            log "missing ${missing[*]}: install them (apt-get install ${missing[*]})"; exit 1
        fi
        log "installing ${missing[*]} with apt-get"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    fi
}

bud() {  # bud IMAGE DOCKERFILE CONTEXT [buildah bud args...]
    local image="$1" file="$2" ctx="$3"; shift 3
    local t0=$SECONDS
    log "buildah bud $image"
    buildah --storage-driver "$driver" bud --isolation chroot --layers="${LAYERS:-false}" \
        -f "$file" -t "$image" "$@" "$ctx"
    log "built $image in $((SECONDS - t0)) s"
}

rootfs() {  # the debootstrap root, packed once per suite
    local dir="$SLONKD_CACHE/rootfs/$SUITE"
    if [[ -s "$dir/rootfs.tar" ]]; then
        log "rootfs $SUITE cached: $dir/rootfs.tar"; return
    fi
    mkdir -p "$dir"
    local tmp; tmp="$(mktemp -d "$dir/root.XXXXXX")"
    local t0=$SECONDS
    log "debootstrap --variant=minbase $SUITE from $DEBIAN_MIRROR (about 1-2 minutes)"
    debootstrap --variant=minbase "$SUITE" "$tmp" "$DEBIAN_MIRROR" >"$dir/debootstrap.log" 2>&1 \
        || { log "debootstrap failed, see $dir/debootstrap.log"; rm -rf "$tmp"; exit 1; }
    # Like the official slim images: no package caches, a sources list with the mirror used.
    rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    tar -C "$tmp" --numeric-owner -cf "$dir/rootfs.tar.part" .
    mv "$dir/rootfs.tar.part" "$dir/rootfs.tar"
    rm -rf "$tmp"
    log "rootfs $SUITE packed in $((SECONDS - t0)) s"
}

base() {
    if [[ -n "${SKIP_ROOTFS:-}" ]]; then log "SKIP_ROOTFS: using $BASE_IMAGE as it is"; return; fi
    rootfs
    local dir="$SLONKD_CACHE/rootfs/$SUITE" stamp
    stamp="$(stat -c %Y "$dir/rootfs.tar")"
    if buildah --storage-driver "$driver" inspect --type image \
        --format '{{index .ImageAnnotations "dev.slonk.rootfs-mtime"}}' "$BASE_IMAGE" 2>/dev/null \
        | grep -qx "$stamp"; then
        log "$BASE_IMAGE is up to date"; return
    fi
    bud "$BASE_IMAGE" "$here/base/Dockerfile" "$dir" --annotation "dev.slonk.rootfs-mtime=$stamp"
}

python_for_wheels() {  # a Python with pip whose version matches the suite's python3
    local py="${PYTHON:-}" want
    case "$SUITE" in bookworm) want=3.11 ;; trixie) want=3.13 ;; *) want="" ;; esac
    if [[ -z "$py" ]]; then
        py=python3
        [[ -x "$repo/.venv/bin/python" ]] && py="$repo/.venv/bin/python"
    fi
    local have; have="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    if [[ -n "$want" && "$have" != "$want" ]]; then
        log "$py is Python $have but $SUITE's python3 is $want: binary wheels would not load;"
        log "set PYTHON to a Python $want with pip"; exit 1
    fi
    "$py" -m pip --version >/dev/null || { log "$py has no pip (apt-get install python3-pip)"; exit 1; }
    echo "$py"
}

wheels() {  # slonkd and its dependencies as wheels, so the images need no package index
    local out="$here/.build/wheels" t0=$SECONDS py
    py="$(python_for_wheels)"
    rm -rf "$out"; mkdir -p "$out"
    # setuptools stages the package in the tree's build/ and never empties it: a module moved
    # or deleted since an earlier build rides along into the wheel (slonkd/testing did, after
    # it moved to the harness distribution). The staging is setuptools' scratch space (git ignores it).
    rm -rf "$repo/build"
    log "pip wheel slonkd and its dependencies into container/.build/wheels"
    # Reproducible wheel (zip times from the last commit): an unchanged tree gives the same
    # bytes, so buildah's layer cache keeps every step after the COPY.
    SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 315532800)" \
        "$py" -m pip wheel --quiet --no-cache-dir --wheel-dir "$out" "$repo"
    log "wheels in $((SECONDS - t0)) s"
}

images=("$@")
((${#images[@]})) || images=(base slonkd controller worker login mosquitto)
need_tools
did_wheels=""
for image in "${images[@]}"; do
    case "$image" in
        base) base ;;
        slonkd)
            [[ -n "$did_wheels" ]] || { wheels; did_wheels=1; }
            bud "localhost/slonk/slonkd:$TAG" "$here/slonkd/Dockerfile" "$here" \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" ;;
        controller | worker | login)
            [[ -n "$did_wheels" ]] || { wheels; did_wheels=1; }
            bud "localhost/slonk/slurm-$image:$TAG" "$here/slurm/Dockerfile" "$here" \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" --target "$image" ;;
        mosquitto)
            bud "localhost/slonk/mosquitto:$TAG" "$here/mosquitto/Dockerfile" "$here" \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" ;;
        slurmdbd)
            bud "localhost/slonk/slurm-slurmdbd:$TAG" "$here/slurmdbd/Dockerfile" "$here" \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" ;;
        mariadb)
            bud "localhost/slonk/mariadb:$TAG" "$here/mariadb/Dockerfile" "$here" \
                --build-arg "BASE_IMAGE=$BASE_IMAGE" ;;
        *) log "unknown image $image (base slonkd controller worker login slurmdbd mosquitto mariadb)"; exit 2 ;;
    esac
done
