//===- CudaExecutor.h - runs a verified plan program on a GPU ----*- C++
//-*-===//
//
// The CUDA backend's executor: the program's arena is one device
// allocation, the persistent tensors are initialized on the host (the same
// values as the CPU backend's, drawn at their global indices) and copied
// in, and every instruction enqueues its kernel (runtime/kernels/cuda) on
// the context's compute stream. The host waits for the GPU only where it
// must see data: a call's results (the step's loss and gradient norm),
// Executor::finish (once per step), persistent tensors read or written,
// the prefix lengths of a prefix-masked attention (checked on the host as
// the CPU backend checks them) and, with the MPI communicator, the
// collectives and the data a send takes, staged through host memory (a
// rank's device buffers go to the host, through MPI and back; ranks may
// share a GPU). A call without results returns with its kernels still
// queued, so the host enqueues the next call's while the GPU runs them.
//
// With NCCL the collectives and transfers move device buffers. Every NCCL
// operation runs on one communication stream, with everything around it
// (packing pieces along inner dimensions into staging buffers and joining
// them, widening 16-bit tensors to f32 and rounding the results back):
// kernels of two NCCL communicators running at once can deadlock, so none
// runs on the compute stream. Each collective or transfer starts after an
// event of the compute stream, and the compute stream waits for it (an
// event, not the host) only before the first later instruction that
// touches its buffers, so the gradients' reduction overlaps the rest of the
// backward pass. 16-bit tensors are reduced in f32 and rounded once, as
// over MPI, so a 16-bit plan trains alike over both; transfers copy bits.
// The host never blocks on work that may include NCCL's: it polls the
// streams and the communicators' asynchronous errors, with a timeout, and
// a failure aborts the communicators and says which one failed and why
// (NcclCommunicator::wait).
//
// With `recordCalls` (triad-run's --cuda-graphs), a call is recorded once
// as a CUDA graph (its compute and communication streams' work, the NCCL
// calls included) and later calls of the same function, slot and mode
// replay it: one launch instead of hundreds (CallRecordings.h says when).
// Dropout then reads the step and microbatch from device words written
// before each call. A recorded call starts after every collective in
// flight and every transfer on its values, and joins what it starts before
// it ends, so it overlaps communication with computation within itself,
// not across calls. Calls with transfers to a pipeline peer, or
// collectives staged through host memory, run instruction by instruction
// (callsNotRecorded says which and why). NCCL calls in graphs and direct
// ones share the communicators (NCCL's graph mixing, on by default); every
// rank must capture the same NCCL calls, so a recording of NCCL calls that
// fails on one rank is an error, not a fallback.
//
// Timed on the device (ExecutorOptions::deviceTimes, triad-run's
// --trace-device), each instruction's work is bracketed by two timing
// events on the stream it is enqueued on: the compute stream, or for a
// collective or transfer over NCCL the communication stream (after its
// wait for the compute stream, so the span is the NCCL work itself,
// waiting for peers included). Staged through host memory, a collective's
// span is on the compute stream and covers its copies and the host's MPI
// exchange between them; a staged send's covers its copy to the host, and
// a staged receive has none (it is copied in when it is waited for).
// Nothing waits for the events until finish, which turns them into the
// host's clock (cuda::EventTimeline).
//
// Data-dependent errors (a token id or a label outside the vocabulary) are
// raised by the kernels on the device and reported when the host next waits
// for the GPU (see above; after each instruction when instructions are
// timed), not at the instruction that found them: the call named may be a
// later one than the call that found it.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_EXECUTOR_CUDAEXECUTOR_H
#define TRIAD_RUNTIME_EXECUTOR_CUDAEXECUTOR_H

#include "runtime/comm/nccl/NcclCommunicator.h"
#include "runtime/executor/Executor.h"
#include "runtime/kernels/cuda/CudaContext.h"
#include "runtime/kernels/cuda/CudnnAttention.h"
#include "runtime/kernels/cuda/EventTimeline.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace triad::rt {

namespace cuda {
struct Operand;
struct Result;
} // namespace cuda

