//===- CudnnAttentionTest.cpp - attention through cuDNN vs Triad's
//---------===//
//
// The cuDNN route of the CUDA backend's attention
// (runtime/kernels/cuda/CudnnAttention.h). Without a GPU: the names of the
// --cuda-attention choices, what the host refuses to send to cuDNN, the
// route each choice gives, the plan cache's key, a missing library failing
// with a status, and (where cuDNN is installed) every tensor and operation
// descriptor of the forward, training-forward and gradient graphs
// finalizing in cuDNN itself. With a GPU: cuDNN's forward and gradient
// against Triad's own tensor-core kernels and the CPU's exact kernels on the
// same bf16 and f16 inputs (causal and unmasked, one kv head per head and
// grouped, head dimensions 64 and 128), the fallback to Triad's kernels and
// its count, the error of --cuda-attention=cudnn on a call cuDNN does not
// take, and the plan cache.
//
// The GPU tests skip with "no CUDA device on this machine" (ctest's
// SKIP_REGULAR_EXPRESSION). Nothing here has run on a GPU until a run on
// one says so.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/cuda/CudnnAttention.h"
#include "runtime/kernels/cpu/CpuKernels.h"
#include "runtime/kernels/cpu/HalfFloat.h"
#include "runtime/kernels/cuda/CudaAttention.h"
#include "runtime/tests/CudaTestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace triad::rt::cuda {
namespace {

using cpu::Mask;
using test::expectNear;
using test::maxAbs;
using test::randomFloats;

/// A library name no machine has.
constexpr const char *kNoSuchLibrary = "libtriad-no-such-cudnn.so.9";

cpu::AttentionShape shape(int64_t batch, int64_t querySeq, int64_t keySeq,
                          int64_t heads, int64_t kvHeads, int64_t headDim,
                          Mask mask) {
  return {batch,   querySeq, keySeq, heads,
          kvHeads, headDim,  mask,   1.0f / std::sqrt(float(headDim))};
}

/// A call the route takes on an H100 with cuDNN 9.19, where nothing else
/// is said.
CudnnAttentionCall goodCall() {
  CudnnAttentionCall call;
  call.shape = shape(2, 128, 128, 8, 2, 64, Mask::Causal);
  call.type = DType::BF16;
  return call;
}

CudnnFacts hopper(size_t version = 91900) { return {version, 90}; }

//===----------------------------------------------------------------------===//
// Host logic (no GPU)
//===----------------------------------------------------------------------===//

TEST(CudnnRoute, AttentionKernelNamesParse) {
  for (AttentionKernel kernel : {AttentionKernel::Auto, AttentionKernel::Cudnn,
                                 AttentionKernel::Triad}) {
    absl::StatusOr<AttentionKernel> parsed =
        parseAttentionKernel(attentionKernelName(kernel));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kernel);
  }
  absl::StatusOr<AttentionKernel> bad = parseAttentionKernel("flash");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "unknown attention kernel 'flash' (expected auto, cudnn or triad)");
}

