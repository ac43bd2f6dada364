#!/usr/bin/env bash
# Set everything up and run the demo on the embedded defaults: a local civilization
# in a temporary CIV_ROOT, no root, no API key, the embedded model. Three citizen
# daemons (opus, mira, aria) each get a small task and run a few wakes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/bootstrap.sh"
citizen="$here/.venv/bin/citizen"

echo "==> citizen doctor"
# --provider local: the demo never spends API money, even if a key is in the environment.
"$citizen" --root "$(mktemp -d -t experience-doctor.XXXXXX)" doctor --provider local
echo
echo "==> citizen demo (three daemons on the embedded model; 5 to 10 minutes on 2 cores)"
"$citizen" demo "$@"
