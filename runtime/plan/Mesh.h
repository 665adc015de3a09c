//===- Mesh.h - ranks, mesh coordinates and groups of a plan ----*- C++ -*-===//
//
// Where a world rank stands in a plan's mesh: its coordinate on every axis
// (Plan.mesh lists the axes from the slowest to the fastest varying over
// consecutive ranks), its place in every communicator group (Plan.groups)
// and the slice of every persistent tensor it holds. Every function here
// assumes a plan that passed the loader's checks (Plan.h).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_PLAN_MESH_H
#define TRIAD_RUNTIME_PLAN_MESH_H

#include "runtime/plan/plan_generated.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace triad::rt {

/// A rank's coordinate on each mesh axis, in Plan.mesh order.
using MeshCoordinates = std::vector<int64_t>;

/// The coordinates of world rank `worldRank` (0 <= worldRank < meshSize):
/// row-major, the last axis varying fastest.
MeshCoordinates meshCoordinates(const plan::Plan &plan, int64_t worldRank);

/// The world rank at `coordinates` (the inverse of meshCoordinates).
int64_t worldRankAt(const plan::Plan &plan, const MeshCoordinates &coordinates);

/// The position of mesh axis `name` in Plan.mesh, or -1.
int64_t meshAxisIndex(const plan::Plan &plan, std::string_view name);

/// The coordinate on axis `name`; 0 when the mesh has no such axis.
int64_t coordinateOn(const plan::Plan &plan, const MeshCoordinates &coordinates,
                     std::string_view name);

/// The pipeline rank (the program) of a rank: its coordinate on "pp".
inline uint32_t pipelineRankAt(const plan::Plan &plan,
                               const MeshCoordinates &coordinates) {
  return static_cast<uint32_t>(coordinateOn(plan, coordinates, "pp"));
}

/// The world rank of pipeline rank `peerPipelineRank` that shares every
/// other coordinate with the rank at `coordinates`: the other end of a Send
/// or Recv (see plan.fbs). The mesh must have a "pp" axis with more than
/// `peerPipelineRank` ranks.
int64_t pipelinePeerRank(const plan::Plan &plan,
                         const MeshCoordinates &coordinates,
                         int64_t peerPipelineRank);

/// A rank's place in one communicator group.
struct GroupPosition {
  /// Members of the group: the product of the sizes of its axes.
  int64_t size = 1;
  /// This rank's index among them: its coordinates on the group's axes,
  /// the first listed axis varying slowest.
  int64_t member = 0;
  /// Equal for exactly the ranks of the same group instance: the rank's
  /// coordinates on every other axis, in mesh order (row-major).
  int64_t color = 0;
};

/// The position of the rank at `coordinates` in Plan.groups[group].
GroupPosition groupPosition(const plan::Plan &plan, uint32_t group,
                            const MeshCoordinates &coordinates);

/// The number of members of Plan.groups[group].
int64_t groupSize(const plan::Plan &plan, uint32_t group);

/// Where the slice of a persistent tensor that one rank holds lies in its
/// global tensor: the offsets of its first element and, per dimension, how
/// many of its elements lie inside the global tensor (the rest, at the end
/// of each dimension, is padding).
struct SliceBox {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
};

/// The slice of `persistent` that the rank at `coordinates` holds (see
/// Persistent in plan.fbs): in each dimension, the axes that split it take
/// nested pieces of what the axes before them left, the innermost one the
/// value's own size and the others ceil(piece / axis size) each, starting
/// from the dimension's padded (or global) extent past `offsets`.
SliceBox sliceBox(const plan::Plan &plan, const plan::Program &program,
                  const plan::Persistent &persistent,
                  const MeshCoordinates &coordinates);

} // namespace triad::rt

#endif // TRIAD_RUNTIME_PLAN_MESH_H
