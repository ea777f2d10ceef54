#!/usr/bin/env bash
# The README's test command: set-up (idempotent), then the suite serially and under MPI at 2 and 4 ranks.
# Extra arguments go to every pytest call (e.g. -x, -k name).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
source tools/env.sh
export PY="$PWD/.venv/bin/python"
status=0
for n in 2 4; do
  echo "=== MPI tests on $n ranks ==="
  timeout 1500 mpirun -n $n tools/mpi_pytest.sh -q --with-mpi -m "mpi and not slow" "$@" tests || status=1
done
echo "=== serial suite ==="
"$PY" -m pytest -q "$@" || status=1
exit $status
