//===- CudaExecutor.cpp - runs a verified plan program on a GPU -----------===//
//
// One case per plan op code, mapping the instruction's values and
// attributes (as Plan.cpp checks them) onto the CUDA kernels, the same way
// CpuExecutor.cpp maps them onto the CPU kernels. The shape manipulations
// are strided copies (cuda::stridedCopy) and sums (cuda::reduceSum); the
// optimizer's scalars stay on the device (runtime/kernels/StepMath.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/executor/CudaExecutor.h"

#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cuda/CudaCheck.h"
#include "runtime/kernels/cuda/CudaKernels.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

namespace triad::rt {

namespace {
/// A transfer staged through host memory: the MPI request on a host copy
/// it owns; completing a receive copies the data to its device address.
class StagedTransfer : public CommRequest {
public:
  StagedTransfer(std::unique_ptr<std::vector<float>> host,
                 std::unique_ptr<CommRequest> request, cuda::CudaContext *gpu,
                 void *deviceTarget, size_t bytes)
      : host(std::move(host)), request(std::move(request)), gpu(gpu),
        deviceTarget(deviceTarget), bytes(bytes) {}

  absl::Status wait() override {
    if (absl::Status status = request->wait(); !status.ok())
      return status;
    if (!deviceTarget)
      return absl::OkStatus();
    // The copy leaves the host buffer once queued (pageable memory).
    return gpu->copyToDevice(deviceTarget, host->data(), bytes);
  }

private:
  std::unique_ptr<std::vector<float>> host;
  std::unique_ptr<CommRequest> request;
  cuda::CudaContext *gpu;
  void *deviceTarget;
  size_t bytes;
};

using Shape = std::vector<int64_t>;

cuda::DType cudaType(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::BF16:
    return cuda::DType::BF16;
  case plan::DType::F16:
    return cuda::DType::F16;
  case plan::DType::I32:
    return cuda::DType::I32;
  default:
    return cuda::DType::F32;
  }
}

/// A Matmul's epilogue (KernelCodes.h) as cuBLASLt's.
cuda::Epilogue cudaEpilogue(plan::EpilogueCode code) {
  switch (code) {
  case plan::EpilogueCode::None:
  case plan::EpilogueCode::Accumulate: // cuBLASLt's beta (MatmulOptions)
  case plan::EpilogueCode::Addend:     // cuBLASLt's C (MatmulOptions)
    break;
  case plan::EpilogueCode::Bias:
  case plan::EpilogueCode::BiasAddend:
    return cuda::Epilogue::Bias;
  case plan::EpilogueCode::BiasGeluTanh:
    return cuda::Epilogue::GeluTanhBias;
  case plan::EpilogueCode::BiasRelu:
    return cuda::Epilogue::ReluBias;
  case plan::EpilogueCode::GeluTanhGrad:
    return cuda::Epilogue::GeluTanhGrad;
  }
  return cuda::Epilogue::None;
}

/// A strided copy over `shape` (the result's, or a concat part's), reading
/// x with `xStrides` and writing row-major `outShape`.
absl::StatusOr<cuda::StridedCopy>
copyOver(const Shape &shape, const Shape &xStrides, const Shape &outShape) {
  if (shape.size() > static_cast<size_t>(cuda::kMaxRank))
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend copies tensors of at most ",
                     cuda::kMaxRank, " dimensions, not ", shape.size()));
  cuda::StridedCopy copy;
  copy.rank = static_cast<int>(shape.size());
  Shape outStrides = rowMajorStrides(outShape);
  for (size_t d = 0; d < shape.size(); ++d) {
    copy.shape[d] = shape[d];
    copy.xStrides[d] = xStrides[d];
    copy.bound[d] = std::numeric_limits<int64_t>::max();
    copy.outStrides[d] = outStrides[d];
  }
  return copy;
}

/// NCCL work on the communication stream: completing it makes the compute
/// stream wait for it (the host does not).
class StreamRequest : public CommRequest {
public:
  /// `done` was recorded on the communication stream right after the
  /// collective was enqueued there: waiting orders the compute stream after
  /// that collective alone, not after every one queued since.
  StreamRequest(cudaStream_t compute, cudaEvent_t done)
      : compute(compute), done(done) {}
  ~StreamRequest() override { cudaEventDestroy(done); }

  absl::Status wait() override {
    TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, done, 0));
    return absl::OkStatus();
  }

private:
  cudaStream_t compute;
  cudaEvent_t done;
};

} // namespace

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::create(
    const LoadedPlan &plan, uint32_t pipelineRank, uint64_t seed,
    ExecutorOptions options, cuda::ContextOptions contextOptions, bool nccl,
    std::chrono::milliseconds ncclTimeout, bool recordCalls, bool hostInit) {
  absl::StatusOr<const plan::Program *> program =
      findProgram(plan, pipelineRank, options, "CUDA", /*sixteenBit=*/true);
  if (!program.ok())
    return program.status();
  auto began = std::chrono::steady_clock::now();
  std::unique_ptr<CudaExecutor> executor(
      new CudaExecutor(plan, **program, options));
  if (absl::Status status = executor->connect(); !status.ok())
    return status;
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> context =
      cuda::CudaContext::create(contextOptions);
  if (!context.ok())
    return context.status();
  executor->gpu = std::move(*context);
  executor->recordsCalls = recordCalls;
  if (nccl) {
    // The plan's groups by their axes, for NCCL's error messages.
    std::vector<std::string> groupNames;
    if (const auto *groups = plan.root().groups())
      for (const plan::Group *group : *groups) {
        std::vector<std::string> axes;
        if (group->axes())
          for (const flatbuffers::String *axis : *group->axes())
            axes.push_back(axis->str());
        groupNames.push_back(absl::StrCat("[", absl::StrJoin(axes, ", "), "]"));
      }
    absl::StatusOr<std::unique_ptr<nccl::NcclCommunicator>> comm =
        nccl::NcclCommunicator::create(*executor->communicator, ncclTimeout,
                                       std::move(groupNames));
    if (!comm.ok())
      return absl::Status(
          comm.status().code(),
          absl::StrCat("cannot set up NCCL: ", comm.status().message()));
    executor->ncclComm = std::move(*comm);
    TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(
        &executor->commStream, cudaStreamNonBlocking));
    for (cudaEvent_t &event : executor->drained)
      TRIAD_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    // The staging buffers at their largest now: growing one later would
    // free the old one, which waits for the whole device (NCCL kernels
    // waiting on peers included).
    NcclStaging most = executor->largestNcclStaging();
    for (auto [buffer, count] :
         {std::pair{&executor->stagedDevice[0], most.packed.first},
          {&executor->stagedDevice[1], most.packed.second},
          {&executor->stagedWide[0], most.widened.first},
          {&executor->stagedWide[1], most.widened.second}})
      if (count > 0)
        if (absl::StatusOr<float *> grownBuffer =
                executor->grown(*buffer, count);
            !grownBuffer.ok())
          return grownBuffer.status();
  }
  executor->endPhase("setup", began);
  size_t bytes = std::max<uint64_t>((*program)->arena_bytes(), 256);
  absl::StatusOr<cuda::DeviceBuffer> arena =
      cuda::DeviceBuffer::allocate(bytes);
  if (!arena.ok())
    return absl::Status(
        arena.status().code(),
        absl::StrCat("cannot allocate the program's arena of ", bytes,
                     " bytes on the GPU: ", arena.status().message()));
  executor->arena = std::move(*arena);
  // The f32 copies of 16-bit operands at their largest now, for the same
  // reason as the staging buffers.
  if (absl::Status status = executor->sizeWidePool(); !status.ok())
    return status;
  ++cuda::issueCounts().copies;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(executor->arena.data(), 0, bytes,
                                             executor->gpu->stream()));
  if (absl::Status status = executor->gpu->synchronize(); !status.ok())
    return status;
  executor->endPhase("arena", began);
  executor->seed = seed;
  if (absl::Status status = executor->initialize(hostInit); !status.ok())
    return status;
  return executor;
}

