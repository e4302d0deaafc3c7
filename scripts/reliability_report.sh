#!/usr/bin/env bash
# Runs the fault-injection suite (tests/reliability) and writes docs/reliability.md from what it recorded:
# every fault tried, how many times, the outcome, what it cost, and whether the test that tried it passed.
# Extra arguments go to pytest. docs/reliability.md is written only from the whole suite on a commit with no
# uncommitted changes to app/, inference/, ui/ or tests/reliability/; HEARTH_RELIABILITY_REPORT=FILE writes
# the report of any run to FILE instead. Exits with pytest's status, or the report's when pytest passed.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
output="${HEARTH_RELIABILITY_REPORT:-docs/reliability.md}"
record="$(mktemp)"
trap 'rm -f "$record"' EXIT
status=0
QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}" HEARTH_RELIABILITY_RECORD="$record" \
    "$python" -m pytest -q -p no:cacheprovider tests/reliability "$@" || status=$?
report=0
"$python" scripts/reliability_report.py "$record" "$output" --pytest-status "$status" || report=$?
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$report"
