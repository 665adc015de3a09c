//===- Bf16Products.cpp - bf16 matrix products through oneDNN -------------===//
//
// oneDNN's C API (its C++ one reports errors by exceptions): one matmul
// primitive per shape, made on first use and kept, run on the caller's
// buffers through memory objects whose data handles are set per call.
// oneDNN's OpenMP build shares the kernels' OpenMP threads, as OpenBLAS's
// does.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cpu/Bf16Products.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

#include <array>
#include <string>
#include <tuple>

#if TRIAD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace triad::rt::cpu {

const char *bf16ProductKernelName(Bf16ProductKernel kernel) {
  switch (kernel) {
  case Bf16ProductKernel::Auto:
    return "auto";
  case Bf16ProductKernel::OneDnn:
    return "onednn";
  case Bf16ProductKernel::Blas:
    return "blas";
  }
  return "auto";
}

absl::StatusOr<Bf16ProductKernel>
parseBf16ProductKernel(absl::string_view name) {
  for (Bf16ProductKernel kernel :
       {Bf16ProductKernel::Auto, Bf16ProductKernel::OneDnn,
        Bf16ProductKernel::Blas})
    if (name == bf16ProductKernelName(kernel))
      return kernel;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown bf16 product kernel '", name,
                   "' (expected auto, onednn or blas)"));
}

#if TRIAD_HAVE_ONEDNN

namespace {

/// The shape's key in the cache: every field of Bf16ProductShape.
using ShapeKey =
    std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool>;

ShapeKey keyOf(const Bf16ProductShape &s) {
  return {s.batch,      s.m,          s.n,          s.k,
          s.transposeA, s.transposeB, s.rhsBatched, s.resultBf16};
}

absl::Status check(dnnl_status_t status, absl::string_view what) {
  if (status == dnnl_success)
    return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("oneDNN: ", what, " failed (status ", status, ")"));
}

/// A row-major [rows x cols] matrix per batch entry (stored transposed when
/// `transposed`), as a 3-d memory descriptor of dims [batch, rows, cols]
/// (a batch of 1 against a larger one is broadcast: a shared rhs).
absl::StatusOr<dnnl_memory_desc_t> matrixDesc(int64_t batch, int64_t rows,
                                              int64_t cols, bool transposed,
                                              dnnl_data_type_t type) {
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {rows * cols, transposed ? 1 : cols,
                         transposed ? rows : 1};
  dnnl_memory_desc_t desc;
  if (absl::Status s =
          check(dnnl_memory_desc_init_by_strides(&desc, 3, dims, type, strides),
                "a memory descriptor");
      !s.ok())
    return s;
  return desc;
}

} // namespace

/// One shape's primitive and the memory objects it runs on.
struct Product {
  dnnl_primitive_t primitive = nullptr;
  std::array<dnnl_memory_t, 3> memories = {nullptr, nullptr, nullptr};
  ~Product() {
    for (dnnl_memory_t memory : memories)
      if (memory)
        dnnl_memory_destroy(memory);
    if (primitive)
      dnnl_primitive_destroy(primitive);
  }
};

struct Bf16Products::State {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  absl::flat_hash_map<ShapeKey, std::unique_ptr<Product>> products;
  ~State() {
    products.clear();
    if (stream)
      dnnl_stream_destroy(stream);
    if (engine)
      dnnl_engine_destroy(engine);
  }

  absl::StatusOr<Product *> productFor(const Bf16ProductShape &s);
};

