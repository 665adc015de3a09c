//===- Mpi.cpp - the MPI world of a runtime process -----------------------===//

#include "runtime/comm/mpi/Mpi.h"
#include "runtime/comm/mpi/MpiStatus.h"

#include "absl/strings/str_cat.h"

#include <mpi.h>

#include <cstdlib>

namespace triad::rt::mpi {

namespace {

absl::Status check(int code, const char *what) { return mpiStatus(code, what); }

} // namespace

bool launchedByLauncher() {
  for (const char *variable :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"})
    if (std::getenv(variable))
      return true;
  return false;
}

bool startedBySrunWithoutPmix() {
  // srun sets SLURM_STEP_ID in the tasks it starts (a batch script has
  // SLURM_PROCID but no step); its PMIx plugin sets PMIX_RANK, and mpirun
  // inside an allocation OMPI_COMM_WORLD_SIZE.
  return std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID") &&
         !std::getenv("PMIX_RANK") && !std::getenv("OMPI_COMM_WORLD_SIZE");
}

absl::StatusOr<World> World::initialize(int *argc, char ***argv) {
  World world;
  if (!launchedByLauncher())
    return world;
  int initialized = 0;
  if (absl::Status status =
          check(MPI_Initialized(&initialized), "MPI_Initialized");
      !status.ok())
    return status;
  if (initialized)
    return absl::FailedPreconditionError("MPI is already initialized");
  // Threads may call MPI where the library allows it: the watchdog's
  // side channel (PeerQuery) asks the peers where they are while the main
  // thread waits in a collective.
  int provided = MPI_THREAD_SINGLE;
  if (absl::Status status =
          check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      !status.ok())
    return status;
  world.started = true;
  world.threadMultiple = provided >= MPI_THREAD_MULTIPLE;
  if (absl::Status status =
          check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler");
      !status.ok())
    return status;
  if (absl::Status status = check(
          MPI_Comm_rank(MPI_COMM_WORLD, &world.worldRank), "MPI_Comm_rank");
      !status.ok())
    return status;
  if (absl::Status status = check(
          MPI_Comm_size(MPI_COMM_WORLD, &world.worldSize), "MPI_Comm_size");
      !status.ok())
    return status;
  return world;
}

World::World(World &&other) noexcept { *this = std::move(other); }

World &World::operator=(World &&other) noexcept {
  if (this != &other) {
    if (started)
      MPI_Finalize();
    worldRank = other.worldRank;
    worldSize = other.worldSize;
    started = other.started;
    threadMultiple = other.threadMultiple;
    other.started = false;
  }
  return *this;
}

World::~World() {
  if (started)
    MPI_Finalize();
}

absl::Status World::barrier() const {
  if (!started)
    return absl::OkStatus();
  return check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void World::abort(int code) const {
  if (started)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

} // namespace triad::rt::mpi
