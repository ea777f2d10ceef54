# Source me: environment for relcp_mpi on Debian 12 (system PETSc/h5py-mpi stack).
export PETSC_DIR="${PETSC_DIR:-/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real}"
export H5PY_ALWAYS_USE_MPI=1
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