class CudaExecutor : public Executor {
public:
  /// Prepares the program of `pipelineRank` on the GPU `context` selects:
  /// checks that the backend can run it (f32, bf16, f16 and i32 values),
  /// allocates its arena on the device and initializes its persistent
  /// tensors with `seed`. Without a GPU it fails with FailedPrecondition.
  /// With `nccl`, every rank of the job creates its NCCL communicators
  /// (bootstrapped over options.communicator) and the collectives and
  /// transfers move device buffers through NCCL, every wait for them
  /// bounded by `ncclTimeout` (0: none); otherwise they are staged through
  /// host memory for options.communicator.
  /// With `recordCalls`, calls are recorded and replayed as CUDA graphs
  /// (see above). The initial values are drawn on the GPU (cuda::
  /// initValues: the host's Philox bits, the device's log, sin and cos;
  /// a tensor of more than cuda::kInitDims dimensions, or a 16-bit one
  /// without an f32 copy where the GPU has no room for a temporary, on the
  /// host), or with `hostInit` all on the host (Executor::initialValues,
  /// what the CPU backend holds bit for bit) and copied.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>>
  create(const LoadedPlan &plan, uint32_t pipelineRank, uint64_t seed,
         ExecutorOptions options = {}, cuda::ContextOptions context = {},
         bool nccl = false,
         std::chrono::milliseconds ncclTimeout = kDefaultCommTimeout,
         bool recordCalls = false, bool hostInit = false);

  ~CudaExecutor() override;

  const char *backend() const override { return "cuda"; }
  cuda::CudaContext &context() { return *gpu; }
  std::vector<std::string> callsNotRecorded() const override;
  /// The CUDA graphs kept for replay.
  size_t recordedCalls() const { return recordings.recordings(); }

private:
  CudaExecutor(const LoadedPlan &plan, const plan::Program &program,
               ExecutorOptions options)
      : Executor(plan, program, options) {}

  absl::Status writeValue(uint32_t index, const HostTensor &arg) override;
  absl::Status readValue(uint32_t index, HostTensor &result) override;
  absl::Status execute(const plan::Instr &instr, uint64_t step) override;
  /// What execute enqueues (timed on the device where it is asked).
  absl::Status enqueue(const plan::Instr &instr, uint64_t step);
  absl::Status startCollective(const plan::Instr &instr, size_t index) override;
  absl::Status startTransfer(const plan::Instr &instr, size_t index) override;
  /// The collective `instr` staged through host memory for the MPI
  /// communicator (without NCCL).
  absl::Status stageCollective(const plan::Instr &instr);
  absl::Status settle(bool timed) override;
  int64_t issuedWork() const override { return cuda::issueCounts().total(); }
  bool timesOnDevice() const override { return options.deviceTimes; }
  absl::Status deviceSpans(std::vector<InstructionTime> *times) override;
  /// Runs `issue`, which enqueues the work of the instruction being timed
  /// (Executor::timing) on `stream`, between two marks of the timeline;
  /// just runs it when none is timed. `communication`: the work is a
  /// collective's or a transfer's.
  template <typename Issue>
  absl::Status timedOn(cudaStream_t stream, bool communication, Issue issue);
  /// The instructions timed on the device since the last deviceSpans: their
  /// marks in `timeline`.
  struct DeviceSpan {
    Timing at;
    size_t begin, end;
    bool communication;
  };
  std::vector<DeviceSpan> spans;
  cuda::EventTimeline timeline;
  CallMode callMode(const CallKey &key) override;
  absl::Status beginCall(uint64_t step, uint32_t microbatch) override;
  absl::Status startRecording() override;
  absl::StatusOr<bool> endRecording(const CallKey &key,
                                    absl::Status body) override;
  absl::Status replay(const CallKey &key) override;
  /// Whether calls of a function can be recorded: why not (a transfer to
  /// a pipeline peer, whose receive may wait for a peer's later call, which
  /// a recorded call, joined before it ends, would deadlock on; or a
  /// collective staged through host memory), and whether a recording holds
  /// NCCL calls (whose failure is then an error, see endRecording).
  struct Recordable {
    std::optional<std::string> cannot;
    bool nccl = false;
  };
  const Recordable &recordable(uint32_t index);
  std::map<uint32_t, Recordable> recordableFunctions;

