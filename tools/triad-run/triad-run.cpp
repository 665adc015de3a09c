//===- triad-run.cpp - trains a compiled plan on a token corpus -----------===//
//
// triad-run PLAN --data FILE --steps N [--seed S] [--lr F] [--log-every K]
//           [--metrics FILE] [--trace FILE] [--save DIR [--save-every K]]
//           [--load DIR|auto] [--token-width u16|u32] [--timeout SECONDS]
//
// The runtime's tool: no MLIR or LLVM. It verifies the plan, opens the
// corpus, and runs optimizer steps 1..N (or, with --load, from the
// checkpoint's step to N) on the CPU, printing one progress line per logged
// step. Under a launcher (mpirun, srun) it starts MPI, checks that the job
// has as many ranks as the plan's mesh and runs one rank of it: the plan's
// collectives go over MPI (one communicator per plan group), each rank
// reads the samples of its data-parallel rank, and only rank 0 prints.
//
// Files of a job of several ranks:
//   --metrics FILE   FILE: the job's records, written by rank 0 (as for one
//                    rank); FILE with ".rankR" before its extension
//                    (metrics.rank1.jsonl): every rank's own records, one
//                    per logged step (rank, coordinates, step, seconds,
//                    the rank's named results).
//   --trace FILE     every rank writes its timeline to FILE with ".rankR"
//                    before the extension (process R); at the end rank 0
//                    merges them into FILE, one process per rank.
//   --save DIR       DIR/step-N/rank-R.safetensors per rank and
//                    DIR/step-N/index.json by rank 0 (runtime/checkpoint/
//                    Checkpoint.h), DIR/latest moved once every shard is
//                    written; --load DIR reads them under any mesh. A run
//                    that would move DIR/latest back to an older step is
//                    refused unless --overwrite is given, and a second job
//                    saving into DIR at once is refused (DIR/.lock).
//
// A rank that makes no progress for --timeout seconds (600 by default: no
// instruction starts, no collective or transfer completes; a peer stopped
// or hung) prints where it is and what it waits for, asks the ranks it
// waits for where they are (a thread of each answers: PeerQuery) and names
// those that never arrived, and exits with status 3, which ends the job
// under mpirun. With --comm=nccl the host polls NCCL's communicators while
// it waits for the GPU: an error NCCL reports (a peer that died) fails the
// step at once with NCCL's text, and a wait longer than --timeout aborts
// NCCL.
//
// Every input is checked before use: bad input is one line on stderr,
// `triad-run: error: ...`, and exit status 1, on every rank (a rank that
// failed alone says so, and the others name it). A failure of one rank in
// the middle of a step ends the job (MPI_Abort), since the others may be
// waiting for it.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/mpi/Mpi.h"
#include "runtime/comm/mpi/MpiCommunicator.h"
#include "runtime/comm/mpi/PeerQuery.h"
#include "runtime/data/TokenFile.h"
#include "runtime/executor/CpuExecutor.h"
#include "runtime/plan/Mesh.h"
#include "runtime/plan/Plan.h"
#include "runtime/support/CommandLine.h"
#include "runtime/support/Files.h"
#include "runtime/support/TensorBoard.h"
#include "runtime/support/Watchdog.h"
#include "runtime/train/Trainer.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <vector>

ABSL_FLAG(std::string, data, "",
          "Token corpus to train on: flat little-endian token ids (required)");
ABSL_FLAG(std::optional<int64_t>, steps, std::nullopt,
          "Train until optimizer step N (required); with --load, N counts "
          "the checkpoint's steps too");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Seed of the initial weights, the samples and the dropout masks "
          "(default 1234; with --load, the checkpoint's)");
ABSL_FLAG(std::optional<double>, lr, std::nullopt,
          "Peak learning rate instead of the plan's (the schedule's floor "
          "scales alike)");
ABSL_FLAG(int64_t, log_every, 1,
          "Print a progress line (and a metrics record) every K steps, at "
          "the first and at the last one");
ABSL_FLAG(std::string, metrics, "",
          "Write one JSON object per logged step to FILE (JSON lines)");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace (chrome://tracing, Perfetto) to FILE: the "
          "steps of --trace-steps, with their calls, instructions and idle "
          "time");
ABSL_FLAG(std::string, trace_steps, "1:3",
          "With --trace: the steps A:B (or one step A) the trace records; "
          "other steps record nothing, so that a long run's trace stays "
          "bounded");
ABSL_FLAG(bool, trace_device, false,
          "With --trace and --device=cuda: time each traced instruction on "
          "the GPU too (CUDA events around its work, on the stream it runs "
          "on) instead of waiting for it after each one, so that kernels and "
          "NCCL collectives overlap in the traced steps as in the others; "
          "each rank gets two more tracks, its GPU's compute and "
          "communication streams, and its host tracks show the time to "
          "issue each instruction");
ABSL_FLAG(std::string, tensorboard, "",
          "Write TensorBoard event files into folder DIR (rank 0): per "
          "logged step the loss, its interval mean, lr, gradient norm, "
          "tokens/s, TFLOP/s, host and sync ms per step, launches per step "
          "(and MFU, the loss scale where there are)");
ABSL_FLAG(std::string, eval_data, "",
          "A held-out token file (triad-data --validation-output): its loss "
          "is measured every --eval-every steps and after the last one, the "
          "same on every mesh");
ABSL_FLAG(int64_t, eval_every, 0,
          "With --eval-data: evaluate every K steps (0: after the last step "
          "only)");
ABSL_FLAG(int64_t, eval_batches, 1,
          "With --eval-data: global batches per evaluation");
ABSL_FLAG(std::string, save, "",
          "Save checkpoints into folder DIR: at the end, and every "
          "--save-every steps");
ABSL_FLAG(int64_t, save_every, 0, "With --save: save every K steps");
ABSL_FLAG(bool, overwrite, false,
          "With --save: allow saving steps at or before the folder's latest "
          "checkpoint, moving 'latest' back to them");
ABSL_FLAG(std::string, init_from, "",
          "Start from the weights of checkpoint folder DIR's latest step "
          "(fine-tuning): its parameters only, with a new optimizer state, "
          "schedule and data position, from step 1; any mesh, any seed");
ABSL_FLAG(std::string, load, "",
          "Resume from the latest checkpoint in folder DIR; auto: from the "
          "newest intact checkpoint of the --save folder (skipping damaged "
          "newer ones with a warning), or from step 1 when it has none");
ABSL_FLAG(std::string, token_width, "u16",
          "Width of the corpus's token ids: u16 or u32");
ABSL_FLAG(std::string, device, "cpu",
          "Backend the steps run on: cpu, or cuda (a GPU per rank: the "
          "rank's local rank modulo the node's GPUs, unless --cuda-device)");
ABSL_FLAG(std::optional<int>, cuda_device, std::nullopt,
          "With --device=cuda: run every rank on GPU N");
ABSL_FLAG(std::string, comm, "mpi",
          "With --device=cuda: how ranks exchange device buffers: mpi "
          "(staged through host memory; ranks may share a GPU) or nccl "
          "(one GPU per rank)");
ABSL_FLAG(int64_t, timeout, 600,
          "End the job when this rank makes no progress for SECONDS (no "
          "instruction starts and no collective or transfer completes): it "
          "prints its step, call, instruction and the collective or "
          "transfer it waits for, asks the ranks it waits for where they "
          "are and names those that never arrived, and exits with status "
          "3; 0: never. With --comm=nccl also the longest the host waits "
          "for NCCL's device work before it aborts NCCL (an error NCCL "
          "reports, such as a peer that died, ends the wait at once)");
ABSL_FLAG(std::string, matmul_precision, "f32",
          "With --device=cuda: how f32 matrix products compute: f32 (exact, "
          "within 1e-5 of the CPU), or tf32 or bf16 (tensor cores, operands "
          "rounded to TF32 or bf16, f32 sums; faster, no longer within 1e-5 "
          "of the CPU). Tensors stay f32 either way");
