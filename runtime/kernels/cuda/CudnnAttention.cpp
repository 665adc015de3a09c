//===- CudnnAttention.cpp - attention through cuDNN's fused attention -----===//
//
// cuDNN's backend API, loaded with dlopen: graphs of tensor descriptors and
// operations (matmul, pointwise, reduction, reshape) that cuDNN's fused
// attention engines recognize, finalized into execution plans through
// cuDNN's heuristics, and executed with a variant pack of the tensors'
// addresses. Without cuDNN's headers at build time only the host checks and
// the router's Triad route are compiled.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudnnAttention.h"

#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/kernels/cuda/CudaCheck.h"

#include "absl/strings/str_cat.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#if TRIAD_HAVE_CUDNN
#include <cudnn_graph.h>
#include <dlfcn.h>
#endif

namespace triad::rt::cuda {

namespace {

/// "a causal bf16 attention gradient of batch 2, 128 queries, 128 keys,
/// 8 heads over 2 kv heads of 64": a call in a refusal.
std::string describe(const CudnnAttentionCall &call) {
  const cpu::AttentionShape &s = call.shape;
  const char *mask = s.mask == cpu::Mask::Causal   ? "causal"
                     : s.mask == cpu::Mask::Prefix ? "prefix-masked"
                                                   : "unmasked";
  return absl::StrCat("a ", mask, " ", dtypeName(call.type), " attention",
                      call.backward ? " gradient" : "", " of batch ", s.batch,
                      ", ", s.querySeq, " queries, ", s.keySeq, " keys, ",
                      s.heads, " heads over ", s.kvHeads, " kv heads of ",
                      s.headDim);
}

} // namespace

//===----------------------------------------------------------------------===//
// What the host decides
//===----------------------------------------------------------------------===//

std::string cudnnRefusal(const CudnnAttentionCall &call,
                         const CudnnFacts &facts) {
  const cpu::AttentionShape &s = call.shape;
  if (call.type != DType::BF16 && call.type != DType::F16)
    return absl::StrCat("cuDNN's fused attention takes bf16 or f16 tensors, "
                        "not ",
                        dtypeName(call.type));
  if (s.mask == cpu::Mask::Prefix)
    return "prefix masks are not mapped onto cuDNN's attention";
  if (call.hasSlopes)
    return "ALiBi slopes are not mapped onto cuDNN's attention";
  if (s.batch <= 0 || s.querySeq <= 0 || s.keySeq <= 0)
    return "the call is empty";
  if (s.heads <= 0 || s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
    return "the heads are not a multiple of the kv heads";
  // Hopper's kernels take head dimensions up to 256; the others' up to 128.
  const int64_t widest = facts.computeCapability / 10 == 9 ? 256 : 128;
  if (s.headDim % 8 != 0 || s.headDim > widest)
    return absl::StrCat("head dimension ", s.headDim,
                        ": cuDNN takes multiples of 8 up to ", widest,
                        " on this GPU");
  if (facts.computeCapability < 80)
    return absl::StrCat("compute capability ", facts.computeCapability / 10,
                        ".", facts.computeCapability % 10,
                        ": cuDNN's fused attention needs 8.0 or later");
  for (const void *tensor : call.tensors)
    if (reinterpret_cast<uintptr_t>(tensor) % 16 != 0)
      return "a tensor is not 16-byte aligned";
  if (call.backward && s.querySeq == 1 && s.keySeq == 1)
    return "cuDNN's attention gradient does not take one query and one key";
  if (facts.version == 0)
    return "";
  // cuDNN's frontend refuses a masked attention of one query row (decode)
  // up to 9.9.
  if (s.mask == cpu::Mask::Causal && s.querySeq == 1 && facts.version <= 90900)
    return absl::StrCat("cuDNN ", facts.version,
                        " does not take a causal attention of one query");
  if (facts.version == 91000 || facts.version == 91001)
    return absl::StrCat("cuDNN ", facts.version,
                        " has known wrong results in its fused attention "
                        "(fixed in 9.10.2)");
  // Up to 9.15.0, cuDNN's own frontend gives a gradient whose key sequence
  // is not a multiple of 128 a padding mask (every sample's sequence
  // lengths), working around wrong results without one; the graphs here
  // have none.
  if (call.backward && facts.version <= 91500 && s.keySeq % 128 != 0)
    return absl::StrCat("cuDNN ", facts.version,
                        "'s attention gradient needs a key sequence that is a "
                        "multiple of 128 here, not ",
                        s.keySeq);
  return "";
}

CudnnPlanKey cudnnPlanKey(const cpu::AttentionShape &shape, DType type,
                          CudnnPass pass) {
  CudnnPlanKey key;
  key.batch = shape.batch;
  key.querySeq = shape.querySeq;
  key.keySeq = shape.keySeq;
  key.heads = shape.heads;
  key.kvHeads = shape.kvHeads;
  key.headDim = shape.headDim;
  key.type = type;
  key.causal = shape.mask == cpu::Mask::Causal;
  key.pass = pass;
  return key;
}

absl::StatusOr<AttentionRoute> chooseAttentionRoute(AttentionKernel kernel,
                                                    absl::string_view refusal) {
  if (kernel == AttentionKernel::Triad)
    return AttentionRoute::Triad;
  if (refusal.empty())
    return AttentionRoute::Cudnn;
  if (kernel == AttentionKernel::Cudnn)
    return absl::FailedPreconditionError(
        absl::StrCat("--cuda-attention=cudnn, but cuDNN's fused attention "
                     "does not take ",
                     refusal));
  return AttentionRoute::Triad;
}

AttentionRouteCounts &attentionRouteCounts() {
  thread_local AttentionRouteCounts counts;
  return counts;
}

#if TRIAD_HAVE_CUDNN

//===----------------------------------------------------------------------===//
// The library
//===----------------------------------------------------------------------===//

namespace {

/// cuDNN's entry points in one loaded library. The library stays loaded
/// for the process: cuDNN loads its own sub-libraries and is not meant to
/// be unloaded.
struct CudnnApi {
  decltype(&cudnnGetVersion) getVersion = nullptr;
  decltype(&cudnnGetErrorString) getErrorString = nullptr;
  /// Optional: cuDNN's text of the last error, more than its code says.
  decltype(&cudnnGetLastErrorString) getLastErrorString = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) setStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) createDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) setAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) getAttribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
  size_t version = 0;
};

