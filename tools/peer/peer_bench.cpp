// Minimal SimToolbox (SylinderSystem) benchmark driver for the relcp_mpi peer cases.
//
//   peer_bench RunConfig.yaml SylinderInitial.dat [--warm 2] [--steps 10] [--force fx fy fz] [--timers] [--dump F]
// --timers: print the peer's Teuchos stage timers (totals over the timed steps); --dump F: final state (.dat)
//
// Reads the peer's own config + initial-configuration files, then runs warm+steps steps of
//   prepareStep(); setForceNonBrown(body force on every body); calcVelocityNonCon();
//   resolveConstraints(); sumForceVelocity(); stepEuler();
// i.e. SylinderSystem::runStep() without Brownian motion and without writeResult() (no file output).
// Each step is timed (MPI_Wtime, barrier before/after).  Per step it prints wall time, BBPGD iterations,
// final residual, number of constraints and the max overlap (-min delta0 over the constraints collected at the
// start of that step, i.e. the overlap of the configuration the step starts from).  Set initPreSteps: 0 in
// RunConfig.yaml so that initialize() does not run the 100 collision-resolution pre-steps.
#include <mpi.h>

#include "Sylinder/SylinderSystem.hpp"
#include "Util/Logger.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

extern int peer_last_ite;
extern double peer_last_res;
extern int peer_last_mv;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    PS::Initialize(argc, argv);
    Logger::setup_mpi_spdlog(spdlog::level::err);
    std::string runConfig = argc > 1 ? argv[1] : "RunConfig.yaml";
    std::string posFile = argc > 2 ? argv[2] : "SylinderInitial.dat";
    int warm = 2, steps = 10;
    double f[3] = {0, 0, -5};
    std::string dumpFile;
    bool timers = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--warm")) warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--force")) { for (int k = 0; k < 3; k++) f[k] = atof(argv[++i]); }
        else if (!strcmp(argv[i], "--dump")) dumpFile = argv[++i];
        else if (!strcmp(argv[i], "--timers")) timers = true;
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    {
        SylinderConfig cfg(runConfig);
        if (rank == 0) cfg.dump();
        double ti0 = MPI_Wtime();
        SylinderSystem system;
        system.initialize(cfg, posFile, argc, argv);
        double ti1 = MPI_Wtime();
        Logger::set_level(spdlog::level::err);
        if (rank == 0) printf("INIT %.3f s\n", ti1 - ti0);

        double sumWall = 0, sumIte = 0, maxOverlapTimed = 0;
        long sumCon = 0;
        for (int s = 0; s < warm + steps; s++) {
            if (s == warm) Teuchos::TimeMonitor::zeroOutTimers(); // peer's own stage timers: timed steps only
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            system.prepareStep();
            const int nLocal = system.getContainer().getNumberOfParticleLocal();
            std::vector<double> force(6 * nLocal, 0.0);
            for (int i = 0; i < nLocal; i++)
                for (int k = 0; k < 3; k++) force[6 * i + k] = f[k];
            system.setForceNonBrown(force);
            system.calcVelocityNonCon();
            system.resolveConstraints();
            system.sumForceVelocity();
            system.stepEuler();
            MPI_Barrier(MPI_COMM_WORLD);
            double t1 = MPI_Wtime();
            // statistics (not timed)
            auto &pool = system.getConstraintPoolNonConst();
            long ncon = 0;
            double minDelta = 1e300;
            for (auto &q : pool) {
                ncon += q.size();
                for (auto &b : q) minDelta = std::min(minDelta, b.delta0);
            }
            long nconG = 0;
            double minDeltaG = 0;
            MPI_Allreduce(&ncon, &nconG, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(&minDelta, &minDeltaG, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
            double ov = std::max(0.0, -minDeltaG);
            if (rank == 0)
                printf("STEP %d wall %.4f s ite %d res %.3g mv %d constraints %ld max_overlap %.3e %s\n", s, t1 - t0,
                       peer_last_ite, peer_last_res, peer_last_mv, nconG, ov, s < warm ? "(warm)" : "");
            if (s >= warm) {
                sumWall += t1 - t0;
                sumIte += peer_last_ite;
                sumCon += nconG;
                maxOverlapTimed = std::max(maxOverlapTimed, ov);
            }
            fflush(stdout);
        }
        if (rank == 0)
            printf("SUMMARY steps %d warm %d wall_per_step %.4f s ite_per_step %.1f constraints_mean %.0f "
                   "max_overlap %.3e\n",
                   steps, warm, sumWall / steps, sumIte / steps, double(sumCon) / steps, maxOverlapTimed);
        if (timers) Teuchos::TimeMonitor::summarize(); // totals over the timed steps
        if (!dumpFile.empty() && rank == 0) {
            // final configuration in the peer's ascii format (1 rank only)
            FILE *fp = fopen(dumpFile.c_str(), "w");
            fprintf(fp, "%d\nfinal\n", system.getContainer().getNumberOfParticleLocal());
            for (int i = 0; i < system.getContainer().getNumberOfParticleLocal(); i++)
                system.getContainer()[i].writeAscii(fp);
            fclose(fp);
        }
    }
    PS::Finalize();
    MPI_Finalize();
    return 0;
}
