//===- CpuExecutor.cpp - runs a verified plan program on the CPU ----------===//
//
// One case per plan op code, mapping the instruction's values and
// attributes (as Plan.cpp checks them) onto the CPU kernels. The shape
// manipulations (transpose, slice, pad, concat, broadcast, sum) are strided
// copies written here.
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CpuExecutor.h"

#include "runtime/kernels/StepMath.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cpu/HalfFloat.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace triad::rt {

namespace {

using Shape = std::vector<int64_t>;

/// Whether a Sum of x to `result` reduces over leading dimensions only
/// (a bias gradient: result [1, .., 1, x's trailing sizes]).
bool reducesLeading(const Shape &x, const Shape &result) {
  size_t lead = x.size() - result.size(), ones = 0;
  while (ones < result.size() && result[ones] == 1)
    ++ones;
  return std::equal(result.begin() + ones, result.end(),
                    x.begin() + lead + ones);
}

} // namespace

absl::StatusOr<CpuExecutor>
CpuExecutor::create(const LoadedPlan &plan, uint32_t pipelineRank,
                    uint64_t seed, ExecutorOptions options,
                    cpu::Bf16ProductKernel bf16Products) {
  absl::StatusOr<const plan::Program *> program =
      findProgram(plan, pipelineRank, options, "CPU", /*sixteenBit=*/true);
  if (!program.ok())
    return program.status();
  auto began = std::chrono::steady_clock::now();
  CpuExecutor executor(plan, **program, options);
  if (bf16Products == cpu::Bf16ProductKernel::OneDnn ||
      (bf16Products == cpu::Bf16ProductKernel::Auto &&
       cpu::bf16ProductsAvailable())) {
    absl::StatusOr<std::unique_ptr<cpu::Bf16Products>> products =
        cpu::Bf16Products::create();
    if (!products.ok())
      return products.status();
    executor.bf16Products = std::move(*products);
  }
  if (absl::Status status = executor.connect(); !status.ok())
    return status;
  executor.endPhase("setup", began);
  size_t bytes = std::max<uint64_t>((*program)->arena_bytes(), 64);
  executor.arena.reset(static_cast<std::byte *>(
      ::operator new(bytes, std::align_val_t(64), std::nothrow)));
  if (!executor.arena)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the program's arena of ", bytes, " bytes"));
  std::memset(executor.arena.get(), 0, bytes);
  executor.endPhase("arena", began);
  executor.seed = seed;
  // Each group's values drawn once: into an f32 member where it has one
  // (a master copy), then copied to the others (rounded for 16-bit ones).
  for (const std::vector<const plan::Persistent *> &group :
       executor.initGroups()) {
    std::vector<float> scratch;
    float *values = nullptr;
    if (const plan::Persistent *wide = executor.f32Member(group)) {
      values = executor.f32(wide->value());
    } else {
      scratch.resize(elementCount(shapeOf(executor.value(group[0]->value()))));
      values = scratch.data();
    }
    if (absl::Status status = executor.initialValues(*group[0], values);
        !status.ok())
      return status;
    for (const plan::Persistent *p : group) {
      uint32_t index = p->value();
      if (executor.isSixteenBit(index))
        executor.narrowInto(index, values);
      else if (executor.f32(index) != values)
        std::memcpy(executor.f32(index), values,
                    4 * elementCount(shapeOf(executor.value(index))));
    }
  }
  executor.endPhase("initial values", began);
  return executor;
}

CpuExecutor::~CpuExecutor() {
  // A receive in flight writes into the arena until it completes.
  drainInFlight();
}

uint16_t *CpuExecutor::bits16(uint32_t index) {
  return reinterpret_cast<uint16_t *>(arena.get() + offsetOf(index));
}

void CpuExecutor::widenFrom(uint32_t index, float *out) {
  cpu::widen(value(index).dtype() == plan::DType::BF16, bits16(index), out,
             elementCount(shapeOf(value(index))));
}

void CpuExecutor::narrowInto(uint32_t index, const float *in) {
  cpu::narrow(value(index).dtype() == plan::DType::BF16, in, bits16(index),
              elementCount(shapeOf(value(index))));
}

float *CpuExecutor::f32(uint32_t index) {
  // A 16-bit value inside a kernel call: its f32 copy.
  for (auto &[widenedIndex, copy] : widened)
    if (widenedIndex == index)
      return copy;
  return reinterpret_cast<float *>(arena.get() + offsetOf(index));
}

int32_t *CpuExecutor::i32(uint32_t index) {
  return reinterpret_cast<int32_t *>(arena.get() + offsetOf(index));
}

