//===- MeshInterpreter.cpp - a partitioned module on a simulated mesh -----===//
//
// One interpreter per rank of the module's dist.mesh, each on its own
// thread. A collective is a rendezvous of all ranks (every rank runs the
// same program, so they meet at the same collectives in the same order):
// each rank leaves its inputs, all wait, each computes its result from its
// group's inputs in group order, all wait again.
//
//===----------------------------------------------------------------------===//

#include "triad/Interpreter/Interpreter.h"
#include "triad/Interpreter/Kernels.h"

#include "dialects/Dist/DistDialect.h"

#include "llvm/ADT/TypeSwitch.h"

#include <condition_variable>
#include <mutex>
#include <thread>

using namespace mlir;
using namespace triad;
using namespace triad::interp;

struct MeshInterpreter::Exchange {
  explicit Exchange(dist::MeshOp mesh) : mesh(mesh) {
    int64_t ranks = mesh ? mesh.getNumRanks() : 1;
    inputs.resize(ranks);
    participants = ranks;
  }

  /// Waits until every participating rank has arrived; false when a rank
  /// failed meanwhile.
  bool barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t generation = this->generation;
    if (++arrived >= participants) {
      arrived = 0;
      ++this->generation;
      condition.notify_all();
    } else {
      condition.wait(lock, [&] {
        return this->generation != generation || arrived >= participants;
      });
      if (this->generation == generation) {
        // A rank left while the others waited.
        arrived = 0;
        ++this->generation;
        condition.notify_all();
      }
    }
    return !failed;
  }

  /// A rank that finished (or failed) no longer takes part.
  void leave(bool failure) {
    std::lock_guard<std::mutex> lock(mutex);
    failed = failed || failure;
    --participants;
    condition.notify_all();
  }

  /// The coordinate of `rank` on each mesh axis.
  int64_t coordinate(int64_t rank, StringRef axis) {
    for (int64_t i = mesh.getSizes().size() - 1; i >= 0; --i) {
      if (cast<StringAttr>(mesh.getAxes()[i]).getValue() == axis)
        return rank % mesh.getSizes()[i];
      rank /= mesh.getSizes()[i];
    }
    return 0;
  }

  /// The ranks of `rank`'s group over `axes`, in group order.
  std::vector<int64_t> group(int64_t rank, ArrayRef<StringRef> axes) {
    std::vector<std::pair<int64_t, int64_t>> members;
    for (int64_t other = 0; other < (int64_t)inputs.size(); ++other) {
      bool same = true;
      for (Attribute axis : mesh.getAxes()) {
        StringRef name = cast<StringAttr>(axis).getValue();
        if (!llvm::is_contained(axes, name) &&
            coordinate(other, name) != coordinate(rank, name))
          same = false;
      }
      if (!same)
        continue;
      int64_t index = 0;
      for (StringRef axis : axes)
        index = index * mesh.getAxisSize(axis).value_or(1) +
                coordinate(other, axis);
      members.emplace_back(index, other);
    }
    llvm::sort(members);
    std::vector<int64_t> ranks;
    for (auto [index, member] : members)
      ranks.push_back(member);
    return ranks;
  }

  FailureOr<std::vector<Tensor>> collective(int64_t rank, Operation *op,
                                            ArrayRef<const Tensor *> in) {
    inputs[rank].assign(in.begin(), in.end());
    if (!barrier())
      return failure();
    auto axesOf = [](ArrayAttr axes) {
      return SmallVector<StringRef>(axes.getAsValueRange<StringAttr>());
    };
    auto sum = [&](const std::vector<int64_t> &members, size_t operand) {
      Tensor total = *inputs[members.front()][operand];
      for (size_t m = 1; m < members.size(); ++m)
        for (size_t i = 0; i < total.data.size(); ++i)
          total.data[i] += inputs[members[m]][operand]->data[i];
      return total;
    };
    auto position = [&](const std::vector<int64_t> &members) {
      return llvm::find(members, rank) - members.begin();
    };
    auto piece = [](const Tensor &whole, int64_t dim, int64_t parts,
                    int64_t index) {
      std::vector<int64_t> offsets(whole.rank(), 0), sizes(whole.shape);
      sizes[dim] /= parts;
      offsets[dim] = index * sizes[dim];
      return slice(whole, offsets, sizes);
    };
    std::vector<Tensor> results;
    llvm::TypeSwitch<Operation *>(op)
        .Case([&](dist::AllReduceOp reduce) {
          auto members = group(rank, axesOf(reduce.getAxes()));
          for (size_t i = 0; i < in.size(); ++i)
            results.push_back(sum(members, i));
        })
        .Case([&](dist::AllGatherOp gather) {
          auto members = group(rank, axesOf(gather.getAxes()));
          std::vector<const Tensor *> pieces;
          for (int64_t member : members)
            pieces.push_back(inputs[member][0]);
          results.push_back(concat(pieces, gather.getDim()));
        })
        .Case([&](dist::ReduceScatterOp scatter) {
          auto members = group(rank, axesOf(scatter.getAxes()));
          results.push_back(piece(sum(members, 0), scatter.getDim(),
                                  members.size(), position(members)));
        })
        .Case([&](dist::AllSliceOp keep) {
          auto members = group(rank, axesOf(keep.getAxes()));
          results.push_back(
              piece(*in[0], keep.getDim(), members.size(), position(members)));
        })
        .Case([&](dist::AllToAllOp exchange) {
          auto members = group(rank, axesOf(exchange.getAxes()));
          std::vector<Tensor> received;
          for (int64_t member : members)
            received.push_back(piece(*inputs[member][0], exchange.getSplitDim(),
                                     members.size(), position(members)));
          std::vector<const Tensor *> pointers;
          for (const Tensor &t : received)
            pointers.push_back(&t);
          results.push_back(concat(pointers, exchange.getConcatDim()));
        });
    bool known = !results.empty();
    if (!barrier())
      return failure();
    if (!known)
      return op->emitError("has no meaning in the interpreter");
    return results;
  }

  dist::MeshOp mesh;
  std::vector<std::vector<const Tensor *>> inputs;
  std::mutex mutex;
  std::condition_variable condition;
  int64_t arrived = 0, participants = 0;
  uint64_t generation = 0;
  bool failed = false;
};

