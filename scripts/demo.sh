#!/usr/bin/env bash
# Set everything up and run the main job on the embedded defaults: a local
# civilization in a temporary CIV_ROOT, no root, no API key, the embedded model.
# (For now the job is `citizen doctor` and one `citizen ask`; the daemon issue
# turns it into the full three-citizen demo.)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/bootstrap.sh"
citizen="$here/.venv/bin/citizen"

root="$(mktemp -d -t experience-demo.XXXXXX)"
export CIV_ROOT="$root"
# --provider local: the demo never spends API money, even if a key is in the environment.
echo "==> citizen doctor (CIV_ROOT=$root)"
"$citizen" doctor --provider local
echo
echo "==> citizen ask"
"$citizen" ask --provider local --max-tokens 60 "In one sentence: what do you do all day?"
echo
echo "demo done. The civilization root was $root (empty until the daemon issue lands)."
