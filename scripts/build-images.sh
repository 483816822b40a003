#!/usr/bin/env bash
# Builds the images docker-compose.yml runs, on a machine that cannot pull from a registry.
#
# The base images come from Debian's packages: a debootstrap root imported into Docker, tagged
#   python:3.11-slim-bookworm         Debian's python3 and venv (same name as the public default base)
#   kafkasim/zookeeper-base:bookworm   Debian's ZooKeeper (libzookeeper-java; the `zookeeper` package only adds
#                                      init scripts and pulls in a desktop JRE) and a headless Java runtime
# then the project's Dockerfiles build kafkasim/kafkasim:latest and kafkasim/zookeeper:latest on them,
# so `docker compose up` finds every image and runs the repository's docker-compose.yml unchanged.
# A base image that already exists (pulled, or built before) is used as it is. Each image is labelled with
# a hash of its inputs and is not built again while they are unchanged; --force rebuilds everything.
# debootstrap's downloads and the root tarballs are kept in $KAFKASIM_IMAGE_CACHE (/var/cache/kafkasim).
# A first run takes minutes, so debootstrap and docker build report one line per stage or step on stderr
# (and a "still at" line in a long one); a build that fails prints its whole output.
set -euo pipefail
cd "$(dirname "$0")/.."

force=0
[ "${1:-}" = "--force" ] && force=1
suite=bookworm
mirror=${KAFKASIM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${KAFKASIM_IMAGE_CACHE:-/var/cache/kafkasim}
python_base=python:3.11-slim-bookworm
zookeeper_base=kafkasim/zookeeper-base:$suite
kafkasim_image=${KAFKASIM_IMAGE:-kafkasim/kafkasim:latest}
zookeeper_image=kafkasim/zookeeper:latest

log() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# follow LABEL LOG: a long command's output (stdin) goes whole to LOG, and to the terminal one line per step
# (docker build's "Step N/M", BuildKit's "#N [k/m]", a change of debootstrap's "I: <stage>") with the seconds
# since the start, plus a "still at" line when nothing was shown for 30 s: a build takes minutes, and
# silence looks like a hang. The caller shows LOG in full when the command fails.
follow() {
  local label=$1 out=$2 start=$SECONDS shown=$SECONDS line="" partial="" status step="" stage="" text words
  local legacy='^Step ([0-9]+/[0-9]+) : (.*)$' buildkit='^#[0-9]+ \[([^]]+)\] (.*)$' debootstrap='^I: ([A-Za-z]+)'
  : > "$out"
  while true; do
    status=0
    IFS= read -r -t 5 line || status=$?
    if [ "$status" -gt 128 ]; then
      partial+=$line  # read timed out inside a line: keep its start for the next read
    else
      [ "$status" -ne 0 ] && [ -z "$partial$line" ] && break
      line=$partial$line
      partial=""
      printf '%s\n' "$line" >> "$out"
      text=""
      if [[ $line =~ $legacy ]]; then
        text="step ${BASH_REMATCH[1]}: ${BASH_REMATCH[2]}"
      elif [[ $line =~ $buildkit ]]; then
        text="[${BASH_REMATCH[1]}] ${BASH_REMATCH[2]}"
      elif [[ $line =~ $debootstrap ]] && [ "${BASH_REMATCH[1]/Validating/Retrieving}" != "$stage" ]; then
        stage=${BASH_REMATCH[1]/Validating/Retrieving}  # it alternates the two for every package
        text=${line#I: }
      fi
      read -ra words <<< "$text"  # a Dockerfile's continued lines leave runs of blanks
      text="${words[*]}"
      [ ${#text} -gt 110 ] && text="${text:0:107}..."
      if [ -n "$text" ] && [ "$text" != "$step" ]; then  # BuildKit repeats a step's header as output resumes
        step=$text
        log "$label $text (+$(( SECONDS - start )) s)"
        shown=$SECONDS
      fi
      [ "$status" -ne 0 ] && break  # the last line had no newline
    fi
    if [ $(( SECONDS - shown )) -ge 30 ]; then
      log "$label still at: ${step:-the start} (+$(( SECONDS - start )) s)"
      shown=$SECONDS
    fi
  done
  return 0
}

docker info >/dev/null 2>&1 || { echo "error: the Docker engine is not reachable (is dockerd running?)" >&2; exit 1; }

label_of() {  # image label -> value, empty when the image or label is missing
  docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null | sed 's/^<no value>$//' || true
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null 2>&1 && return
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: debootstrap is missing; run as root or: sudo apt-get install debootstrap" >&2
    exit 1
  fi
  log "installing debootstrap from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

# base_image TAG PACKAGES CMD: a minbase root of Debian with PACKAGES, imported as TAG.
base_image() {
  local tag=$1 packages=$2 cmd=$3
  if [ "$force" = 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is present"
    return
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: building $tag with debootstrap needs root" >&2
    exit 1
  fi
  mkdir -p "$cache/debs"
  local key tarball
  key=$( { printf '%s %s %s\n' "$suite" "$packages" "$mirror"; cat /usr/local/share/ca-certificates/*.crt 2>/dev/null; } \
        | sha256sum | cut -c1-16)
  tarball="$cache/rootfs-$suite-$key.tar"
  if [ ! -s "$tarball" ] || [ "$force" = 1 ]; then
    ensure_debootstrap
    local root
    root=$(mktemp -d /var/tmp/kafkasim-rootfs.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$root'" EXIT
    log "debootstrap $suite with $packages (downloads kept in $cache/debs)"
    debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$packages" "$suite" "$root" "$mirror" 2>&1 \
      | follow "debootstrap $tag:" "$cache/debootstrap-$key.log" \
      || { tail -20 "$cache/debootstrap-$key.log" >&2; exit 1; }
    # The certificate authorities this host adds to Debian's (a TLS-inspecting proxy's, say) are trusted
    # in the local base too, so pip in the build reaches PyPI the way the host does.
    if [ -x "$root/usr/sbin/update-ca-certificates" ] && compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
      chroot "$root" update-ca-certificates >/dev/null 2>&1
    fi
    # what a slim image leaves out too: package lists and caches, documentation
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
      "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
    tar --numeric-owner -C "$root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  log "importing $tarball as $tag"
  remember "$tag"
  docker import --change 'ENV LANG=C.UTF-8' --change "CMD $cmd" \
    --change "LABEL org.opencontainers.image.description=\"Debian $suite minbase + $packages, by debootstrap\"" \
    "$tarball" "$tag" >/dev/null
}

# build TAG CONTEXT DOCKERFILE BASE HASH
build() {
  local tag=$1 context=$2 dockerfile=$3 base=$4 hash=$5
  if [ "$force" = 0 ] && [ "$(label_of "$tag" kafkasim.inputs)" = "$hash" ]; then
    log "$tag is current (inputs $hash)"
    return
  fi
  log "building $tag on $base"
  remember "$tag"
  local out status=0 start=$SECONDS
  out=$(mktemp)
  # BUILDKIT_PROGRESS: BuildKit's plain lines (one per step) instead of its redrawn screen; the legacy
  # builder ignores it and prints "Step N/M" lines anyway
  BUILDKIT_PROGRESS=plain docker build -t "$tag" -f "$dockerfile" --build-arg "BASE_IMAGE=$base" \
    --label "kafkasim.inputs=$hash" "$context" 2>&1 | follow "$tag" "$out" || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$out" >&2
    rm -f "$out"
    echo "error: docker build of $tag failed (exit $status); its whole output is above" >&2
    exit "$status"
  fi
  rm -f "$out"
  log "$tag built in $(( SECONDS - start )) s"
}

# inputs_hash FILES...: the contents and names of every file the build copies, plus the base image's id
inputs_hash() {
  local base=$1; shift
  { docker image inspect -f '{{.Id}}' "$base"
    find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

# Images this run replaces are removed once nothing uses them; nothing else is touched.
replaced=()
remember() { local id; id=$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null) && replaced+=("$id") || true; }
retire() {
  local id
  for id in "${replaced[@]}"; do
    [ "$(docker image inspect -f '{{len .RepoTags}}' "$id" 2>/dev/null)" = 0 ] && docker rmi "$id" >/dev/null 2>&1 || true
  done
}

start=$(date +%s)
base_image "$python_base" python3,python3-venv,ca-certificates '["python3"]'
base_image "$zookeeper_base" default-jre-headless,libzookeeper-java '["bash"]'
build "$zookeeper_image" docker/zookeeper docker/zookeeper/Dockerfile "$zookeeper_base" \
  "$(inputs_hash "$zookeeper_base" docker/zookeeper)"
build "$kafkasim_image" . Dockerfile "$python_base" \
  "$(inputs_hash "$python_base" Dockerfile .dockerignore docker/requirements.py pyproject.toml README.md analysis broker cluster \
     clusterplane controller traces zk)"
retire
log "images ready in $(( $(date +%s) - start )) s"
docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E "^($python_base|$zookeeper_base|$kafkasim_image|$zookeeper_image)\b" >&2 || true