absl::Status CudaExecutor::initialize(bool onHost) {
  auto began = std::chrono::steady_clock::now();
  std::vector<std::vector<const plan::Persistent *>> groups = initGroups();
  // A group's values drawn once on the host and written to each member
  // (rounded to 16 bits for a 16-bit one), through one host buffer.
  HostTensor initial;
  double drawing = 0;
  auto drawOnHost =
      [&](const std::vector<const plan::Persistent *> &group) -> absl::Status {
    auto drawn = std::chrono::steady_clock::now();
    initial.shape = shapeOf(value(group[0]->value()));
    initial.floats.resize(static_cast<size_t>(elementCount(initial.shape)));
    if (absl::Status status = initialValues(*group[0], initial.floats.data());
        !status.ok())
      return status;
    drawing +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - drawn)
            .count();
    for (const plan::Persistent *p : group)
      if (absl::Status status = writeValue(p->value(), initial); !status.ok())
        return status;
    return absl::OkStatus();
  };
  if (!onHost) {
    // Each group's values drawn once on the GPU, into its f32 member where
    // it has one (a master copy) or a temporary, then cast or copied to the
    // others; zeros are the arena's already. A tensor of more dimensions
    // than the kernel takes, or a temporary the GPU has no room for, is
    // drawn on the host instead.
    for (const std::vector<const plan::Persistent *> &group : groups) {
      absl::StatusOr<InitDraw> draw = initDraw(*group[0]);
      if (!draw.ok())
        return draw.status();
      cuda::InitPiece piece;
      piece.dims = static_cast<int32_t>(draw->local.size());
      if (piece.dims > cuda::kInitDims) {
        if (absl::Status status = drawOnHost(group); !status.ok())
          return status;
        continue;
      }
      for (int32_t d = 0; d < piece.dims; ++d) {
        piece.local[d] = draw->local[d];
        piece.offsets[d] = draw->offsets[d];
        piece.globalStrides[d] = draw->globalStrides[d];
        piece.inside[d] = draw->inside[d];
      }
      int64_t count = elementCount(draw->local);
      float *values = nullptr;
      cuda::DeviceBuffer apart;
      if (const plan::Persistent *wide = f32Member(group)) {
        values = static_cast<float *>(arenaAddress(wide->value()));
      } else {
        absl::StatusOr<cuda::DeviceBuffer> buffer =
            cuda::DeviceBuffer::allocate(static_cast<size_t>(count) * 4);
        if (!buffer.ok()) {
          cudaGetLastError();
          if (absl::Status status = drawOnHost(group); !status.ok())
            return status;
          continue;
        }
        apart = std::move(*buffer);
        values = apart.as<float>();
      }
      if (absl::Status status =
              cuda::initValues(*gpu, values, piece, draw->normal, draw->fill,
                               draw->key[0], draw->key[1], draw->stddev);
          !status.ok())
        return status;
      for (const plan::Persistent *p : group) {
        void *target = arenaAddress(p->value());
        if (target == values)
          continue;
        if (isSixteenBit(p->value())) {
          if (absl::Status status =
                  cuda::cast(*gpu, values, cuda::DType::F32, target,
                             typedResult(p->value()).type, count);
              !status.ok())
            return status;
        } else {
          ++cuda::issueCounts().copies;
          TRIAD_CUDA_RETURN_IF_ERROR(
              cudaMemcpyAsync(target, values, static_cast<size_t>(count) * 4,
                              cudaMemcpyDeviceToDevice, gpu->stream()));
        }
      }
      // (A temporary is freed only once the work reading it is done.)
      if (apart.data())
        if (absl::Status status = gpu->synchronize(); !status.ok())
          return status;
    }
    if (absl::Status status = gpu->synchronize(); !status.ok())
      return status;
    std::vector<uint16_t>().swap(hostBits);
    endPhase("initial values on the GPU", began);
    return absl::OkStatus();
  }
  // On the host: one host buffer for every group, at the largest group's
  // size.
  size_t largest = 0;
  for (const std::vector<const plan::Persistent *> &group : groups)
    largest = std::max<size_t>(largest,
                               elementCount(shapeOf(value(group[0]->value()))));
  initial.floats.reserve(largest);
  hostBits.reserve(largest);
  for (const std::vector<const plan::Persistent *> &group : groups)
    if (absl::Status status = drawOnHost(group); !status.ok())
      return status;
  if (absl::Status status = gpu->synchronize(); !status.ok())
    return status;
  std::vector<uint16_t>().swap(hostBits);
  // The draws, and the rest of the loop: rounding to 16 bits and the
  // copies to the GPU.
  double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count();
  addPhase("initial values", drawing);
  addPhase("copies to the GPU", std::max(0.0, total - drawing));
  return absl::OkStatus();
}

void CudaExecutor::GraphExecDeleter::operator()(CUgraphExec_st *exec) const {
  cudaGraphExecDestroy(exec);
}

CudaExecutor::~CudaExecutor() {
  // A receive staged through the host still copies into the arena, and
  // NCCL's are ordered before the drain below.
  drainInFlight();
  if (commStream) {
    // NCCL may still use the arena and the staging buffers. Polled: a
    // peer that died would leave a plain synchronization waiting forever;
    // a failure aborts the communicators, which ends their kernels, and
    // the streams then finish without them (a destructor cannot report).
    if (ncclComm && !ncclComm->aborted())
      drainStreams("the last GPU work before the executor is destroyed",
                   /*commToo=*/true)
          .IgnoreError();
    cudaStreamSynchronize(commStream);
    cudaStreamDestroy(commStream);
  }
  for (cudaEvent_t event : drained)
    if (event)
      cudaEventDestroy(event);
  // The recorded calls go once the last replay is done.
  if (gpu && recordings.recordings() > 0)
    cudaStreamSynchronize(gpu->stream());
  recordings.clear();
}

absl::Status CudaExecutor::drainStreams(std::string what, bool commToo) {
  if (ncclComm->aborted()) {
    // Their kernels are gone, so the streams end without them.
    TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(gpu->stream()));
    TRIAD_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(commStream));
    return ncclComm->wait(std::move(what), [] { return true; });
  }
  size_t events = commToo ? 2 : 1;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaEventRecord(drained[0], gpu->stream()));
  if (commToo)
    TRIAD_CUDA_RETURN_IF_ERROR(cudaEventRecord(drained[1], commStream));
  return ncclComm->wait(std::move(what),
                        [this, events]() -> absl::StatusOr<bool> {
                          for (size_t i = 0; i < events; ++i) {
                            cudaError_t state = cudaEventQuery(drained[i]);
                            if (state == cudaErrorNotReady)
                              return false;
                            if (state != cudaSuccess)
                              return cuda::cudaStatus(state, "cudaEventQuery");
                          }
                          return true;
                        });
}

template <typename Issue>
absl::Status CudaExecutor::timedOn(cudaStream_t stream, bool communication,
                                   Issue issue) {
  if (!timing)
    return issue();
  absl::StatusOr<size_t> begin = timeline.mark(stream);
  if (!begin.ok())
    return begin.status();
  absl::Status status = issue();
  absl::StatusOr<size_t> end = timeline.mark(stream);
  if (!status.ok())
    return status;
  if (!end.ok())
    return end.status();
  spans.push_back({*timing, *begin, *end, communication});
  return absl::OkStatus();
}

absl::Status CudaExecutor::deviceSpans(std::vector<InstructionTime> *times) {
  if (!times || spans.empty()) {
    spans.clear();
    timeline.clear();
    return absl::OkStatus();
  }
  // The marks on the communication stream end with the work tracked in
  // flight, which finish has waited for; polled all the same, so that a
  // peer that failed cannot leave this waiting.
  if (ncclComm)
    if (absl::Status status =
            drainStreams("the device times of the traced instructions",
                         /*commToo=*/true);
        !status.ok()) {
      spans.clear();
      timeline.clear();
      return status;
    }
  std::vector<DeviceSpan> done = std::move(spans);
  spans.clear();
  std::vector<std::pair<size_t, size_t>> marks;
  for (const DeviceSpan &span : done)
    marks.emplace_back(span.begin, span.end);
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> at =
      timeline.resolve(gpu->stream(), marks);
  if (!at.ok())
    return at.status();
  for (size_t i = 0; i < done.size(); ++i) {
    const DeviceSpan &span = done[i];
    times->push_back({span.at.instr->op(), (*at)[i].first, (*at)[i].second,
                      /*wait=*/false, span.at.instr, span.at.index,
                      span.at.function, span.at.microbatch, /*onDevice=*/true,
                      span.communication});
  }
  return absl::OkStatus();
}

template <typename Work>
absl::Status CudaExecutor::onCommStream(const plan::Instr &instr, size_t index,
                                        const Touched &touched, Work work) {
  cudaEvent_t ready = nullptr;
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  absl::Status status = cuda::cudaStatus(cudaEventRecord(ready, gpu->stream()),
                                         "cudaEventRecord");
  if (status.ok())
    status = cuda::cudaStatus(cudaStreamWaitEvent(commStream, ready, 0),
                              "cudaStreamWaitEvent");
  cudaEventDestroy(ready);
  if (status.ok())
    status = timedOn(commStream, /*communication=*/true,
                     [&] { return work(commStream); });
  if (!status.ok()) {
    // What `work` enqueued before it failed may still read or write the
    // buffers: the compute stream waits for it before it reuses them.
    cudaEvent_t failedAt = nullptr;
    if (cudaEventCreateWithFlags(&failedAt, cudaEventDisableTiming) ==
        cudaSuccess) {
      if (cudaEventRecord(failedAt, commStream) == cudaSuccess)
        cudaStreamWaitEvent(gpu->stream(), failedAt, 0);
      cudaEventDestroy(failedAt);
    }
    return status;
  }
  // One event per pair, each recorded right after the work: a later
  // instruction waits for the pair it touches (StreamRequest).
  for (const auto &[x, out] : touched) {
    cudaEvent_t done = nullptr;
    TRIAD_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    if (absl::Status recorded = cuda::cudaStatus(
            cudaEventRecord(done, commStream), "cudaEventRecord");
        !recorded.ok()) {
      cudaEventDestroy(done);
      return recorded;
    }
    if (absl::Status tracked = track(
            std::nullopt, std::make_unique<StreamRequest>(gpu->stream(), done),
            instr, index, x, out);
        !tracked.ok())
      return tracked;
  }
  return absl::OkStatus();
}

void *CudaExecutor::arenaAddress(uint32_t index) const {
  return arena.as<std::byte>() + offsetOf(index);
}

void *CudaExecutor::address(uint32_t index) const {
  return typedResult(index).data;
}

cuda::Result CudaExecutor::typedResult(uint32_t index) const {
  for (const auto &[widenedIndex, copy] : widened)
    if (widenedIndex == index)
      return {copy, cuda::DType::F32};
  return {arenaAddress(index), cudaType(value(index).dtype())};
}

