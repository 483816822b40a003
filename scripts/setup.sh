#!/usr/bin/env bash
# Installs everything kafkasim needs on a Debian machine: a Java runtime and Debian's ZooKeeper (when
# missing), then kafkasim and its Python dependencies into ./.venv. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# the dashboard's browser test: headless Chromium and the driver selenium talks to
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "installing from Debian: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
      || { echo "error: apt-get install ${missing[*]} failed; run it by hand to see why" >&2; exit 1; }
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    echo "installing from Debian (sudo): ${missing[*]}"
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: kafkasim needs these Debian packages: ${missing[*]}" >&2
    echo "       run this script as root, or first: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# pip's own output is shown only when it fails: a working install says one line
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e ".[dev]"; } \
    >"$log" 2>&1; then
  cat "$log" >&2
  echo "error: installing kafkasim's Python packages into .venv failed (pip's output above)" >&2
  exit 1
fi
echo "kafkasim is installed: .venv/bin/kafkasim (or 'source .venv/bin/activate' and then kafkasim)"