/// Every host check of cudnnRefusal, each on a call the route otherwise
/// takes: the reason names what is refused.
TEST(CudnnRoute, RefusesWhatItDoesNotMap) {
  EXPECT_EQ(cudnnRefusal(goodCall(), hopper()), "");
  EXPECT_EQ(cudnnRefusal(goodCall(), {0, 90}), "")
      << "the checks that need a version wait for one";
  struct Refused {
    const char *what, *reason;
    CudnnAttentionCall call;
    CudnnFacts facts;
  };
  std::vector<Refused> refused;
  auto add = [&](const char *what, const char *reason, auto change,
                 CudnnFacts facts = hopper()) {
    CudnnAttentionCall call = goodCall();
    change(call);
    refused.push_back({what, reason, call, facts});
  };
  add("f32", "bf16 or f16", [](CudnnAttentionCall &c) { c.type = DType::F32; });
  add("prefix", "prefix masks",
      [](CudnnAttentionCall &c) { c.shape.mask = Mask::Prefix; });
  add("alibi", "ALiBi", [](CudnnAttentionCall &c) { c.hasSlopes = true; });
  add("head dimension 20", "head dimension 20",
      [](CudnnAttentionCall &c) { c.shape.headDim = 20; });
  add("head dimension 264", "up to 256",
      [](CudnnAttentionCall &c) { c.shape.headDim = 264; });
  add("head dimension 256 on an A100", "up to 128",
      [](CudnnAttentionCall &c) { c.shape.headDim = 256; }, {91900, 80});
  add("empty", "empty", [](CudnnAttentionCall &c) { c.shape.batch = 0; });
  add("a T4", "compute capability 7.5", [](CudnnAttentionCall &) {},
      {91900, 75});
  add("misaligned", "16-byte aligned", [](CudnnAttentionCall &c) {
    c.tensors = {reinterpret_cast<const void *>(uintptr_t{256}),
                 reinterpret_cast<const void *>(uintptr_t{258})};
  });
  add("one query and one key", "one query and one key",
      [](CudnnAttentionCall &c) {
        c.backward = true;
        c.shape.querySeq = c.shape.keySeq = 1;
      });
  add(
      "cuDNN 9.10.0", "known wrong results", [](CudnnAttentionCall &) {},
      hopper(91000));
  add(
      "a gradient of 100 keys on cuDNN 9.15.0", "multiple of 128",
      [](CudnnAttentionCall &c) {
        c.backward = true;
        c.shape.keySeq = 100;
      },
      hopper(91500));
  for (const Refused &r : refused) {
    std::string why = cudnnRefusal(r.call, r.facts);
    EXPECT_NE(why.find(r.reason), std::string::npos)
        << r.what << ": the refusal is '" << why << "'";
  }

  // What it takes besides: no mask, one kv head for all, head dimension
  // 256 on Hopper, a forward of 100 keys on 9.15.0 and a gradient of 100
  // keys from 9.15.1 on, aligned tensors.
  CudnnAttentionCall call = goodCall();
  call.shape.mask = Mask::None;
  call.shape.kvHeads = 1;
  call.shape.headDim = 256;
  call.type = DType::F16;
  call.tensors = {reinterpret_cast<const void *>(uintptr_t{256}),
                  reinterpret_cast<const void *>(uintptr_t{4096 + 16})};
  EXPECT_EQ(cudnnRefusal(call, hopper()), "");
  call.shape.keySeq = 100;
  EXPECT_EQ(cudnnRefusal(call, hopper(91500)), "");
  call.backward = true;
  EXPECT_EQ(cudnnRefusal(call, hopper(91501)), "");
}

TEST(CudnnRoute, ChoosesTheRouteByTheKernelChoice) {
  auto route = [](AttentionKernel kernel, const char *refusal) {
    return chooseAttentionRoute(kernel, refusal);
  };
  EXPECT_EQ(*route(AttentionKernel::Auto, ""), AttentionRoute::Cudnn);
  EXPECT_EQ(*route(AttentionKernel::Auto, "prefix"), AttentionRoute::Triad);
  EXPECT_EQ(*route(AttentionKernel::Cudnn, ""), AttentionRoute::Cudnn);
  EXPECT_EQ(*route(AttentionKernel::Triad, ""), AttentionRoute::Triad);
  EXPECT_EQ(*route(AttentionKernel::Triad, "prefix"), AttentionRoute::Triad);
  absl::StatusOr<AttentionRoute> refused = route(
      AttentionKernel::Cudnn, "a prefix-masked bf16 attention: prefix masks");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "--cuda-attention=cudnn, but cuDNN's fused attention does not "
            "take a prefix-masked bf16 attention: prefix masks");
}