cuda::Operand CudaExecutor::typedOperand(uint32_t index) const {
  cuda::Result where = typedResult(index);
  return {where.data, where.type};
}

int64_t CudaExecutor::elementBytes(uint32_t index) const {
  return isSixteenBit(index) ? 2 : 4;
}

int64_t CudaExecutor::addressedBytes(uint32_t index) const {
  return typedResult(index).type == cuda::DType::F32 ? 4 : elementBytes(index);
}

absl::Status CudaExecutor::writeValue(uint32_t index, const HostTensor &arg) {
  int64_t n = elementCount(shapeOf(value(index)));
  if (isSixteenBit(index)) {
    // (A copy from pageable memory returns once it has taken the bytes.)
    hostBits.resize(static_cast<size_t>(n));
    cpu::narrow(value(index).dtype() == plan::DType::BF16, arg.floats.data(),
                hostBits.data(), n);
    return gpu->copyToDevice(arenaAddress(index), hostBits.data(), 2 * n);
  }
  const void *source = value(index).dtype() == plan::DType::I32
                           ? static_cast<const void *>(arg.ints.data())
                           : static_cast<const void *>(arg.floats.data());
  return gpu->copyToDevice(arenaAddress(index), source, 4 * n);
}

absl::Status CudaExecutor::readValue(uint32_t index, HostTensor &result) {
  int64_t n = elementCount(result.shape);
  if (isSixteenBit(index)) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    if (absl::Status status =
            gpu->copyToHost(bits.data(), arenaAddress(index), 2 * n);
        !status.ok())
      return status;
    result.floats.resize(n);
    cpu::widen(value(index).dtype() == plan::DType::BF16, bits.data(),
               result.floats.data(), n);
    return absl::OkStatus();
  }
  void *target;
  if (value(index).dtype() != plan::DType::I32) {
    result.floats.resize(n);
    target = result.floats.data();
  } else {
    result.ints.resize(n);
    target = result.ints.data();
  }
  return gpu->copyToHost(target, arenaAddress(index), 4 * n);
}

absl::Status CudaExecutor::settle(bool) {
  // With NCCL the compute stream may wait for NCCL's kernels: poll until
  // it is done, so that the synchronization below returns at once. (The
  // communication stream is left alone: a timed instruction's time is its
  // own, before a call's results are read the compute stream has waited
  // for what writes them, and in finish for every collective and
  // transfer.)
  if (ncclComm)
    if (absl::Status status = drainStreams("the GPU work enqueued so far",
                                           /*commToo=*/false);
        !status.ok())
      return status;
  return gpu->synchronize();
}

const CudaExecutor::Recordable &CudaExecutor::recordable(uint32_t index) {
  auto [it, inserted] = recordableFunctions.try_emplace(index);
  Recordable &answer = it->second;
  const plan::Function &function = *program->functions()->Get(index);
  if (!inserted || !function.body())
    return answer;
  for (const plan::Instr *instr : *function.body()) {
    if (isTransfer(instr->op())) {
      answer.cannot = "it sends to or receives from another pipeline stage, "
                      "which may wait for a later call";
      break;
    }
    if (isCollective(instr->op()) && !ncclComm) {
      answer.cannot = "its collectives are staged through host memory (with "
                      "NCCL they are recorded)";
      break;
    }
    answer.nccl |= isCollective(instr->op());
  }
  return answer;
}

CallMode CudaExecutor::callMode(const CallKey &key) {
  if (!recordsCalls)
    return CallMode::Direct;
  return recordings.mode(key, recordable(key.function).cannot);
}

absl::Status CudaExecutor::beginCall(uint64_t step, uint32_t microbatch) {
  return recordsCalls ? gpu->setCall(step, microbatch) : absl::OkStatus();
}

absl::Status CudaExecutor::startRecording() {
  // Recordings hold the addresses of the scratch and the tables.
  gpu->holdForRecordings();
  // What is recorded is not issued until the recording is launched.
  countsBeforeRecording = cuda::issueCounts();
  // Thread-local: a call this thread may not make while recording (one
  // that would wait for the device, or upload from pageable memory) fails
  // the recording, and the call then runs directly.
  TRIAD_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(gpu->stream(), cudaStreamCaptureModeThreadLocal));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaExecutor::endRecording(const CallKey &key,
                                                absl::Status body) {
  cudaGraph_t graph = nullptr;
  if (gpu->recording()) {
    cudaError_t ended = cudaStreamEndCapture(gpu->stream(), &graph);
    if (body.ok())
      body = cuda::cudaStatus(ended, "cudaStreamEndCapture");
  }
  cuda::issueCounts() = countsBeforeRecording;
  cudaGraphExec_t exec = nullptr;
  if (body.ok())
    body = cuda::cudaStatus(cudaGraphInstantiate(&exec, graph, 0),
                            "cudaGraphInstantiate");
  if (graph)
    cudaGraphDestroy(graph);
  if (!body.ok()) {
    // A call the recording refused leaves its error as the thread's last
    // one, which the next launch check would report.
    cudaGetLastError();
    // Whether an NCCL call is part of a graph must be the same on every
    // rank: this rank running it directly while its peers replay theirs
    // would hang them. The ranks do not agree on a fallback, so it is an
    // error.
    if (recordable(key.function).nccl)
      return absl::Status(
          body.code(),
          absl::StrCat("recording the call as a CUDA graph failed on this "
                       "rank, after its NCCL calls were recorded (run "
                       "without --cuda-graphs): ",
                       body.message()));
    recordings.refused(key,
                       absl::StrCat("recording it failed: ", body.message()));
    return false;
  }
  recordings.recorded(key, GraphExec(exec));
  if (absl::Status launched = replay(key); !launched.ok())
    return launched;
  return true;
}

absl::Status CudaExecutor::replay(const CallKey &key) {
  const GraphExec *exec = recordings.recording(key);
  if (!exec)
    return absl::InternalError("no recording of this call to replay");
  ++cuda::issueCounts().graphs;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec->get(), gpu->stream()));
  return absl::OkStatus();
}

std::vector<std::string> CudaExecutor::callsNotRecorded() const {
  std::vector<std::string> lines;
  for (const auto &[key, why] : recordings.refusals())
    lines.push_back(absl::StrCat(
        "function '", program->functions()->Get(key.function)->name()->str(),
        "'", key.slot ? absl::StrCat(" (slot ", key.slot, ")") : "",
        key.evaluating ? " evaluating" : "", ": ", why));
  return lines;
}

absl::Status CudaExecutor::copyValue(uint32_t from, uint32_t to,
                                     int64_t bytes) {
  if (from == to || bytes == 0)
    return absl::OkStatus();
  ++cuda::issueCounts().copies;
  TRIAD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(address(to), address(from), bytes,
                                             cudaMemcpyDeviceToDevice,
                                             gpu->stream()));
  return absl::OkStatus();
}

absl::StatusOr<float *> CudaExecutor::grown(cuda::DeviceBuffer &buffer,
                                            int64_t count) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * 4;
  if (buffer.size() < bytes) {
    // The streams may still read the old buffer.
    if (ncclComm)
      if (absl::Status status = drainStreams(
              "the GPU work before a buffer grows", /*commToo=*/true);
          !status.ok())
        return status;
    if (absl::Status status = gpu->synchronize(); !status.ok())
      return status;
    absl::StatusOr<cuda::DeviceBuffer> larger =
        cuda::DeviceBuffer::allocate(bytes);
    if (!larger.ok())
      return larger.status();
    buffer = std::move(*larger);
  }
  return buffer.as<float>();
}

absl::Status CudaExecutor::sizeWidePool() {
  std::vector<int64_t> most;
  for (const plan::Function *function : *program->functions()) {
    if (!function->body())
      continue;
    for (const plan::Instr *instr : *function->body()) {
      std::vector<uint32_t> sixteen = sixteenBitOperands(*instr);
      if (sixteen.empty() || runsIn16Bit(*instr))
        continue;
      if (most.size() < sixteen.size())
        most.resize(sixteen.size(), 0);
      for (size_t i = 0; i < sixteen.size(); ++i)
        most[i] = std::max(most[i], elementCount(shapeOf(value(sixteen[i]))));
    }
  }
  widePool.resize(most.size());
  for (size_t i = 0; i < most.size(); ++i)
    if (absl::StatusOr<float *> copy = grown(widePool[i], most[i]); !copy.ok())
      return copy.status();
  return absl::OkStatus();
}

CudaExecutor::NcclStaging CudaExecutor::largestNcclStaging() const {
  NcclStaging most;
  auto atLeast = [](PackedStaging &largest, PackedStaging need) {
    largest.first = std::max(largest.first, need.first);
    largest.second = std::max(largest.second, need.second);
  };
  for (const plan::Function *function : *program->functions()) {
    if (!function->body())
      continue;
    for (const plan::Instr *instr : *function->body()) {
      plan::OpCode op = instr->op();
      if (op != plan::OpCode::AllReduce && op != plan::OpCode::AllGather &&
          op != plan::OpCode::ReduceScatter && op != plan::OpCode::AllToAll)
        continue;
      NcclStaging need = ncclStaging(*instr);
      atLeast(most.packed, need.packed);
      atLeast(most.widened, need.widened);
    }
  }
  return most;
}

