#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run the whole suite.
#   scripts/test.sh [pytest args…]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/bootstrap.sh"
cd "$here"
set +e
"$here/.venv/bin/python" -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test at all: that is a broken suite, not a pass.
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests - failing on purpose" >&2
    exit 1
fi
exit "$rc"