absl::StatusOr<float *> CpuExecutor::persistent(const std::string &name) {
  if (program->persistent())
    for (const plan::Persistent *p : *program->persistent())
      if (p->name()->str() == name) {
        if (isSixteenBit(p->value()))
          return absl::FailedPreconditionError(
              absl::StrCat("persistent tensor '", name,
                           "' is 16-bit; read it with readPersistent"));
        return f32(p->value());
      }
  return absl::NotFoundError(
      absl::StrCat("the program has no persistent tensor '", name, "'"));
}

absl::Status CpuExecutor::writeValue(uint32_t index, const HostTensor &arg) {
  int64_t n = elementCount(shapeOf(value(index)));
  if (value(index).dtype() == plan::DType::I32)
    std::copy_n(arg.ints.data(), n, i32(index));
  else if (isSixteenBit(index))
    narrowInto(index, arg.floats.data());
  else
    std::copy_n(arg.floats.data(), n, f32(index));
  return absl::OkStatus();
}

absl::Status CpuExecutor::readValue(uint32_t index, HostTensor &result) {
  int64_t n = elementCount(result.shape);
  if (value(index).dtype() == plan::DType::I32) {
    result.ints.assign(i32(index), i32(index) + n);
  } else if (isSixteenBit(index)) {
    result.floats.resize(n);
    widenFrom(index, result.floats.data());
  } else {
    result.floats.assign(f32(index), f32(index) + n);
  }
  return absl::OkStatus();
}

absl::Status CpuExecutor::startCollective(const plan::Instr &instr,
                                          size_t index) {
  uint32_t x = instr.inputs()->Get(0), out = instr.outputs()->Get(0);
  if (instr.inputs()->size() > 1 || isSixteenBit(x))
    return runHere(instr);
  absl::StatusOr<PendingCollective> pending = triad::rt::startCollective(
      *communicator, describeCollective(instr, f32(x), f32(out)));
  if (!pending.ok())
    return pending.status();
  return track(std::move(*pending), nullptr, instr, index, x, out);
}

absl::Status CpuExecutor::runHere(const plan::Instr &instr) {
  // It completes here, on copies where they are 16-bit, so it does not
  // overlap the instructions after it: 16-bit tensors travel and sum in
  // f32, and each result is rounded once.
  size_t tensors = instr.inputs()->size();
  std::vector<std::vector<float>> wide(2 * tensors);
  std::vector<TensorCollective> bucket;
  for (size_t i = 0; i < tensors; ++i) {
    uint32_t x = instr.inputs()->Get(i), out = instr.outputs()->Get(i);
    const float *xData = f32(x);
    float *outData = f32(out);
    if (isSixteenBit(x)) {
      wide[2 * i].resize(elementCount(shapeOf(value(x))));
      wide[2 * i + 1].resize(elementCount(shapeOf(value(out))));
      widenFrom(x, wide[2 * i].data());
      xData = wide[2 * i].data();
      outData = wide[2 * i + 1].data();
    }
    bucket.push_back(describeCollective(instr, xData, outData, i));
  }
  if (absl::Status status = triad::rt::runBucket(*communicator, bucket);
      !status.ok())
    return status;
  for (size_t i = 0; i < tensors; ++i)
    if (isSixteenBit(instr.outputs()->Get(i)))
      narrowInto(instr.outputs()->Get(i), wide[2 * i + 1].data());
  return absl::OkStatus();
}

absl::Status CpuExecutor::startTransfer(const plan::Instr &instr,
                                        size_t index) {
  Transfer t = describeTransfer(instr);
  // A transfer copies bits: 16-bit values travel as they are, two to a
  // 4-byte word (the loader admits only even counts of them).
  float *data = f32(t.data);
  int64_t words = t.elements;
  if (isSixteenBit(t.data)) {
    data = reinterpret_cast<float *>(bits16(t.data));
    words = t.elements / 2;
  }
  absl::StatusOr<std::unique_ptr<CommRequest>> request =
      t.send ? communicator->startSend(data, words, t.peer, t.tag)
             : communicator->startRecv(data, words, t.peer, t.tag);
  if (!request.ok())
    return request.status();
  return track(std::nullopt, std::move(*request), instr, index,
               t.send ? std::optional<uint32_t>(t.data) : std::nullopt,
               t.send ? std::nullopt : std::optional<uint32_t>(t.data));
}

bool CpuExecutor::runsOnBf16Products(const plan::Instr &instr) const {
  if (!bf16Products || instr.op() != plan::OpCode::Matmul)
    return false;
  plan::DType a = value(instr.inputs()->Get(0)).dtype(),
              b = value(instr.inputs()->Get(1)).dtype(),
              c = value(instr.outputs()->Get(0)).dtype();
  if (a != plan::DType::BF16 || b != plan::DType::BF16 ||
      (c != plan::DType::BF16 && c != plan::DType::F32))
    return false;
  MatmulDims d = matmulDims(instr);
  return d.batch > 0 && d.m > 0 && d.n > 0 && d.k > 0;
}