/// The entry points of `library`, loaded once per process and name.
absl::StatusOr<std::shared_ptr<const CudnnApi>>
loadCudnn(const std::string &library) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const CudnnApi>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(library); it != loaded.end())
    return it->second;
  dlerror();
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return absl::UnavailableError(absl::StrCat("cannot load ", library, ": ",
                                               why ? why : "unknown error"));
  }
  auto api = std::make_shared<CudnnApi>();
  std::string missing;
  auto bind = [&](auto &entry, const char *name, bool required) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(
        dlsym(handle, name));
    if (!entry && required)
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  bind(api->getVersion, "cudnnGetVersion", true);
  bind(api->getErrorString, "cudnnGetErrorString", true);
  bind(api->getLastErrorString, "cudnnGetLastErrorString", false);
  bind(api->create, "cudnnCreate", true);
  bind(api->destroy, "cudnnDestroy", true);
  bind(api->setStream, "cudnnSetStream", true);
  bind(api->createDescriptor, "cudnnBackendCreateDescriptor", true);
  bind(api->destroyDescriptor, "cudnnBackendDestroyDescriptor", true);
  bind(api->setAttribute, "cudnnBackendSetAttribute", true);
  bind(api->getAttribute, "cudnnBackendGetAttribute", true);
  bind(api->finalize, "cudnnBackendFinalize", true);
  bind(api->execute, "cudnnBackendExecute", true);
  if (!missing.empty()) {
    dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat(library, " lacks ", missing, ": it is not cuDNN 9"));
  }
  api->version = api->getVersion();
  if (api->version < 90000 || api->version >= 100000) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(
        library, " is cuDNN ", api->version, ", not cuDNN 9 (90000 to 99999)"));
  }
  loaded.emplace(library, api);
  return std::shared_ptr<const CudnnApi>(api);
}

/// ": " and cuDNN's text of its last error on this thread, its lines
/// joined; "" when there is none.
std::string lastError(const CudnnApi &api) {
  if (!api.getLastErrorString)
    return "";
  char detail[1024] = "";
  api.getLastErrorString(detail, sizeof(detail));
  std::string text(detail);
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ')
    text.pop_back();
  return text.empty() ? "" : absl::StrCat(": ", text);
}

/// OK for CUDNN_STATUS_SUCCESS; otherwise an error naming `what`, with
/// cuDNN's text of the code and of the last error: Unimplemented where
/// cuDNN does not support what it was asked (its 3000 codes), Internal
/// otherwise.
absl::Status cudnnStatus(const CudnnApi &api, cudnnStatus_t status,
                         absl::string_view what) {
  if (status == CUDNN_STATUS_SUCCESS)
    return absl::OkStatus();
  std::string text =
      absl::StrCat(what, ": ", api.getErrorString(status), " (",
                   static_cast<int>(status), ")", lastError(api));
  int category = static_cast<int>(status) / 1000 * 1000;
  if (category == CUDNN_STATUS_NOT_SUPPORTED)
    return absl::UnimplementedError(text);
  return absl::InternalError(text);
}

//===----------------------------------------------------------------------===//
// Graphs
//===----------------------------------------------------------------------===//

/// A backend descriptor, destroyed with its owner.
class Descriptor {
public:
  Descriptor() = default;
  Descriptor(const CudnnApi *api, cudnnBackendDescriptor_t raw)
      : api(api), raw(raw) {}
  Descriptor(Descriptor &&other) noexcept
      : api(other.api), raw(std::exchange(other.raw, nullptr)) {}
  Descriptor &operator=(Descriptor &&other) noexcept {
    if (this != &other) {
      reset();
      api = other.api;
      raw = std::exchange(other.raw, nullptr);
    }
    return *this;
  }
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;
  ~Descriptor() { reset(); }

  cudnnBackendDescriptor_t get() const { return raw; }

private:
  void reset() {
    if (raw)
      api->destroyDescriptor(raw);
    raw = nullptr;
  }

  const CudnnApi *api = nullptr;
  cudnnBackendDescriptor_t raw = nullptr;
};

using Dims = std::array<int64_t, 4>;

/// A tensor's dimensions and strides, as cuDNN's (batch, head, row,
/// column).
struct Layout {
  Dims dims, strides;
};

/// Triad's packed [batch, seq, heads * headDim] as (batch, head, seq, dim).
Layout packed(int64_t batch, int64_t heads, int64_t seq, int64_t headDim) {
  return {{batch, heads, seq, headDim},
          {seq * heads * headDim, headDim, heads * headDim, 1}};
}

/// Contiguous `dims`, the last fastest.
Layout rowMajor(Dims dims) {
  return {dims, {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}};
}

/// The same bytes with the last two dimensions swapped.
Layout transposed(Layout layout) {
  std::swap(layout.dims[2], layout.dims[3]);
  std::swap(layout.strides[2], layout.strides[3]);
  return layout;
}

/// One value per (sample, head, query row): the softmax's statistics.
Layout rowValues(int64_t batch, int64_t heads, int64_t seq) {
  return {{batch, heads, seq, 1}, {heads * seq, seq, 1, 1}};
}

/// The unique ids of the tensors a plan's executions name (the variant
/// pack's); virtual tensors take ids from kFirstVirtual on.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kMaskValue,
  kOne,
  kDO,
  kDQ,
  kDK,
  kDV,
  kRowSums,
  kDQAccumulator,
  kUidCount,
  kFirstVirtual = 100,
};