ABSL_FLAG(bool, tf32, false, "Short for --matmul-precision=tf32");
ABSL_FLAG(std::string, cuda_attention, "auto",
          "With --device=cuda: what runs a bf16 or f16 plan's attention and "
          "its gradient: auto (the default: cuDNN's fused attention where "
          "the installed cuDNN, libcudnn.so.9, takes the call: causal or no "
          "mask, no ALiBi, head dimensions that are multiples of 16 up to "
          "128; Triad's own tensor-core kernels elsewhere, and where no cuDNN "
          "is found), cudnn (cuDNN, and an error where it does not take a "
          "call) or triad (Triad's kernels only, whose results do not depend "
          "on timing, where cuDNN's gradient adds dq with atomics; about 1.4 "
          "times slower at 1.3 B parameters on an H100)");
ABSL_FLAG(std::string, cuda_gelu_grad, "fused",
          "With --device=cuda: how a product fused with the tanh GELU's "
          "gradient (the MLP's first layer in the backward) runs: fused "
          "(the default: the gradient and the bias gradient in cuBLASLt's "
          "epilogue, DGELU_BGRAD, where cuBLASLt takes them), dgelu (the "
          "gradient in the epilogue, the bias gradient by Triad's column "
          "sum) or kernels (the product, then Triad's kernels)");
ABSL_FLAG(int32_t, cuda_matmul_candidates, 1,
          "With --device=cuda: how many of cuBLASLt's algorithms to time for "
          "each product shape on its first call, keeping the fastest (1, the "
          "default: its heuristic's first, untimed; at most 32). Timing picks "
          "by the clock: two runs may choose differently, and their results "
          "then differ by the products' rounding");
ABSL_FLAG(bool, cuda_graphs, false,
          "With --device=cuda: record each call (a microbatch's forward and "
          "backward, the optimizer step) once as a CUDA graph and replay it, "
          "one launch instead of one per kernel: the same results, less "
          "host time per step. Calls with pipeline transfers, or with "
          "collectives staged through host memory (--comm=mpi), run kernel "
          "by kernel; the run says which at its end");
ABSL_FLAG(std::string, cuda_init, "gpu",
          "With --device=cuda: where the initial values are drawn: gpu (the "
          "default: the host's Philox streams, the GPU's log, sin and cos, "
          "so an element may differ from the CPU backend's in its last bit; "
          "seconds faster for a billion parameters) or host (as the CPU "
          "backend, bit for bit, then copied to the GPU)");
ABSL_FLAG(std::string, cpu_bf16_products, "auto",
          "With --device=cpu: what multiplies a bf16 plan's bf16 operands: "
          "onednn (oneDNN on the CPU's bf16 units, AVX512-BF16 or AMX; f32 "
          "sums), blas (OpenBLAS's f32 product on widened copies), or auto "
          "(onednn where this build and CPU have it, else blas)");
ABSL_FLAG(double, peak_tflops, 0,
          "The device's peak TFLOP/s (for example 989 for an H100's dense "
          "bf16): the progress line and metrics then show the FLOPs "
          "utilization (MFU) beside the achieved TFLOP/s per rank (the "
          "plan's FLOPs: its products and attention, with a recomputed "
          "forward pass and a padded vocabulary's columns, which the "
          "model's FLOPs leave out)");

using namespace triad::rt;
namespace plan = triad::plan;

namespace {

/// " (bf16 products on oneDNN)" when the CPU executor multiplies a bf16
/// plan's operands in bf16, else nothing.
std::string cpuProductsNote(const Executor &executor) {
  const auto *cpuExecutor = dynamic_cast<const CpuExecutor *>(&executor);
  if (!cpuExecutor || !cpuExecutor->runsBf16Products())
    return "";
  for (const plan::Value *value : *executor.programOf().values())
    if (value->dtype() == plan::DType::BF16)
      return " (bf16 products on oneDNN)";
  return "";
}

/// Numbers for people: 1234567 -> "1,234,567".
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), result;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      result.push_back(',');
    result.push_back(digits[i]);
  }
  return value < 0 ? "-" + result : result;
}

std::string mebibytes(double bytes) {
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

double peakResidentBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return static_cast<double>(usage.ru_maxrss) * 1024.0; // KiB on Linux
}

