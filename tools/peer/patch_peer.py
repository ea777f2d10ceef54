#!/usr/bin/env python3
"""Apply the benchmark patches to a pristine SimToolbox source tree (wenyan4work/SimToolbox @ f61784a).

    python3 patch_peer.py /work/peer/src

1. Util/TRngPool.hpp: the TRNG library is not packaged for Debian -> same interface on std::mt19937_64
   (random numbers are only used for Brownian motion / random initial configurations: neither is used here).
2. Sylinder/SylinderSystem.cpp: drop the VTK includes and the VTK *reader* (setInitialFromVTKFile, only used for
   restarts); VTK is not needed otherwise (the writers are hand-written XML).
3. Sylinder/SylinderNear.hpp: the neighbour-search radius bug
   max(length + 2 radius, lengthCollision + 2 lengthCollision) -> ... + 2 radiusCollision
   (the comparison in docs/BENCHMARKS.md was made "with its neighbour-search radius bug fixed").
4. Sylinder/Sylinder.cpp calcDragCoeff: if the environment variable PEER_DRAG_TIPTOTIP=1, use the tip-to-tip
   length L + 2R in the slender-body drag (relcp_mpi's convention, physics/mobility.py); default: the peer's own
   convention (core length L).
5. Constraint/ConstraintSolver.cpp: record the BBPGD iteration count / residual / mat-vec count of the last solve
   in globals (peer_last_ite, peer_last_res, peer_last_mv) so the driver can report iterations per step.
Idempotent: each patch checks for a marker.
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "/work/peer/src"


def edit(rel, fn):
    p = os.path.join(src, rel)
    s = open(p).read()
    if "RELCP_BENCH_PATCH" in s:
        print("already patched:", rel)
        return
    t = fn(s)
    assert t != s, rel
    open(p, "w").write(t)
    print("patched:", rel)


TRNG = r'''// RELCP_BENCH_PATCH: std::random replacement of the TRNG-based pool (same interface)
#ifndef TRNGPOOL_HPP_
#define TRNGPOOL_HPP_
#include <memory>
#include <random>
#include <vector>
#include <mpi.h>
#include <omp.h>
class TRngPool {
    using myEngineType = std::mt19937_64;
    int myRank = 0, nProcs = 1, nThreads = 1;
    std::vector<std::unique_ptr<myEngineType>> rngEngineThreadsPtr;
    std::uniform_real_distribution<double> u01{0.0, 1.0};
    std::normal_distribution<double> n01{0.0, 1.0};
    std::unique_ptr<std::lognormal_distribution<double>> lnDistPtr;
  public:
    void setLogNormalParameters(double mu, double sigma) {
        lnDistPtr.reset(new std::lognormal_distribution<double>(mu, sigma));
    }
    explicit TRngPool(int seed = 0) {
        int flag = 0;
        MPI_Initialized(&flag);
        if (flag) {
            MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
            MPI_Comm_size(MPI_COMM_WORLD, &nProcs);
        }
        nThreads = omp_get_max_threads();
        rngEngineThreadsPtr.resize(nThreads);
        for (int i = 0; i < nThreads; i++) {
            std::seed_seq sq{(unsigned)seed, (unsigned)myRank, (unsigned)i};
            rngEngineThreadsPtr[i].reset(new myEngineType(sq));
        }
        setLogNormalParameters(1.0, 1.0);
    }
    ~TRngPool() = default;
    TRngPool(const TRngPool &) = delete;
    TRngPool &operator=(const TRngPool &) = delete;
    inline double getU01(int threadId) { return u01(*rngEngineThreadsPtr[threadId]); }
    inline double getN01(int threadId) { return n01(*rngEngineThreadsPtr[threadId]); }
    inline double getLN(int threadId) { return (*lnDistPtr)(*rngEngineThreadsPtr[threadId]); }
    inline double getU01() { return getU01(omp_get_thread_num()); }
    inline double getN01() { return getN01(omp_get_thread_num()); }
    inline double getLN() { return getLN(omp_get_thread_num()); }
};
#endif
'''
edit("Util/TRngPool.hpp", lambda s: TRNG)


def sylsys(s):
    s = re.sub(r'#include <vtk[^>]*>\n', '', s)
    start = s.index("void SylinderSystem::setInitialFromVTKFile(const std::string &pvtpFileName) {")
    # find end of function: next "\n}\n" after start
    end = s.index("\n}\n", start) + 3
    stub = ('void SylinderSystem::setInitialFromVTKFile(const std::string &pvtpFileName) {\n'
            '    // RELCP_BENCH_PATCH: VTK reader removed (restart only)\n'
            '    spdlog::critical("setInitialFromVTKFile not available in this build");\n'
            '    std::exit(1);\n}\n')
    return s[:start] + stub + s[end:]


edit("Sylinder/SylinderSystem.cpp", sylsys)

edit("Sylinder/SylinderNear.hpp", lambda s: s.replace(
    "return std::max(length + 2 * radius, lengthCollision + 2 * lengthCollision) * (1 + colBuf);",
    "return std::max(length + 2 * radius, lengthCollision + 2 * radiusCollision) * (1 + colBuf); // RELCP_BENCH_PATCH"))


def drag(s):
    s = s.replace('#include "Util/Base64.hpp"\n',
                  '#include "Util/Base64.hpp"\n#include <cstdlib>\n#include <cstring>\n'
                  '// RELCP_BENCH_PATCH: PEER_DRAG_TIPTOTIP=1 -> slender-body drag with tip-to-tip length\n'
                  'static const bool peerDragTipToTip = [] { const char *e = std::getenv("PEER_DRAG_TIPTOTIP");'
                  ' return e && std::strcmp(e, "1") == 0; }();\n', 1)
    s = s.replace("""        const double b = -(1 + 2 * log(radius / (length)));""",
                  """        const double length = peerDragTipToTip ? this->length + 2 * radius : this->length;
        const double b = -(1 + 2 * log(radius / (length)));""", 1)
    return s


edit("Sylinder/Sylinder.cpp", drag)


def consolver(s):
    s = s.replace("void ConstraintSolver::solveConstraints() {",
                  "// RELCP_BENCH_PATCH: last-solve statistics for the benchmark driver\n"
                  "int peer_last_ite = 0; double peer_last_res = 0; int peer_last_mv = 0;\n"
                  "void ConstraintSolver::solveConstraints() {", 1)
    s = s.replace("""    auto &p = history.back();