/// A tensor of a graph: its descriptor (owned by the builder) and layout.
struct Tensor {
  cudnnBackendDescriptor_t descriptor = nullptr;
  Layout layout{};
};

/// A pointwise operation: its mode, the type of its result, the precision
/// it computes in and, for GEN_INDEX, the dimension it numbers.
struct Pointwise {
  cudnnPointwiseMode_t mode;
  cudnnDataType_t result = CUDNN_DATA_FLOAT;
  cudnnDataType_t math = CUDNN_DATA_FLOAT;
  int64_t axis = -1;
};

/// A finalized execution plan and every descriptor it was built from (kept
/// for its life).
struct CudnnPlan {
  std::vector<Descriptor> descriptors;
  Descriptor plan;
  int64_t workspaceBytes = 0;
  /// The ids of the tensors each execution names.
  std::vector<int64_t> uids;
};

/// Builds a graph's descriptors. The first failure sticks: later calls do
/// nothing and status() reports it, so that a graph reads as a sequence of
/// operations.
class GraphBuilder {
public:
  explicit GraphBuilder(const CudnnApi &api) : api(api) {}

  const absl::Status &status() const { return error; }
  size_t operationCount() const { return operations.size(); }

  /// A tensor an execution names (its address is in the variant pack).
  Tensor data(int64_t uid, Layout layout, cudnnDataType_t type) {
    uids.push_back(uid);
    return tensor(uid, layout, type, /*isVirtual=*/false, /*byValue=*/false);
  }
  /// An f32 scalar passed by value (its host address is in the pack).
  Tensor scalar(int64_t uid) {
    uids.push_back(uid);
    return tensor(uid, {{1, 1, 1, 1}, {1, 1, 1, 1}}, CUDNN_DATA_FLOAT,
                  /*isVirtual=*/false, /*byValue=*/true);
  }
  /// An intermediate tensor, never stored.
  Tensor intermediate(Layout layout, cudnnDataType_t type) {
    return tensor(nextVirtual++, layout, type, /*isVirtual=*/true,
                  /*byValue=*/false);
  }

  /// y = op(x[, b[, t]]) into a new intermediate y, shaped as the inputs
  /// broadcast together and laid out as the input of that shape.
  Tensor pointwise(Pointwise op, const Tensor &x, const Tensor *b = nullptr,
                   const Tensor *t = nullptr) {
    Layout layout = x.layout;
    for (const Tensor *input : {b, t})
      if (input)
        for (size_t d = 0; d < 4; ++d)
          layout.dims[d] = std::max(layout.dims[d], input->layout.dims[d]);
    if (layout.dims != x.layout.dims)
      layout = b && b->layout.dims == layout.dims ? b->layout
                                                  : rowMajor(layout.dims);
    Tensor y = intermediate(layout, op.result);
    pointwiseTo(op, y, x, b, t);
    return y;
  }
  void pointwiseTo(Pointwise op, const Tensor &y, const Tensor &x,
                   const Tensor *b = nullptr, const Tensor *t = nullptr) {
    Descriptor mode = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(mode, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
        &op.mode);
    set(mode, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
        &op.math);
    if (op.mode == CUDNN_POINTWISE_GEN_INDEX)
      set(mode, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &op.axis);
    finalize(mode);
    Descriptor operation = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t modeRaw = mode.get();
    set(operation, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &modeRaw);
    set(operation, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.descriptor);
    if (b)
      set(operation, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->descriptor);
    if (t)
      set(operation, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->descriptor);
    set(operation, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.descriptor);
    const float one = 1.0f;
    set(operation, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1,
        &one);
    set(operation, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1,
        &one);
    finalize(operation);
    keep(std::move(mode));
    addOperation(std::move(operation));
  }