bool CpuExecutor::runsStored(const plan::Instr &instr) const {
  switch (instr.op()) {
  case plan::OpCode::Add:
  case plan::OpCode::Mul:
  case plan::OpCode::Activation:
  case plan::OpCode::ActivationGrad:
  case plan::OpCode::Gated:
    break;
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm:
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad:
    // A row at a time.
    break;
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad:
    // A (sample, head) at a time; ALiBi's slopes are read as f32.
    if (std::optional<uint32_t> slopes = attentionCall(instr).slopes;
        slopes && value(*slopes).dtype() != plan::DType::F32)
      return false;
    break;
  case plan::OpCode::Cast:
    // Between float types: widened and rounded a chunk at a time.
    if (value(instr.inputs()->Get(0)).dtype() == plan::DType::I32 ||
        value(instr.outputs()->Get(0)).dtype() == plan::DType::I32)
      return false;
    break;
  case plan::OpCode::Sum:
    // Over leading dimensions (a bias gradient), read a block of columns
    // at a time.
    if (!reducesLeading(shapeOf(value(instr.inputs()->Get(0))),
                        shapeOf(value(instr.outputs()->Get(0)))))
      return false;
    break;
  default:
    return false;
  }
  // Chunks of the result are written as each is computed: a result may be
  // an operand itself, but not overlap another one.
  return !resultOverlapsOperand(instr, /*inPlace=*/true);
}

cpu::StoredIn CpuExecutor::storedIn(uint32_t index) {
  cpu::StoredOut out = storedOut(index);
  return {out.data, out.type};
}

cpu::StoredOut CpuExecutor::storedOut(uint32_t index) {
  // A 16-bit value inside a kernel on f32 copies: its copy.
  for (auto &[widenedIndex, copy] : widened)
    if (widenedIndex == index)
      return {copy, cpu::Storage::F32};
  switch (value(index).dtype()) {
  case plan::DType::BF16:
    return {bits16(index), cpu::Storage::BF16};
  case plan::DType::F16:
    return {bits16(index), cpu::Storage::F16};
  default:
    return {f32(index), cpu::Storage::F32};
  }
}

absl::Status CpuExecutor::executeStored(const plan::Instr &instr) {
  auto in = [&](size_t i) { return storedIn(instr.inputs()->Get(i)); };
  uint32_t out = instr.outputs()->Get(0);
  int64_t count = elementCount(shapeOf(value(out)));
  switch (instr.op()) {
  case plan::OpCode::Add:
    cpu::addBroadcast(in(0), in(1), storedOut(out), count,
                      elementCount(shapeOf(value(instr.inputs()->Get(1)))));
    break;
  case plan::OpCode::Mul:
    cpu::mul(in(0), in(1), storedOut(out), count);
    break;
  case plan::OpCode::Activation:
    cpu::activation(activationOf(instr.ints()->Get(0)), in(0), storedOut(out),
                    count);
    break;
  case plan::OpCode::ActivationGrad:
    cpu::activationGrad(activationOf(instr.ints()->Get(0)), in(0), in(1),
                        storedOut(out), count);
    break;
  case plan::OpCode::Gated:
    cpu::gated(activationOf(instr.ints()->Get(0)), in(0), in(1), storedOut(out),
               count);
    break;
  case plan::OpCode::Cast:
    cpu::convert(in(0), storedOut(out), count);
    break;
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad: {
    AttentionCall call = attentionCall(instr);
    const int32_t *prefix = call.prefix ? i32(*call.prefix) : nullptr;
    if (prefix)
      if (absl::Status s = checkPrefixLengths(prefix, call.shape); !s.ok())
        return s;
    const float *slopes = call.slopes ? f32(*call.slopes) : nullptr;
    if (instr.op() == plan::OpCode::Attention)
      cpu::attention(in(0), in(1), in(2), prefix, slopes, storedOut(out),
                     call.shape);
    else
      cpu::attentionGrad(in(0), in(1), in(2), prefix, slopes,
                         storedIn(call.dout), storedOut(out),
                         storedOut(instr.outputs()->Get(1)),
                         storedOut(instr.outputs()->Get(2)), call.shape);
    break;
  }
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm:
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad: {
    int64_t width = shapeOf(value(out)).back(), rows = count / width;
    auto epsilon = static_cast<float>(instr.floats()->Get(0));
    if (instr.op() == plan::OpCode::LayerNorm) {
      std::optional<cpu::StoredIn> beta;
      if (instr.inputs()->size() == 3)
        beta = in(2);
      cpu::layerNorm(in(0), in(1), beta ? &*beta : nullptr, storedOut(out),
                     rows, width, epsilon);
    } else if (instr.op() == plan::OpCode::RmsNorm) {
      cpu::rmsNorm(in(0), in(1), storedOut(out), rows, width, epsilon);
    } else {
      // dgamma is accumulated over the rows, from zero.
      uint32_t dgamma = instr.outputs()->Get(1);
      std::memset(arena.get() + offsetOf(dgamma), 0,
                  value(dgamma).region()->bytes());
      if (instr.op() == plan::OpCode::LayerNormGrad)
        cpu::layerNormGrad(in(0), in(1), in(2), storedOut(out),
                           storedOut(dgamma), rows, width, epsilon);
      else
        cpu::rmsNormGrad(in(0), in(1), in(2), storedOut(out), storedOut(dgamma),
                         rows, width, epsilon);
    }
    break;
  }
  case plan::OpCode::Sum: {
    int64_t total = elementCount(shapeOf(value(instr.inputs()->Get(0))));
    cpu::sumRows(in(0), total / count, count, instr.floats()->Get(0),
                 storedOut(out));
    break;
  }
  default:
    return absl::InternalError("not an element-wise kernel");
  }
  return absl::OkStatus();
}

