#!/usr/bin/env bash
# The README's run command: set-up (idempotent), then the default deck on 2 ranks.
# Usage: tools/run_default.sh [deck.yaml] [extra relcp-mpi run options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
source tools/env.sh
DECK="${1:-input_decks/two_ellipsoids.yaml}"; shift || true
# --overwrite: re-running replaces the previous output of the deck (the script is idempotent)
exec mpirun -n "${NP:-2}" .venv/bin/python -m relcp_mpi run "$DECK" --overwrite "$@"