  /// y = the f32 reduction `op` of x over the dimensions where y has 1 (or,
  /// for the heads, a divisor of x's: the sum over a kv head's query
  /// heads).
  Tensor reduction(cudnnReduceTensorOp_t op, const Tensor &x, Layout layout) {
    Tensor y = intermediate(layout, CUDNN_DATA_FLOAT);
    reductionTo(op, x, y);
    return y;
  }
  void reductionTo(cudnnReduceTensorOp_t op, const Tensor &x, const Tensor &y) {
    Descriptor reduce = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(reduce, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    set(reduce, CUDNN_ATTR_REDUCTION_OPERATOR,
        CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op);
    finalize(reduce);
    Descriptor operation = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cudnnBackendDescriptor_t reduceRaw = reduce.get();
    set(operation, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &reduceRaw);
    set(operation, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.descriptor);
    set(operation, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.descriptor);
    finalize(operation);
    keep(std::move(reduce));
    addOperation(std::move(operation));
  }

  /// c = a b (f32 sums) over the last two dimensions, the leading ones
  /// batched (a kv head's k and v broadcast over its query heads).
  Tensor matmul(const Tensor &a, const Tensor &b, Layout layout,
                cudnnDataType_t type) {
    Tensor c = intermediate(layout, type);
    matmulTo(a, b, c);
    return c;
  }
  void matmulTo(const Tensor &a, const Tensor &b, const Tensor &c) {
    Descriptor product = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(product, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(product);
    Descriptor operation = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(operation, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.descriptor);
    set(operation, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.descriptor);
    set(operation, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.descriptor);
    cudnnBackendDescriptor_t productRaw = product.get();
    set(operation, CUDNN_ATTR_OPERATION_MATMUL_DESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &productRaw);
    finalize(operation);
    keep(std::move(product));
    addOperation(std::move(operation));
  }

  /// x seen with another layout (a transpose, as strides) and type.
  Tensor reshape(const Tensor &x, Layout layout, cudnnDataType_t type) {
    Tensor y = intermediate(layout, type);
    Descriptor operation = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(operation, CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.descriptor);
    set(operation, CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.descriptor);
    finalize(operation);
    addOperation(std::move(operation));
    return y;
  }

  /// The operation graph on `handle`, and the first engine configuration
  /// of cuDNN's heuristics (mode A) that finalizes into an execution plan.
  absl::StatusOr<std::unique_ptr<CudnnPlan>> plan(cudnnHandle_t handle) && {
    if (!error.ok())
      return error;
    auto result = std::make_unique<CudnnPlan>();
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const Descriptor &operation : operations)
      ops.push_back(operation.get());
    Descriptor graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops.size()), ops.data());
    set(graph, kOperationGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(graph);
    Descriptor heuristics = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendDescriptor_t graphRaw = graph.get();
    set(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graphRaw);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(heuristics);
    if (!error.ok())
      return error;
    int64_t count = 0;
    if (absl::Status s = cudnnStatus(
            api,
            api.getAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
            "counting cuDNN's engine configurations");
        !s.ok())
      return s;
    std::vector<Descriptor> configurations;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configurations.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(configurations.back().get());
    }
    if (!error.ok())
      return error;
    int64_t returned = 0;
    if (count > 0)
      if (absl::Status s = cudnnStatus(
              api,
              api.getAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                               raw.data()),
              "reading cuDNN's engine configurations");
          !s.ok())
        return s;
    // (An engine the heuristics leave out says why in cuDNN's last error:
    // no NVRTC to compile its kernels, say.)
    absl::Status lastFailure = absl::UnimplementedError(
        absl::StrCat("cuDNN's heuristics found no engine for the graph (of ",
                     count, " candidates)", lastError(api)));
    for (int64_t i = 0; i < std::min(count, returned); ++i) {
      cudnnBackendDescriptor_t created = nullptr;
      if (absl::Status s = cudnnStatus(
              api,
              api.createDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                   &created),
              "cudnnBackendCreateDescriptor(execution plan)");
          !s.ok())
        return s;
      Descriptor candidate(&api, created);
      cudnnBackendDescriptor_t configuration = raw[i];
      absl::Status s =
          cudnnStatus(api,
                      api.setAttribute(created, kExecutionPlanHandle,
                                       CUDNN_TYPE_HANDLE, 1, &handle),
                      "setting the execution plan's handle");
      if (s.ok())
        s = cudnnStatus(
            api,
            api.setAttribute(created, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configuration),
            "setting the execution plan's engine configuration");
      if (s.ok())
        s = cudnnStatus(api, api.finalize(created),
                        absl::StrCat("finalizing the execution plan of engine "
                                     "configuration ",
                                     i + 1, " of ", returned));
      if (!s.ok()) {
        lastFailure = s;
        continue;
      }
      int64_t workspace = 0, returnedCount = 0;
      if (absl::Status ws =
              cudnnStatus(api,
                          api.getAttribute(
                              created, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                              CUDNN_TYPE_INT64, 1, &returnedCount, &workspace),
                          "reading the execution plan's workspace size");
          !ws.ok())
        return ws;
      result->plan = std::move(candidate);
      result->workspaceBytes = std::max<int64_t>(workspace, 0);
      result->uids = uids;
      result->descriptors = std::move(descriptors);
      for (Descriptor &operation : operations)
        result->descriptors.push_back(std::move(operation));
      result->descriptors.push_back(std::move(graph));
      result->descriptors.push_back(std::move(heuristics));
      for (Descriptor &c : configurations)
        result->descriptors.push_back(std::move(c));
      return result;
    }
    return lastFailure;
  }

private:
  // The handle attributes of the operation graph and the execution plan:
  // deprecated in cuDNN 9's later headers (device properties may stand in),
  // and required by its earlier versions, which the route also takes.
  static constexpr cudnnBackendAttributeName_t kOperationGraphHandle =
      static_cast<cudnnBackendAttributeName_t>(800);
  static constexpr cudnnBackendAttributeName_t kExecutionPlanHandle =
      static_cast<cudnnBackendAttributeName_t>(400);

  Tensor tensor(int64_t uid, Layout layout, cudnnDataType_t type,
                bool isVirtual, bool byValue) {
    Descriptor descriptor = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    set(descriptor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
        &type);
    set(descriptor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4,
        layout.dims.data());
    set(descriptor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4,
        layout.strides.data());
    set(descriptor, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(descriptor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
        &alignment);
    const bool yes = true;
    if (isVirtual)
      set(descriptor, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
          &yes);
    if (byValue)
      set(descriptor, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1,
          &yes);
    finalize(descriptor);
    Tensor result{descriptor.get(), layout};
    keep(std::move(descriptor));
    return result;
  }

  Descriptor make(cudnnBackendDescriptorType_t type) {
    if (!error.ok())
      return {};
    cudnnBackendDescriptor_t raw = nullptr;
    error = cudnnStatus(
        api, api.createDescriptor(type, &raw),
        absl::StrCat("cudnnBackendCreateDescriptor(descriptor type ",
                     static_cast<int>(type), ")"));
    return Descriptor(&api, error.ok() ? raw : nullptr);
  }

  void set(const Descriptor &descriptor, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count,
           const void *values) {
    if (!error.ok())
      return;
    error = cudnnStatus(
        api, api.setAttribute(descriptor.get(), name, type, count, values),
        absl::StrCat("cudnnBackendSetAttribute(attribute ",
                     static_cast<int>(name), ", type ", static_cast<int>(type),
                     ") of operation ", operations.size() + 1));
  }

  void finalize(const Descriptor &descriptor) {
    if (!error.ok())
      return;
    error = cudnnStatus(api, api.finalize(descriptor.get()),
                        absl::StrCat("cudnnBackendFinalize of operation ",
                                     operations.size() + 1, "'s descriptors"));
  }

  void keep(Descriptor descriptor) {
    descriptors.push_back(std::move(descriptor));
  }
  void addOperation(Descriptor operation) {
    operations.push_back(std::move(operation));
  }

  const CudnnApi &api;
  absl::Status error;
  std::vector<Descriptor> descriptors, operations;
  std::vector<int64_t> uids;
  int64_t nextVirtual = kFirstVirtual;
};

