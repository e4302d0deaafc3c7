#!/usr/bin/env bash
# Refresh the translation sources (resources/i18n/*.ts) from the code and compile them into the .qm files
# the app loads. Translate new strings in between with Qt Linguist (`pyside6-linguist FILE.ts`) or by
# editing the .ts, then run this again.
#
#   ./scripts/update_translations.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${HEARTH_VENV:-$root/.venv}"

for ts in resources/i18n/hearth_*.ts; do
  # No source locations: line numbers would change the file on every edit of the code.
  "$venv/bin/pyside6-lupdate" ui/*.py -ts "$ts" -no-obsolete -locations none
  "$venv/bin/pyside6-lrelease" "$ts" -qm "${ts%.ts}.qm"
done
