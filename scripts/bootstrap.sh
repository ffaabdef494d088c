#!/usr/bin/env bash
# Creates .venv at the repository root with disagg (and, with --test, its test tools) installed,
# and installs the Debian packages named in DISAGG_APT_PACKAGES when they are missing.
# Idempotent: a second run with the same pyproject.toml installs nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EXTRAS=""
if [[ "${1:-}" == "--test" ]]; then EXTRAS="[test]"; fi

apt_missing=()
for pkg in ${DISAGG_APT_PACKAGES:-}; do
  dpkg -s "$pkg" >/dev/null 2>&1 || apt_missing+=("$pkg")
done
if (( ${#apt_missing[@]} )); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "bootstrap: installing Debian packages: ${apt_missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${apt_missing[@]}" >/dev/null
  else
    echo "bootstrap: not root, cannot install ${apt_missing[*]}; tests that need them will skip" >&2
  fi
fi

PY="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=".venv/.disagg-installed${EXTRAS}"
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".${EXTRAS}"
  touch "$stamp"
fi