cudnnDataType_t ioType(DType type) {
  return type == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

/// `scores` with the keys above the diagonal (column > row, from the top
/// left, as Triad's causal mask) replaced by the mask value.
Tensor causalMask(GraphBuilder &g, const Tensor &scores) {
  Tensor row = g.pointwise(
      {CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 2},
      scores);
  Tensor column = g.pointwise(
      {CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 3},
      scores);
  Tensor visible = g.pointwise(
      {CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN}, row,
      &column);
  Tensor maskValue = g.scalar(kMaskValue);
  return g.pointwise({CUDNN_POINTWISE_BINARY_SELECT}, scores, &maskValue,
                     &visible);
}

/// The forward: out = softmax(scale Q K^T [masked]) V, the probabilities
/// rounded to the tensors' type before their product with V (f32
/// otherwise), and Stats, each row's max plus the log of its sum of
/// exponentials (its log-sum-exp): stored with `training`, else an
/// intermediate, which cuDNN's attention engines expect all the same (a
/// graph without it matches none of them).
void forwardGraph(GraphBuilder &g, const CudnnPlanKey &key, bool training) {
  const int64_t b = key.batch, h = key.heads, hk = key.kvHeads,
                sq = key.querySeq, skv = key.keySeq, d = key.headDim;
  const cudnnDataType_t io = ioType(key.type);
  const Layout rows = rowValues(b, h, sq);
  Tensor q = g.data(kQ, packed(b, h, sq, d), io);
  Tensor kT = g.data(kK, transposed(packed(b, hk, skv, d)), io);
  Tensor v = g.data(kV, packed(b, hk, skv, d), io);
  Tensor out = g.data(kO, packed(b, h, sq, d), io);
  Tensor stats = training ? g.data(kStats, rows, CUDNN_DATA_FLOAT)
                          : g.intermediate(rows, CUDNN_DATA_FLOAT);
  Tensor scale = g.scalar(kScale);

  Tensor scores = g.matmul(q, kT, rowMajor({b, h, sq, skv}), CUDNN_DATA_FLOAT);
  scores = g.pointwise({CUDNN_POINTWISE_MUL}, scores, &scale);
  if (key.causal)
    scores = causalMask(g, scores);
  Tensor largest = g.reduction(CUDNN_REDUCE_TENSOR_MAX, scores, rows);
  Tensor shifted = g.pointwise({CUDNN_POINTWISE_SUB}, scores, &largest);
  Tensor exps = g.pointwise({CUDNN_POINTWISE_EXP}, shifted);
  Tensor sums = g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, rows);
  Tensor logs = g.pointwise({CUDNN_POINTWISE_LOG}, sums);
  g.pointwiseTo({CUDNN_POINTWISE_ADD}, stats, largest, &logs);
  Tensor probabilities = g.pointwise({CUDNN_POINTWISE_DIV, io}, exps, &sums);
  g.matmulTo(probabilities, v, out);
}

/// c = a b into `c` (a kv head's gradient): directly where every query
/// head has its own kv head, else into one product per query head, summed
/// over each kv head's query heads.
void productPerKvHead(GraphBuilder &g, const CudnnPlanKey &key, const Tensor &a,
                      const Tensor &b, const Tensor &c) {
  if (key.heads == key.kvHeads) {
    g.matmulTo(a, b, c);
    return;
  }
  Tensor perHead =
      g.matmul(a, b, rowMajor({key.batch, key.heads, key.keySeq, key.headDim}),
               ioType(key.type));
  g.reductionTo(CUDNN_REDUCE_TENSOR_ADD, perHead, c);
}

/// The gradient from Q, K, V, O, dO and the forward's Stats: P =
/// exp(scale Q K^T [masked] - Stats); dV = P^T dO; dS = P (dO V^T -
/// rowsum(dO O)) scale; dK = dS^T Q; dQ = dS K, summed in an f32
/// accumulator (RowSums and the accumulator are stored: the variant pack
/// names them). dK and dV sum over a kv head's query heads.
void backwardGraph(GraphBuilder &g, const CudnnPlanKey &key) {
  const int64_t b = key.batch, h = key.heads, hk = key.kvHeads,
                sq = key.querySeq, skv = key.keySeq, d = key.headDim;
  const cudnnDataType_t io = ioType(key.type);
  const Layout rows = rowValues(b, h, sq), queries = packed(b, h, sq, d),
               keys = packed(b, hk, skv, d),
               scoresLayout = rowMajor({b, h, sq, skv});
  Tensor q = g.data(kQ, queries, io);
  Tensor kT = g.data(kK, transposed(keys), io);
  Tensor vT = g.data(kV, transposed(keys), io);
  Tensor out = g.data(kO, queries, io);
  Tensor dOut = g.data(kDO, queries, io);
  Tensor stats = g.data(kStats, rows, CUDNN_DATA_FLOAT);
  Tensor dQ = g.data(kDQ, queries, io);
  Tensor dK = g.data(kDK, keys, io);
  Tensor dV = g.data(kDV, keys, io);
  Tensor rowSums = g.data(kRowSums, rows, CUDNN_DATA_FLOAT);
  Tensor dQAccumulator =
      g.data(kDQAccumulator, rowMajor({b, h, sq, d}), CUDNN_DATA_FLOAT);
  Tensor scale = g.scalar(kScale);
  Tensor one = g.scalar(kOne);

  // Each row's sum of dO * O (the softmax gradient's correction), laid out
  // as cuDNN's own frontend lays this intermediate out.
  Tensor products = g.intermediate(
      {{b, h, sq, d}, {h * sq * d, sq * d, h * d, 1}}, CUDNN_DATA_FLOAT);
  g.pointwiseTo({CUDNN_POINTWISE_MUL}, products, dOut, &out);
  Tensor dots = g.reduction(CUDNN_REDUCE_TENSOR_ADD, products, rows);
  g.pointwiseTo({CUDNN_POINTWISE_MUL}, rowSums, dots, &one);

  // The probabilities again, from the scores and Stats.
  Tensor scores = g.matmul(q, kT, scoresLayout, CUDNN_DATA_FLOAT);
  scores = g.pointwise({CUDNN_POINTWISE_MUL}, scores, &scale);
  scores = g.pointwise({CUDNN_POINTWISE_SUB}, scores, &stats);
  if (key.causal)
    scores = causalMask(g, scores);
  Tensor probabilities = g.pointwise({CUDNN_POINTWISE_EXP}, scores);

  // dV = P^T dO.
  Tensor probabilitiesT =
      g.reshape(probabilities, transposed(scoresLayout), io);
  productPerKvHead(g, key, probabilitiesT, dOut, dV);

  // dS = P (dO V^T - rowsum(dO O)) scale.
  Tensor dScores = g.matmul(dOut, vT, scoresLayout, CUDNN_DATA_FLOAT);
  dScores = g.pointwise({CUDNN_POINTWISE_SUB}, dScores, &rowSums);
  dScores = g.pointwise({CUDNN_POINTWISE_MUL}, dScores, &probabilities);
  dScores = g.pointwise({CUDNN_POINTWISE_MUL}, dScores, &scale);

  // dK = dS^T Q.
  Tensor dScoresT = g.reshape(dScores, transposed(scoresLayout), io);
  productPerKvHead(g, key, dScoresT, q, dK);

  // dQ = dS K, through the f32 accumulator. (K's view is f32, as cuDNN's
  // frontend types this intermediate.)
  Tensor k = g.reshape(kT, keys, CUDNN_DATA_FLOAT);
  g.matmulTo(dScores, k, dQAccumulator);
  g.pointwiseTo({CUDNN_POINTWISE_IDENTITY}, dQ, dQAccumulator);
}