  /// The device address of value `index`: in the arena, or its f32 copy
  /// while a kernel on a 16-bit value runs.
  void *address(uint32_t index) const;
  /// Its address in the arena.
  void *arenaAddress(uint32_t index) const;
  /// Value `index` as a typed kernel reads or writes it: at `address`, in
  /// its own type, or f32 while it is its f32 copy.
  cuda::Operand typedOperand(uint32_t index) const;
  cuda::Result typedResult(uint32_t index) const;
  /// A Matmul's epilogue as cuBLASLt's options: its operands (bias,
  /// pre-activation, activation input, bias gradient, weight, addend) in
  /// the arena and of their own types where `stored`, else at `address`
  /// as f32 (the f32 kernel's, on f32 copies).
  cuda::MatmulOptions epilogueOptions(const MatmulDims &d, bool stored) const;
  /// The kernel of one instruction on its values as typedOperand,
  /// typedResult, f32 and i32 give them: `execute` runs it on the values
  /// as they are where each is f32 or i32, the kernel is typed
  /// (runsTyped) or it moves bits (copiesBits), and otherwise on f32
  /// copies of the 16-bit values, but for products and casts, which it
  /// runs on 16-bit values itself.
  absl::Status executeKernel(const plan::Instr &instr, uint64_t step);
  /// The bytes of one element of value `index`.
  int64_t elementBytes(uint32_t index) const;
  /// The bytes of one element of value `index` as it lies at `address`: 4
  /// while it is an f32 copy, else elementBytes.
  int64_t addressedBytes(uint32_t index) const;
  float *f32(uint32_t index) const {
    return static_cast<float *>(address(index));
  }
  int32_t *i32(uint32_t index) const {
    return static_cast<int32_t *>(address(index));
  }
  /// Copies value `from` to value `to` on the device (nothing when they
  /// are the same value).
  absl::Status copyValue(uint32_t from, uint32_t to, int64_t bytes);
  /// The collective `instr` (of a bucket, its input and output `pair`)
  /// through NCCL on device buffers, on the communication stream: 16-bit
  /// tensors widened into (and rounded back from) f32 staging, pieces
  /// along a dimension with leading sizes packed into (and joined from)
  /// blocks in the packing staging.
  absl::Status ncclCollective(const plan::Instr &instr, size_t index,
                              size_t pair = 0);
  /// The f32 collective `c` over `members` through NCCL on `stream`,
  /// packing and joining its pieces where they are not blocks.
  absl::Status ncclMove(const TensorCollective &c, int64_t members,
                        cudaStream_t stream);
  /// The values an instruction's NCCL work reads and writes, by pair (a
  /// bucket's tensors; a transfer's one side is none).
  using Touched =
      std::vector<std::pair<std::optional<uint32_t>, std::optional<uint32_t>>>;
  /// Enqueues `work` (NCCL calls and the kernels around them) on the
  /// communication stream after what the compute stream has enqueued so
  /// far, and tracks each pair of `touched` as instruction `index` in
  /// flight: the compute stream waits for it (an event recorded right after
  /// the work, not the host) before the first later instruction that
  /// touches its buffers.
  template <typename Work>
  absl::Status onCommStream(const plan::Instr &instr, size_t index,
                            const Touched &touched, Work work);
  /// Tensor `pair` of a collective over NCCL, checked against its group:
  /// the group exists, the shapes agree with its size, and no piece is
  /// padded (which NCCL's collectives cannot take).
  absl::StatusOr<TensorCollective> ncclTensor(const plan::Instr &instr,
                                              size_t pair) const;
  /// A bucket of all-gathers or reduce-scatters over NCCL as one NCCL group
  /// (NcclCommunicator::grouped), its tensors widened (16-bit ones) and
  /// packed into pieces (a dimension other than the first) before it, each
  /// into its own part of the staging buffers, and unpacked and rounded
  /// back after it.
  absl::Status ncclBucket(const plan::Instr &instr, size_t index);
  /// With NCCL: waits on the host until the compute stream (and, with
  /// `commToo`, the communication stream) has done what was enqueued on
  /// it, polling NCCL's communicators for errors and the timeout instead
  /// of blocking (see NcclCommunicator::wait); `what` names the wait in
  /// its error.
  absl::Status drainStreams(std::string what, bool commToo);
  /// `buffer`, grown to at least `count` floats where it is smaller.
  absl::StatusOr<float *> grown(cuda::DeviceBuffer &buffer, int64_t count);
  /// The staging `buffer`, which create sized for the program's largest
  /// collective, as at least `count` floats: growing it while NCCL may
  /// run would free the old one, which waits for the whole device.
  absl::StatusOr<float *> staged(const cuda::DeviceBuffer &buffer,
                                 int64_t count) const;
  /// The most staging any collective of the program needs over NCCL:
  /// for packing pieces, and for 16-bit tensors in f32 (Collectives.h).
  struct NcclStaging {
    PackedStaging packed, widened;
  };
  /// The staging all of `instr`'s tensors need at once (ncclBucket runs
  /// a bucket's together; one tensor's alone otherwise): packing, then
  /// widening 16-bit values to f32.
  NcclStaging ncclStaging(const plan::Instr &instr) const;
  NcclStaging largestNcclStaging() const;
  /// Whether `instr`, with 16-bit operands, runs on them as they are (a
  /// cast, a copy or layout op of copiesBits, a product of one 16-bit type,
  /// or a kernel of runsTyped) rather than on f32 copies.
  bool runsIn16Bit(const plan::Instr &instr) const;
  /// Whether `instr` moves its elements' bits as they are: a Copy,
  /// Transpose, Slice, Pad, Concat or Broadcast whose operands all have
  /// the result's type (a 16-bit value's strided copy moves 2-byte
  /// elements, with no f32 copy). Not when a result shares bytes with an
  /// operand (see runsTyped).
  bool copiesBits(const plan::Instr &instr) const;
  /// Whether `instr` is an Attention or AttentionGrad of a 16-bit plan that
  /// runs on its values as they are (cuda's typed attention: tensor cores
  /// in their type, each result rounded once, the bits of running on f32
  /// copies): q, k, v, dout and the results of one 16-bit type, f32 slopes,
  /// a shape the tensor cores take, and no result sharing bytes with an
  /// operand. Such a call goes through cuDNN's fused attention where the
  /// attention router takes it (attentionRoutes), Triad's typed kernel
  /// being the fallback: cuDNN is asked only where that fallback exists.
  bool attentionIn16Bit(const plan::Instr &instr) const;
  /// Whether `instr`'s kernel reads and writes each float value in its own
  /// type (cuda's typed kernels, which give the bits of the f32 kernel on
  /// f32 copies): the element-wise kernels, norms and their gradients,
  /// embeddings, rope, dropout, sums, the loss and log-sum-exp, and the
  /// optimizer step's Fill, Select, Accumulate, ScaleBy and AdamW (whose
  /// gradient the contract keeps f32 for now: the compiler casts 16-bit
  /// ones first). Not when a result shares bytes with an operand other than
  /// itself, which a typed kernel would read after writing; the f32 copies
  /// keep such a plan working.
  bool runsTyped(const plan::Instr &instr) const;
  /// Allocates the f32 copies of 16-bit operands (widePool) at the largest
  /// any instruction of the program widens (not those that run in 16 bits),
  /// so that none grows (and frees, which waits for the whole device) while
  /// a function runs.
  absl::Status sizeWidePool();
  /// Writes the `pieces` pieces of `tensor` (of `shape`) along `dim` one
  /// after the other (packPieces on the device, on `stream`), or joins
  /// them back (`join`: unpackPieces).
  absl::Status movePieces(const float *from, float *to,
                          const std::vector<int64_t> &shape, int64_t dim,
                          int64_t pieces, bool join, cudaStream_t stream);
  /// The router of the program's attention calls (cuDNN's fused attention
  /// or Triad's kernels, by the context's AttentionKernel), made on first
  /// use.
  cuda::AttentionRouter &attentionRoutes();