absl::StatusOr<float *> CudaExecutor::staged(const cuda::DeviceBuffer &buffer,
                                             int64_t count) const {
  if (buffer.size() < static_cast<size_t>(count) * 4)
    return absl::InternalError(
        absl::StrCat("a collective needs ", count,
                     " floats of staging, but its buffer "
                     "was sized for ",
                     buffer.size() / 4, " when the executor was created"));
  return buffer.as<float>();
}

absl::Status CudaExecutor::movePieces(const float *from, float *to,
                                      const std::vector<int64_t> &shape,
                                      int64_t dim, int64_t pieces, bool join,
                                      cudaStream_t stream) {
  // The tensor as [outer][pieces][run] and the packed blocks as
  // [pieces][outer][run] (runtime/comm/Collectives.h).
  int64_t outer = outerElements(shape, dim);
  int64_t run = outer == 0 ? 0 : elementCount(shape) / outer / pieces;
  int64_t a = join ? pieces : outer, b = join ? outer : pieces;
  // Target [b][a][run] from source [a][b][run].
  Shape target = {b, a, run};
  absl::StatusOr<cuda::StridedCopy> copy =
      copyOver(target, {run, b * run, 1}, target);
  if (!copy.ok())
    return copy.status();
  return cuda::stridedCopy(stream, from, to, *copy);
}

absl::StatusOr<TensorCollective>
CudaExecutor::ncclTensor(const plan::Instr &instr, size_t pair) const {
  uint32_t x = instr.inputs()->Get(pair), out = instr.outputs()->Get(pair);
  TensorCollective c = describeCollective(instr, f32(x), f32(out), pair);
  if (c.group >= ncclComm->groupCount())
    return absl::InvalidArgumentError(
        absl::StrCat("group ", c.group, " is not one of the ",
                     ncclComm->groupCount(), " communicator groups"));
  int64_t members = ncclComm->groupSize(c.group);
  if (absl::StatusOr<TensorShape> shape = resultShape(c, members); !shape.ok())
    return shape.status();
  if ((c.kind == CollectiveKind::AllGather &&
       c.outShape[c.dim] != c.xShape[c.dim] * members) ||
      (c.kind == CollectiveKind::ReduceScatter &&
       c.xShape[c.dim] != c.outShape[c.dim] * members))
    return absl::UnimplementedError(
        "a collective of padded pieces (ZeRO's split of a dimension the "
        "data-parallel ranks do not divide) does not run over NCCL yet; "
        "use --comm mpi");
  return c;
}

CudaExecutor::NcclStaging
CudaExecutor::ncclStaging(const plan::Instr &instr) const {
  NcclStaging need;
  size_t tensors = instr.inputs()->size();
  for (size_t pair = 0; pair < tensors; ++pair) {
    TensorCollective c = describeCollective(instr, nullptr, nullptr, pair);
    if (c.group >= ncclComm->groupCount())
      continue; // refused when it runs
    PackedStaging packed = packedStaging(c, ncclComm->groupSize(c.group));
    PackedStaging widened = isSixteenBit(instr.inputs()->Get(pair))
                                ? widenedStaging(c)
                                : PackedStaging{0, 0};
    // A bucket's tensors are staged side by side; a lone one on its own.
    auto add = [&](PackedStaging &total, PackedStaging part) {
      total.first = tensors > 1 ? total.first + part.first
                                : std::max(total.first, part.first);
      total.second = tensors > 1 ? total.second + part.second
                                 : std::max(total.second, part.second);
    };
    add(need.packed, packed);
    add(need.widened, widened);
  }
  return need;
}

absl::Status CudaExecutor::ncclBucket(const plan::Instr &instr, size_t index) {
  size_t tensors = instr.inputs()->size();
  bool gather = instr.op() == plan::OpCode::AllGather;
  NcclStaging need = ncclStaging(instr);
  float *packedBase = nullptr, *wideX = nullptr, *wideOut = nullptr;
  for (auto [target, buffer, count] :
       {std::tuple{&packedBase, &stagedDevice[0], need.packed.first},
        std::tuple{&wideX, &stagedWide[0], need.widened.first},
        std::tuple{&wideOut, &stagedWide[1], need.widened.second}}) {
    if (count == 0)
      continue;
    absl::StatusOr<float *> staging = staged(*buffer, count);
    if (!staging.ok())
      return staging.status();
    *target = *staging;
  }
  // Each tensor's parts of the staging buffers, and what NCCL moves.
  struct Part {
    TensorCollective c;
    uint32_t x, out;
    float *wideX = nullptr, *wideOut = nullptr, *packed = nullptr;
  };
  std::vector<Part> parts;
  std::vector<nccl::NcclCommunicator::Piece> pieces;
  Touched touched;
  int64_t members = 0;
  for (size_t pair = 0; pair < tensors; ++pair) {
    absl::StatusOr<TensorCollective> c = ncclTensor(instr, pair);
    if (!c.ok())
      return c.status();
    members = ncclComm->groupSize(c->group);
    Part part{*c, instr.inputs()->Get(pair), instr.outputs()->Get(pair)};
    touched.push_back({part.x, part.out});
    if (isSixteenBit(part.x)) {
      PackedStaging widened = widenedStaging(part.c);
      part.wideX = wideX;
      part.wideOut = wideOut;
      wideX += widened.first;
      wideOut += widened.second;
      part.c.x = part.wideX;
      part.c.out = part.wideOut;
    }
    PackedStaging packed = packedStaging(part.c, members);
    if (packed.first > 0) {
      part.packed = packedBase;
      packedBase += packed.first;
    }
    int64_t count = elementCount(part.c.xShape);
    if (count > 0)
      pieces.push_back(
          gather ? nccl::NcclCommunicator::Piece{part.c.x,
                                                 part.packed ? part.packed
                                                             : part.c.out,
                                                 count}
                 : nccl::NcclCommunicator::Piece{part.packed ? part.packed
                                                             : part.c.x,
                                                 part.c.out, count / members});
    parts.push_back(part);
  }
  ncclComm->setCaller(absl::StrCat("instruction ", index, " (",
                                   plan::EnumNameOpCode(instr.op()),
                                   "), a bucket of ", tensors, " tensors"));
  return onCommStream(
      instr, index, touched, [&](cudaStream_t stream) -> absl::Status {
        // Widened, and (a reduce-scatter's) packed, before the group.
        for (const Part &p : parts) {
          int64_t count = elementCount(p.c.xShape);
          if (p.wideX)
            if (absl::Status status = cuda::cast(
                    stream, arenaAddress(p.x), cudaType(value(p.x).dtype()),
                    p.wideX, cuda::DType::F32, count);
                !status.ok())
              return status;
          if (!gather && p.packed)
            if (absl::Status status =
                    movePieces(p.c.x, p.packed, p.c.xShape, p.c.dim, members,
                               /*join=*/false, stream);
                !status.ok())
              return status;
        }
        if (!pieces.empty()) {
          // One group: NCCL launches it as one operation.
          ++cuda::issueCounts().ncclCalls;
          if (absl::Status status = ncclComm->grouped(
                  parts.front().c.group,
                  gather ? nccl::NcclCommunicator::Grouped::AllGather
                         : nccl::NcclCommunicator::Grouped::ReduceScatter,
                  pieces, stream);
              !status.ok())
            return status;
        }
        // (An all-gather's) unpacked, and rounded back, after it.
        for (const Part &p : parts) {
          if (gather && p.packed)
            if (absl::Status status =
                    movePieces(p.packed, p.c.out, p.c.outShape, p.c.dim,
                               members, /*join=*/true, stream);
                !status.ok())
              return status;
          if (p.wideOut)
            if (absl::Status status = cuda::cast(
                    stream, p.wideOut, cuda::DType::F32, arenaAddress(p.out),
                    cudaType(value(p.out).dtype()), elementCount(p.c.outShape));
                !status.ok())
              return status;
        }
        return absl::OkStatus();
      });
}

absl::Status CudaExecutor::ncclCollective(const plan::Instr &instr,
                                          size_t index, size_t pair) {
  uint32_t x = instr.inputs()->Get(pair), out = instr.outputs()->Get(pair);
  absl::StatusOr<TensorCollective> checked = ncclTensor(instr, pair);
  if (!checked.ok())
    return checked.status();
  TensorCollective c = *checked;
  int64_t members = ncclComm->groupSize(c.group);
  int64_t count = elementCount(c.xShape);
  // Nothing to move (an empty span where it is timed).
  if (count == 0)
    return timedOn(commStream, /*communication=*/true,
                   [] { return absl::OkStatus(); });
  ncclComm->setCaller(absl::StrCat(
      "instruction ", index, " (", plan::EnumNameOpCode(instr.op()), ")",
      instr.inputs()->size() > 1 ? absl::StrCat(", tensor ", pair) : ""));
  // 16-bit tensors are widened to f32, moved and reduced in f32 and
  // rounded once, as startCollective does over MPI, so that a 16-bit plan
  // has the same losses over both (an all-reduce runs in place on the
  // widened x).
  bool sixteen = isSixteenBit(x);
  cuda::DType type = cudaType(value(x).dtype());
  PackedStaging widened = widenedStaging(c);
  return onCommStream(
      instr, index, {{x, out}}, [&](cudaStream_t stream) -> absl::Status {
        if (!sixteen)
          return ncclMove(c, members, stream);
        absl::StatusOr<float *> wideX = staged(stagedWide[0], widened.first);
        if (!wideX.ok())
          return wideX.status();
        float *wideOut = *wideX;
        if (widened.second > 0) {
          absl::StatusOr<float *> buffer =
              staged(stagedWide[1], widened.second);
          if (!buffer.ok())
            return buffer.status();
          wideOut = *buffer;
        }
        if (absl::Status status = cuda::cast(stream, arenaAddress(x), type,
                                             *wideX, cuda::DType::F32, count);
            !status.ok())
          return status;
        TensorCollective wide = c;
        wide.x = *wideX;
        wide.out = wideOut;
        if (absl::Status status = ncclMove(wide, members, stream); !status.ok())
          return status;
        return cuda::cast(stream, wideOut, cuda::DType::F32, arenaAddress(out),
                          type, elementCount(c.outShape));
      });
}