void buildGraph(GraphBuilder &g, const CudnnPlanKey &key) {
  switch (key.pass) {
  case CudnnPass::Forward:
    forwardGraph(g, key, /*training=*/false);
    return;
  case CudnnPass::ForwardTraining:
    forwardGraph(g, key, /*training=*/true);
    return;
  case CudnnPass::Backward:
    backwardGraph(g, key);
    return;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// The plans of one handle
//===----------------------------------------------------------------------===//

/// cuDNN's handle on a context's stream and the plans built on it.
class CudnnAttention {
public:
  static absl::StatusOr<std::unique_ptr<CudnnAttention>>
  create(const std::string &library) {
    absl::StatusOr<std::shared_ptr<const CudnnApi>> api = loadCudnn(library);
    if (!api.ok())
      return api.status();
    std::unique_ptr<CudnnAttention> attention(new CudnnAttention(*api));
    if (absl::Status s = cudnnStatus(**api, (*api)->create(&attention->handle),
                                     "cudnnCreate");
        !s.ok()) {
      attention->handle = nullptr;
      return absl::UnavailableError(s.message());
    }
    return attention;
  }

  ~CudnnAttention() {
    // Their kernels (modules cuDNN compiled at run time) may still be
    // queued on the stream the plans last ran on.
    if (lastStream)
      cudaStreamSynchronize(lastStream);
    plans.clear();
    if (handle)
      api->destroy(handle);
  }

  size_t version() const { return api->version; }
  size_t planCount() const { return plans.size(); }

  /// The plan of `key`: built the first time, then the same one; a refusal
  /// is kept and given again.
  absl::StatusOr<const CudnnPlan *> plan(const CudnnPlanKey &key) {
    auto it = plans.find(key);
    if (it == plans.end()) {
      GraphBuilder g(*api);
      buildGraph(g, key);
      it = plans.emplace(key, std::move(g).plan(handle)).first;
    }
    if (!it->second.ok())
      return it->second.status();
    return it->second->get();
  }

  absl::Status forward(CudaContext &context, Operand q, Operand k, Operand v,
                       Result out, const cpu::AttentionShape &shape) {
    absl::StatusOr<const CudnnPlan *> plan =
        this->plan(cudnnPlanKey(shape, q.type, CudnnPass::Forward));
    if (!plan.ok())
      return plan.status();
    void *workspace = nullptr;
    if ((*plan)->workspaceBytes > 0) {
      absl::StatusOr<void *> scratch =
          context.scratch(static_cast<size_t>((*plan)->workspaceBytes));
      if (!scratch.ok())
        return scratch.status();
      workspace = *scratch;
    }
    float scale = shape.scale, maskValue = this->maskValue();
    Pointers pointers{};
    pointers[kQ] = const_cast<void *>(q.data);
    pointers[kK] = const_cast<void *>(k.data);
    pointers[kV] = const_cast<void *>(v.data);
    pointers[kO] = out.data;
    pointers[kScale] = &scale;
    pointers[kMaskValue] = &maskValue;
    return run(context, **plan, pointers, workspace);
  }

  /// The forward in training mode (O and Stats into scratch), then the
  /// gradient graph.
  absl::Status backward(CudaContext &context, Operand q, Operand k, Operand v,
                        Operand dout, Result dq, Result dk, Result dv,
                        const cpu::AttentionShape &shape) {
    absl::StatusOr<const CudnnPlan *> forwardPlan =
        plan(cudnnPlanKey(shape, q.type, CudnnPass::ForwardTraining));
    if (!forwardPlan.ok())
      return forwardPlan.status();
    absl::StatusOr<const CudnnPlan *> backwardPlan =
        plan(cudnnPlanKey(shape, q.type, CudnnPass::Backward));
    if (!backwardPlan.ok())
      return backwardPlan.status();
    const size_t queryValues =
                     static_cast<size_t>(shape.batch * shape.querySeq *
                                         shape.heads * shape.headDim),
                 rows = static_cast<size_t>(shape.batch * shape.heads *
                                            shape.querySeq);
    const size_t outBytes = alignScratch(2 * queryValues),
                 rowBytes = alignScratch(sizeof(float) * rows),
                 accumulatorBytes = alignScratch(sizeof(float) * queryValues),
                 workspaceBytes = alignScratch(static_cast<size_t>(
                     std::max((*forwardPlan)->workspaceBytes,
                              (*backwardPlan)->workspaceBytes)));
    absl::StatusOr<void *> scratch = context.scratch(
        outBytes + 2 * rowBytes + accumulatorBytes + workspaceBytes);
    if (!scratch.ok())
      return scratch.status();
    char *base = static_cast<char *>(*scratch);
    void *out = base, *stats = base + outBytes,
         *rowSums = base + outBytes + rowBytes,
         *accumulator = base + outBytes + 2 * rowBytes,
         *workspace = base + outBytes + 2 * rowBytes + accumulatorBytes;

    float scale = shape.scale, maskValue = this->maskValue(), one = 1.0f;
    Pointers pointers{};
    pointers[kQ] = const_cast<void *>(q.data);
    pointers[kK] = const_cast<void *>(k.data);
    pointers[kV] = const_cast<void *>(v.data);
    pointers[kO] = out;
    pointers[kStats] = stats;
    pointers[kScale] = &scale;
    pointers[kMaskValue] = &maskValue;
    pointers[kOne] = &one;
    pointers[kDO] = const_cast<void *>(dout.data);
    pointers[kDQ] = dq.data;
    pointers[kDK] = dk.data;
    pointers[kDV] = dv.data;
    pointers[kRowSums] = rowSums;
    pointers[kDQAccumulator] = accumulator;
    if (absl::Status s = run(context, **forwardPlan, pointers, workspace);
        !s.ok())
      return s;
    // cuDNN clears dQ's accumulator itself from 9.6.0 on.
    if (api->version < 90600) {
      ++issueCounts().copies;
      TRIAD_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          accumulator, 0, sizeof(float) * queryValues, context.stream()));
    }
    return run(context, **backwardPlan, pointers, workspace);
  }

private:
  using Pointers = std::array<void *, kUidCount>;

  explicit CudnnAttention(std::shared_ptr<const CudnnApi> api)
      : api(std::move(api)) {}

  /// What masked scores become: -inf, or the lowest f32 before cuDNN 9.10,
  /// whose softmax preferred it.
  float maskValue() const {
    return api->version < 91000 ? std::numeric_limits<float>::lowest()
                                : -std::numeric_limits<float>::infinity();
  }

  /// Executes `plan` on the context's stream with the addresses of the
  /// tensors it names.
  absl::Status run(CudaContext &context, const CudnnPlan &plan,
                   const Pointers &pointers, void *workspace) {
    if (absl::Status s = cudnnStatus(
            *api, api->setStream(handle, context.stream()), "cudnnSetStream");
        !s.ok())
      return s;
    lastStream = context.stream();
    std::vector<void *> addresses;
    for (int64_t uid : plan.uids) {
      if (!pointers[uid])
        return absl::InternalError(
            absl::StrCat("no address for cuDNN tensor ", uid));
      addresses.push_back(pointers[uid]);
    }
    cudnnBackendDescriptor_t raw = nullptr;
    if (absl::Status s = cudnnStatus(
            *api,
            api->createDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &raw),
            "cudnnBackendCreateDescriptor(variant pack)");
        !s.ok())
      return s;
    Descriptor pack(api.get(), raw);
    absl::Status s =
        cudnnStatus(*api,
                    api->setAttribute(raw, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                      CUDNN_TYPE_INT64,
                                      static_cast<int64_t>(plan.uids.size()),
                                      plan.uids.data()),
                    "setting the variant pack's tensor ids");
    if (s.ok())
      s = cudnnStatus(
          *api,
          api->setAttribute(
              raw, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
              static_cast<int64_t>(addresses.size()), addresses.data()),
          "setting the variant pack's addresses");
    if (s.ok())
      s = cudnnStatus(*api,
                      api->setAttribute(raw, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                        CUDNN_TYPE_VOID_PTR, 1, &workspace),
                      "setting the variant pack's workspace");
    if (s.ok())
      s = cudnnStatus(*api, api->finalize(raw), "finalizing the variant pack");
    if (!s.ok())
      return s;
    ++issueCounts().kernels;
    return cudnnStatus(*api, api->execute(handle, plan.plan.get(), raw),
                       "cudnnBackendExecute");
  }

  std::shared_ptr<const CudnnApi> api;
  cudnnHandle_t handle = nullptr;
  std::map<CudnnPlanKey, absl::StatusOr<std::unique_ptr<CudnnPlan>>> plans;
  /// The stream run() last enqueued a plan's work on.
  cudaStream_t lastStream = nullptr;
};