/// One plan per shape, type, mask and pass; the scale is a by-value
/// scalar of each execution, so it is no part of the key.
TEST(CudnnRoute, KeysTellPlansApart) {
  const cpu::AttentionShape base = shape(2, 128, 128, 8, 2, 64, Mask::Causal);
  const CudnnPlanKey key = cudnnPlanKey(base, DType::BF16, CudnnPass::Forward);
  EXPECT_EQ(key.batch, 2);
  EXPECT_EQ(key.heads, 8);
  EXPECT_EQ(key.kvHeads, 2);
  EXPECT_TRUE(key.causal);
  cpu::AttentionShape rescaled = base;
  rescaled.scale = 0.5f;
  EXPECT_EQ(cudnnPlanKey(rescaled, DType::BF16, CudnnPass::Forward), key);
  std::vector<CudnnPlanKey> others;
  for (int change = 0; change < 9; ++change) {
    cpu::AttentionShape s = base;
    DType type = DType::BF16;
    CudnnPass pass = CudnnPass::Forward;
    switch (change) {
    case 0:
      s.batch = 4;
      break;
    case 1:
      s.querySeq = 256;
      break;
    case 2:
      s.keySeq = 256;
      break;
    case 3:
      s.heads = 16;
      break;
    case 4:
      s.kvHeads = 8;
      break;
    case 5:
      s.headDim = 128;
      break;
    case 6:
      s.mask = Mask::None;
      break;
    case 7:
      type = DType::F16;
      break;
    case 8:
      pass = CudnnPass::Backward;
      break;
    }
    others.push_back(cudnnPlanKey(s, type, pass));
  }
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_FALSE(others[i] == key) << "change " << i;
    EXPECT_TRUE(others[i] < key || key < others[i]) << "change " << i;
  }
}

/// A machine without cuDNN: loading it is an Unavailable status that
/// names the library and says why, not a crash.
TEST(CudnnRoute, AMissingLibraryIsAStatus) {
  absl::StatusOr<size_t> version = cudnnLibraryVersion(kNoSuchLibrary);
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.status().code(), absl::StatusCode::kUnavailable);
  if (cudnnRouteBuilt()) {
    EXPECT_NE(version.status().message().find(kNoSuchLibrary),
              std::string::npos)
        << version.status();
  }
  CudnnPlanKey key = cudnnPlanKey(shape(1, 128, 128, 2, 2, 64, Mask::Causal),
                                  DType::BF16, CudnnPass::Forward);
  EXPECT_EQ(cudnnOperationCount(key, kNoSuchLibrary).status().code(),
            absl::StatusCode::kUnavailable);
}

/// Where cuDNN is installed, the descriptors of every tensor and operation
/// of every graph finalize in cuDNN itself (the operation graph and the
/// plan need a GPU): the forward of 10 operations (Q K^T, the scale, the
/// softmax's max, subtraction, exponential, sum, the statistics' log and
/// addition, division, P V; the statistics are stored only in training,
/// but cuDNN's engines want them computed) and 4 more with the causal mask
/// (row and column numbers, their comparison, the select); the gradient's
/// 18 (the
/// rows' dO . O: product, sum, copy; the probabilities: Q K^T, scale,
/// Stats, exponential; dV: transpose and product; dS: dO V^T, subtraction,
/// product, scale; dK: transpose and product; dQ: K's view, product, copy),
/// 2 more (the sums over a kv head's query heads) for grouped heads and 4
/// more with the mask.
/// (Without cuDNN there is nothing to check, which the test prints: a skip
/// would read as a failure in the GPU bundle's outcome.)
TEST(CudnnRoute, GraphDescriptorsFinalizeInCudnn) {
  absl::StatusOr<size_t> version = cudnnLibraryVersion();
  if (!version.ok()) {
    std::printf("nothing to check: %s\n",
                std::string(version.status().message()).c_str());
    return;
  }
  std::printf("cuDNN %zu\n", *version);
  for (DType type : {DType::BF16, DType::F16})
    for (Mask mask : {Mask::Causal, Mask::None})
      for (int64_t kvHeads : {8, 2})
        for (int64_t headDim : {64, 128})
          for (CudnnPass pass : {CudnnPass::Forward, CudnnPass::ForwardTraining,
                                 CudnnPass::Backward}) {
            CudnnPlanKey key = cudnnPlanKey(
                shape(2, 128, 256, 8, kvHeads, headDim, mask), type, pass);
            SCOPED_TRACE(testing::Message()
                         << (type == DType::BF16 ? "bf16" : "f16")
                         << (key.causal ? " causal" : " unmasked") << " kv "
                         << kvHeads << " d" << headDim << " pass "
                         << static_cast<int>(pass));
            const int masked = key.causal ? 4 : 0;
            int expected = pass == CudnnPass::Backward
                               ? 18 + masked + (kvHeads != 8 ? 2 : 0)
                               : 10 + masked;
            absl::StatusOr<int> count = cudnnOperationCount(key);
            ASSERT_TRUE(count.ok()) << count.status();
            EXPECT_EQ(*count, expected);
          }
}

