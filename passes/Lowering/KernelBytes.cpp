//===- KernelBytes.cpp - what rt kernels read and write, in arena bytes ---===//
//
// See KernelBytes.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/KernelBytes.h"

#include "llvm/ADT/STLExtras.h"

#include <limits>

using namespace mlir;

namespace triad::rtbytes {

using rt::KernelOp;

namespace {

/// What RangeCache holds on this thread.
thread_local RangeCache::Cached *cache = nullptr;

} // namespace

RangeCache::RangeCache() : outer(cache) { cache = &cached; }
RangeCache::~RangeCache() { cache = outer; }

bool ByteSet::overlaps(Range r) const {
  auto next = ranges.upper_bound(r.begin);
  if (next != ranges.end() && next->first < r.end)
    return true;
  return next != ranges.begin() && std::prev(next)->second > r.begin;
}

bool ByteSet::covers(Range r) const {
  auto next = ranges.upper_bound(r.begin);
  return next != ranges.begin() && std::prev(next)->second >= r.end;
}

void ByteSet::add(Range r) {
  auto it = ranges.upper_bound(r.begin);
  if (it != ranges.begin() && std::prev(it)->second >= r.begin)
    --it;
  while (it != ranges.end() && it->first <= r.end) {
    r.begin = std::min(r.begin, it->first);
    r.end = std::max(r.end, it->second);
    it = ranges.erase(it);
  }
  ranges.emplace(r.begin, r.end);
}

Range rangeOf(Value value) {
  if (cache)
    if (auto it = cache->ranges.find(value); it != cache->ranges.end())
      return it->second;
  Range range = {0, std::numeric_limits<int64_t>::max()};
  if (auto buffer = value.getDefiningOp<rt::BufferOp>()) {
    range.begin = buffer.getOffset();
    range.end = range.begin + buffer.getBytes() +
                (buffer.getSlotCount() - 1) * buffer.getStride().value_or(0);
  }
  if (cache)
    cache->ranges.try_emplace(value, range);
  return range;
}

namespace {

/// Whether two ranges share a byte.
bool meet(Range x, Range y) { return x.begin < y.end && y.begin < x.end; }

/// Whether `value`'s bytes meet any of `ranges`.
bool meetsAny(Value value, ArrayRef<Range> ranges) {
  Range r = rangeOf(value);
  return llvm::any_of(ranges, [&](Range l) { return meet(r, l); });
}

} // namespace

bool overlaps(Value a, Value b) {
  return a == b || meet(rangeOf(a), rangeOf(b));
}

bool writesOver(KernelOp kernel, Value value) {
  return llvm::any_of(kernel.getOutputs(),
                      [&](Value out) { return overlaps(out, value); });
}

bool touches(KernelOp kernel, Value value) {
  return writesOver(kernel, value) ||
         llvm::any_of(kernel.getInputs(),
                      [&](Value in) { return overlaps(in, value); });
}

SmallVector<KernelOp> between(KernelOp first, KernelOp last) {
  SmallVector<KernelOp> kernels;
  for (Operation *op = first->getNextNode(); op && op != last.getOperation();
       op = op->getNextNode())
    if (auto kernel = dyn_cast<KernelOp>(op))
      kernels.push_back(kernel);
  return kernels;
}

bool onlyPassesBetween(Value value, KernelOp writer, KernelOp reader) {
  unsigned uses = 0;
  for (OpOperand &use : value.getUses()) {
    ++uses;
    if (use.getOwner() != writer.getOperation() &&
        use.getOwner() != reader.getOperation())
      return false;
  }
  return uses == 2 && writer.getOutputs().size() == 1 &&
         llvm::count(reader.getInputs(), value) == 1;
}

namespace {

/// `left` without the bytes `written` writes (a slotted buffer writes one
/// of its copies: none is taken off).
void takeOff(SmallVector<Range> &left, Value written) {
  auto buffer = written.getDefiningOp<rt::BufferOp>();
  if (!buffer || buffer.getSlotCount() != 1)
    return;
  Range w = rangeOf(written);
  SmallVector<Range> rest;
  for (Range l : left) {
    if (w.end <= l.begin || l.end <= w.begin) {
      rest.push_back(l);
      continue;
    }
    if (l.begin < w.begin)
      rest.push_back({l.begin, w.begin});
    if (w.end < l.end)
      rest.push_back({w.end, l.end});
  }
  left = std::move(rest);
}

/// Whether the kernels from `first` to the block's end read none of the
/// bytes in `left` other than through `dropped`, before a kernel writes
/// them; `left` loses the bytes the kernels write.
bool readsNoneOf(SmallVector<Range> &left, Value dropped, Operation *first) {
  auto readsLeft = [&](Value value) {
    return value != dropped && meetsAny(value, left);
  };
  for (Operation *op = first; op && !left.empty(); op = op->getNextNode()) {
    auto kernel = dyn_cast<KernelOp>(op);
    if (!kernel)
      continue;
    if (llvm::any_of(kernel.getInputs(), readsLeft))
      return false;
    for (Value out : kernel.getOutputs())
      takeOff(left, out);
  }
  return true;
}

/// Whether `func` returns none of the bytes in `left`.
bool returnsNoneOf(rt::FuncOp func, ArrayRef<Range> left) {
  return !llvm::any_of(func.getResults(),
                       [&](Value value) { return meetsAny(value, left); });
}

/// The bytes the functions of `program` read before they write them (a
/// kernel's input not wholly written earlier in its function, or a result;
/// the runtime writes a call's arguments before it runs): what a call may
/// read of what an earlier call left.
ByteSet exposedReads(Operation *program) {
  ByteSet exposed;
  for (Region &region : program->getRegions())
    for (auto func : region.getOps<rt::FuncOp>()) {
      ByteSet written;
      auto write = [&](Value value) {
        auto buffer = value.getDefiningOp<rt::BufferOp>();
        if (buffer && buffer.getSlotCount() == 1)
          written.add(rangeOf(value));
      };
      auto read = [&](Value value) {
        Range r = rangeOf(value);
        if (!written.covers(r))
          exposed.add(r);
      };
      for (Value arg : func.getArgs())
        write(arg);
      for (auto kernel : func.getBody().getOps<KernelOp>()) {
        for (Value in : kernel.getInputs())
          read(in);
        for (Value out : kernel.getOutputs())
          write(out);
      }
      for (Value result : func.getResults())
        read(result);
    }
  return exposed;
}

} // namespace

bool bytesUnreadElsewhere(Value dropped, KernelOp writer) {
  // The bytes still as `writer` left them: the rest of its function must
  // write them before it reads them, and so must any later call (of any
  // function of the program, its own included).
  auto func = writer->getParentOfType<rt::FuncOp>();
  SmallVector<Range> left = {rangeOf(dropped)};
  if (!readsNoneOf(left, dropped, writer->getNextNode()) ||
      !returnsNoneOf(func, left))
    return false;
  Operation *program = func->getParentOp();
  if (!program)
    return true;
  if (!cache)
    return !exposedReads(program).overlaps(rangeOf(dropped));
  auto it = cache->exposed.find(program);
  if (it == cache->exposed.end())
    it = cache->exposed.try_emplace(program, exposedReads(program)).first;
  return !it->second.overlaps(rangeOf(dropped));
}

llvm::DenseMap<Operation *, int64_t> layersOf(rt::FuncOp func) {
  llvm::DenseMap<Operation *, int64_t> layers;
  std::optional<ArrayRef<int64_t>> spans = func.getLayerSpans();
  if (!spans)
    return layers;
  int64_t index = 0;
  for (auto kernel : func.getBody().getOps<KernelOp>()) {
    for (size_t l = 0; l + 1 < spans->size(); l += 2)
      if ((*spans)[l] <= index && index < (*spans)[l + 1])
        layers[kernel.getOperation()] = static_cast<int64_t>(l / 2);
    ++index;
  }
  return layers;
}

void setLayerSpans(rt::FuncOp func,
                   const llvm::DenseMap<Operation *, int64_t> &layers) {
  std::optional<ArrayAttr> names = func.getLayerNames();
  if (!names)
    return;
  SmallVector<Attribute> newNames;
  SmallVector<int64_t> spans;
  int64_t index = 0, current = -1;
  for (auto kernel : func.getBody().getOps<KernelOp>()) {
    int64_t layer = layers.lookup_or(kernel.getOperation(), -1);
    if (layer != current || (layer >= 0 && spans.back() != index)) {
      if (layer >= 0) {
        newNames.push_back((*names)[layer]);
        spans.append({index, index + 1});
      }
      current = layer;
    } else if (layer >= 0) {
      spans.back() = index + 1;
    }
    ++index;
  }
  Builder b(func.getContext());
  func.setLayerNamesAttr(b.getArrayAttr(newNames));
  func.setLayerSpansAttr(b.getDenseI64ArrayAttr(spans));
}

KernelOp writerOf(Value value, KernelOp reader) {
  KernelOp writer;
  for (OpOperand &use : value.getUses())
    if (auto kernel = dyn_cast<KernelOp>(use.getOwner());
        kernel && kernel != reader &&
        llvm::is_contained(kernel.getOutputs(), value))
      writer = kernel;
  return writer;
}

void eraseUnused(ArrayRef<Value> values) {
  for (Value value : values)
    if (value.use_empty())
      if (Operation *buffer = value.getDefiningOp())
        buffer->erase();
}

} // namespace triad::rtbytes