  std::unique_ptr<cuda::CudaContext> gpu;
  cuda::DeviceBuffer arena;
  /// The NCCL communicators, when collectives move device buffers.
  std::unique_ptr<nccl::NcclCommunicator> ncclComm;
  /// With NCCL: the stream its collectives and transfers run on, beside
  /// the context's compute stream, and an event recorded on each stream
  /// to poll for its end (drainStreams).
  cudaStream_t commStream = nullptr;
  cudaEvent_t drained[2] = {nullptr, nullptr};
  /// With NCCL: the pieces of a collective packed into blocks (and the
  /// blocks received before joining), and the f32 copies of a 16-bit
  /// collective's x and result; see NcclStaging.
  cuda::DeviceBuffer stagedDevice[2], stagedWide[2];
  /// Host staging of collectives and transfers (grown as needed).
  std::vector<float> stagedX, stagedOut;
  /// Draws the initial values of each group of persistent tensors on the
  /// GPU (create), or on the host and copies them (`onHost`).
  absl::Status initialize(bool onHost);
  /// A 16-bit value's bits on the host on their way to the arena
  /// (writeValue): one buffer for start-up's hundreds of initial values, so
  /// that each does not fault in fresh pages, released after them.
  std::vector<uint16_t> hostBits;
  /// Device f32 copies of the 16-bit values of the instruction running
  /// (one buffer per operand, reused from one instruction to the next in
  /// stream order, grown as needed), and which value each holds.
  std::vector<cuda::DeviceBuffer> widePool;
  std::vector<std::pair<uint32_t, void *>> widened;
  /// attentionRoutes(): cuDNN's handle and plans, kept for the executor's
  /// life (and released before the context, declared above).
  std::unique_ptr<cuda::AttentionRouter> attentionRouter;
  /// An instantiated CUDA graph, destroyed with its owner.
  struct GraphExecDeleter {
    void operator()(CUgraphExec_st *exec) const;
  };
  using GraphExec = std::unique_ptr<CUgraphExec_st, GraphExecDeleter>;
  /// With recordCalls: the recorded calls (released before the context,
  /// declared above), and the issue counts before the one being recorded.
  bool recordsCalls = false;
  CallRecordings<GraphExec> recordings;
  cuda::IssueCounts countsBeforeRecording;
};

} // namespace triad::rt

#endif // TRIAD_RUNTIME_EXECUTOR_CUDAEXECUTOR_H
