//===- Mpi.h - the MPI world of a runtime process ---------------*- C++ -*-===//
//-*-===//
//
// A thin layer over MPI for the runtime's tools: MPI starts only when a
// launcher (mpirun, srun) started the process, so a plain `triad-run ...`
// runs as one rank without it. MPI errors come back as absl::Status (the
// world's communicator returns errors instead of aborting).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_MPI_MPI_H
#define TRIAD_RUNTIME_COMM_MPI_MPI_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <memory>
#include <string>

namespace triad::rt::mpi {

/// Whether a launcher started this process: one of the variables that Open
/// MPI, PMI, PMIx or Slurm set is in the environment.
bool launchedByLauncher();

/// Whether srun started this process without a PMIx plugin (`--mpi=none`,
/// `pmi2`, or a cluster whose MpiDefault is one of them): Open MPI's
/// MPI_Init would then abort, advising to rebuild it.
bool startedBySrunWithoutPmix();

/// This process's place among the ranks of the job.
class World {
public:
  /// Starts MPI when a launcher started the process; otherwise a world of
  /// one rank without MPI.
  static absl::StatusOr<World> initialize(int *argc, char ***argv);

  World(World &&other) noexcept;
  World &operator=(World &&other) noexcept;
  World(const World &) = delete;
  World &operator=(const World &) = delete;
  /// Finalizes MPI if this world started it.
  ~World();

  int rank() const { return worldRank; }
  int size() const { return worldSize; }
  bool usesMpi() const { return started; }
  /// Whether any thread may call MPI at any time (MPI_THREAD_MULTIPLE).
  bool threadsMayCallMpi() const { return started && threadMultiple; }

  /// Waits for every rank (nothing without MPI).
  absl::Status barrier() const;

  /// Ends every rank of the job with exit status `code` (MPI_Abort): for a
  /// failure of this rank alone, which the others, waiting for it in a
  /// collective, would never learn of. Without MPI, ends this process.
  [[noreturn]] void abort(int code) const;

private:
  World() = default;
  int worldRank = 0, worldSize = 1;
  bool started = false, threadMultiple = false;
};

} // namespace triad::rt::mpi

#endif // TRIAD_RUNTIME_COMM_MPI_MPI_H