absl::Status CpuExecutor::executeOptimizer(const plan::Instr &instr) {
  auto in = [&](size_t i) { return instr.inputs()->Get(i); };
  auto out = [&](size_t i) { return instr.outputs()->Get(i); };
  auto n = [&](uint32_t index) { return elementCount(shapeOf(value(index))); };
  // A float tensor's f32 elements: itself, or its 16-bit elements widened
  // into `scratch` (one tensor at a time, whatever the count).
  std::vector<float> scratch;
  auto wide = [&](uint32_t index) -> const float * {
    if (!isSixteenBit(index))
      return f32(index);
    scratch.resize(static_cast<size_t>(n(index)));
    widenFrom(index, scratch.data());
    return scratch.data();
  };
  if (instr.op() == plan::OpCode::SumSquares) {
    // Each tensor's sum in double, added in input order.
    double limit = plan::sumSquaresLimit(instr), sum = 0.0;
    for (uint32_t x : *instr.inputs())
      sum += cpu::sumSquares(wide(x), n(x), limit);
    f32(out(0))[0] = static_cast<float>(sum);
    return absl::OkStatus();
  }
  plan::AdamWShape tensors = *plan::adamWShape(
      instr.inputs()->size(), instr.outputs()->size(), instr.floats()->size());
  size_t shared = 4 * tensors.count, per = tensors.outputsPerTensor;
  float lr = f32(in(shared))[0], step = f32(in(shared + 1))[0],
        coefficient = f32(in(shared + 2))[0];
  // A skipped step (in place, the contract says) writes nothing.
  if (tensors.skips && f32(in(shared + 3))[0] != 0.0f)
    return absl::OkStatus();
  plan::AdamWAttrs adamw = plan::adamWAttrs(*instr.floats());
  for (size_t t = 0; t < tensors.count; ++t) {
    uint32_t param = in(4 * t), grad = in(4 * t + 1), m = in(4 * t + 2),
             v = in(4 * t + 3);
    uint32_t newParam = out(per * t), newM = out(per * t + 1),
             newV = out(per * t + 2);
    int64_t size = n(param);
    // The kernel works in place: bring the inputs to the outputs first.
    for (auto [from, to] : {std::pair{param, newParam}, {m, newM}, {v, newV}})
      if (from != to)
        std::memmove(f32(to), f32(from), 4 * size);
    cpu::adamw(f32(newParam), wide(grad), f32(newM), f32(newV), size, lr, step,
               coefficient, static_cast<float>(adamw.beta1),
               static_cast<float>(adamw.beta2),
               static_cast<float>(adamw.epsilon),
               static_cast<float>(instr.floats()->Get(3 + t)));
    // The parameter rounded as a Cast rounds it.
    if (tensors.rounded)
      cpu::convert({f32(newParam), cpu::Storage::F32},
                   storedOut(out(per * t + 3)), size);
  }
  return absl::OkStatus();
}