//===----------------------------------------------------------------------===//
// On a GPU
//===----------------------------------------------------------------------===//

const char *nameOf(DType type) { return type == DType::BF16 ? "bf16" : "f16"; }

std::string nameOf(const cpu::AttentionShape &s) {
  return std::string(s.mask == Mask::Causal ? "causal" : "unmasked") +
         " batch " + std::to_string(s.batch) + " q" +
         std::to_string(s.querySeq) + " k" + std::to_string(s.keySeq) +
         " heads " + std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) +
         " d" + std::to_string(s.headDim);
}

/// `values` as bits of `type` (rounded to nearest even) and back.
std::vector<uint16_t> bitsOf(DType type, const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  cpu::narrow(type == DType::BF16, values.data(), bits.data(),
              static_cast<int64_t>(values.size()));
  return bits;
}
std::vector<float> floatsOf(DType type, const std::vector<uint16_t> &bits) {
  std::vector<float> values(bits.size());
  cpu::widen(type == DType::BF16, bits.data(), values.data(),
             static_cast<int64_t>(bits.size()));
  return values;
}

/// Random q, k, v and dout of a shape, already values of `type`.
struct Inputs {
  std::vector<float> q, k, v, dout;

  Inputs(const cpu::AttentionShape &s, DType type) {
    size_t queries = s.batch * s.querySeq * s.heads * s.headDim;
    size_t keys = s.batch * s.keySeq * s.kvHeads * s.headDim;
    q = floatsOf(type, bitsOf(type, randomFloats(queries, 21)));
    k = floatsOf(type, bitsOf(type, randomFloats(keys, 22)));
    v = floatsOf(type, bitsOf(type, randomFloats(keys, 23)));
    dout = floatsOf(type, bitsOf(type, randomFloats(queries, 24)));
  }
};

/// out, dq, dk, dv of one route.
struct Results {
  std::vector<float> out, dq, dk, dv;
  const std::vector<float> &operator[](int i) const {
    const std::vector<float> *all[] = {&out, &dq, &dk, &dv};
    return *all[i];
  }
};
const char *const kResultNames[] = {"out", "dq", "dk", "dv"};

/// cuDNN's results against Triad's tensor-core kernels' and the CPU's
/// exact f32 kernels' on the same 16-bit inputs. Both GPU routes round the
/// probabilities (and, backward, the score gradients) to the 16-bit type
/// before their products, 2^-9 relative for bf16 and 2^-11 for f16 per
/// term, and each result once (an ulp: 2^-8 and 2^-11); where they round
/// differs (cuDNN's exponentials, its max and sums in another order, its
/// f32 accumulation of dq). The tolerance, 2e-2 (bf16) or 5e-3 (f16) of the
/// tensor's largest element plus as much of the element, is what Triad's
/// tensor cores are held to against the CPU (CudaAttentionTest), about ten
/// times those roundings and far below a masking or indexing error (of the
/// size of the elements). Returns the largest difference from Triad's as
/// a fraction of the largest element, which the tests print.
double expectCudnnNear(DType type, const std::vector<float> &cudnn,
                       const std::vector<float> &triad,
                       const std::vector<float> &exact,
                       const std::string &what) {
  const double tolerance = type == DType::BF16 ? 2e-2 : 5e-3;
  expectNear(cudnn, triad, tolerance, tolerance * maxAbs(triad),
             what + " (cuDNN against Triad's kernels)");
  expectNear(cudnn, exact, tolerance, tolerance * maxAbs(exact),
             what + " (cuDNN against the CPU)");
  double worst = 0.0;
  for (size_t i = 0; i < cudnn.size() && i < triad.size(); ++i)
    worst = std::max(worst, std::fabs(double(cudnn[i]) - triad[i]));
  double largest = maxAbs(triad);
  return largest > 0.0 ? worst / largest : worst;
}

