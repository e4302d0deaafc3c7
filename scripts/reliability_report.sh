#!/usr/bin/env bash
# Runs the fault-injection suite (tests/reliability) and writes docs/reliability.md from what it recorded:
# every fault tried, how many times, the outcome, and whether the test that tried it passed.
# Extra arguments go to pytest. Exits with pytest's status, after writing the report either way.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
record="$(mktemp)"
trap 'rm -f "$record"' EXIT
status=0
QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}" HEARTH_RELIABILITY_RECORD="$record" \
    "$python" -m pytest -q -p no:cacheprovider tests/reliability "$@" || status=$?
"$python" scripts/reliability_report.py "$record" docs/reliability.md --pytest-status "$status"
exit "$status"