bool cudnnRouteBuilt() { return true; }

absl::StatusOr<size_t> cudnnLibraryVersion(const std::string &library) {
  absl::StatusOr<std::shared_ptr<const CudnnApi>> api = loadCudnn(library);
  if (!api.ok())
    return api.status();
  return (*api)->version;
}

absl::StatusOr<int> cudnnOperationCount(const CudnnPlanKey &key,
                                        const std::string &library) {
  absl::StatusOr<std::shared_ptr<const CudnnApi>> api = loadCudnn(library);
  if (!api.ok())
    return api.status();
  GraphBuilder g(**api);
  buildGraph(g, key);
  if (!g.status().ok())
    return g.status();
  return static_cast<int>(g.operationCount());
}

#else // !TRIAD_HAVE_CUDNN

class CudnnAttention {
public:
  size_t version() const { return 0; }
  size_t planCount() const { return 0; }
};

bool cudnnRouteBuilt() { return false; }

absl::StatusOr<size_t> cudnnLibraryVersion(const std::string &) {
  return absl::UnavailableError(
      "this build has no cuDNN route: cuDNN's headers (cudnn_graph.h) were "
      "not found when it was built");
}

absl::StatusOr<int> cudnnOperationCount(const CudnnPlanKey &,
                                        const std::string &library) {
  return cudnnLibraryVersion(library).status();
}

