//===- Mesh.cpp - ranks, mesh coordinates and groups of a plan ------------===//

#include "runtime/plan/Mesh.h"

#include "runtime/comm/Collectives.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace triad::rt {

namespace {

/// The piece index of the rank at `coordinates` over `axes` (first listed
/// slowest) and the number of pieces.
std::pair<int64_t, int64_t> pieceOver(
    const plan::Plan &plan,
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>> *axes,
    const MeshCoordinates &coordinates) {
  int64_t index = 0, pieces = 1;
  if (axes)
    for (const flatbuffers::String *name : *axes) {
      int64_t axis = meshAxisIndex(plan, name->string_view());
      if (axis < 0)
        continue;
      int64_t size = plan.mesh()->Get(axis)->size();
      index = index * size + coordinates[axis];
      pieces *= size;
    }
  return {index, pieces};
}

} // namespace

MeshCoordinates meshCoordinates(const plan::Plan &plan, int64_t worldRank) {
  size_t axes = plan.mesh() ? plan.mesh()->size() : 0;
  MeshCoordinates coordinates(axes, 0);
  for (size_t i = axes; i-- > 0;) {
    int64_t size = plan.mesh()->Get(i)->size();
    coordinates[i] = worldRank % size;
    worldRank /= size;
  }
  return coordinates;
}

int64_t worldRankAt(const plan::Plan &plan,
                    const MeshCoordinates &coordinates) {
  int64_t rank = 0;
  for (size_t i = 0; i < coordinates.size(); ++i)
    rank = rank * plan.mesh()->Get(i)->size() + coordinates[i];
  return rank;
}

int64_t pipelinePeerRank(const plan::Plan &plan,
                         const MeshCoordinates &coordinates,
                         int64_t peerPipelineRank) {
  MeshCoordinates peer = coordinates;
  peer[meshAxisIndex(plan, "pp")] = peerPipelineRank;
  return worldRankAt(plan, peer);
}

int64_t meshAxisIndex(const plan::Plan &plan, std::string_view name) {
  if (plan.mesh())
    for (size_t i = 0; i < plan.mesh()->size(); ++i)
      if (plan.mesh()->Get(i)->name()->string_view() == name)
        return static_cast<int64_t>(i);
  return -1;
}

int64_t coordinateOn(const plan::Plan &plan, const MeshCoordinates &coordinates,
                     std::string_view name) {
  int64_t axis = meshAxisIndex(plan, name);
  return axis < 0 ? 0 : coordinates[axis];
}

GroupPosition groupPosition(const plan::Plan &plan, uint32_t group,
                            const MeshCoordinates &coordinates) {
  const plan::Group *g = plan.groups()->Get(group);
  GroupPosition position;
  std::tie(position.member, position.size) =
      pieceOver(plan, g->axes(), coordinates);
  std::vector<bool> inGroup(coordinates.size(), false);
  if (g->axes())
    for (const flatbuffers::String *name : *g->axes()) {
      int64_t axis = meshAxisIndex(plan, name->string_view());
      if (axis >= 0)
        inGroup[axis] = true;
    }
  for (size_t i = 0; i < coordinates.size(); ++i)
    if (!inGroup[i])
      position.color =
          position.color * plan.mesh()->Get(i)->size() + coordinates[i];
  return position;
}

int64_t groupSize(const plan::Plan &plan, uint32_t group) {
  MeshCoordinates origin(plan.mesh() ? plan.mesh()->size() : 0, 0);
  return groupPosition(plan, group, origin).size;
}

SliceBox sliceBox(const plan::Plan &plan, const plan::Program &program,
                  const plan::Persistent &persistent,
                  const MeshCoordinates &coordinates) {
  const plan::Value *value = program.values()->Get(persistent.value());
  const auto *padded = persistent.padded_shape();
  bool split = persistent.split() && persistent.split()->size() != 0;
  SliceBox box;
  for (size_t d = 0; d < value->shape()->size(); ++d) {
    int64_t local = value->shape()->Get(d);
    int64_t global = persistent.global_shape()->Get(d);
    int64_t start = persistent.offsets()->Get(d);
    int64_t end = global;
    int64_t piece = (padded ? padded->Get(d) : global) - start;
    const auto *axes = split ? persistent.split()->Get(d)->axes() : nullptr;
    std::vector<std::pair<int64_t, int64_t>> levels; // (index, pieces)
    if (axes)
      for (const flatbuffers::String *name : *axes) {
        int64_t axis = meshAxisIndex(plan, name->string_view());
        if (axis >= 0)
          levels.emplace_back(coordinates[axis],
                              plan.mesh()->Get(axis)->size());
      }
    for (size_t i = 0; i < levels.size(); ++i) {
      auto [index, pieces] = levels[i];
      piece = i + 1 == levels.size() ? local : paddedPiece(piece, pieces);
      start += index * piece;
      end = std::min(end, start + piece);
    }
    if (levels.empty())
      end = std::min(end, start + local);
    box.offsets.push_back(start);
    box.sizes.push_back(std::clamp<int64_t>(end - start, 0, local));
  }
  return box;
}

} // namespace triad::rt