absl::Status CpuExecutor::execute(const plan::Instr &instr, uint64_t step) {
  // The optimizer's kernels over many tensors read 16-bit gradients one
  // tensor at a time, not all widened at once.
  if (instr.op() == plan::OpCode::SumSquares ||
      instr.op() == plan::OpCode::AdamW)
    return executeOptimizer(instr);
  // 16-bit values: the kernel works on f32 copies (exact), and its 16-bit
  // results are rounded back (to nearest even) once it is done. Products
  // of bf16 operands skip the copies where oneDNN multiplies bf16.
  std::vector<uint32_t> sixteen = sixteenBitOperands(instr);
  if (sixteen.empty())
    return executeF32(instr, step);
  if (runsStored(instr))
    return executeStored(instr);
  if (runsOnBf16Products(instr)) {
    uint32_t a = instr.inputs()->Get(0), b = instr.inputs()->Get(1);
    MatmulDims d = matmulDims(instr);
    if (d.epilogue == plan::EpilogueCode::None) {
      uint32_t out = instr.outputs()->Get(0);
      bool resultBf16 = value(out).dtype() == plan::DType::BF16;
      return bf16Products->run({d.batch, d.m, d.n, d.k, d.transposeA,
                                d.transposeB, d.rhsBatched, resultBf16},
                               bits16(a), bits16(b),
                               resultBf16 ? static_cast<void *>(bits16(out))
                                          : static_cast<void *>(f32(out)));
    }
    // A fused product (its epilogue runs in executeF32, on an f32 result
    // before the one rounding) reads its operands' bits: they need no
    // copies.
    sixteen.erase(std::remove_if(
                      sixteen.begin(), sixteen.end(),
                      [&](uint32_t index) { return index == a || index == b; }),
                  sixteen.end());
  }
  if (widePool.size() < sixteen.size())
    widePool.resize(sixteen.size());
  // An operand that is only an output needs no widening: the kernel writes
  // all of it.
  auto isInput = [&](uint32_t index) {
    return instr.inputs() &&
           std::find(instr.inputs()->begin(), instr.inputs()->end(), index) !=
               instr.inputs()->end();
  };
  for (size_t i = 0; i < sixteen.size(); ++i) {
    widePool[i].resize(elementCount(shapeOf(value(sixteen[i]))));
    if (isInput(sixteen[i]))
      widenFrom(sixteen[i], widePool[i].data());
  }
  for (size_t i = 0; i < sixteen.size(); ++i)
    widened.emplace_back(sixteen[i], widePool[i].data());
  absl::Status status = executeF32(instr, step);
  if (status.ok() && instr.outputs())
    for (auto &[index, copy] : widened)
      if (std::find(instr.outputs()->begin(), instr.outputs()->end(), index) !=
          instr.outputs()->end())
        narrowInto(index, copy);
  widened.clear();
  return status;
}