#endif // TRIAD_HAVE_CUDNN

//===----------------------------------------------------------------------===//
// The router
//===----------------------------------------------------------------------===//

AttentionRouter::AttentionRouter(AttentionKernel kernel, std::string library)
    : choice(kernel), library(std::move(library)) {}

AttentionRouter::~AttentionRouter() = default;

size_t AttentionRouter::cachedPlans() const {
  return cudnn ? cudnn->planCount() : 0;
}

std::string AttentionRouter::refusal(CudaContext &context,
                                     const CudnnAttentionCall &call) {
  if (computeCapability < 0) {
    int major = 0, minor = 0;
    int device = context.options().device;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               device) != cudaSuccess) {
      // Unknown: refused below. (Cleared, or the next launch check would
      // report it.)
      cudaGetLastError();
      major = minor = 0;
    }
    computeCapability = 10 * major + minor;
  }
  CudnnFacts facts;
  facts.computeCapability = computeCapability;
  // What needs no cuDNN first, so that a call it cannot take loads nothing.
  if (std::string why = cudnnRefusal(call, facts); !why.empty())
    return why;
#if TRIAD_HAVE_CUDNN
  if (!triedCudnn) {
    triedCudnn = true;
    absl::StatusOr<std::unique_ptr<CudnnAttention>> created =
        CudnnAttention::create(library);
    if (created.ok())
      cudnn = std::move(*created);
    else
      unavailable =
          absl::StrCat("cuDNN is not available: ", created.status().message());
  }
  if (!cudnn)
    return unavailable;
  facts.version = cudnn->version();
  if (std::string why = cudnnRefusal(call, facts); !why.empty())
    return why;
  std::vector<CudnnPass> passes = {CudnnPass::Forward};
  if (call.backward)
    passes = {CudnnPass::ForwardTraining, CudnnPass::Backward};
  for (CudnnPass pass : passes)
    if (absl::StatusOr<const CudnnPlan *> plan =
            cudnn->plan(cudnnPlanKey(call.shape, call.type, pass));
        !plan.ok())
      return absl::StrCat("cuDNN ", cudnn->version(),
                          " builds no plan for it: ", plan.status().message());
  return "";
#else
  return "this build has no cuDNN route (cuDNN's headers were not found "
         "when it was built)";
#endif
}

absl::Status AttentionRouter::attention(CudaContext &context, Operand q,
                                        Operand k, Operand v,
                                        const int32_t *prefixLengths,
                                        const float *alibiSlopes, Result out,
                                        const cpu::AttentionShape &shape) {
  if (choice != AttentionKernel::Triad) {
    CudnnAttentionCall call;
    call.shape = shape;
    bool oneType = k.type == q.type && v.type == q.type && out.type == q.type;
    call.type = oneType ? q.type : DType::F32;
    call.hasSlopes = alibiSlopes != nullptr;
    call.tensors = {q.data, k.data, v.data, out.data};
    absl::StatusOr<AttentionRoute> route = routeOf(context, call);
    if (!route.ok())
      return route.status();
#if TRIAD_HAVE_CUDNN
    if (*route == AttentionRoute::Cudnn) {
      ++attentionRouteCounts().cudnnForward;
      return cudnn->forward(context, q, k, v, out, shape);
    }
#endif
  }
  ++attentionRouteCounts().triadForward;
  return cuda::attention(context, q, k, v, prefixLengths, alibiSlopes, out,
                         shape);
}

absl::Status AttentionRouter::attentionGrad(
    CudaContext &context, Operand q, Operand k, Operand v,
    const int32_t *prefixLengths, const float *alibiSlopes, Operand dout,
    Result dq, Result dk, Result dv, const cpu::AttentionShape &shape) {
  if (choice != AttentionKernel::Triad) {
    CudnnAttentionCall call;
    call.shape = shape;
    bool oneType = k.type == q.type && v.type == q.type &&
                   dout.type == q.type && dq.type == q.type &&
                   dk.type == q.type && dv.type == q.type;
    call.type = oneType ? q.type : DType::F32;
    call.hasSlopes = alibiSlopes != nullptr;
    call.backward = true;
    call.tensors = {q.data,  k.data,  v.data, dout.data,
                    dq.data, dk.data, dv.data};
    absl::StatusOr<AttentionRoute> route = routeOf(context, call);
    if (!route.ok())
      return route.status();
#if TRIAD_HAVE_CUDNN
    if (*route == AttentionRoute::Cudnn) {
      ++attentionRouteCounts().cudnnBackward;
      return cudnn->backward(context, q, k, v, dout, dq, dk, dv, shape);
    }
#endif
  }
  ++attentionRouteCounts().triadBackward;
  return cuda::attentionGrad(context, q, k, v, prefixLengths, alibiSlopes, dout,
                             dq, dk, dv, shape);
}

absl::StatusOr<AttentionRoute>
AttentionRouter::routeOf(CudaContext &context, const CudnnAttentionCall &call) {
  std::string why = refusal(context, call);
  last = why.empty() ? "" : absl::StrCat(describe(call), ": ", why);
  return chooseAttentionRoute(choice, last);
}

absl::Status AttentionRouter::triadOnly(bool backward, absl::string_view why) {
  if (choice == AttentionKernel::Cudnn) {
    last = absl::StrCat("an attention", backward ? " gradient" : "", ": ", why);
    return chooseAttentionRoute(choice, last).status();
  }
  if (backward)
    ++attentionRouteCounts().triadBackward;
  else
    ++attentionRouteCounts().triadForward;
  return absl::OkStatus();
}

} // namespace triad::rt::cuda