MeshInterpreter::MeshInterpreter(ModuleOp module, InterpreterOptions options)
    : exchange(std::make_unique<Exchange>(dist::MeshOp::lookup(module))) {
  for (int64_t r = 0; r < (int64_t)exchange->inputs.size(); ++r) {
    InterpreterOptions rankOptions = options;
    rankOptions.rank = r;
    rankOptions.collectives = [this, r](Operation *op,
                                        ArrayRef<const Tensor *> in) {
      return exchange->collective(r, op, in);
    };
    ranks.push_back(std::make_unique<Interpreter>(module, rankOptions));
  }
}

MeshInterpreter::~MeshInterpreter() = default;

void MeshInterpreter::initializeParameters() {
  for (auto &rank : ranks)
    rank->initializeParameters();
}

FailureOr<std::vector<std::vector<Tensor>>>
MeshInterpreter::call(StringRef name, ArrayRef<std::vector<Tensor>> args) {
  if (args.size() != ranks.size())
    return failure();
  std::vector<FailureOr<std::vector<Tensor>>> results(ranks.size(), failure());
  exchange->participants = ranks.size();
  exchange->arrived = 0;
  exchange->failed = false;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      results[r] = ranks[r]->call(name, args[r]);
      exchange->leave(failed(results[r]));
    });
  for (std::thread &thread : threads)
    thread.join();
  std::vector<std::vector<Tensor>> all;
  for (auto &result : results) {
    if (failed(result))
      return failure();
    all.push_back(std::move(*result));
  }
  return all;
}
