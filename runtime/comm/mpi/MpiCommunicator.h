//===- MpiCommunicator.h - the plan's collectives over MPI ------*- C++ -*-===//
//
// The MPI backend of Communicator (runtime/comm/Comm.h). At creation it
// places this process in the plan's mesh (its world rank's coordinates) and
// creates one MPI communicator per plan group, eagerly and in the order of
// Plan.groups, so every rank creates them in one canonical order:
// MPI_Comm_split of the world with color = the rank's coordinates on the
// mesh axes outside the group (row-major) and key = its member index in the
// group. They return errors instead of aborting, and are freed when the
// communicator is destroyed (before MPI is finalized).
//
// Point-to-point transfers run on a duplicate of the world communicator
// (MPI_Send, MPI_Recv), so they match only each other; a receive checks
// that it got the count it expected.
//
// The start* collectives are MPI's nonblocking ones (MPI_Iallreduce,
// MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ialltoall; MPI_Isend and
// MPI_Irecv for transfers). Open MPI
// progresses them inside MPI calls, so without an MPI progress thread most
// of the transfer happens in wait(); the schedule is still right for a
// backend that does progress in the background.
//
// Counts above 2^31 - 1 elements per block are refused (MPI's int counts),
// and tags above the MPI's MPI_TAG_UB.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H
#define TRIAD_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H

#include "runtime/comm/Comm.h"
#include "runtime/plan/plan_generated.h"

#include "absl/status/statusor.h"

#include <memory>

namespace triad::rt::mpi {

/// The communicator of this process for `plan` (a plan that passed the
/// loader's checks). MPI must be running (World::usesMpi) with as many
/// ranks as the plan's mesh; every rank must call it, with the same plan.
absl::StatusOr<std::unique_ptr<Communicator>>
createMpiCommunicator(const plan::Plan &plan);

} // namespace triad::rt::mpi

#endif // TRIAD_RUNTIME_COMM_MPI_MPICOMMUNICATOR_H
