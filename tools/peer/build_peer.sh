#!/bin/bash
# Build the SimToolbox benchmark driver (peer_bench) on Debian 12 with the distribution's Trilinos 13.2.
# Usage: tools/peer/build_peer.sh [WORK=/work/peer]
# Needs: apt-get install --no-install-recommends libtrilinos-tpetra-dev libtrilinos-belos-dev
#        libtrilinos-teuchos-dev libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libtrilinos-ifpack2-dev
#        libtrilinos-zoltan-dev libeigen3-dev libyaml-cpp-dev libopenmpi-dev
# and the SimToolbox source (github wenyan4work/SimToolbox, tested at f61784ae3a10f31f289947d07ee569b44e38c5b5)
# unpacked in $WORK/src (e.g. git --git-dir=<mirror> archive HEAD | tar -x -C $WORK/src).
# Debian's TrilinosConfig.cmake requires every Trilinos package (Epetra, Thyra, Xpetra...), so this script
# compiles directly with mpicxx instead of the project's CMake (which also wants VTK and TRNG).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-/work/peer}
SRC=$WORK/src
OBJ=$WORK/build
mkdir -p "$OBJ"
python3 "$HERE/patch_peer.py" "$SRC"
CXXFLAGS="-std=c++14 -O3 -DNDEBUG -fopenmp -DPARTICLE_SIMULATOR_THREAD_PARALLEL -DPARTICLE_SIMULATOR_MPI_PARALLEL \
 -I$SRC -I$SRC/Sylinder -I/usr/include/trilinos -I/usr/include/eigen3 -w"
LIBS="-ltrilinos_belostpetra -ltrilinos_belos -ltrilinos_tpetraext -ltrilinos_tpetrainout -ltrilinos_tpetra \
 -ltrilinos_tpetraclassic -ltrilinos_kokkoskernels -ltrilinos_teuchoskokkoscomm -ltrilinos_teuchoskokkoscompat \
 -ltrilinos_teuchosremainder -ltrilinos_teuchosnumerics -ltrilinos_teuchoscomm -ltrilinos_teuchosparameterlist \
 -ltrilinos_teuchosparser -ltrilinos_teuchoscore -ltrilinos_kokkoscontainers -ltrilinos_kokkoscore \
 -ltrilinos_zoltan -lyaml-cpp -llapack -lblas -ldl"
SOURCES="$HERE/peer_bench.cpp $SRC/Sylinder/SylinderSystem.cpp $SRC/Sylinder/SylinderConfig.cpp $SRC/Sylinder/Sylinder.cpp
 $SRC/Trilinos/TpetraUtil.cpp $SRC/Boundary/Boundary.cpp $SRC/Constraint/BCQPSolver.cpp
 $SRC/Constraint/ConstraintCollector.cpp $SRC/Constraint/ConstraintOperator.cpp $SRC/Constraint/ConstraintSolver.cpp
 $SRC/Util/Base64.cpp"
OBJS=""
for s in $SOURCES; do
  o=$OBJ/$(basename "${s%.cpp}").o
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ]; then
    echo "compiling $s"
    nice -n 19 mpicxx $CXXFLAGS -c "$s" -o "$o"
  fi
  OBJS="$OBJS $o"
done
nice -n 19 mpicxx -fopenmp $OBJS -o "$OBJ/peer_bench" $LIBS
echo "built $OBJ/peer_bench"