absl::Status CpuExecutor::executeF32(const plan::Instr &instr, uint64_t step) {
  auto in = [&](size_t i) { return instr.inputs()->Get(i); };
  auto out = [&](size_t i) { return instr.outputs()->Get(i); };
  auto intAt = [&](size_t i) { return instr.ints()->Get(i); };
  auto floatAt = [&](size_t i) { return instr.floats()->Get(i); };
  auto shape = [&](uint32_t index) { return shapeOf(value(index)); };
  auto n = [&](uint32_t index) { return elementCount(shape(index)); };
  auto badIds = [](const char *what) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", what, " is outside the vocabulary"));
  };
  // Element-wise copy into the value `target` of whatever `source` says for
  // each target coordinate (-1: zero), for f32 or i32 values alike.
  auto gather = [&](uint32_t source, uint32_t target,
                    auto sourceIndex /* (coords) -> int64_t */) {
    bool floats = value(target).dtype() != plan::DType::I32;
    forEachIndex(shape(target), [&](int64_t linear, const Shape &coords) {
      int64_t from = sourceIndex(coords);
      if (floats)
        f32(target)[linear] = from < 0 ? 0.0f : f32(source)[from];
      else
        i32(target)[linear] = from < 0 ? 0 : i32(source)[from];
    });
  };

  switch (instr.op()) {
  case plan::OpCode::Embedding: {
    EmbeddingRows table = embeddingRows(instr);
    if (!cpu::embedding(i32(in(0)), f32(in(1)), f32(out(0)), n(in(0)),
                        table.rows, table.hidden, table.firstRow, table.vocab))
      return badIds("token id");
    return absl::OkStatus();
  }
  case plan::OpCode::EmbeddingGrad: {
    EmbeddingRows table = embeddingRows(instr);
    std::fill_n(f32(out(0)), table.rows * table.hidden, 0.0f);
    if (!cpu::embeddingGradAccumulate(i32(in(0)), f32(in(1)), f32(out(0)),
                                      n(in(0)), table.rows, table.hidden,
                                      table.firstRow, table.vocab))
      return badIds("token id");
    return absl::OkStatus();
  }
  case plan::OpCode::Matmul: {
    MatmulDims d = matmulDims(instr);
    // The product goes to c, or, where c is the accumulator it is added
    // to or an addend follows it, to a buffer of its own first.
    float *product = f32(out(0));
    if (d.weight || d.addend) {
      productBuffer.resize(static_cast<size_t>(n(out(0))));
      product = productBuffer.data();
    }
    if (runsOnBf16Products(instr)) {
      // oneDNN's f32 result (the f32 copy of a bf16 one), then the
      // epilogue: `execute` left the operands' bits unwidened.
      if (absl::Status status = bf16Products->run(
              {d.batch, d.m, d.n, d.k, d.transposeA, d.transposeB, d.rhsBatched,
               /*resultBf16=*/false},
              bits16(in(0)), bits16(in(1)), product);
          !status.ok())
        return status;
    } else {
      cpu::matmul(f32(in(0)), f32(in(1)), product, d.batch, d.m, d.n, d.k,
                  d.transposeA, d.transposeB, d.rhsBatched);
    }
    if (d.weight)
      cpu::accumulate(f32(out(0)), product, f32(*d.weight)[0], n(out(0)));
    if (d.addend) {
      // (product [+ bias]) + addend, each add rounded as the Add kernel's.
      if (d.bias)
        cpu::addBroadcast(product, f32(*d.bias), product, n(out(0)), d.n);
      cpu::addBroadcast(product, f32(*d.addend), f32(out(0)), n(out(0)),
                        n(out(0)));
      return absl::OkStatus();
    }
    // A fused epilogue runs after the product, in the unfused kernels'
    // arithmetic (a 16-bit result is rounded once, after it: see
    // plan::MatmulAttrs).
    if (d.bias) {
      std::optional<cpu::Activation> activation;
      if (d.activation)
        activation = activationOf(static_cast<int64_t>(*d.activation));
      cpu::matmulEpilogue(f32(out(0)), f32(*d.bias), activation,
                          d.preActivation ? f32(*d.preActivation) : nullptr,
                          n(out(0)), d.n);
    }
    if (d.gradient) {
      cpu::activationGrad(activationOf(static_cast<int64_t>(*d.gradient)),
                          f32(*d.activationInput), f32(out(0)), f32(out(0)),
                          n(out(0)));
      if (d.biasGrad)
        cpu::sumRows(f32(out(0)), n(out(0)) / d.n, d.n, 1.0, f32(*d.biasGrad));
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Add:
    cpu::addBroadcast(f32(in(0)), f32(in(1)), f32(out(0)), n(out(0)), n(in(1)));
    return absl::OkStatus();
  case plan::OpCode::Mul:
    cpu::mul(f32(in(0)), f32(in(1)), f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Scale:
    cpu::scale(f32(in(0)), static_cast<float>(floatAt(0)), f32(out(0)),
               n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Activation:
    cpu::activation(activationOf(intAt(0)), f32(in(0)), f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::ActivationGrad:
    cpu::activationGrad(activationOf(intAt(0)), f32(in(0)), f32(in(1)),
                        f32(out(0)), n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Gated:
    cpu::gated(activationOf(intAt(0)), f32(in(0)), f32(in(1)), f32(out(0)),
               n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = elementCount(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    if (instr.op() == plan::OpCode::LayerNorm)
      cpu::layerNorm(f32(in(0)), f32(in(1)),
                     instr.inputs()->size() == 3 ? f32(in(2)) : nullptr,
                     f32(out(0)), rows, width, epsilon);
    else
      cpu::rmsNorm(f32(in(0)), f32(in(1)), f32(out(0)), rows, width, epsilon);
    return absl::OkStatus();
  }
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = elementCount(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    std::fill_n(f32(out(1)), width, 0.0f);
    if (instr.op() == plan::OpCode::LayerNormGrad)
      cpu::layerNormGrad(f32(in(0)), f32(in(1)), f32(in(2)), f32(out(0)),
                         f32(out(1)), rows, width, epsilon);
    else
      cpu::rmsNormGrad(f32(in(0)), f32(in(1)), f32(in(2)), f32(out(0)),
                       f32(out(1)), rows, width, epsilon);
    return absl::OkStatus();
  }
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad:
    // The stored values' kernel, on f32 ones (or f32 copies).
    return executeStored(instr);
  case plan::OpCode::Rope: {
    Shape x = shape(in(0));
    plan::RopeAttrs rope = plan::ropeAttrs(*instr.ints(), *instr.floats());
    cpu::rope(f32(in(0)), f32(out(0)), x[0], x[1], rope.heads,
              x[2] / rope.heads, rope.rotaryDim, static_cast<float>(rope.base),
              static_cast<float>(rope.direction));
    return absl::OkStatus();
  }
  case plan::OpCode::Copy:
    if (in(0) != out(0))
      std::memmove(f32(out(0)), f32(in(0)), 4 * n(out(0)));
    return absl::OkStatus();
  case plan::OpCode::Cast: {
    // Between float types it is a copy of the f32 values (a 16-bit result
    // is rounded when the kernel is done).
    bool fromInt = value(in(0)).dtype() == plan::DType::I32,
         toInt = value(out(0)).dtype() == plan::DType::I32;
    int64_t size = n(out(0));
    if (fromInt == toInt) {
      if (in(0) != out(0))
        std::memmove(f32(out(0)), f32(in(0)), 4 * size);
    } else if (toInt) {
      for (int64_t i = 0; i < size; ++i)
        i32(out(0))[i] = static_cast<int32_t>(std::trunc(f32(in(0))[i]));
    } else {
      for (int64_t i = 0; i < size; ++i)
        f32(out(0))[i] = static_cast<float>(i32(in(0))[i]);
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Transpose: {
    Shape inStrides = rowMajorStrides(shape(in(0)));
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d)
        from += coords[d] * inStrides[intAt(d)];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Slice: {
    Shape x = shape(in(0)), inStrides = rowMajorStrides(x);
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d)
        from += (coords[d] + intAt(d)) * inStrides[d];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Pad: {
    Shape x = shape(in(0)), inStrides = rowMajorStrides(x);
    gather(in(0), out(0), [&](const Shape &coords) -> int64_t {
      int64_t from = 0;
      for (size_t d = 0; d < coords.size(); ++d) {
        int64_t c = coords[d] - intAt(d);
        if (c < 0 || c >= x[d])
          return -1;
        from += c * inStrides[d];
      }
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Concat: {
    int64_t dim = intAt(0), offset = 0;
    Shape result = shape(out(0)), outStrides = rowMajorStrides(result);
    bool floats = value(out(0)).dtype() != plan::DType::I32;
    for (size_t i = 0; i < instr.inputs()->size(); ++i) {
      uint32_t part = in(i);
      forEachIndex(shape(part), [&](int64_t linear, const Shape &coords) {
        int64_t to = 0;
        for (size_t d = 0; d < coords.size(); ++d)
          to += (coords[d] + (static_cast<int64_t>(d) == dim ? offset : 0)) *
                outStrides[d];
        if (floats)
          f32(out(0))[to] = f32(part)[linear];
        else
          i32(out(0))[to] = i32(part)[linear];
      });
      offset += shape(part)[dim];
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Broadcast: {
    Shape x = shape(in(0)), inStrides = rowMajorStrides(x);
    size_t lead = shape(out(0)).size() - x.size();
    gather(in(0), out(0), [&](const Shape &coords) {
      int64_t from = 0;
      for (size_t d = 0; d < x.size(); ++d)
        if (x[d] != 1)
          from += coords[lead + d] * inStrides[d];
      return from;
    });
    return absl::OkStatus();
  }
  case plan::OpCode::Sum: {
    // Reduce x to the result's shape (broadcast's adjoint), times a factor.
    Shape x = shape(in(0)), result = shape(out(0)),
          outStrides = rowMajorStrides(result);
    size_t lead = x.size() - result.size();
    std::vector<double> sums(static_cast<size_t>(elementCount(result)), 0.0);
    // The common reductions are over leading dimensions (a bias gradient:
    // result [1, .., 1, x's trailing sizes]) or trailing ones (result [x's
    // leading sizes, 1, .., 1]): contiguous loops, added in the same order
    // as the general case below.
    bool leading = reducesLeading(x, result);
    size_t kept = 0;
    while (kept < result.size() && result[kept] == x[lead + kept])
      ++kept;
    bool trailing =
        lead == 0 && std::all_of(result.begin() + kept, result.end(),
                                 [](int64_t d) { return d == 1; });
    const float *data = f32(in(0));
    int64_t total = elementCount(x), width = elementCount(result);
    if (leading) {
      cpu::sumRows(data, total / width, width, floatAt(0), f32(out(0)));
      return absl::OkStatus();
    }
    if (trailing) {
      int64_t chunk = total / width;
      for (int64_t i = 0; i < width; ++i)
        for (int64_t j = 0; j < chunk; ++j)
          sums[i] += data[i * chunk + j];
    } else
      forEachIndex(x, [&](int64_t linear, const Shape &coords) {
        int64_t to = 0;
        for (size_t d = 0; d < result.size(); ++d)
          if (result[d] != 1)
            to += coords[lead + d] * outStrides[d];
        sums[to] += f32(in(0))[linear];
      });
    for (size_t i = 0; i < sums.size(); ++i)
      f32(out(0))[i] = static_cast<float>(sums[i] * floatAt(0));
    return absl::OkStatus();
  }
  case plan::OpCode::Dropout: {
    plan::DropoutAttrs dropout =
        plan::dropoutAttrs(*instr.ints(), *instr.floats());
    cpu::dropout(f32(in(0)), f32(out(0)), n(out(0)),
                 dropoutProbability(dropout), seed, step, dropout.stream,
                 dropoutPiece(instr));
    return absl::OkStatus();
  }
  case plan::OpCode::CrossEntropy:
  case plan::OpCode::CrossEntropyGrad: {
    bool grad = instr.op() == plan::OpCode::CrossEntropyGrad;
    Shape logits = shape(in(0));
    int64_t vocab = logits.back();
    bool hasLse = instr.inputs()->size() == (grad ? 4u : 3u);
    std::optional<cpu::VocabPiece> piece =
        vocabPiece(instr, 1, vocab, hasLse ? f32(in(grad ? 3 : 2)) : nullptr);
    const cpu::VocabPiece *pieceOrNull = piece ? &*piece : nullptr;
    auto ignore = static_cast<int32_t>(intAt(0));
    if (grad) {
      if (!cpu::crossEntropyGrad(f32(in(0)), i32(in(1)), f32(out(0)), n(in(1)),
                                 vocab, ignore, f32(in(2))[0], pieceOrNull))
        return badIds("label");
      return absl::OkStatus();
    }
    int64_t counted = 0;
    float loss = cpu::crossEntropy(f32(in(0)), i32(in(1)), n(in(1)), vocab,
                                   ignore, &counted, pieceOrNull);
    if (counted < 0)
      return badIds("label");
    f32(out(0))[0] = loss;
    return absl::OkStatus();
  }
  case plan::OpCode::LogSumExp: {
    int64_t columns = shape(in(0)).back();
    std::optional<cpu::VocabPiece> piece =
        vocabPiece(instr, 0, columns, nullptr);
    cpu::logSumExp(f32(in(0)), f32(out(0)), n(out(0)), columns,
                   cpu::classColumns(columns, piece ? &*piece : nullptr));
    return absl::OkStatus();
  }
  case plan::OpCode::Values:
    for (int64_t i = 0; i < n(out(0)); ++i)
      f32(out(0))[i] = static_cast<float>(floatAt(i));
    return absl::OkStatus();
  case plan::OpCode::Fill:
    std::fill_n(f32(out(0)), n(out(0)), static_cast<float>(floatAt(0)));
    return absl::OkStatus();
  case plan::OpCode::ClipCoefficient: {
    stepmath::Clip clip = stepmath::clipCoefficient(f32(in(0))[0], floatAt(0));
    f32(out(0))[0] = clip.coefficient;
    f32(out(1))[0] = clip.norm;
    return absl::OkStatus();
  }
  case plan::OpCode::LrSchedule: {
    plan::LrScheduleAttrs attrs = schedule(instr);
    f32(out(0))[0] =
        stepmath::learningRate(f32(in(0))[0], attrs.peak, attrs.floor,
                               attrs.warmupSteps, attrs.decaySteps);
    return absl::OkStatus();
  }
  case plan::OpCode::Select: {
    uint32_t chosen = f32(in(0))[0] != 0.0f ? in(1) : in(2);
    if (chosen != out(0))
      std::memmove(f32(out(0)), f32(chosen), 4 * n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::LossScaleUpdate: {
    plan::LossScaleAttrs scale =
        plan::lossScaleAttrs(*instr.ints(), *instr.floats());
    stepmath::LossScale next = stepmath::lossScaleUpdate(
        f32(in(0))[0], f32(in(1))[0], f32(in(2))[0], scale.growth,
        scale.backoff, scale.growthInterval);
    f32(out(0))[0] = next.skip;
    f32(out(1))[0] = next.scale;
    f32(out(2))[0] = next.goodSteps;
    f32(out(3))[0] = next.inverse;
    return absl::OkStatus();
  }
  case plan::OpCode::CountValid:
    f32(out(0))[0] = static_cast<float>(
        cpu::countValid(i32(in(0)), n(in(0)), static_cast<int32_t>(intAt(0))));
    return absl::OkStatus();
  case plan::OpCode::Accumulate: {
    float weight = f32(in(2))[0];
    cpu::accumulate(f32(out(0)), f32(in(1)), weight, n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::Reciprocal:
    f32(out(0))[0] = stepmath::reciprocal(f32(in(0))[0]);
    return absl::OkStatus();
  case plan::OpCode::ScaleBy: {
    float factor = f32(in(1))[0];
    cpu::scale(f32(in(0)), factor, f32(out(0)), n(out(0)));
    return absl::OkStatus();
  }
  case plan::OpCode::AllSlice: {
    // No communication: the member index comes from the mesh.
    SliceView view = allSliceView(instr);
    const auto *source = reinterpret_cast<const std::byte *>(f32(in(0)));
    auto *target = reinterpret_cast<std::byte *>(f32(out(0)));
    for (int64_t i = 0; i < view.outer; ++i) {
      std::memcpy(target + i * view.runBytes,
                  source + i * view.xRunBytes + view.offsetBytes,
                  static_cast<size_t>(view.validBytes));
      // A padded split's padding.
      std::memset(target + i * view.runBytes + view.validBytes, 0,
                  static_cast<size_t>(view.runBytes - view.validBytes));
    }
    return absl::OkStatus();
  }
  case plan::OpCode::AllReduce:
  case plan::OpCode::AllGather:
  case plan::OpCode::ReduceScatter:
  case plan::OpCode::AllToAll:
  case plan::OpCode::Send:
  case plan::OpCode::Recv:
    return absl::InternalError(
        "collectives and transfers run through startCollective and "
        "startTransfer");
  }
  return absl::InternalError("unknown op code");
}

} // namespace triad::rt