""", """    auto &p = history.back();
    peer_last_ite = static_cast<int>(p[0]); peer_last_res = p[4]; peer_last_mv = static_cast<int>(p[5]);
""", 1)
    return s


edit("Constraint/ConstraintSolver.cpp", consolver)

# 6. Kokkos 3 (Trilinos 13.2): View::dimension_0()/dimension_1() were removed -> extent(0)/extent(1)
for d, _, files in os.walk(src):
    for fn in files:
        if fn.endswith((".cpp", ".hpp")):
            p = os.path.join(d, fn)
            s = open(p).read()
            t = s.replace(".dimension_0()", ".extent(0)").replace(".dimension_1()", ".extent(1)")
            if t != s:
                open(p, "w").write(t)
                print("patched (Kokkos extent):", os.path.relpath(p, src))

# 7. Debian's Tpetra 13.2 is explicitly instantiated only for GlobalOrdinal = long long (not int):
#    switch the peer's Tpetra typedefs to <int, long long> and the global-index arrays fed to Map constructors.
def go_ll(rel, pairs):
    p = os.path.join(src, rel)
    s = open(p).read()
    if "RELCP_BENCH_GO" in s:
        return
    for a, b in pairs:
        assert a in s, (rel, a)
        s = s.replace(a, b)
    s = "// RELCP_BENCH_GO: GlobalOrdinal long long\n" + s
    open(p, "w").write(s)
    print("patched (GO=long long):", rel)


go_ll("Trilinos/TpetraUtil.hpp", [
    ("Tpetra::Map<int, int>", "Tpetra::Map<int, long long>"),
    ("Tpetra::Operator<double, int, int>", "Tpetra::Operator<double, int, long long>"),
    ("Tpetra::CrsMatrix<double, int, int>", "Tpetra::CrsMatrix<double, int, long long>"),
    ("Tpetra::MultiVector<double, int, int>", "Tpetra::MultiVector<double, int, long long>"),
    ("Tpetra::Vector<double, int, int>", "Tpetra::Vector<double, int, long long>"),
    ("getTMAPFromGlobalIndexOnLocal(const std::vector<int> &gidOnLocal", "getTMAPFromGlobalIndexOnLocal(const std::vector<long long> &gidOnLocal"),
])
go_ll("Trilinos/TpetraUtil.cpp", [
    ("getTMAPFromGlobalIndexOnLocal(const std::vector<int> &gidOnLocal", "getTMAPFromGlobalIndexOnLocal(const std::vector<long long> &gidOnLocal"),
    ("std::vector<int> gidOnLocal(localSize1 + localSize2, 0);", "std::vector<long long> gidOnLocal(localSize1 + localSize2, 0);"),
])
go_ll("Constraint/BCQPSolver.cpp", [("std::vector<int> colMapIndex(colIndexCount);", "std::vector<long long> colMapIndex(colIndexCount);")])
go_ll("Constraint/ConstraintCollector.cpp", [("std::vector<int> colMapIndex(mobMax - mobMin + 1);", "std::vector<long long> colMapIndex(mobMax - mobMin + 1);")])
go_ll("Constraint/ConstraintOperator.cpp", [("Tpetra::RowMatrixTransposer<double, int, int>", "Tpetra::RowMatrixTransposer<double, int, long long>")])