class CudnnAttentionKernels : public test::CudaTest {
protected:
  /// The inputs on the device in `type`, and poisoned results of their
  /// sizes.
  struct OnDevice {
    DType type;
    DeviceBuffer q, k, v, dout, out, dq, dk, dv;
    Operand in(const DeviceBuffer &b) const { return {b.data(), type}; }
    Result res(const DeviceBuffer &b) const { return {b.data(), type}; }
  };
  OnDevice onDevice(DType type, const Inputs &in) {
    return {type,
            upload(bitsOf(type, in.q)),
            upload(bitsOf(type, in.k)),
            upload(bitsOf(type, in.v)),
            upload(bitsOf(type, in.dout)),
            poisoned(in.q.size(), 2),
            poisoned(in.q.size(), 2),
            poisoned(in.k.size(), 2),
            poisoned(in.v.size(), 2)};
  }

  /// The forward and gradient of `s` on `in` through `router`, or, without
  /// one, through Triad's typed kernels directly.
  Results run(AttentionRouter *router, const cpu::AttentionShape &s, DType type,
              const Inputs &in) {
    OnDevice d = onDevice(type, in);
    Operand qo = d.in(d.q), ko = d.in(d.k), vo = d.in(d.v),
            douto = d.in(d.dout);
    Result outr = d.res(d.out), dqr = d.res(d.dq), dkr = d.res(d.dk),
           dvr = d.res(d.dv);
    absl::Status forward =
        router
            ? router->attention(*context, qo, ko, vo, nullptr, nullptr, outr, s)
            : attention(*context, qo, ko, vo, nullptr, nullptr, outr, s);
    EXPECT_TRUE(forward.ok()) << forward;
    absl::Status backward =
        router ? router->attentionGrad(*context, qo, ko, vo, nullptr, nullptr,
                                       douto, dqr, dkr, dvr, s)
               : attentionGrad(*context, qo, ko, vo, nullptr, nullptr, douto,
                               dqr, dkr, dvr, s);
    EXPECT_TRUE(backward.ok()) << backward;
    Results results;
    if (!forward.ok() || !backward.ok())
      return results;
    results.out = floatsOf(type, download<uint16_t>(d.out, in.q.size()));
    results.dq = floatsOf(type, download<uint16_t>(d.dq, in.q.size()));
    results.dk = floatsOf(type, download<uint16_t>(d.dk, in.k.size()));
    results.dv = floatsOf(type, download<uint16_t>(d.dv, in.v.size()));
    return results;
  }

  /// The CPU's exact f32 results on the same inputs.
  static Results exact(const cpu::AttentionShape &s, const Inputs &in) {
    Results r{std::vector<float>(in.q.size()), std::vector<float>(in.q.size()),
              std::vector<float>(in.k.size()), std::vector<float>(in.v.size())};
    cpu::attention(in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr,
                   r.out.data(), s);
    cpu::attentionGrad(in.q.data(), in.k.data(), in.v.data(), nullptr, nullptr,
                       in.dout.data(), r.dq.data(), r.dk.data(), r.dv.data(),
                       s);
    return r;
  }
};

