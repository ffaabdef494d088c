#!/usr/bin/env bash
# The whole test suite: lint (ruff), types (mypy), tests (pytest). Installs what it needs first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Debian packages for the real Slurm of tests/slurm and the throw-away PostgreSQL of tests/control
# (its client's pg_dump/pg_restore for `disagg backup`), the headless Chromium (with its WebDriver) that
# the dashboard's browser tests drive, and for the isolation tests: the system's python3 (the tests' jobs
# run as tenants' users, who cannot reach a python under /root), passwd (useradd/userdel) and bubblewrap
# (each job's namespaces; util-linux gives setpriv and nsenter); bootstrap
# installs the missing ones when root.
export DISAGG_APT_PACKAGES="${DISAGG_APT_PACKAGES:-} slurm-wlm munge postgresql chromium chromium-driver python3 passwd bubblewrap"
bash "$ROOT/scripts/bootstrap.sh" --test
cd "$ROOT"
echo "== ruff"; .venv/bin/ruff check src tests scripts
echo "== mypy"; .venv/bin/mypy
# Two workers (pytest-xdist; tests/conftest.py says what goes to one worker): most of the suite's time is
# spent waiting on the servers, the Slurm cluster and the browser that the tests start. `-n 0` runs it in one.
echo "== pytest"; .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 "$@"
