#!/usr/bin/env bash
# Idempotent set-up on Debian 12: the system MPI/PETSc/HDF5 Python stack and a project venv.
# Never builds PETSc from source.  Safe to run repeatedly; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="python3-petsc4py python3-mpi4py python3-h5py-mpi python3-yaml python3-numpy python3-scipy python3-pytest
python3-pytest-mpi python3-hypothesis python3-matplotlib python3-venv python3-setuptools openmpi-bin python3-gsd python3-numba
python3-dev gcc"
# python3-numba: optional compiled geometry kernels (relcp_mpi/geometry/*_jit.py); RELCP_NUMBA=0 or its
# absence (e.g. a cluster `pip install .`) selects the numpy path, which gives the same bits.  python3-dev, gcc:
# numba's pycc builds the same kernels ahead of time into relcp_mpi/geometry/_kernels_aot*.so (below), which the
# runs then use without importing numba (~90 MiB less memory per rank; geometry/numba_switch.py)
# RELCP_VIEWERS=1: also ParaView's Python (~500 MB; tests/test_xdmf_reader.py opens the XDMF sidecar with its
# readers, skipped without it) and VTK (tools/render_frame.py)
if [ "${RELCP_VIEWERS:-0}" = "1" ]; then PKGS="$PKGS python3-paraview python3-vtk9 xvfb xauth"; fi
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv (system site packages)"
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
# editable install without touching the network (all dependencies come from Debian)
if ! .venv/bin/python -c "import relcp_mpi, sys; sys.exit(0 if relcp_mpi.__file__.startswith('$PWD') else 1)" 2>/dev/null \
   || [ ! -x .venv/bin/relcp-mpi ]; then
  echo "[setup] installing relcp_mpi into .venv"
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null
fi
# the ahead-of-time kernels: rebuilt only when missing or built from other kernel sources (~15 s); a failed build
# is not fatal (the runs then use numba's JIT, the same bits)
.venv/bin/python -m relcp_mpi.geometry.aot_build || echo "[setup] AOT kernel build failed; using numba JIT" >&2
# a plain launcher: the editable install's wrapper first looks the entry point up in the package metadata
# (~0.1 s), a window in which a stop signal (SIGTERM/SIGUSR1) would still kill a rank without a word; this one
# installs the handlers first thing (idempotent: rewritten on every run)
printf '%s\n' "#!$PWD/.venv/bin/python" \
  "# relcp-mpi launcher written by tools/setup.sh: stop-signal handlers first, then the command line" \
  "import sys" "from relcp_mpi.driver.signals import install_signal_handlers" "install_signal_handlers()" \
  "from relcp_mpi.cli import main" "sys.exit(main())" > .venv/bin/relcp-mpi.tmp
chmod +x .venv/bin/relcp-mpi.tmp && mv .venv/bin/relcp-mpi.tmp .venv/bin/relcp-mpi
source tools/env.sh
.venv/bin/python -c "from relcp_mpi.petsc import get_petsc; import h5py, mpi4py; assert h5py.get_config().mpi, 'h5py without MPI'" \
  || { echo "[setup] the Python stack does not import; see messages above" >&2; exit 1; }
echo "[setup] ok"