absl::StatusOr<Product *>
Bf16Products::State::productFor(const Bf16ProductShape &s) {
  auto [it, inserted] = products.try_emplace(keyOf(s));
  if (!inserted)
    return it->second.get();
  // A failure leaves no entry behind.
  auto forget = [&](absl::Status status) {
    products.erase(keyOf(s));
    return status;
  };
  auto product = std::make_unique<Product>();
  int64_t weightsBatch = s.rhsBatched ? s.batch : 1;
  absl::StatusOr<dnnl_memory_desc_t> a =
      matrixDesc(s.batch, s.m, s.k, s.transposeA, dnnl_bf16);
  absl::StatusOr<dnnl_memory_desc_t> b =
      matrixDesc(weightsBatch, s.k, s.n, s.transposeB, dnnl_bf16);
  absl::StatusOr<dnnl_memory_desc_t> c =
      matrixDesc(s.batch, s.m, s.n, false, s.resultBf16 ? dnnl_bf16 : dnnl_f32);
  for (const auto *desc : {&a, &b, &c})
    if (!desc->ok())
      return forget(desc->status());
  dnnl_matmul_desc_t matmul;
  if (absl::Status st =
          check(dnnl_matmul_desc_init(&matmul, &*a, &*b, nullptr, &*c),
                "describing the product");
      !st.ok())
    return forget(st);
  dnnl_primitive_desc_t pd = nullptr;
  if (absl::Status st = check(
          dnnl_primitive_desc_create(&pd, &matmul, nullptr, engine, nullptr),
          absl::StrCat("choosing a kernel for a bf16 product of ", s.batch,
                       " x [", s.m, " x ", s.k, "] by [", s.k, " x ", s.n,
                       "]"));
      !st.ok())
    return forget(st);
  dnnl_status_t made = dnnl_primitive_create(&product->primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  if (absl::Status st = check(made, "making the product's kernel"); !st.ok())
    return forget(st);
  const dnnl_memory_desc_t *descs[3] = {&*a, &*b, &*c};
  for (int i = 0; i < 3; ++i)
    if (absl::Status st =
            check(dnnl_memory_create(&product->memories[i], descs[i], engine,
                                     DNNL_MEMORY_NONE),
                  "a memory object");
        !st.ok())
      return forget(st);
  it = products.find(keyOf(s));
  it->second = std::move(product);
  return it->second.get();
}

bool bf16ProductsAvailable(std::string *whyNot) {
  // A CPU without bf16 instructions would run oneDNN's emulation, no faster
  // than OpenBLAS on widened copies.
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
    return true;
  if (whyNot)
    *whyNot = "this CPU has no bf16 instructions (AVX512-BF16 or AMX)";
  return false;
}

Bf16Products::Bf16Products() : state(std::make_unique<State>()) {}

absl::StatusOr<std::unique_ptr<Bf16Products>> Bf16Products::create() {
  std::string whyNot;
  if (!bf16ProductsAvailable(&whyNot))
    return absl::FailedPreconditionError(
        absl::StrCat("oneDNN's bf16 products cannot run: ", whyNot));
  std::unique_ptr<Bf16Products> products(new Bf16Products());
  State &state = *products->state;
  if (absl::Status s =
          check(dnnl_engine_create(&state.engine, dnnl_cpu, 0), "the engine");
      !s.ok())
    return s;
  if (absl::Status s = check(dnnl_stream_create(&state.stream, state.engine,
                                                dnnl_stream_default_flags),
                             "the stream");
      !s.ok())
    return s;
  return products;
}

absl::Status Bf16Products::run(const Bf16ProductShape &shape, const uint16_t *a,
                               const uint16_t *b, void *c) {
  Bf16ProductShape s = shape;
  if (!s.rhsBatched && !s.transposeA && s.batch > 1) {
    // A shared rhs: one product of the stacked rows.
    s.m *= s.batch;
    s.batch = 1;
  }
  absl::StatusOr<Product *> product = state->productFor(s);
  if (!product.ok())
    return product.status();
  void *handles[3] = {const_cast<uint16_t *>(a), const_cast<uint16_t *>(b), c};
  for (int i = 0; i < 3; ++i)
    if (absl::Status st = check(
            dnnl_memory_set_data_handle((*product)->memories[i], handles[i]),
            "setting a buffer");
        !st.ok())
      return st;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, (*product)->memories[0]},
                             {DNNL_ARG_WEIGHTS, (*product)->memories[1]},
                             {DNNL_ARG_DST, (*product)->memories[2]}};
  if (absl::Status st = check(
          dnnl_primitive_execute((*product)->primitive, state->stream, 3, args),
          "the product");
      !st.ok())
    return st;
  return check(dnnl_stream_wait(state->stream), "waiting for the product");
}

size_t Bf16Products::cachedShapes() const { return state->products.size(); }

#else // !TRIAD_HAVE_ONEDNN

struct Bf16Products::State {};

bool bf16ProductsAvailable(std::string *whyNot) {
  if (whyNot)
    *whyNot = "this build has no oneDNN (install libdnnl-dev and rebuild)";
  return false;
}

Bf16Products::Bf16Products() : state(std::make_unique<State>()) {}

absl::StatusOr<std::unique_ptr<Bf16Products>> Bf16Products::create() {
  std::string whyNot;
  bf16ProductsAvailable(&whyNot);
  return absl::FailedPreconditionError(
      absl::StrCat("oneDNN's bf16 products cannot run: ", whyNot));
}

absl::Status Bf16Products::run(const Bf16ProductShape &, const uint16_t *,
                               const uint16_t *, void *) {
  return absl::FailedPreconditionError("this build has no oneDNN");
}

size_t Bf16Products::cachedShapes() const { return 0; }

#endif // TRIAD_HAVE_ONEDNN

Bf16Products::~Bf16Products() = default;

} // namespace triad::rt::cpu