/// The tool's process: its MPI world and communicator, and how it ends.
class Tool {
public:
  /// Prints `message` as the tool's error and ends with status 1. Call it
  /// where every rank fails alike (every rank sees the same inputs, or
  /// learned of the failure through the communicator).
  [[noreturn]] void fail(const std::string &message) {
    std::fprintf(stderr, "triad-run: error: %s\n", message.c_str());
    std::fflush(stderr);
    peers.reset();
    comm.reset();
    world.reset(); // finalizes MPI
    std::exit(1);
  }
  void failIf(const absl::Status &status, const std::string &context = "") {
    if (!status.ok())
      fail(absl::StrCat(context, status.message()));
  }
  /// For an outcome that may differ between ranks (every rank calls it):
  /// when any rank failed, every rank fails, a failing rank with its own
  /// error and the others naming the first rank that failed.
  void failIfAny(const absl::Status &status, const std::string &context = "") {
    absl::Status agreed = comm ? comm->agree(status) : status;
    if (!agreed.ok())
      fail(absl::StrCat(status.ok() ? "" : context, agreed.message()));
  }
  /// A failure of this rank alone while the others may be waiting for it:
  /// prints it and ends the whole job.
  [[noreturn]] void abortJob(const std::string &message) {
    std::fprintf(stderr, "triad-run: error: %s%s\n",
                 size() > 1 ? absl::StrCat("rank ", rank(), ": ").c_str() : "",
                 message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    if (world)
      world->abort(1);
    std::exit(1);
  }
  void abortIf(const absl::Status &status, const std::string &context = "") {
    if (!status.ok())
      abortJob(absl::StrCat(context, status.message()));
  }
  /// Prints a line on rank 0.
  void say(const std::string &line) {
    if (rank() == 0) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  int rank() const { return world ? world->rank() : 0; }
  int size() const { return world ? world->size() : 1; }

  std::unique_ptr<mpi::World> world;
  /// The plan's collectives over MPI (under a launcher).
  std::unique_ptr<Communicator> comm;
  /// The watchdog's side channel to the other ranks (under a launcher,
  /// with a --timeout); ends before MPI does.
  std::unique_ptr<mpi::PeerQuery> peers;
};

/// `path` with ".rankR" before its extension: metrics.jsonl ->
/// metrics.rank1.jsonl, out/trace -> out/trace.rank1.
std::string perRankPath(const std::string &path, int rank) {
  size_t slash = path.find_last_of('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find_last_of('.');
  std::string tag = absl::StrCat(".rank", rank);
  if (dot == std::string::npos || dot <= base)
    return path + tag;
  return absl::StrCat(path.substr(0, dot), tag, path.substr(dot));
}

/// A file written line by line and flushed after each (JSON lines, the
/// trace), so a run that dies leaves what it had written.
class OutputFile {
public:
  static absl::StatusOr<OutputFile> open(const std::string &path) {
    OutputFile file;
    file.path = path;
    file.handle = std::fopen(path.c_str(), "w");
    if (!file.handle)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return file;
  }
  OutputFile() = default;
  OutputFile(OutputFile &&other) noexcept
      : path(std::move(other.path)), handle(other.handle) {
    other.handle = nullptr;
  }
  OutputFile &operator=(OutputFile &&other) noexcept {
    std::swap(path, other.path);
    std::swap(handle, other.handle);
    return *this;
  }
  ~OutputFile() {
    if (handle)
      std::fclose(handle);
  }
  explicit operator bool() const { return handle != nullptr; }

  absl::Status write(const std::string &text) {
    if (std::fwrite(text.data(), 1, text.size(), handle) != text.size() ||
        std::fflush(handle) != 0)
      return absl::DataLossError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return absl::OkStatus();
  }
  absl::Status close() {
    FILE *open = handle;
    handle = nullptr;
    if (open && std::fclose(open) != 0)
      return absl::DataLossError(
          absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
    return absl::OkStatus();
  }

private:
  std::string path;
  FILE *handle = nullptr;
};

using Json = nlohmann::ordered_json;

/// One line of JSON; strings from the plan that are not UTF-8 get
/// replacement characters.
std::string json(const Json &value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// A number for JSON: null when it is not finite.
Json number(double value) {
  return std::isfinite(value) ? Json(value) : Json();
}

/// Chrome's trace event format: {"traceEvents": [...]} of complete ("X")
/// events in microseconds, one process per rank.
class TraceWriter {
public:
  absl::Status open(const std::string &path, int rank) {
    absl::StatusOr<OutputFile> opened = OutputFile::open(path);
    if (!opened.ok())
      return opened.status();
    file = std::move(*opened);
    pid = rank;
    // Two tracks per rank: the compute (steps, calls, kernels) and the
    // communication (collectives and transfers, and the waits for them), so
    // that their overlap shows; with --trace-device, two more for the GPU's
    // streams (named when their first span comes).
    return file.write(
        absl::StrCat("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n",
                     json({{"name", "process_name"},
                           {"ph", "M"},
                           {"pid", pid},
                           {"tid", 0},
                           {"args", {{"name", absl::StrCat("rank ", rank)}}}}),
                     ",\n", track(kComputeTrack, "compute"), ",\n",
                     track(kCommunicationTrack, "communication")));
  }
  absl::Status write(const std::vector<TraceEvent> &events) {
    if (!file)
      return absl::OkStatus();
    std::string text;
    for (const TraceEvent &event : events) {
      int tid = trackOf(event);
      if (tid >= kDeviceComputeTrack && !named[tid - kDeviceComputeTrack]) {
        named[tid - kDeviceComputeTrack] = true;
        absl::StrAppend(&text, ",\n",
                        track(tid, tid == kDeviceComputeTrack
                                       ? "GPU compute stream"
                                       : "GPU communication stream"));
      }
      Json record = {{"name", event.name},
                     {"cat", event.category},
                     {"ph", "X"},
                     {"ts", event.beginMicros},
                     {"dur", event.durationMicros},
                     {"pid", pid},
                     {"tid", tid}};
      if (!event.detail.empty())
        record["args"]["operands"] = event.detail;
      if (!event.layer.empty())
        record["args"]["layer"] = event.layer;
      if (!event.call.empty())
        record["args"]["call"] = event.call;
      if (event.instruction >= 0)
        record["args"]["instruction"] = event.instruction;
      absl::StrAppend(&text, ",\n", json(record));
    }
    return file.write(text);
  }
  absl::Status close() {
    if (!file)
      return absl::OkStatus();
    if (absl::Status status = file.write("\n]}\n"); !status.ok())
      return status;
    return file.close();
  }

private:
  static constexpr int kComputeTrack = 0, kCommunicationTrack = 1,
                       kDeviceComputeTrack = 2, kDeviceCommunicationTrack = 3;
  /// Whether the device tracks have been named.
  bool named[2] = {false, false};
  std::string track(int tid, const char *name) const {
    return json({{"name", "thread_name"},
                 {"ph", "M"},
                 {"pid", pid},
                 {"tid", tid},
                 {"args", {{"name", name}}}});
  }
  static int trackOf(const TraceEvent &event) {
    if (event.category == "device")
      return kDeviceComputeTrack;
    if (event.category == "device communication")
      return kDeviceCommunicationTrack;
    return communicates(event) ? kCommunicationTrack : kComputeTrack;
  }
  /// An instruction that moves data between ranks, or the wait for one.
  static bool communicates(const TraceEvent &event) {
    if (event.category != "instruction")
      return false;
    std::string_view name = event.name;
    if (name.substr(0, 5) == "wait ")
      return true;
    for (std::string_view op : {"AllReduce", "AllGather", "ReduceScatter",
                                "AllToAll", "AllSlice", "Send", "Recv"})
      if (name == op)
        return true;
    return false;
  }

  OutputFile file;
  int pid = 0;
};

/// Merges the traces `parts` (one per rank) into one trace at `path`.
absl::Status mergeTraces(const std::vector<std::string> &parts,
                         const std::string &path) {
  std::string text = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (const std::string &part : parts) {
    absl::StatusOr<std::string> content = readFile(part);
    if (!content.ok())
      return content.status();
    Json trace = Json::parse(*content, nullptr, /*allow_exceptions=*/false);
    if (trace.is_discarded() || !trace.is_object() ||
        !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
      return absl::DataLossError(
          absl::StrCat("'", part, "' is not a complete trace"));
    for (const Json &event : trace["traceEvents"]) {
      absl::StrAppend(&text, first ? "" : ",\n", json(event));
      first = false;
    }
  }
  absl::StrAppend(&text, "\n]}\n");
  return writeFileAtomically(path, text);
}

/// One line about the plan: mesh, parameters, batch, arena.
std::string describePlan(const std::string &path, const plan::Plan &plan) {
  std::vector<std::string> axes;
  for (const plan::MeshAxis *axis : *plan.mesh())
    axes.push_back(absl::StrCat(axis->name()->str(), "=", axis->size()));
  // Parameters over all pipeline ranks, each counted once by name.
  std::map<std::string, int64_t> parameters;
  uint64_t arena = 0;
  for (const plan::Program *program : *plan.programs()) {
    if (program->pipeline_rank() == 0)
      arena = program->arena_bytes();
    if (program->persistent())
      for (const plan::Persistent *p : *program->persistent())
        if (p->role() == plan::Role::Parameter) {
          int64_t count = 1;
          for (int64_t size : *p->global_shape())
            count *= size;
          parameters[p->name()->str()] = count;
        }
  }
  int64_t total = 0;
  for (const auto &entry : parameters)
    total += entry.second;
  int64_t world = meshSize(plan);
  return absl::StrCat(
      "triad-run: plan ", path, ": mesh ", absl::StrJoin(axes, " x "), " (",
      world, world == 1 ? " rank" : " ranks", "), ", grouped(total),
      " parameters, batch ", plan.batch(), " x seq ", plan.seq(), " in ",
      plan.microbatches(), " microbatch", plan.microbatches() == 1 ? "" : "es",
      " of ", microbatchSamples(plan), ", vocab ", grouped(plan.vocab()),
      ", arena ", mebibytes(static_cast<double>(arena)), " (pipeline rank 0)");
}

std::string meshText(const plan::Plan &plan) {
  std::vector<std::string> axes;
  for (const plan::MeshAxis *axis : *plan.mesh())
    axes.push_back(absl::StrCat(axis->name()->str(), "=", axis->size()));
  return absl::StrJoin(axes, ", ");
}

} // namespace

int main(int argc, char **argv) {
  // Start-up, phase by phase, for the "ready in" line.
  auto launched = std::chrono::steady_clock::now();
  absl::SetProgramUsageMessage(
      "trains a compiled plan on a token corpus\n\n"
      "  triad-run tiny.plan --data corpus.bin --steps 200\n"
      "  mpirun -np 8 triad-run tiny.plan --data corpus.bin --steps 200\n\n"
      "Before the first step: the plan, the data, and where start-up went "
      "(\"ready in\": MPI, the plan and the data; the executor's setup (a "
      "GPU's context), its arena, drawing the initial values and, on a GPU, "
      "copying them there; then a checkpoint's weights).\n"
      "Progress, one line per logged step:\n"
      "  step    5/200 | loss 4.8123 | avg 4.9410 | lr 1.00e-03 | grad norm "
      "0.9123 | 12,345 tok/s | 0.81 TFLOP/s | 10,240 tokens | 4.1 s | mem "
      "3.2 MiB | rss 45.1 MiB | host 1.2 ms/step\n"
      "(loss: the step's; avg: the mean loss of the steps since the last "
      "line; tok/s and TFLOP/s: over those steps, TFLOP/s per rank from the "
      "plan's products and attention; tokens: seen since step 1; then the "
      "wall time of the run; mem: the plan's arena on this rank; rss: the "
      "process's peak resident memory; host: the mean time per step of "
      "those steps that the host spent in the executor's calls, not "
      "waiting for the device, and on a GPU the kernel launches, cuBLASLt "
      "products, copies and NCCL calls it issued per step; with "
      "--peak-tflops also MFU). "
      "--metrics records per logged step: step, loss, loss_mean, lr, "
      "grad_norm, tokens_per_s (the step's), interval_tokens_per_s, tflops, "
      "mfu (with --peak-tflops), loss_scale (f16 plans: the dynamic loss "
      "scale, also on the progress line), tokens_seen, elapsed_s, time (Unix "
      "seconds), memory_bytes, rss_bytes, step_seconds, host_seconds, "
      "sync_seconds (the step's time waiting for the device, its final "
      "synchronization included) and launches (the step's), "
      "host_ms_per_step, sync_ms_per_step and launches_per_step (the "
      "interval's means), skipped. Flags may be spelled with - or _ "
      "(--log-every, --log_every).\n\n"
      "Under mpirun the job has the plan's mesh size in ranks and only rank "
      "0 prints. --metrics FILE: rank 0 writes the job's records to FILE "
      "and every rank R its own (rank, coordinates, step, step_seconds, "
      "idle_seconds: under a pipeline the time spent in transfers waiting "
      "for other stages, host_seconds, sync_seconds, launches, its named "
      "results) to FILE with .rankR before the "
      "extension (metrics.rank1.jsonl). --trace FILE: every rank writes FILE "
      "with .rankR before the extension; rank 0 merges them into FILE at the "
      "end; under a pipeline each call is named by its schedule action and "
      "categorized forward, backward, transfer or optimizer, and idle events "
      "show the bubble. "
      "--save DIR: DIR/step-N/rank-R.safetensors per rank, "
      "DIR/step-N/index.json and DIR/latest by rank 0 once every shard is "
      "written; --load reads a checkpoint saved under any mesh.");
  underscoreFlagNames(argc, argv);
  std::vector<char *> positional = absl::ParseCommandLine(argc, argv);
  Tool tool;

  // Flags first: nothing starts on a bad command line.
  std::string dataPath = absl::GetFlag(FLAGS_data);
  std::optional<int64_t> stepsFlag = absl::GetFlag(FLAGS_steps);
  int64_t logEvery = absl::GetFlag(FLAGS_log_every);
  int64_t saveEvery = absl::GetFlag(FLAGS_save_every);
  int64_t timeout = absl::GetFlag(FLAGS_timeout);
  std::string saveDir = absl::GetFlag(FLAGS_save);
  std::string loadDir = absl::GetFlag(FLAGS_load);
  std::string initFromDir = absl::GetFlag(FLAGS_init_from);
  if (!initFromDir.empty() && !loadDir.empty())
    tool.fail("give --load (resume) or --init-from (new run from the "
              "weights), not both");
  std::string width = absl::GetFlag(FLAGS_token_width);
  std::optional<double> lr = absl::GetFlag(FLAGS_lr);
  std::optional<uint64_t> seedFlag = absl::GetFlag(FLAGS_seed);
  std::optional<int> cudaDevice = absl::GetFlag(FLAGS_cuda_device);
  absl::StatusOr<MatmulPrecision> matmulPrecision =
      parseMatmulPrecision(absl::GetFlag(FLAGS_matmul_precision));
  if (!matmulPrecision.ok())
    tool.fail(absl::StrCat("--matmul-precision: ",
                           matmulPrecision.status().message()));
  if (absl::GetFlag(FLAGS_tf32)) {
    if (*matmulPrecision == MatmulPrecision::Bf16)
      tool.fail("--tf32 and --matmul-precision=bf16 disagree: give one");
    *matmulPrecision = MatmulPrecision::Tf32;
  }
  bool fastMatmul = *matmulPrecision != MatmulPrecision::F32;
  absl::StatusOr<AttentionKernel> cudaAttention =
      parseAttentionKernel(absl::GetFlag(FLAGS_cuda_attention));
  if (!cudaAttention.ok())
    tool.fail(
        absl::StrCat("--cuda-attention: ", cudaAttention.status().message()));
  absl::StatusOr<cpu::Bf16ProductKernel> bf16Products =
      cpu::parseBf16ProductKernel(absl::GetFlag(FLAGS_cpu_bf16_products));
  if (!bf16Products.ok())
    tool.fail(
        absl::StrCat("--cpu-bf16-products: ", bf16Products.status().message()));
  std::string comm = absl::GetFlag(FLAGS_comm);
  absl::StatusOr<Backend> backend = parseBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok())
    tool.fail(absl::StrCat("--device: ", backend.status().message()));
  if (!backendBuilt(*backend))
    tool.fail(absl::StrCat("--device=", backendName(*backend),
                           ": this triad-run was built without the CUDA "
                           "backend (the CUDA toolkit was not found)"));
  if (comm != "mpi" && comm != "nccl")
    tool.fail(
        absl::StrCat("unknown --comm '", comm, "' (expected mpi or nccl)"));
  if (*backend != Backend::Cuda && (cudaDevice || fastMatmul || comm == "nccl"))
    tool.fail(absl::StrCat(
        cudaDevice   ? "--cuda-device"
        : fastMatmul ? absl::StrCat("--matmul-precision=",
                                    matmulPrecisionName(*matmulPrecision))
                     : "--comm=nccl",
        " needs --device=cuda"));
  bool cudaGraphs = absl::GetFlag(FLAGS_cuda_graphs);
  if (*backend != Backend::Cuda && cudaGraphs)
    tool.fail("--cuda-graphs needs --device=cuda");
  absl::StatusOr<GeluGradRoute> geluGrad =
      parseGeluGradRoute(absl::GetFlag(FLAGS_cuda_gelu_grad));
  if (!geluGrad.ok())
    tool.fail(absl::StrCat("--cuda-gelu-grad: ", geluGrad.status().message()));
  if (*backend != Backend::Cuda && *geluGrad != GeluGradRoute::Fused)
    tool.fail(absl::StrCat("--cuda-gelu-grad=", geluGradRouteName(*geluGrad),
                           " needs --device=cuda"));
  int32_t matmulCandidates = absl::GetFlag(FLAGS_cuda_matmul_candidates);
  if (matmulCandidates < 1 || matmulCandidates > 32)
    tool.fail(absl::StrCat("--cuda-matmul-candidates must be 1 to 32, not ",
                           matmulCandidates));
  if (*backend != Backend::Cuda && matmulCandidates != 1)
    tool.fail("--cuda-matmul-candidates needs --device=cuda");
  std::string cudaInit = absl::GetFlag(FLAGS_cuda_init);
  if (cudaInit != "gpu" && cudaInit != "host")
    tool.fail(absl::StrCat("unknown --cuda-init '", cudaInit,
                           "' (expected gpu or host)"));
  if (*backend != Backend::Cuda && cudaInit != "gpu")
    tool.fail("--cuda-init=host needs --device=cuda");
  bool traceDevice = absl::GetFlag(FLAGS_trace_device);
  if (traceDevice && absl::GetFlag(FLAGS_trace).empty())
    tool.fail("--trace-device needs --trace FILE");
  if (traceDevice && *backend != Backend::Cuda)
    tool.fail("--trace-device needs --device=cuda (the CPU's instruction "
              "times are already its own)");
  if (*backend != Backend::Cuda && *cudaAttention == AttentionKernel::Cudnn)
    tool.fail(
        absl::StrCat("--cuda-attention=", attentionKernelName(*cudaAttention),
                     " needs --device=cuda"));
  if (*backend != Backend::Cpu && *bf16Products != cpu::Bf16ProductKernel::Auto)
    tool.fail(absl::StrCat(
        "--cpu-bf16-products=", cpu::bf16ProductKernelName(*bf16Products),
        " needs --device=cpu"));
  if (*bf16Products == cpu::Bf16ProductKernel::OneDnn)
    if (std::string whyNot; !cpu::bf16ProductsAvailable(&whyNot))
      tool.fail(absl::StrCat("--cpu-bf16-products=onednn: ", whyNot));
  if (cudaDevice && *cudaDevice < 0)
    tool.fail(
        absl::StrCat("--cuda-device must be 0 or more, got ", *cudaDevice));
  if (positional.size() != 2)
    tool.fail(positional.size() < 2
                  ? "give the plan file to run (triad-run PLAN --data FILE "
                    "--steps N)"
                  : absl::StrCat("give one plan file, not ",
                                 positional.size() - 1, " (",
                                 absl::StrJoin(positional.begin() + 1,
                                               positional.end(), " "),
                                 ")"));
  std::string planPath = positional[1];
  if (dataPath.empty())
    tool.fail("give the token corpus to train on with --data FILE");
  if (!stepsFlag)
    tool.fail("give the optimizer step to train until with --steps N");
  int64_t steps = *stepsFlag;
  if (steps < 1)
    tool.fail(absl::StrCat("--steps must be at least 1, got ", steps));
  if (logEvery < 1)
    tool.fail(absl::StrCat("--log-every must be at least 1, got ", logEvery));
  if (timeout < 0)
    tool.fail(absl::StrCat("--timeout must be 0 (never) or a number of "
                           "seconds, got ",
                           timeout));
  if (saveEvery != 0 && saveDir.empty())
    tool.fail("--save-every needs --save DIR (where to save)");
  if (loadDir == "auto" && saveDir.empty())
    tool.fail("--load auto resumes from the --save folder: give --save DIR");
  if (saveEvery < 0)
    tool.fail(absl::StrCat("--save-every must be positive, got ", saveEvery));
  if (width != "u16" && width != "u32")
    tool.fail(absl::StrCat("unknown --token-width '", width,
                           "' (expected u16 or u32)"));
  if (lr && !(*lr > 0.0 && std::isfinite(*lr)))
    tool.fail(absl::StrCat("--lr must be a positive number, got ", *lr));

  // torchrun (or another launcher of its kind) starts processes that find
  // each other over TCP, not MPI: each would run alone. Say what works.
  if (const char *size = std::getenv("WORLD_SIZE");
      size && !mpi::launchedByLauncher() && std::string(size) != "1" &&
      (std::getenv("RANK") || std::getenv("LOCAL_RANK") ||
       std::getenv("TORCHELASTIC_RUN_ID")))
    tool.fail(absl::StrCat(
        "started with WORLD_SIZE=", size,
        " by torchrun or a launcher like it, but Triad's ranks talk over MPI: "
        "start the job with mpirun -np ",
        size, " triad-run ... (or srun under Slurm)"));

  // srun without PMIx: Open MPI's own message would advise rebuilding it.
  if (mpi::startedBySrunWithoutPmix())
    tool.fail(
        "started by srun without PMIx (srun --mpi=none or pmi2, or a "
        "cluster whose MpiDefault is one of them), through which Open MPI "
        "cannot start: run srun --mpi=pmix ... triad-run ... (or set "
        "MpiDefault=pmix in slurm.conf), or mpirun inside the allocation");

  // The job: MPI under a launcher, else one rank.
  absl::StatusOr<mpi::World> world = mpi::World::initialize(&argc, &argv);
  tool.failIf(world.status(), "cannot start MPI: ");
  tool.world = std::make_unique<mpi::World>(std::move(*world));

  absl::StatusOr<LoadedPlan> loaded = loadPlan(planPath);
  tool.failIf(loaded.status());
  const plan::Plan &plan = loaded->root();
  int64_t meshRanks = meshSize(plan);
  if (meshRanks != tool.world->size())
    tool.fail(absl::StrCat(
        "the plan is for a mesh of ", meshRanks, " rank",
        meshRanks == 1 ? "" : "s", " (", meshText(plan), "); ",
        tool.world->usesMpi() ? "mpirun started " : "this run has ",
        tool.world->size(),
        tool.world->usesMpi()
            ? ""
            : absl::StrCat(" (start it with mpirun -np ", meshRanks, ")")));
  if (tool.world->usesMpi()) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        mpi::createMpiCommunicator(plan);
    tool.failIf(comm.status(), "cannot set up the plan's communicators: ");
    tool.comm = std::move(*comm);
  }
  bool multiRank = tool.size() > 1;

  // From here on a rank may fail where another does not (its files, its
  // node): every rank learns of it.
  absl::StatusOr<TokenFile> data = TokenFile::open(
      dataPath, width == "u16" ? TokenWidth::U16 : TokenWidth::U32,
      plan.vocab());
  tool.failIfAny(data.status());
  std::string evalPath = absl::GetFlag(FLAGS_eval_data);
  int64_t evalEvery = absl::GetFlag(FLAGS_eval_every),
          evalBatches = absl::GetFlag(FLAGS_eval_batches);
  if (evalEvery < 0 || evalBatches < 1)
    tool.fail(absl::StrCat("--eval-every must be 0 or more and --eval-batches "
                           "at least 1, got ",
                           evalEvery, " and ", evalBatches));
  std::optional<TokenFile> evalData;
  if (!evalPath.empty()) {
    absl::StatusOr<TokenFile> opened = TokenFile::open(
        evalPath, width == "u16" ? TokenWidth::U16 : TokenWidth::U32,
        plan.vocab());
    tool.failIfAny(opened.status(), "--eval-data: ");
    evalData = std::move(*opened);
  }

  // --load auto: the newest checkpoint of the --save folder that every
  // rank finds intact (the oldest of the ranks' choices), or none.
  std::optional<uint64_t> loadStep;
  bool skippedDamaged = false;
  if (loadDir == "auto") {
    std::vector<std::string> skipped;
    absl::StatusOr<uint64_t> newest = newestIntactCheckpoint(saveDir, skipped);
    int64_t mine = newest.ok() ? static_cast<int64_t>(*newest) : -1;
    absl::StatusOr<int64_t> agreed =
        tool.comm ? tool.comm->worldMinimum(mine) : mine;
    tool.failIf(agreed.status(), "--load auto: ");
    for (const std::string &line : skipped)
      tool.say(absl::StrCat("triad-run: warning: --load auto: skipping the "
                            "damaged checkpoint ",
                            line));
    skippedDamaged = !skipped.empty();
    if (*agreed < 0) {
      tool.say(absl::StrCat("triad-run: --load auto: no intact checkpoint in '",
                            saveDir, "': training from step 1"));
      loadDir.clear();
    } else {
      loadDir = saveDir;
      loadStep = static_cast<uint64_t>(*agreed);
    }
  }

  // Resuming: the checkpoint's step and seed.
  uint64_t seed = seedFlag.value_or(1234), firstStep = 1;
  std::optional<double> checkpointLr;
  std::map<std::string, double> checkpointHyperparameters;
  if (!loadDir.empty()) {
    absl::StatusOr<CheckpointReader> checkpoint =
        CheckpointReader::open(loadDir, loadStep);
    tool.failIfAny(checkpoint.status(), "--load: ");
    const CheckpointInfo &info = checkpoint->info();
    if (seedFlag && *seedFlag != info.seed)
      tool.fail(absl::StrCat("--seed ", *seedFlag, " differs from the seed ",
                             info.seed, " of checkpoint '", loadDir,
                             "' (leave --seed out to resume with it)"));
    seed = info.seed;
    checkpointLr = info.peakLearningRate;
    checkpointHyperparameters = info.hyperparameters;
    if (info.step >= static_cast<uint64_t>(steps))
      tool.fail(absl::StrCat("checkpoint '", loadDir, "' is at step ",
                             info.step, ": --steps ", steps,
                             " leaves nothing to train (--steps counts the "
                             "checkpoint's steps too)"));
    firstStep = info.step + 1;
  }

  // Records where this rank is, for the watchdog (started once the
  // trainer exists, so that a peer stopped in a load, a step or a save ends
  // the job instead of hanging it).
  Progress progress;
  TrainerOptions options;
  options.progress = &progress;
  options.seed = seed;
  options.learningRate = lr;
  // A schedule that decays over the run (the compiler's default) ends at
  // --steps, which counts a resumed checkpoint's steps too: a run resumed
  // with the --steps it started with follows the same schedule.
  options.runSteps = steps;
  options.trace = !absl::GetFlag(FLAGS_trace).empty();
  {
    // A:B, or A alone.
    std::string window = absl::GetFlag(FLAGS_trace_steps);
    std::vector<std::string> ends = absl::StrSplit(window, ':');
    uint64_t first = 0, last = 0;
    bool valid = (ends.size() == 1 || ends.size() == 2) &&
                 absl::SimpleAtoi(ends.front(), &first) &&
                 absl::SimpleAtoi(ends.back(), &last) && first >= 1 &&
                 last >= first;
    if (!valid)
      tool.fail(absl::StrCat("--trace-steps must be A:B with 1 <= A <= B, or "
                             "one step A; got '",
                             window, "'"));
    options.traceFirstStep = first;
    options.traceLastStep = last;
  }
  options.deviceTimes = traceDevice;
  options.communicator = tool.comm.get();
  options.device.backend = *backend;
  options.device.cudaDevice = cudaDevice.value_or(-1);
  options.device.matmulPrecision = *matmulPrecision;
  options.device.cudaAttention = *cudaAttention;
  options.device.cudaGraphs = cudaGraphs;
  options.device.cudaHostInit = cudaInit == "host";
  options.device.cudaGeluGrad = *geluGrad;
  options.device.cudaMatmulCandidates = matmulCandidates;
  options.device.nccl = comm == "nccl";
  options.device.cpuBf16Products = *bf16Products;
  // NCCL's waits poll for its errors and give up after the watchdog's
  // time (which, measured from the last progress, normally reports a
  // hang first, with more to say); an error NCCL reports ends them at once.
  options.device.ncclTimeout = std::chrono::seconds(timeout);
  auto creating = std::chrono::steady_clock::now();
  absl::StatusOr<Trainer> trainer = Trainer::create(*loaded, *data, options);
  tool.failIfAny(trainer.status());
  auto created = std::chrono::steady_clock::now();
  std::unique_ptr<Watchdog> watchdog;
  // Every rank starts the side channel at this point, or none does.
  if (timeout > 0 && tool.size() > 1 && tool.world->threadsMayCallMpi()) {
    absl::StatusOr<std::unique_ptr<mpi::PeerQuery>> peers =
        mpi::PeerQuery::start(*tool.world,
                              [&progress] { return progress.answer(); });
    tool.failIfAny(peers.status(),
                   "cannot start the watchdog's side channel: ");
    tool.peers = std::move(*peers);
  }
  if (timeout > 0) {
    std::string where = absl::StrCat("rank ", tool.rank());
    const MeshCoordinates &at = trainer->executor().coordinates();
    std::vector<std::string> axes;
    for (size_t i = 0; i < at.size(); ++i)
      axes.push_back(
          absl::StrCat(plan.mesh()->Get(i)->name()->str(), " ", at[i]));
    absl::StrAppend(&where, " (", absl::StrJoin(axes, ", "), ")");
    // The ranks a waiting rank waits for are asked where they are: at most
    // 2 s (less with a short --timeout), so that the report comes soon.
    auto within = std::chrono::milliseconds(
        std::min<int64_t>(2000, std::max<int64_t>(timeout * 250, 250)));
    watchdog = std::make_unique<Watchdog>(
        progress, std::chrono::seconds(timeout),
        [where, timeout, within, &progress, peers = tool.peers.get(),
         rank = tool.rank()](const std::string &report) {
          // From the watchdog's thread, while the main thread is blocked;
          // MPI here only through the side channel, which MPI_THREAD_MULTIPLE
          // allows. The launcher ends the job when a rank exits.
          std::string text = report;
          if (std::optional<WaitPoint> point = progress.waitPoint();
              peers && point && !point->peers.empty()) {
            auto ask = [peers](const std::vector<int64_t> &ranks,
                               std::chrono::milliseconds limit) {
              return peers->ask(ranks, limit);
            };
            std::string said = describePeers(
                *point, rank, askAround(*point, rank, ask, within), within);
            if (!said.empty())
              absl::StrAppend(&text, "; ", said);
          }
          std::fprintf(stderr,
                       "triad-run: error: %s: %s; ending the job (--timeout "
                       "%lld)\n",
                       where.c_str(), text.c_str(),
                       static_cast<long long>(timeout));
          std::fflush(stderr);
          std::fflush(stdout);
          std::_Exit(3);
        });
  }
  if (!loadDir.empty())
    tool.failIf(trainer->load(loadDir, loadStep),
                "--load: "); // fails on every rank
  if (!initFromDir.empty()) {
    tool.failIf(trainer->initFrom(initFromDir), "--init-from: ");
    tool.say(absl::StrCat("triad-run: starting from the weights of '",
                          initFromDir, "' (new optimizer state, from step 1)"));
  }
  // A resumed run under another peak learning rate than its checkpoint's
  // says so (the plan's rate, or --lr, wins).
  if (std::optional<double> peak = trainer->executor().peakLearningRate();
      checkpointLr && peak &&
      std::abs(*peak - *checkpointLr) > 1e-9 * std::abs(*checkpointLr))
    tool.say(absl::StrFormat(
        "triad-run: warning: resuming with peak lr %g, but checkpoint '%s' "
        "was trained with %g (--lr %g keeps it)",
        *peak, loadDir, *checkpointLr, *checkpointLr));
  // And under other hyper-parameters: the plan's win (recompile with the
  // checkpoint's to keep them).
  {
    std::vector<std::string> changed;
    std::map<std::string, double> mine = trainer->executor().hyperparameters();
    for (const auto &[name, before] : checkpointHyperparameters) {
      auto it = mine.find(name);
      if (it != mine.end() &&
          std::abs(it->second - before) > 1e-9 * std::abs(before))
        changed.push_back(absl::StrFormat("%s %g (checkpoint: %g)", name,
                                          it->second, before));
    }
    if (!changed.empty())
      tool.say(absl::StrCat(
          "triad-run: warning: resuming with other hyper-parameters than "
          "checkpoint '",
          loadDir, "' was trained with: ", absl::StrJoin(changed, ", "),
          " (the plan's apply; compile it with the checkpoint's to keep "
          "them)"));
  }
  absl::Status folder;
  if (!saveDir.empty() && mkdir(saveDir.c_str(), 0755) != 0 && errno != EEXIST)
    folder = absl::PermissionDeniedError(
        absl::StrCat("cannot create checkpoint folder '", saveDir,
                     "': ", std::strerror(errno)));
  tool.failIfAny(folder, "--save: ");
  // One job at a time saves into a folder: rank 0 holds its lock until the
  // process exits (saveLock is static, so exit() releases it too).
  static std::optional<FolderLock> saveLock;
  absl::Status locked;
  if (!saveDir.empty() && tool.rank() == 0) {
    absl::StatusOr<FolderLock> lock = FolderLock::acquire(saveDir);
    if (lock.ok()) {
      if (!lock->staleNote().empty())
        tool.say("triad-run: " + lock->staleNote());
      saveLock = std::move(*lock);
    } else {
      locked = lock.status();
    }
  }
  tool.failIfAny(locked, "--save: ");
  // 'latest' never moves back to an older step (another run's folder, or
  // this run's from further on) unless the user says so.
  absl::Status forward;
  // (--load auto moves it back over the damaged checkpoints it skipped.)
  if (!saveDir.empty() && !absl::GetFlag(FLAGS_overwrite) && !skippedDamaged &&
      tool.rank() == 0 && firstStep <= static_cast<uint64_t>(steps))
    if (absl::StatusOr<CheckpointReader> existing =
            CheckpointReader::open(saveDir);
        existing.ok() && existing->info().step >= firstStep) {
      uint64_t firstSave =
          saveEvery > 0
              ? std::min<uint64_t>(static_cast<uint64_t>(steps),
                                   (firstStep + saveEvery - 1) /
                                       static_cast<uint64_t>(saveEvery) *
                                       static_cast<uint64_t>(saveEvery))
              : static_cast<uint64_t>(steps);
      if (firstSave <= existing->info().step)
        forward = absl::FailedPreconditionError(absl::StrCat(
            "'", saveDir, "' holds step ", existing->info().step,
            " and this run would save step ", firstSave,
            " over or before it: save into another folder, resume from it "
            "(--load ",
            saveDir,
            "), or pass --overwrite to move 'latest' "
            "back"));
    }
  tool.failIfAny(forward, "--save: ");

  // The job's metrics (rank 0) and, with several ranks, every rank's own.
  std::string metricsPath = absl::GetFlag(FLAGS_metrics),
              tracePath = absl::GetFlag(FLAGS_trace);
  OutputFile metrics, rankMetrics;
  absl::Status opened;
  if (!metricsPath.empty() && tool.rank() == 0) {
    absl::StatusOr<OutputFile> file = OutputFile::open(metricsPath);
    if (file.ok())
      metrics = std::move(*file);
    opened = file.status();
  }
  if (!metricsPath.empty() && multiRank && opened.ok()) {
    absl::StatusOr<OutputFile> file =
        OutputFile::open(perRankPath(metricsPath, tool.rank()));
    if (file.ok())
      rankMetrics = std::move(*file);
    opened = file.status();
  }
  tool.failIfAny(opened, "--metrics: ");
  std::optional<TensorBoardWriter> tensorboard;
  if (std::string dir = absl::GetFlag(FLAGS_tensorboard);
      !dir.empty() && tool.rank() == 0) {
    absl::StatusOr<TensorBoardWriter> writer = TensorBoardWriter::open(dir);
    opened = writer.status();
    if (writer.ok())
      tensorboard = std::move(*writer);
  }
  tool.failIfAny(opened, "--tensorboard: ");
  TraceWriter trace;
  if (options.trace)
    tool.failIfAny(
        trace.open(multiRank ? perRankPath(tracePath, tool.rank()) : tracePath,
                   tool.rank()),
        "--trace: ");
  Json coordinates = Json::object();
  const MeshCoordinates &position = trainer->executor().coordinates();
  for (size_t i = 0; i < position.size(); ++i)
    coordinates[plan.mesh()->Get(i)->name()->str()] = position[i];

  tool.say(describePlan(planPath, plan));
  tool.say(absl::StrCat(
      "triad-run: data ", dataPath, ": ", grouped(data->size()), " tokens (",
      width, "); ",
      firstStep == 1 ? absl::StrCat("training steps 1..", steps)
                     : absl::StrCat("resuming from '", loadDir, "' at step ",
                                    firstStep - 1, ", training steps ",
                                    firstStep, "..", steps),
      ", seed ", seed,
      lr ? absl::StrFormat(", peak lr %.3g", *lr) : std::string(), ", on ",
      *backend == Backend::Cuda
          ? absl::StrCat(
                "cuda",
                fastMatmul
                    ? absl::StrCat(" (", matmulPrecisionName(*matmulPrecision),
                                   " matmuls)")
                    : "",
                comm == "nccl" ? ", nccl" : "")
          : absl::StrCat("cpu", cpuProductsNote(trainer->executor()))));
  {
    // Where start-up went: MPI, the plan and the data before the executor;
    // the executor's phases; then a checkpoint's weights and the outputs.
    auto seconds = [](auto from, auto to) {
      return std::chrono::duration<double>(to - from).count();
    };
    auto ready = std::chrono::steady_clock::now();
    std::vector<std::string> phases;
    for (const Executor::StartupPhase &phase :
         trainer->executor().startupPhases())
      phases.push_back(absl::StrFormat("%s %.1f s", phase.name, phase.seconds));
    tool.say(absl::StrFormat(
        "triad-run: ready in %.1f s: %.1f s before the executor (MPI, the "
        "plan, the data), the executor %.1f s (%s)%s",
        seconds(launched, ready), seconds(launched, creating),
        seconds(creating, created), absl::StrJoin(phases, ", "),
        seconds(created, ready) >= 0.05
            ? absl::StrFormat(", then %.1f s (a checkpoint's weights, the "
                              "output files)",
                              seconds(created, ready))
            : std::string()));
  }

  double arenaBytes =
      static_cast<double>(trainer->executor().programOf().arena_bytes());
  double peakTflops = absl::GetFlag(FLAGS_peak_tflops);
  if (!(peakTflops >= 0) || !std::isfinite(peakTflops))
    tool.fail(absl::StrCat("--peak-tflops must be 0 (no MFU) or positive, got ",
                           peakTflops));
  // The FLOPs of one step on one rank (the job's over its ranks).
  double rankStepFlops =
      stepFlops(plan) /
      static_cast<double>(std::max<int64_t>(1, meshSize(plan)));
  // What the steps since the last logged line add up to.
  double intervalSeconds = 0, intervalLoss = 0;
  int64_t intervalTokens = 0, intervalSteps = 0, intervalLosses = 0;
  // The host's side of those steps (StepResult::hostSeconds, launches).
  double intervalHostSeconds = 0, intervalSyncSeconds = 0;
  int64_t intervalLaunches = 0;
  int stepWidth = std::max<int>(4, std::to_string(steps).size());
  double trainedSeconds = 0, lastLoss = StepResult::kMissing;
  int64_t trainedTokens = 0;
  uint64_t lastSaved = 0;
  auto started = std::chrono::steady_clock::now();
  // What a stopped run leaves: the last checkpoint it saved, if any.
  auto stoppedWithoutSaving = [&] {
    return absl::StrCat(". Stopped without saving",
                        saveDir.empty() ? ""
                        : lastSaved > 0
                            ? absl::StrCat(": the checkpoint of step ",
                                           lastSaved, " stays the latest")
                            : ": nothing was saved");
  };
  auto save = [&] {
    // Fails on every rank; non-finite parameters are not saved.
    absl::Status saved = trainer->save(saveDir);
    tool.failIf(saved.ok() ? saved
                           : absl::Status(saved.code(),
                                          absl::StrCat(saved.message(),
                                                       stoppedWithoutSaving())),
                "--save: ");
    lastSaved = trainer->completedSteps();
    tool.say(absl::StrCat("triad-run: saved step ", lastSaved, " to ",
                          checkpointStepDir(saveDir, lastSaved)));
  };
  for (uint64_t step = firstStep; step <= static_cast<uint64_t>(steps);
       ++step) {
    absl::StatusOr<StepResult> result = trainer->step();
    tool.abortIf(result.status());
    trainedSeconds += result->seconds;
    trainedTokens += result->tokens;
    lastLoss = result->loss;
    double tokensPerSecond =
        result->seconds > 0 ? result->tokens / result->seconds : 0.0;
    tool.abortIf(trace.write(result->events), "--trace: ");
    intervalSeconds += result->seconds;
    intervalTokens += result->tokens;
    intervalHostSeconds += result->hostSeconds;
    intervalSyncSeconds += result->syncSeconds;
    intervalLaunches += result->launches;
    ++intervalSteps;
    if (std::isfinite(result->loss)) {
      intervalLoss += result->loss;
      ++intervalLosses;
    }
    // Evaluation (every rank): its steps are logged.
    bool evaluating =
        evalData &&
        ((evalEvery > 0 && step % static_cast<uint64_t>(evalEvery) == 0) ||
         step == static_cast<uint64_t>(steps));
    std::optional<Trainer::Evaluation> evaluation;
    if (evaluating) {
      absl::StatusOr<Trainer::Evaluation> measured =
          trainer->evaluate(*evalData, evalBatches);
      tool.abortIf(measured.status(), "--eval-data: ");
      evaluation = *measured;
    }
    if (step % static_cast<uint64_t>(logEvery) == 0 || step == firstStep ||
        step == static_cast<uint64_t>(steps) || evaluating) {
      double meanLoss =
          intervalLosses ? intervalLoss / intervalLosses : StepResult::kMissing;
      double intervalTokensPerSecond =
          intervalSeconds > 0 ? intervalTokens / intervalSeconds : 0.0;
      double tflops = intervalSeconds > 0 ? rankStepFlops * intervalSteps /
                                                intervalSeconds / 1e12
                                          : 0.0;
      double elapsedSeconds = std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - started)
                                  .count();
      int64_t tokensSeen = static_cast<int64_t>(step) * result->tokens;
      double residentBytes = peakResidentBytes();
      // Per step of the interval: the host's time in the calls (not
      // waiting for the device) and the device work it issued.
      double hostMsPerStep = 1e3 * intervalHostSeconds / intervalSteps,
             syncMsPerStep = 1e3 * intervalSyncSeconds / intervalSteps;
      double launchesPerStep =
          static_cast<double>(intervalLaunches) / intervalSteps;
      // f16 plans return their dynamic loss scale.
      auto scale = result->results.find("loss_scale");
      bool scaled = scale != result->results.end();
      tool.say(absl::StrFormat(
          "step %*d/%d | loss %.4f | avg %.4f | lr %.2e | grad norm %.4f | "
          "%s tok/s | %.3g TFLOP/s%s | %s tokens | %.1f s%s%s | mem %s | rss "
          "%s | host %.1f ms/step%s%s",
          stepWidth, step, steps, result->loss, meanLoss, result->lr,
          result->gradNorm, grouped(std::llround(intervalTokensPerSecond)),
          tflops,
          peakTflops > 0
              ? absl::StrFormat(" | MFU %.1f%%", 100.0 * tflops / peakTflops)
              : std::string(),
          grouped(tokensSeen), elapsedSeconds,
          scaled ? absl::StrFormat(" | loss scale %.0f", scale->second)
                 : std::string(),
          evaluation ? absl::StrFormat(" | eval loss %.4f", evaluation->loss)
                     : std::string(),
          mebibytes(arenaBytes), mebibytes(residentBytes), hostMsPerStep,
          intervalLaunches > 0
              ? absl::StrCat(", ", grouped(std::llround(launchesPerStep)),
                             " launches/step")
              : std::string(),
          result->skipped ? " | skipped (overflow)" : ""));
      if (metrics) {
        Json record = {
            {"step", step},
            {"loss", number(result->loss)},
            {"loss_mean", number(meanLoss)},
            {"lr", number(result->lr)},
            {"grad_norm", number(result->gradNorm)},
            {"tokens_per_s", number(tokensPerSecond)},
            {"interval_tokens_per_s", number(intervalTokensPerSecond)},
            {"tflops", number(tflops)},
            {"tokens_seen", tokensSeen},
            {"elapsed_s", number(elapsedSeconds)},
            {"time",
             number(std::chrono::duration<double>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count())},
            {"memory_bytes", number(arenaBytes)},
            {"rss_bytes", number(residentBytes)},
            {"step_seconds", number(result->seconds)},
            {"host_seconds", number(result->hostSeconds)},
            {"sync_seconds", number(result->syncSeconds)},
            {"launches", result->launches},
            {"host_ms_per_step", number(hostMsPerStep)},
            {"sync_ms_per_step", number(syncMsPerStep)},
            {"launches_per_step", number(launchesPerStep)},
            {"skipped", result->skipped}};
        if (peakTflops > 0)
          record["mfu"] = number(tflops / peakTflops);
        if (scaled)
          record["loss_scale"] = number(scale->second);
        if (evaluation) {
          record["eval_loss"] = number(evaluation->loss);
          record["eval_tokens"] = evaluation->tokens;
          record["eval_seconds"] = number(evaluation->seconds);
        }
        tool.abortIf(metrics.write(json(record) + "\n"), "--metrics: ");
      }
      if (tensorboard) {
        std::vector<std::pair<std::string, double>> scalars = {
            {"loss", result->loss},
            {"loss_mean", meanLoss},
            {"lr", result->lr},
            {"grad_norm", result->gradNorm},
            {"tokens_per_s", intervalTokensPerSecond},
            {"tflops", tflops},
            {"host_ms_per_step", hostMsPerStep},
            {"sync_ms_per_step", syncMsPerStep},
            {"launches_per_step", launchesPerStep}};
        if (peakTflops > 0)
          scalars.push_back({"mfu", tflops / peakTflops});
        if (scaled)
          scalars.push_back({"loss_scale", scale->second});
        if (evaluation)
          scalars.push_back({"eval_loss", evaluation->loss});
        tool.abortIf(tensorboard->write(static_cast<int64_t>(step), scalars),
                     "--tensorboard: ");
      }
      intervalSeconds = intervalLoss = 0;
      intervalTokens = intervalSteps = intervalLosses = 0;
      intervalHostSeconds = intervalSyncSeconds = 0;
      intervalLaunches = 0;
      if (rankMetrics) {
        Json results = Json::object();
        for (const auto &[name, value] : result->results)
          results[name] = number(value);
        Json record = {{"rank", tool.rank()},
                       {"coordinates", coordinates},
                       {"step", step},
                       {"step_seconds", number(result->seconds)},
                       {"idle_seconds", number(result->idleSeconds)},
                       {"host_seconds", number(result->hostSeconds)},
                       {"sync_seconds", number(result->syncSeconds)},
                       {"launches", result->launches},
                       {"results", results}};
        tool.abortIf(rankMetrics.write(json(record) + "\n"), "--metrics: ");
      }
    }
    // A non-finite loss or gradient norm (outside f16's skipped steps)
    // ends the run at this step: nothing after it is saved, so the latest
    // checkpoint stays the last finite one.
    bool lossFinite =
        !result->results.count("loss") || std::isfinite(result->loss);
    bool normFinite =
        !result->results.count("grad_norm") || std::isfinite(result->gradNorm);
    if (!result->skipped && (!lossFinite || !normFinite)) {
      if (!(step % static_cast<uint64_t>(logEvery) == 0 || step == firstStep ||
            step == static_cast<uint64_t>(steps)))
        tool.say(absl::StrFormat("step %*d/%d | loss %.4f | grad norm %.4f",
                                 stepWidth, step, steps, result->loss,
                                 result->gradNorm));
      std::string found = trainer->firstNonFiniteParameter();
      tool.fail(absl::StrCat(
          "step ", step, ": the ",
          !lossFinite ? absl::StrCat("loss is ", result->loss)
                      : absl::StrCat("gradient norm is ", result->gradNorm),
          !lossFinite && !normFinite
              ? absl::StrCat(" and the gradient norm ", result->gradNorm)
              : "",
          "; ",
          found.empty()
              ? "every parameter is still finite"
              : absl::StrCat("the first non-finite parameter",
                             tool.size() > 1
                                 ? absl::StrCat(" of rank ", tool.rank())
                                 : "",
                             " is '", found, "'"),
          stoppedWithoutSaving(),
          " (a lower --lr, or gradient clipping, usually helps)"));
    }
    if (!saveDir.empty() && saveEvery > 0 &&
        step % static_cast<uint64_t>(saveEvery) == 0)
      save();
  }
  if (!saveDir.empty() && lastSaved != trainer->completedSteps())
    save();
  // What follows (closing files, merging traces) is not watched; the side
  // channel (which reads `progress`) ends with the watchdog.
  watchdog.reset();
  tool.peers.reset();
  absl::Status closed = trace.close();
  if (closed.ok())
    closed = metrics.close();
  if (closed.ok())
    closed = rankMetrics.close();
  tool.failIfAny(closed);
  if (options.trace && multiRank) {
    // Every rank's trace is complete before rank 0 reads them all.
    tool.failIf(tool.comm->barrier());
    absl::Status merged;
    if (tool.rank() == 0) {
      std::vector<std::string> parts;
      for (int rank = 0; rank < tool.size(); ++rank)
        parts.push_back(perRankPath(tracePath, rank));
      merged = mergeTraces(parts, tracePath);
    }
    tool.failIfAny(merged, "--trace: ");
  }
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  uint64_t trained = static_cast<uint64_t>(steps) - firstStep + 1;
  // Each rank runs its own program: each says which of its calls were not
  // recorded.
  for (const std::string &line : trainer->executor().callsNotRecorded())
    std::fprintf(stderr,
                 "triad-run: rank %d: --cuda-graphs: %s; it ran kernel by "
                 "kernel\n",
                 tool.rank(), line.c_str());
  tool.say(absl::StrFormat(
      "triad-run: trained steps %d..%d in %.2f s (%.3f s/step, %s tok/s); "
      "final loss %.4f",
      firstStep, steps, elapsed, trainedSeconds / trained,
      grouped(std::llround(trainedSeconds > 0 ? trainedTokens / trainedSeconds
                                              : 0.0)),
      lastLoss));
  tool.comm.reset(); // before MPI is finalized
  return 0;
}
