# Sourced by the job scripts: environment, sanity checks, provenance.
set -euo pipefail
export H5PY_ALWAYS_USE_MPI=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
RELCP="${RELCP:-relcp-mpi}"             # or: "python -m relcp_mpi"
echo "=== relcp_mpi job ${SLURM_JOB_ID:-local} on $(hostname) at $(date -Is) ==="
echo "nodes=${SLURM_JOB_NUM_NODES:-1} ntasks=${SLURM_NTASKS:-?} cpus-per-task=${SLURM_CPUS_PER_TASK:-1}"
echo "code version: $(python3 -c 'import relcp_mpi; print(relcp_mpi.__version__)' 2>/dev/null || echo unknown)" \
     "git $(git -C "${SLURM_SUBMIT_DIR:-.}" rev-parse --short HEAD 2>/dev/null || echo n/a)"
env | grep -E '^(SLURM_(JOB|NTASKS|NNODES|CPUS)|PETSC_DIR|H5PY|OMP_|MPI|OMPI_MCA)' | sort || true
# the MPI world size must equal SLURM_NTASKS (catches a launcher/MPI mismatch before the run starts)
check_world_size() {
  local got
  got=$(srun --ntasks="${SLURM_NTASKS}" python3 -c 'from mpi4py import MPI; c=MPI.COMM_WORLD; print(c.size) if c.rank==0 else None')
  if [ "$got" != "${SLURM_NTASKS}" ]; then
    echo "error: MPI world size ($got) != SLURM_NTASKS (${SLURM_NTASKS}); check the MPI module / srun --mpi" >&2
    exit 1
  fi
}
