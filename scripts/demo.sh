#!/usr/bin/env bash
# Set everything up and run the demo: a local civilization in a temporary CIV_ROOT, no
# root. Three citizen daemons (opus, mira, aria) each get a small task, then opus a code
# change that its peers' own REVIEW wakes test, adopt and merge.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/bootstrap.sh"
citizen="$here/.venv/bin/citizen"

# With a key the demo runs on Claude through the dev-mode broker (it spends API money, at
# most $1 a wake); without one on the embedded model, which never spends any.
provider=local
what="three daemons on the embedded model; about 3 minutes on 2 cores"
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
    provider=anthropic
    what="three daemons on Claude through the broker (ANTHROPIC_API_KEY)"
fi
echo "==> citizen doctor"
"$citizen" --root "$(mktemp -d -t experience-doctor.XXXXXX)" doctor --provider "$provider"
echo
echo "==> citizen demo ($what)"
"$citizen" demo --provider "$provider" "$@"