/// cuDNN (asked for with AttentionKernel::Cudnn, so that a refusal fails
/// with its reason) against Triad's kernels and the CPU: bf16 and f16,
/// causal and unmasked, 8 heads over 8 kv heads (128 queries and keys) and
/// over 2 (256), head dimensions 64 and 128. (Sequences are multiples of
/// 128: cuDNN before 9.15.1 takes no other gradient without a padding
/// mask. Each shape builds three plans, each compiled by NVRTC.)
TEST_F(CudnnAttentionKernels, ForwardAndGradientMatchTriadsKernels) {
  AttentionRouter router(AttentionKernel::Cudnn);
  for (DType type : {DType::BF16, DType::F16}) {
    double worst[4] = {0, 0, 0, 0};
    for (Mask mask : {Mask::Causal, Mask::None})
      for (int64_t kvHeads : {8, 2})
        for (int64_t headDim : {64, 128}) {
          const int64_t seq = kvHeads == 8 ? 128 : 256;
          const cpu::AttentionShape s =
              shape(2, seq, seq, 8, kvHeads, headDim, mask);
          const std::string name = std::string(nameOf(type)) + " " + nameOf(s);
          SCOPED_TRACE(name);
          Inputs in(s, type);
          AttentionRouteCounts before = attentionRouteCounts();
          Results cudnn = run(&router, s, type, in);
          EXPECT_EQ(attentionRouteCounts().cudnnForward,
                    before.cudnnForward + 1);
          EXPECT_EQ(attentionRouteCounts().cudnnBackward,
                    before.cudnnBackward + 1);
          Results triad = run(nullptr, s, type, in);
          Results cpu = exact(s, in);
          if (cudnn.out.empty() || triad.out.empty())
            continue;
          for (int i = 0; i < 4; ++i)
            worst[i] = std::max(
                worst[i], expectCudnnNear(type, cudnn[i], triad[i], cpu[i],
                                          name + ": " + kResultNames[i]));
        }
    std::printf("%s: cuDNN's largest difference from Triad's kernels, as a "
                "fraction of the largest element: out %.3g, dq %.3g, dk %.3g, "
                "dv %.3g\n",
                nameOf(type), worst[0], worst[1], worst[2], worst[3]);
  }
}

/// Queries and keys of different lengths (row i sees keys j <= i, from the
/// top left, in both routes): under Auto, whichever route runs matches
/// Triad's kernels; the test prints which one ran.
TEST_F(CudnnAttentionKernels, UnequalSequencesMatchTriadsKernels) {
  AttentionRouter router(AttentionKernel::Auto);
  for (DType type : {DType::BF16, DType::F16})
    for (const cpu::AttentionShape &s :
         {shape(2, 128, 256, 8, 2, 64, Mask::Causal),
          shape(2, 256, 128, 8, 2, 64, Mask::Causal),
          shape(2, 128, 256, 8, 8, 128, Mask::None)}) {
      const std::string name = std::string(nameOf(type)) + " " + nameOf(s);
      SCOPED_TRACE(name);
      Inputs in(s, type);
      AttentionRouteCounts before = attentionRouteCounts();
      Results routed = run(&router, s, type, in);
      std::printf("%s: forward through %s, gradient through %s%s%s\n",
                  name.c_str(),
                  attentionRouteCounts().cudnnForward > before.cudnnForward
                      ? "cuDNN"
                      : "Triad's kernels",
                  attentionRouteCounts().cudnnBackward > before.cudnnBackward
                      ? "cuDNN"
                      : "Triad's kernels",
                  router.lastRefusal().empty() ? "" : ": ",
                  router.lastRefusal().c_str());
      Results triad = run(nullptr, s, type, in);
      Results cpu = exact(s, in);
      if (routed.out.empty() || triad.out.empty())
        continue;
      for (int i = 0; i < 4; ++i)
        expectCudnnNear(type, routed[i], triad[i], cpu[i],
                        name + ": " + kResultNames[i]);
    }
}