absl::Status CudaExecutor::ncclMove(const TensorCollective &c, int64_t members,
                                    cudaStream_t stream) {
  int64_t count = elementCount(c.xShape);
  PackedStaging need = packedStaging(c, members);
  // Every kind below makes one NCCL call.
  ++cuda::issueCounts().ncclCalls;
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    return ncclComm->allReduceSum(c.group, c.x, c.out, count, stream);
  case CollectiveKind::AllGather: {
    if (need.first == 0)
      return ncclComm->allGather(c.group, c.x, c.out, count, stream);
    absl::StatusOr<float *> gathered = staged(stagedDevice[0], need.first);
    if (!gathered.ok())
      return gathered.status();
    if (absl::Status s =
            ncclComm->allGather(c.group, c.x, *gathered, count, stream);
        !s.ok())
      return s;
    return movePieces(*gathered, c.out, c.outShape, c.dim, members,
                      /*join=*/true, stream);
  }
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll: {
    const float *source = c.x;
    if (need.first > 0) {
      absl::StatusOr<float *> packed = staged(stagedDevice[0], need.first);
      if (!packed.ok())
        return packed.status();
      if (absl::Status s = movePieces(c.x, *packed, c.xShape, c.dim, members,
                                      /*join=*/false, stream);
          !s.ok())
        return s;
      source = *packed;
    }
    if (c.kind == CollectiveKind::ReduceScatter)
      return ncclComm->reduceScatter(c.group, source, c.out, count / members,
                                     stream);
    bool join = need.second > 0;
    float *target = c.out;
    if (join) {
      absl::StatusOr<float *> received = staged(stagedDevice[1], need.second);
      if (!received.ok())
        return received.status();
      target = *received;
    }
    if (absl::Status s = ncclComm->allToAll(c.group, source, target,
                                            count / members, stream);
        !s.ok())
      return s;
    if (!join)
      return absl::OkStatus();
    return movePieces(target, c.out, c.outShape, c.concatDim, members,
                      /*join=*/true, stream);
  }
  }
  return absl::InternalError("unknown collective");
}

absl::Status CudaExecutor::startCollective(const plan::Instr &instr,
                                           size_t index) {
  size_t tensors = instr.inputs()->size();
  if (ncclComm) {
    // A bucket (of all-gathers or reduce-scatters) is one NCCL group (not
    // yet run on a GPU).
    if (tensors > 1)
      return ncclBucket(instr, index);
    for (size_t pair = 0; pair < tensors; ++pair)
      if (absl::Status status = ncclCollective(instr, index, pair);
          !status.ok())
        return status;
    return absl::OkStatus();
  }
  return timedOn(gpu->stream(), /*communication=*/false,
                 [&] { return stageCollective(instr); });
}