/// Under Auto, calls cuDNN does not take run Triad's kernels, counted as
/// theirs, with Triad's bits, and the router says why: a prefix mask,
/// ALiBi slopes, a gradient of one query and one key.
TEST_F(CudnnAttentionKernels, FallsBackToTriadsKernelsWhereCudnnDoesNotTake) {
  const DType type = DType::BF16;
  AttentionRouter router(AttentionKernel::Auto);
  struct Case {
    cpu::AttentionShape s;
    bool slopes;
    const char *reason;
  };
  for (const Case &c :
       {Case{shape(2, 128, 128, 4, 2, 64, Mask::Prefix), false, "prefix"},
        Case{shape(2, 128, 128, 4, 2, 64, Mask::Causal), true, "ALiBi"},
        Case{shape(2, 1, 1, 4, 2, 64, Mask::None), false, "one query"}}) {
    SCOPED_TRACE(nameOf(c.s));
    Inputs in(c.s, type);
    std::vector<int32_t> lengths(c.s.batch, 50);
    std::vector<float> slopeValues(c.s.heads, 0.25f);
    DeviceBuffer q = upload(bitsOf(type, in.q)), k = upload(bitsOf(type, in.k)),
                 v = upload(bitsOf(type, in.v)),
                 dout = upload(bitsOf(type, in.dout)), prefix = upload(lengths),
                 slopes = upload(slopeValues);
    const int32_t *prefixLengths =
        c.s.mask == Mask::Prefix ? prefix.as<int32_t>() : nullptr;
    const float *alibi = c.slopes ? slopes.as<float>() : nullptr;
    Operand qo{q.data(), type}, ko{k.data(), type}, vo{v.data(), type},
        douto{dout.data(), type};
    std::vector<DeviceBuffer> outputs;
    for (int route = 0; route < 2; ++route)
      for (size_t n : {in.q.size(), in.q.size(), in.k.size(), in.v.size()})
        outputs.push_back(poisoned(n, 2));
    auto result = [&](int route, int i) {
      return Result{outputs[4 * route + i].data(), type};
    };
    AttentionRouteCounts before = attentionRouteCounts();
    ASSERT_OK(router.attention(*context, qo, ko, vo, prefixLengths, alibi,
                               result(0, 0), c.s));
    ASSERT_OK(router.attentionGrad(*context, qo, ko, vo, prefixLengths, alibi,
                                   douto, result(0, 1), result(0, 2),
                                   result(0, 3), c.s));
    EXPECT_NE(router.lastRefusal().find(c.reason), std::string::npos)
        << router.lastRefusal();
    const AttentionRouteCounts &now = attentionRouteCounts();
    EXPECT_EQ(now.triadBackward, before.triadBackward + 1);
    EXPECT_EQ(now.cudnnBackward, before.cudnnBackward);
    if (c.s.querySeq > 1) {
      EXPECT_EQ(now.triadForward, before.triadForward + 1);
      EXPECT_EQ(now.cudnnForward, before.cudnnForward);
    }
    ASSERT_OK(attention(*context, qo, ko, vo, prefixLengths, alibi,
                        result(1, 0), c.s));
    ASSERT_OK(attentionGrad(*context, qo, ko, vo, prefixLengths, alibi, douto,
                            result(1, 1), result(1, 2), result(1, 3), c.s));
    // (cuDNN may run the forward of one query and one key.)
    for (int i = c.s.querySeq > 1 ? 0 : 1; i < 4; ++i) {
      size_t n = outputs[i].size() / 2;
      EXPECT_EQ(download<uint16_t>(outputs[i], n),
                download<uint16_t>(outputs[4 + i], n))
          << kResultNames[i] << " is not Triad's";
    }
  }
}

/// --cuda-attention=cudnn: a call cuDNN does not take is a
/// FailedPrecondition error that names the flag, the call and the reason,
/// and nothing runs; f32 calls (triadOnly) likewise. Under Triad nothing
/// loads cuDNN.
TEST_F(CudnnAttentionKernels, TheCudnnChoiceRefusesWithAClearError) {
  const DType type = DType::BF16;
  const cpu::AttentionShape s = shape(2, 128, 128, 4, 2, 64, Mask::Prefix);
  Inputs in(s, type);
  DeviceBuffer q = upload(bitsOf(type, in.q)), out = poisoned(in.q.size(), 2);
  std::vector<int32_t> lengths(s.batch, 50);
  DeviceBuffer prefix = upload(lengths);
  AttentionRouter cudnn(AttentionKernel::Cudnn);
  AttentionRouteCounts before = attentionRouteCounts();
  absl::Status refused = cudnn.attention(
      *context, {q.data(), type}, {q.data(), type}, {q.data(), type},
      prefix.as<int32_t>(), nullptr, {out.data(), type}, s);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "--cuda-attention=cudnn, but cuDNN's fused attention does not "
            "take a prefix-masked bf16 attention of batch 2, 128 queries, "
            "128 keys, 4 heads over 2 kv heads of 64: prefix masks are not "
            "mapped onto cuDNN's attention");
  EXPECT_EQ(attentionRouteCounts().triadForward, before.triadForward);
  absl::Status f32 = cudnn.triadOnly(/*backward=*/true, "its values are f32");
  EXPECT_EQ(f32.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f32.message().find("an attention gradient: its values are f32"),
            std::string::npos)
      << f32;

  AttentionRouter triad(AttentionKernel::Triad);
  const cpu::AttentionShape causal = shape(2, 128, 128, 4, 4, 64, Mask::Causal);
  Inputs causalIn(causal, type);
  Results results = run(&triad, causal, type, causalIn);
  EXPECT_FALSE(results.out.empty());
  EXPECT_EQ(triad.cachedPlans(), 0u);
  EXPECT_EQ(triad.lastRefusal(), "");
}

/// Plans are built once per key: calls of another scale reuse the
/// forward's, a gradient adds its two (training forward and gradient), and
/// a refused key is kept too. A library that does not load falls back
/// under Auto (saying why) and is an error under Cudnn.
TEST_F(CudnnAttentionKernels, PlansAreBuiltOncePerShape) {
  const DType type = DType::F16;
  cpu::AttentionShape s = shape(1, 128, 128, 4, 2, 64, Mask::Causal);
  Inputs in(s, type);
  OnDevice d = onDevice(type, in);
  Operand qo = d.in(d.q), ko = d.in(d.k), vo = d.in(d.v), douto = d.in(d.dout);
  Result outr = d.res(d.out), dqr = d.res(d.dq), dkr = d.res(d.dk),
         dvr = d.res(d.dv);

  AttentionRouter router(AttentionKernel::Cudnn);
  ASSERT_OK(router.attention(*context, qo, ko, vo, nullptr, nullptr, outr, s));
  EXPECT_EQ(router.cachedPlans(), 1u);
  s.scale = 0.5f;
  ASSERT_OK(router.attention(*context, qo, ko, vo, nullptr, nullptr, outr, s));
  EXPECT_EQ(router.cachedPlans(), 1u) << "another scale built another plan";
  ASSERT_OK(router.attentionGrad(*context, qo, ko, vo, nullptr, nullptr, douto,
                                 dqr, dkr, dvr, s));
  ASSERT_OK(router.attentionGrad(*context, qo, ko, vo, nullptr, nullptr, douto,
                                 dqr, dkr, dvr, s));
  EXPECT_EQ(router.cachedPlans(), 3u);
  ASSERT_OK(context->synchronize());

  AttentionRouter missing(AttentionKernel::Auto, kNoSuchLibrary);
  AttentionRouteCounts before = attentionRouteCounts();
  ASSERT_OK(missing.attention(*context, qo, ko, vo, nullptr, nullptr, outr, s));
  EXPECT_EQ(attentionRouteCounts().triadForward, before.triadForward + 1);
  EXPECT_NE(missing.lastRefusal().find("cannot load"), std::string::npos)
      << missing.lastRefusal();
  AttentionRouter required(AttentionKernel::Cudnn, kNoSuchLibrary);
  EXPECT_EQ(required.attention(*context, qo, ko, vo, nullptr, nullptr, outr, s)
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

} // namespace
} // namespace triad::rt::cuda