absl::Status CudaExecutor::stageCollective(const plan::Instr &instr) {
  size_t tensors = instr.inputs()->size();
  // Staged through the host: the MPI communicator moves host memory. The
  // collective completes here (the GPU cannot run ahead of data it has not
  // received), so it does not overlap the instructions after it.
  // 16-bit values are widened on the host, reduced in f32 and rounded once.
  // A bucket's tensors are staged one after the other and move as one
  // collective (runBucket).
  std::vector<int64_t> xCounts, outCounts;
  int64_t xTotal = 0, outTotal = 0;
  for (size_t pair = 0; pair < tensors; ++pair) {
    xCounts.push_back(elementCount(shapeOf(value(instr.inputs()->Get(pair)))));
    outCounts.push_back(
        elementCount(shapeOf(value(instr.outputs()->Get(pair)))));
    xTotal += xCounts.back();
    outTotal += outCounts.back();
  }
  stagedX.resize(std::max<int64_t>(xTotal, 1));
  stagedOut.resize(std::max<int64_t>(outTotal, 1));
  std::vector<uint16_t> bits;
  std::vector<TensorCollective> bucket;
  for (size_t pair = 0, xAt = 0, outAt = 0; pair < tensors; ++pair) {
    uint32_t x = instr.inputs()->Get(pair);
    bool sixteen = isSixteenBit(x),
         bf16 = value(x).dtype() == plan::DType::BF16;
    float *host = stagedX.data() + xAt;
    if (sixteen) {
      bits.resize(std::max<int64_t>(xCounts[pair], 1));
      if (absl::Status status =
              gpu->copyToHost(bits.data(), arenaAddress(x), 2 * xCounts[pair]);
          !status.ok())
        return status;
      cpu::widen(bf16, bits.data(), host, xCounts[pair]);
    } else if (absl::Status status =
                   gpu->copyToHost(host, arenaAddress(x), 4 * xCounts[pair]);
               !status.ok()) {
      return status;
    }
    bucket.push_back(
        describeCollective(instr, host, stagedOut.data() + outAt, pair));
    xAt += xCounts[pair];
    outAt += outCounts[pair];
  }
  if (absl::Status status = tensors == 1
                                ? runCollective(*communicator, bucket.front())
                                : runBucket(*communicator, bucket);
      !status.ok())
    return status;
  for (size_t pair = 0, outAt = 0; pair < tensors; ++pair) {
    uint32_t out = instr.outputs()->Get(pair);
    float *host = stagedOut.data() + outAt;
    outAt += outCounts[pair];
    if (!isSixteenBit(out)) {
      if (absl::Status status =
              gpu->copyToDevice(arenaAddress(out), host, 4 * outCounts[pair]);
          !status.ok())
        return status;
      continue;
    }
    bits.resize(std::max<int64_t>(outCounts[pair], 1));
    cpu::narrow(value(out).dtype() == plan::DType::BF16, host, bits.data(),
                outCounts[pair]);
    if (absl::Status status = gpu->copyToDevice(arenaAddress(out), bits.data(),
                                                2 * outCounts[pair]);
        !status.ok())
      return status;
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::startTransfer(const plan::Instr &instr,
                                         size_t index) {
  Transfer t = describeTransfer(instr);
  if (ncclComm) {
    // A transfer copies bits: 16-bit values move as their bytes.
    int64_t bytes = elementBytes(t.data) * t.elements;
    void *data = arenaAddress(t.data);
    ncclComm->setCaller(absl::StrCat("instruction ", index, " (",
                                     plan::EnumNameOpCode(instr.op()), ")"));
    return onCommStream(
        instr, index,
        {{t.send ? std::optional<uint32_t>(t.data) : std::nullopt,
          t.send ? std::nullopt : std::optional<uint32_t>(t.data)}},
        [&](cudaStream_t comm) {
          ++cuda::issueCounts().ncclCalls;
          return t.send ? ncclComm->send(data, bytes, t.peer, comm)
                        : ncclComm->recv(data, bytes, t.peer, comm);
        });
  }
  // Staged through the host: the MPI communicator moves host memory. The
  // transfer stays in flight like the CPU's (Executor::track): a blocking
  // send here would deadlock two stages that send to each other at once (a
  // 1F1B step's activation one way and gradient the other, each above MPI's
  // eager limit), which 8 ranks on one H100 did.
  // A transfer copies bits: 16-bit values travel two to a 4-byte word (the
  // loader admits only even counts of them).
  int64_t bytes = elementBytes(t.data) * t.elements, words = bytes / 4;
  auto host = std::make_unique<std::vector<float>>(
      static_cast<size_t>(std::max<int64_t>(words, 1)));
  if (t.send)
    if (absl::Status status = timedOn(
            gpu->stream(), /*communication=*/false,
            [&] {
              return gpu->copyToHost(host->data(), arenaAddress(t.data), bytes);
            });
        !status.ok())
      return status;
  absl::StatusOr<std::unique_ptr<CommRequest>> request =
      t.send ? communicator->startSend(host->data(), words, t.peer, t.tag)
             : communicator->startRecv(host->data(), words, t.peer, t.tag);
  if (!request.ok())
    return request.status();
  void *target = t.send ? nullptr : arenaAddress(t.data);
  auto staged = std::make_unique<StagedTransfer>(
      std::move(host), std::move(*request), gpu.get(), target, bytes);
  return track(std::nullopt, std::move(staged), instr, index,
               t.send ? std::optional<uint32_t>(t.data) : std::nullopt,
               t.send ? std::nullopt : std::optional<uint32_t>(t.data));
}

namespace {

/// The arithmetic of attention's products for queries of type `queries`:
/// bf16 or f16 tensor cores for 16-bit plans, bf16 for f32 plans under
/// --matmul-precision bf16, else f32.
cuda::DType attentionProducts(plan::DType queries, MatmulPrecision precision) {
  if (queries == plan::DType::BF16)
    return cuda::DType::BF16;
  if (queries == plan::DType::F16)
    return cuda::DType::F16;
  return precision == MatmulPrecision::Bf16 ? cuda::DType::BF16
                                            : cuda::DType::F32;
}

} // namespace

bool CudaExecutor::runsTyped(const plan::Instr &instr) const {
  switch (instr.op()) {
  case plan::OpCode::Embedding:
  case plan::OpCode::EmbeddingGrad:
  case plan::OpCode::Add:
  case plan::OpCode::Mul:
  case plan::OpCode::Scale:
  case plan::OpCode::Activation:
  case plan::OpCode::ActivationGrad:
  case plan::OpCode::Gated:
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm:
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad:
  case plan::OpCode::Rope:
  case plan::OpCode::Sum:
  case plan::OpCode::Dropout:
  case plan::OpCode::CrossEntropy:
  case plan::OpCode::CrossEntropyGrad:
  case plan::OpCode::LogSumExp:
  case plan::OpCode::Fill:
  case plan::OpCode::SumSquares:
  case plan::OpCode::AdamW:
  case plan::OpCode::Select:
  case plan::OpCode::Accumulate:
  case plan::OpCode::ScaleBy:
    break;
  default:
    return false;
  }
  // Element i of a 16-bit result written over an f32 operand would land on
  // elements another thread has yet to read. (A result that is an operand
  // itself is read and written in one type, as the f32 kernel reads and
  // writes it.)
  return !resultOverlapsOperand(instr, /*inPlace=*/true);
}

bool CudaExecutor::copiesBits(const plan::Instr &instr) const {
  switch (instr.op()) {
  case plan::OpCode::Copy:
  case plan::OpCode::Transpose:
  case plan::OpCode::Slice:
  case plan::OpCode::Pad:
  case plan::OpCode::Concat:
  case plan::OpCode::Broadcast:
    break;
  default:
    return false;
  }
  // Bits move as they are only between values of one type; and, as for
  // runsTyped, a hand-made plan whose result shares bytes with an operand
  // keeps the f32 copies, which read every operand before any result is
  // written.
  plan::DType type = value(instr.outputs()->Get(0)).dtype();
  for (uint32_t in : *instr.inputs())
    if (value(in).dtype() != type)
      return false;
  return !resultOverlapsOperand(instr, /*inPlace=*/true);
}

bool CudaExecutor::attentionIn16Bit(const plan::Instr &instr) const {
  plan::OpCode op = instr.op();
  if (op != plan::OpCode::Attention && op != plan::OpCode::AttentionGrad)
    return false;
  plan::DType type = value(instr.inputs()->Get(0)).dtype();
  if (type != plan::DType::BF16 && type != plan::DType::F16)
    return false;
  AttentionCall call = attentionCall(instr);
  // q, k, v (and dout) and the results of one 16-bit type; the slopes
  // (f32 in the plans the compiler makes) are read as f32, the prefix
  // lengths as i32.
  std::vector<uint32_t> tensors = {
      instr.inputs()->Get(0), instr.inputs()->Get(1), instr.inputs()->Get(2)};
  if (op == plan::OpCode::AttentionGrad)
    tensors.push_back(call.dout);
  for (uint32_t out : *instr.outputs())
    tensors.push_back(out);
  for (uint32_t index : tensors)
    if (value(index).dtype() != type)
      return false;
  if (call.slopes && value(*call.slopes).dtype() != plan::DType::F32)
    return false;
  if (!cuda::attentionTakes16Bit(call.shape, cudaType(type)))
    return false;
  // As for runsTyped: a result that shares bytes with an operand keeps the
  // f32 copies.
  return !resultOverlapsOperand(instr, /*inPlace=*/false);
}

cuda::AttentionRouter &CudaExecutor::attentionRoutes() {
  if (!attentionRouter)
    attentionRouter =
        std::make_unique<cuda::AttentionRouter>(gpu->options().attention);
  return *attentionRouter;
}

bool CudaExecutor::runsIn16Bit(const plan::Instr &instr) const {
  // Casts convert on the device; copies and layout ops (copiesBits) move
  // 16-bit elements as they are; products of two 16-bit operands of one
  // type run on tensor cores with f32 sums (the result f32 or of their
  // type); the typed kernels of runsTyped widen and round as they read and
  // write. (The contract gives casts and products an input and an output.)
  plan::OpCode op = instr.op();
  if (op == plan::OpCode::Cast || copiesBits(instr) || attentionIn16Bit(instr))
    return true;
  if (runsTyped(instr))
    return true;
  if (op != plan::OpCode::Matmul)
    return false;
  plan::DType xType = value(instr.inputs()->Get(0)).dtype(),
              bType = value(instr.inputs()->Get(1)).dtype(),
              outType = value(instr.outputs()->Get(0)).dtype();
  return bType == xType && (outType == xType || outType == plan::DType::F32);
}

absl::Status CudaExecutor::execute(const plan::Instr &instr, uint64_t step) {
  return timedOn(gpu->stream(), /*communication=*/false,
                 [&] { return enqueue(instr, step); });
}

cuda::MatmulOptions CudaExecutor::epilogueOptions(const MatmulDims &d,
                                                  bool stored) const {
  auto at = [&](uint32_t index) {
    return stored ? arenaAddress(index) : address(index);
  };
  auto type = [&](uint32_t index) {
    return stored ? cudaType(value(index).dtype()) : cuda::DType::F32;
  };
  cuda::MatmulOptions options;
  options.epilogue = cudaEpilogue(d.epilogue);
  if (d.bias) {
    options.bias = at(*d.bias);
    options.biasType = type(*d.bias);
  }
  if (d.preActivation)
    options.preActivation = at(*d.preActivation);
  if (d.activationInput)
    options.activationInput = at(*d.activationInput);
  if (d.biasGrad) {
    options.biasGrad = at(*d.biasGrad);
    options.biasGradType = type(*d.biasGrad);
  }
  // An accumulating product adds its weighted f32 product to c, its
  // accumulator (the weight an f32 scalar); an adding one, its addend.
  if (d.weight) {
    options.accumulate = true;
    options.weight = static_cast<const float *>(at(*d.weight));
  }
  if (d.addend)
    options.addend = at(*d.addend);
  return options;
}

absl::Status CudaExecutor::enqueue(const plan::Instr &instr, uint64_t step) {
  std::vector<uint32_t> sixteen = sixteenBitOperands(instr);
  if (sixteen.empty() || runsTyped(instr) || copiesBits(instr) ||
      attentionIn16Bit(instr))
    return executeKernel(instr, step);
  if (runsIn16Bit(instr)) {
    plan::OpCode op = instr.op();
    uint32_t x = instr.inputs()->Get(0), out = instr.outputs()->Get(0);
    plan::DType xType = value(x).dtype(), outType = value(out).dtype();
    int64_t count = elementCount(shapeOf(value(out)));
    if (op == plan::OpCode::Cast)
      return xType == outType
                 ? copyValue(x, out, elementBytes(x) * count)
                 : cuda::cast(*gpu, arenaAddress(x), cudaType(xType),
                              arenaAddress(out), cudaType(outType), count);
    MatmulDims d = matmulDims(instr);
    // The epilogue works on the f32 product before the one rounding.
    cuda::MatmulOptions options = epilogueOptions(d, /*stored=*/true);
    options.inputType = cudaType(xType);
    options.outputType = cudaType(outType);
    return cuda::matmul(
        *gpu, arenaAddress(x), arenaAddress(instr.inputs()->Get(1)),
        arenaAddress(out),
        {d.batch, d.m, d.n, d.k, d.transposeA, d.transposeB, d.rhsBatched},
        options);
  }
  // Any other kernel runs on f32 copies, and its 16-bit results are
  // rounded back once it is done.
  if (widePool.size() < sixteen.size())
    widePool.resize(sixteen.size());
  for (size_t i = 0; i < sixteen.size(); ++i) {
    uint32_t index = sixteen[i];
    int64_t n = elementCount(shapeOf(value(index)));
    absl::StatusOr<float *> copy = grown(widePool[i], n);
    if (!copy.ok())
      return copy.status();
    if (absl::Status status = cuda::cast(*gpu, arenaAddress(index),
                                         cudaType(value(index).dtype()), *copy,
                                         cuda::DType::F32, n);
        !status.ok())
      return status;
  }
  for (size_t i = 0; i < sixteen.size(); ++i)
    widened.emplace_back(sixteen[i], widePool[i].data());
  absl::Status status = executeKernel(instr, step);
  for (const auto &[index, copy] : widened)
    if (status.ok() &&
        std::find(instr.outputs()->begin(), instr.outputs()->end(), index) !=
            instr.outputs()->end())
      status = cuda::cast(*gpu, copy, cuda::DType::F32, arenaAddress(index),
                          cudaType(value(index).dtype()),
                          elementCount(shapeOf(value(index))));
  widened.clear();
  return status;
}

absl::Status CudaExecutor::executeKernel(const plan::Instr &instr,
                                         uint64_t step) {
  cuda::CudaContext &ctx = *gpu;
  auto in = [&](size_t i) { return instr.inputs()->Get(i); };
  auto out = [&](size_t i) { return instr.outputs()->Get(i); };
  auto typedIn = [&](size_t i) { return typedOperand(in(i)); };
  auto typedOut = [&](size_t i) { return typedResult(out(i)); };
  auto intAt = [&](size_t i) { return instr.ints()->Get(i); };
  auto floatAt = [&](size_t i) { return instr.floats()->Get(i); };
  auto shape = [&](uint32_t index) { return shapeOf(value(index)); };
  auto n = [&](uint32_t index) { return elementCount(shape(index)); };
  auto strided = [&](uint32_t x, uint32_t target,
                     const absl::StatusOr<cuda::StridedCopy> &copy) {
    if (!copy.ok())
      return copy.status();
    // The elements as they lie at address(): a 16-bit value's own (the
    // layout ops run on them, copiesBits), or 4 bytes.
    cuda::StridedCopy bytes = *copy;
    bytes.elementBytes = static_cast<int>(addressedBytes(target));
    return cuda::stridedCopy(ctx, address(x), address(target), bytes);
  };

  switch (instr.op()) {
  case plan::OpCode::Embedding: {
    EmbeddingRows table = embeddingRows(instr);
    return cuda::embedding(ctx, i32(in(0)), typedIn(1), typedOut(0), n(in(0)),
                           table.rows, table.hidden, table.firstRow,
                           table.vocab);
  }
  case plan::OpCode::EmbeddingGrad: {
    EmbeddingRows table = embeddingRows(instr);
    return cuda::embeddingGrad(ctx, i32(in(0)), typedIn(1), typedOut(0),
                               n(in(0)), table.rows, table.hidden,
                               table.firstRow, table.vocab);
  }
  case plan::OpCode::Matmul: {
    MatmulDims d = matmulDims(instr);
    cuda::MatmulShape s{d.batch,      d.m,          d.n,         d.k,
                        d.transposeA, d.transposeB, d.rhsBatched};
    return cuda::matmul(ctx, f32(in(0)), f32(in(1)), f32(out(0)), s,
                        epilogueOptions(d, /*stored=*/false));
  }
  case plan::OpCode::Add:
    return cuda::addBroadcast(ctx, typedIn(0), typedIn(1), typedOut(0),
                              n(out(0)), n(in(1)));
  case plan::OpCode::Mul:
    return cuda::mul(ctx, typedIn(0), typedIn(1), typedOut(0), n(out(0)));
  case plan::OpCode::Scale:
    return cuda::scale(ctx, typedIn(0), static_cast<float>(floatAt(0)),
                       typedOut(0), n(out(0)));
  case plan::OpCode::Activation:
    return cuda::activation(ctx, activationOf(intAt(0)), typedIn(0),
                            typedOut(0), n(out(0)));
  case plan::OpCode::ActivationGrad:
    return cuda::activationGrad(ctx, activationOf(intAt(0)), typedIn(0),
                                typedIn(1), typedOut(0), n(out(0)));
  case plan::OpCode::Gated:
    return cuda::gated(ctx, activationOf(intAt(0)), typedIn(0), typedIn(1),
                       typedOut(0), n(out(0)));
  case plan::OpCode::LayerNorm:
  case plan::OpCode::RmsNorm: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = elementCount(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    if (instr.op() == plan::OpCode::LayerNorm)
      return cuda::layerNorm(ctx, typedIn(0), typedIn(1),
                             instr.inputs()->size() == 3
                                 ? typedIn(2)
                                 : cuda::Operand{nullptr, cuda::DType::F32},
                             typedOut(0), rows, width, epsilon);
    return cuda::rmsNorm(ctx, typedIn(0), typedIn(1), typedOut(0), rows, width,
                         epsilon);
  }
  case plan::OpCode::LayerNormGrad:
  case plan::OpCode::RmsNormGrad: {
    Shape x = shape(in(0));
    int64_t width = x.back(), rows = elementCount(x) / width;
    float epsilon = static_cast<float>(floatAt(0));
    if (absl::Status s = cuda::fill(ctx, typedOut(1), 0.0f, width); !s.ok())
      return s;
    if (instr.op() == plan::OpCode::LayerNormGrad)
      return cuda::layerNormGrad(ctx, typedIn(0), typedIn(1), typedIn(2),
                                 typedOut(0), typedOut(1), rows, width,
                                 epsilon);
    return cuda::rmsNormGrad(ctx, typedIn(0), typedIn(1), typedIn(2),
                             typedOut(0), typedOut(1), rows, width, epsilon);
  }
  case plan::OpCode::Attention:
  case plan::OpCode::AttentionGrad: {
    AttentionCall call = attentionCall(instr);
    const int32_t *prefix = call.prefix ? i32(*call.prefix) : nullptr;
    // Checked on the device (an error flag the next wait for the GPU
    // reports), so that the host does not wait for the GPU here.
    if (prefix)
      if (absl::Status s = cuda::checkPrefixLengths(
              ctx, prefix, call.shape.batch, call.shape.keySeq);
          !s.ok())
        return s;
    const float *slopes = call.slopes ? f32(*call.slopes) : nullptr;
    const bool gradient = instr.op() == plan::OpCode::AttentionGrad;
    // A 16-bit plan's attention runs on its values as they are
    // (attentionIn16Bit): through cuDNN's fused attention where cuDNN takes
    // the call (attentionRoutes), else on Triad's tensor cores in its type,
    // each result rounded once.
    if (typedIn(0).type != cuda::DType::F32) {
      if (!gradient)
        return attentionRoutes().attention(ctx, typedIn(0), typedIn(1),
                                           typedIn(2), prefix, slopes,
                                           typedOut(0), call.shape);
      return attentionRoutes().attentionGrad(
          ctx, typedIn(0), typedIn(1), typedIn(2), prefix, slopes,
          typedOperand(call.dout), typedOut(0), typedOut(1), typedOut(2),
          call.shape);
    }
    // Otherwise on f32 values (or f32 copies of 16-bit ones, for shapes the
    // tensor cores do not take), which only Triad's kernels run: the
    // products of a 16-bit plan's attention run on tensor cores in its type
    // (the operands are 16-bit values; the probabilities and score
    // gradients round to it too), as do an f32 plan's under
    // --matmul-precision bf16. Otherwise they are exact f32.
    if (absl::Status s = attentionRoutes().triadOnly(
            gradient,
            "its values are f32 (an f32 plan's, or a 16-bit plan's widened "
            "for a shape Triad's 16-bit kernels do not take)");
        !s.ok())
      return s;
    cuda::DType products =
        attentionProducts(value(in(0)).dtype(), ctx.options().matmulPrecision);
    if (!gradient)
      return cuda::attention(ctx, f32(in(0)), f32(in(1)), f32(in(2)), prefix,
                             slopes, f32(out(0)), call.shape, products);
    return cuda::attentionGrad(ctx, f32(in(0)), f32(in(1)), f32(in(2)), prefix,
                               slopes, f32(call.dout), f32(out(0)), f32(out(1)),
                               f32(out(2)), call.shape, products);
  }
  case plan::OpCode::Rope: {
    Shape x = shape(in(0));
    plan::RopeAttrs rope = plan::ropeAttrs(*instr.ints(), *instr.floats());
    return cuda::rope(ctx, typedIn(0), typedOut(0), x[0], x[1], rope.heads,
                      x[2] / rope.heads, rope.rotaryDim,
                      static_cast<float>(rope.base),
                      static_cast<float>(rope.direction));
  }
  case plan::OpCode::Copy:
    return copyValue(in(0), out(0), addressedBytes(out(0)) * n(out(0)));
  case plan::OpCode::Cast: {
    plan::DType from = value(in(0)).dtype(), to = value(out(0)).dtype();
    if (from == to)
      return copyValue(in(0), out(0), addressedBytes(out(0)) * n(out(0)));
    return cuda::cast(
        ctx, address(in(0)),
        from == plan::DType::I32 ? cuda::DType::I32 : cuda::DType::F32,
        address(out(0)),
        to == plan::DType::I32 ? cuda::DType::I32 : cuda::DType::F32,
        n(out(0)));
  }
  case plan::OpCode::Transpose: {
    Shape inStrides = rowMajorStrides(shape(in(0))), xStrides;
    for (size_t d = 0; d < inStrides.size(); ++d)
      xStrides.push_back(inStrides[intAt(d)]);
    return strided(in(0), out(0),
                   copyOver(shape(out(0)), xStrides, shape(out(0))));
  }
  case plan::OpCode::Slice: {
    absl::StatusOr<cuda::StridedCopy> copy =
        copyOver(shape(out(0)), rowMajorStrides(shape(in(0))), shape(out(0)));
    if (copy.ok())
      for (int d = 0; d < copy->rank; ++d)
        copy->shift[d] = intAt(d);
    return strided(in(0), out(0), copy);
  }
  case plan::OpCode::Pad: {
    Shape x = shape(in(0));
    absl::StatusOr<cuda::StridedCopy> copy =
        copyOver(shape(out(0)), rowMajorStrides(x), shape(out(0)));
    if (copy.ok())
      for (int d = 0; d < copy->rank; ++d) {
        copy->shift[d] = -intAt(d);
        copy->bound[d] = x[d];
      }
    return strided(in(0), out(0), copy);
  }
  case plan::OpCode::Concat: {
    int64_t dim = intAt(0), offset = 0;
    Shape result = shape(out(0));
    Shape outStrides = rowMajorStrides(result);
    for (size_t i = 0; i < instr.inputs()->size(); ++i) {
      Shape part = shape(in(i));
      absl::StatusOr<cuda::StridedCopy> copy =
          copyOver(part, rowMajorStrides(part), result);
      if (copy.ok())
        copy->outOffset = offset * outStrides[dim];
      if (absl::Status s = strided(in(i), out(0), copy); !s.ok())
        return s;
      offset += part[dim];
    }
    return absl::OkStatus();
  }
  case plan::OpCode::Broadcast: {
    Shape x = shape(in(0)), inStrides = rowMajorStrides(x),
          result = shape(out(0));
    size_t lead = result.size() - x.size();
    Shape xStrides(result.size(), 0);
    for (size_t d = 0; d < x.size(); ++d)
      xStrides[lead + d] = x[d] != 1 ? inStrides[d] : 0;
    return strided(in(0), out(0), copyOver(result, xStrides, result));
  }
  case plan::OpCode::Sum:
    return cuda::reduceSum(ctx, typedIn(0), shape(in(0)), typedOut(0),
                           shape(out(0)), floatAt(0));
  case plan::OpCode::Dropout: {
    plan::DropoutAttrs dropout =
        plan::dropoutAttrs(*instr.ints(), *instr.floats());
    // A call that may be recorded reads its step and microbatch from the
    // device (what the replayed call's beginCall wrote).
    cuda::DropoutCall call;
    if (recordsCalls)
      call.words = ctx.callWords();
    return cuda::dropout(
        ctx, typedIn(0), typedOut(0), n(out(0)), dropoutProbability(dropout),
        seed, step, dropout.stream,
        dropoutPiece(instr, recordsCalls ? &call.perMicrobatch : nullptr),
        call);
  }
  case plan::OpCode::CrossEntropy:
  case plan::OpCode::CrossEntropyGrad: {
    bool grad = instr.op() == plan::OpCode::CrossEntropyGrad;
    int64_t vocab = shape(in(0)).back();
    bool hasLse = instr.inputs()->size() == (grad ? 4u : 3u);
    // The piece's lse (the logits' type) is read as it is, with the logits.
    std::optional<cuda::TypedVocabPiece> piece;
    if (std::optional<cpu::VocabPiece> columns =
            vocabPiece(instr, 1, vocab, nullptr))
      piece = cuda::TypedVocabPiece{
          hasLse ? typedIn(grad ? 3 : 2)
                 : cuda::Operand{nullptr, cuda::DType::F32},
          columns->first, columns->vocab};
    const cuda::TypedVocabPiece *pieceOrNull = piece ? &*piece : nullptr;
    auto ignore = static_cast<int32_t>(intAt(0));
    if (grad)
      return cuda::crossEntropyGrad(ctx, typedIn(0), i32(in(1)), f32(in(2)),
                                    typedOut(0), n(in(1)), vocab, ignore,
                                    pieceOrNull);
    return cuda::crossEntropy(ctx, typedIn(0), i32(in(1)), f32(out(0)),
                              n(in(1)), vocab, ignore, pieceOrNull);
  }
  case plan::OpCode::LogSumExp: {
    int64_t columns = shape(in(0)).back();
    std::optional<cpu::VocabPiece> piece =
        vocabPiece(instr, 0, columns, nullptr);
    return cuda::logSumExp(
        ctx, typedIn(0), typedOut(0), n(out(0)), columns,
        cpu::classColumns(columns, piece ? &*piece : nullptr));
  }
  case plan::OpCode::Values: {
    // From a device copy of the constants, uploaded once (a call recorded
    // as a CUDA graph then copies on the device, not from host memory that
    // is gone when it replays).
    std::vector<float> values(instr.floats()->begin(), instr.floats()->end());
    size_t bytes = values.size() * sizeof(float);
    if (bytes == 0)
      return absl::OkStatus();
    absl::StatusOr<const void *> constants = ctx.resident(values.data(), bytes);
    if (!constants.ok())
      return constants.status();
    ++cuda::issueCounts().copies;
    TRIAD_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(f32(out(0)), *constants, bytes,
                                               cudaMemcpyDeviceToDevice,
                                               ctx.stream()));
    return absl::OkStatus();
  }
  case plan::OpCode::Fill:
    return cuda::fill(ctx, typedOut(0), static_cast<float>(floatAt(0)),
                      n(out(0)));
  case plan::OpCode::SumSquares: {
    // Every input in one pass, each read in its type.
    std::vector<cuda::ConstSpan> spans;
    for (uint32_t x : *instr.inputs()) {
      cuda::Operand typed = typedOperand(x);
      spans.push_back({typed.data, n(x), typed.type});
    }
    return cuda::sumSquares(ctx, spans, f32(out(0)),
                            plan::sumSquaresLimit(instr));
  }
  case plan::OpCode::ClipCoefficient:
    return cuda::clipCoefficient(ctx, f32(in(0)), floatAt(0), f32(out(0)),
                                 f32(out(1)));
  case plan::OpCode::LrSchedule: {
    plan::LrScheduleAttrs attrs = schedule(instr);
    return cuda::learningRate(ctx, f32(in(0)), attrs.peak, attrs.floor,
                              attrs.warmupSteps, attrs.decaySteps, f32(out(0)));
  }
  case plan::OpCode::AdamW: {
    // Every tensor in one launch (the loader checked that no tensor's
    // results overlap another's operands).
    plan::AdamWShape shape =
        *plan::adamWShape(instr.inputs()->size(), instr.outputs()->size(),
                          instr.floats()->size());
    size_t shared = 4 * shape.count, per = shape.outputsPerTensor;
    std::vector<cuda::AdamWTensor> tensors;
    for (size_t t = 0; t < shape.count; ++t) {
      uint32_t newParam = out(per * t), newM = out(per * t + 1),
               newV = out(per * t + 2);
      int64_t size = n(in(4 * t));
      // The kernel works in place: bring the inputs to the outputs first.
      for (auto [from, to] : {std::pair{in(4 * t), newParam},
                              {in(4 * t + 2), newM},
                              {in(4 * t + 3), newV}})
        if (absl::Status s = copyValue(from, to, 4 * size); !s.ok())
          return s;
      cuda::AdamWTensor tensor{
          f32(newParam), typedIn(4 * t + 1),
          f32(newM),     f32(newV),
          size,          static_cast<float>(floatAt(3 + t))};
      if (shape.rounded)
        tensor.rounded = typedOut(per * t + 3);
      tensors.push_back(tensor);
    }
    plan::AdamWAttrs adamw = plan::adamWAttrs(*instr.floats());
    cuda::AdamWHyper hyper{static_cast<float>(adamw.beta1),
                           static_cast<float>(adamw.beta2),
                           static_cast<float>(adamw.epsilon)};
    return cuda::adamw(ctx, tensors, f32(in(shared)), f32(in(shared + 1)),
                       f32(in(shared + 2)), hyper,
                       shape.skips ? f32(in(shared + 3)) : nullptr);
  }
  case plan::OpCode::Select:
    return cuda::select(ctx, f32(in(0)), typedIn(1), typedIn(2), typedOut(0),
                        n(out(0)));
  case plan::OpCode::LossScaleUpdate: {
    plan::LossScaleAttrs scale =
        plan::lossScaleAttrs(*instr.ints(), *instr.floats());
    return cuda::lossScaleUpdate(ctx, f32(in(0)), f32(in(1)), f32(in(2)),
                                 scale.growth, scale.backoff,
                                 scale.growthInterval, f32(out(0)), f32(out(1)),
                                 f32(out(2)), f32(out(3)));
  }
  case plan::OpCode::CountValid:
    return cuda::countValid(ctx, i32(in(0)), n(in(0)),
                            static_cast<int32_t>(intAt(0)), f32(out(0)));
  case plan::OpCode::Accumulate:
    return cuda::accumulate(ctx, typedOut(0), typedIn(1), f32(in(2)),
                            n(out(0)));
  case plan::OpCode::Reciprocal:
    return cuda::reciprocal(ctx, f32(in(0)), f32(out(0)));
  case plan::OpCode::ScaleBy:
    return cuda::scaleBy(ctx, typedIn(0), f32(in(1)), typedOut(0), n(out(0)));
  case plan::OpCode::AllSlice: {
    // No communication: one two-dimensional copy of this member's piece.
    SliceView view = allSliceView(instr);
    if (view.runBytes == 0 || view.outer == 0)
      return absl::OkStatus();
    auto *target = static_cast<std::byte *>(address(out(0)));
    // A padded split's padding is zero.
    if (view.validBytes < view.runBytes) {
      ++cuda::issueCounts().copies;
      // One row: a plain memset, whatever the row's size (as the copy
      // below).
      if (view.outer == 1)
        TRIAD_CUDA_RETURN_IF_ERROR(
            cudaMemsetAsync(target + view.validBytes, 0,
                            view.runBytes - view.validBytes, ctx.stream()));
      else
        TRIAD_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(
            target + view.validBytes, view.runBytes, 0,
            view.runBytes - view.validBytes, view.outer, ctx.stream()));
    }
    if (view.validBytes == 0)
      return absl::OkStatus();
    const auto *source =
        static_cast<const std::byte *>(address(in(0))) + view.offsetBytes;
    // One row: a plain copy (a 2D copy's pitch would be the whole tensor,
    // which fails above 2 GiB).
    ++cuda::issueCounts().copies;
    if (view.outer == 1)
      TRIAD_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(target, source, view.validBytes,
                          cudaMemcpyDeviceToDevice, ctx.stream()));
    else
      TRIAD_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          target, view.runBytes, source, view.xRunBytes, view.validBytes,
          view.outer, cudaMemcpyDeviceToDevice, ctx.stream()));
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
