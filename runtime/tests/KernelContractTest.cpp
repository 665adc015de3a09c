//===- KernelContractTest.cpp - the kernel contract on its own ------------===//
//
// The contract's checks on views built by hand (the plan loader's and the
// rt verifier's views are tested through PlanTest and the lit tests), the
// checks that need the plan's header passing without one, and the
// attribute decoders the executors read kernels through.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelContract.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace triad::plan {
namespace {

KernelOperand f32(std::vector<int64_t> shape, std::string name) {
  return {DType::F32, std::move(shape), std::move(name)};
}

/// A matmul [4 x 8] . [8 x 4] -> [4 x 4] with the given flags.
KernelView matmul(std::vector<int64_t> ints) {
  KernelView view;
  view.op = OpCode::Matmul;
  view.operands = {f32({4, 8}, "a"), f32({8, 4}, "b"), f32({4, 4}, "c")};
  view.inputs = {0, 1};
  view.outputs = {2};
  view.ints = std::move(ints);
  return view;
}

std::string message(const absl::Status &status) {
  return std::string(status.message());
}

TEST(KernelContract, AcceptsAWellFormedKernel) {
  EXPECT_TRUE(checkKernel(matmul({0, 0}), {}).ok());
}

TEST(KernelContract, SaysWhatIsWrong) {
  EXPECT_EQ(message(checkKernel(matmul({0}), {})),
            "expects 2 inputs, 1 outputs, 2 ints and 0 floats; has 2, 1, 1 "
            "and 0");
  EXPECT_EQ(message(checkKernel(matmul({2, 0}), {})),
            "flag transpose_a is 2; flags are 0 or 1");
  EXPECT_EQ(message(checkKernel(matmul({1, 0}), {})),
            "contracting sizes differ: 4 and 8");
  KernelView badIndex = matmul({0, 0});
  badIndex.inputs[1] = 7;
  EXPECT_EQ(message(checkKernel(badIndex, {})), "input 7 is not an operand");
  KernelView intOperand = matmul({0, 0});
  intOperand.operands[1].dtype = DType::I32;
  EXPECT_EQ(message(checkKernel(intOperand, {})), "b must be a float tensor");

  KernelView activation;
  activation.op = OpCode::Activation;
  activation.operands = {f32({4}, "x"), f32({4}, "y")};
  activation.inputs = {0};
  activation.outputs = {1};
  activation.ints = {kLastActivationCode + 1};
  EXPECT_EQ(message(checkKernel(activation, {})),
            "unknown activation 5 (0 to 4)");
  activation.floats = {1.0};
  activation.ints = {0};
  EXPECT_EQ(message(checkKernel(activation, {})),
            "expects 1 inputs, 1 outputs, 1 ints and 0 floats; has 1, 1, 1 "
            "and 1");

  // LrSchedule's decay is -1 (over the run), 0 (none) or a step.
  KernelView schedule;
  schedule.op = OpCode::LrSchedule;
  schedule.operands = {f32({}, "step"), f32({}, "lr")};
  schedule.inputs = {0};
  schedule.outputs = {1};
  schedule.floats = {1e-3, 0.0};
  schedule.ints = {0, kDecayOverRun};
  EXPECT_TRUE(checkKernel(schedule, {}).ok());
  schedule.ints = {0, -2};
  EXPECT_EQ(message(checkKernel(schedule, {})),
            "invalid schedule: needs 0 <= floor <= peak, peak > 0, a "
            "non-negative warmup and a decay of -1 (the run's length), 0 "
            "(none) or a step");

  // SumSquares takes no float, or a positive limit.
  KernelView squares;
  squares.op = OpCode::SumSquares;
  squares.operands = {f32({4}, "x"), f32({}, "sum")};
  squares.inputs = {0};
  squares.outputs = {1};
  EXPECT_TRUE(checkKernel(squares, {}).ok());
  squares.floats = {16376.0};
  EXPECT_TRUE(checkKernel(squares, {}).ok());
  squares.floats = {0.0};
  EXPECT_EQ(message(checkKernel(squares, {})), "limit must be positive, got 0");
  squares.floats = {std::nan("")};
  EXPECT_EQ(message(checkKernel(squares, {})),
            "a float attribute is not finite");
  squares.floats = {1.0, 2.0};
  EXPECT_EQ(message(checkKernel(squares, {})),
            "expects N inputs (N >= 1), 1 output, no ints and at most 1 float "
            "(the limit); has 1, 1, 0 and 2");
  // Over several tensors of any float type, into one f32 scalar.
  squares.floats = {};
  squares.operands.push_back({DType::BF16, {2, 3}, "y"});
  squares.inputs = {0, 2};
  EXPECT_TRUE(checkKernel(squares, {}).ok());
  squares.operands.push_back({DType::I32, {2}, "ids"});
  squares.inputs = {0, 2, 3};
  EXPECT_EQ(message(checkKernel(squares, {})), "ids must be a float tensor");
  squares.inputs = {};
  EXPECT_EQ(message(checkKernel(squares, {})),
            "expects N inputs (N >= 1), 1 output, no ints and at most 1 float "
            "(the limit); has 0, 1, 0 and 0");
}

/// AdamW over `tensors` tensors of [4] (then [3], [2], ...), each with its
/// param, grad, m and v, then lr, step and coefficient; results in place
/// and, with `rounded`, a bf16 copy of each parameter.
KernelView adamwOver(int64_t tensors, bool rounded) {
  KernelView view;
  view.op = OpCode::AdamW;
  view.floats = {0.9, 0.95, 1e-8};
  for (int64_t t = 0; t < tensors; ++t) {
    uint32_t at = static_cast<uint32_t>(view.operands.size());
    std::string name = std::to_string(t);
    for (const char *what : {"param ", "grad ", "m ", "v "})
      view.operands.push_back(f32({4 - t}, what + name));
    view.inputs.insert(view.inputs.end(), {at, at + 1, at + 2, at + 3});
    view.floats.push_back(0.1 * static_cast<double>(t));
  }
  uint32_t shared = static_cast<uint32_t>(view.operands.size());
  for (const char *what : {"lr", "step", "coefficient"})
    view.operands.push_back(f32({}, what));
  view.inputs.insert(view.inputs.end(), {shared, shared + 1, shared + 2});
  for (int64_t t = 0; t < tensors; ++t) {
    uint32_t at = static_cast<uint32_t>(4 * t);
    view.outputs.insert(view.outputs.end(), {at, at + 2, at + 3});
    if (rounded) {
      view.outputs.push_back(static_cast<uint32_t>(view.operands.size()));
      view.operands.push_back(
          {DType::BF16, {4 - t}, "rounded " + std::to_string(t)});
    }
  }
  return view;
}

TEST(KernelContract, AdamWUpdatesTensorsAndRoundsTheirParameters) {
  for (int64_t tensors : {1, 3})
    for (bool rounded : {false, true})
      EXPECT_TRUE(checkKernel(adamwOver(tensors, rounded), {}).ok())
          << tensors << " tensors, rounded " << rounded;
  // The attributes: a weight decay per tensor.
  AdamWAttrs attrs = adamWAttrs(adamwOver(3, false).floats);
  EXPECT_EQ(attrs.weightDecay, 0.0);
  const std::string counts =
      "expects 4 N + 3 or 4 N + 4 inputs (param, grad, m, v per tensor, then "
      "lr, step, coefficient[, skip]), 3 N or 4 N outputs (param', m', v'[, "
      "the 16-bit param] per tensor), no ints and 3 + N floats (beta1, beta2, "
      "epsilon, a weight decay per tensor), N >= 1; has ";
  KernelView view = adamwOver(3, false);
  view.floats.pop_back();
  EXPECT_EQ(message(checkKernel(view, {})), counts + "15, 9, 0 and 5");
  view = adamwOver(2, true);
  view.outputs.pop_back();
  EXPECT_EQ(message(checkKernel(view, {})), counts + "11, 7, 0 and 5");
  view = adamwOver(2, false);
  view.inputs.pop_back();
  view.inputs.pop_back();
  EXPECT_EQ(message(checkKernel(view, {})), counts + "9, 6, 0 and 5");
  // A skip flag after the coefficient: an f32 scalar, and the tensors
  // updated in place.
  for (bool rounded : {false, true}) {
    view = adamwOver(2, rounded);
    view.inputs.push_back(view.inputs.back());
    EXPECT_TRUE(checkKernel(view, {}).ok()) << "rounded " << rounded;
  }
  view = adamwOver(2, false);
  view.inputs.push_back(view.inputs[0]);
  EXPECT_EQ(message(checkKernel(view, {})), "param 0 must be an f32 scalar");
  view = adamwOver(2, false);
  view.inputs.push_back(view.inputs.back());
  view.operands.push_back(f32({3}, "a copy"));
  view.outputs[3] = static_cast<uint32_t>(view.operands.size() - 1);
  EXPECT_EQ(message(checkKernel(view, {})),
            "with a skip flag, param, m and v are updated in place");
  view = adamwOver(2, false);
  view.ints = {1};
  EXPECT_EQ(message(checkKernel(view, {})), "expects no ints; has 1");
  // Each tensor's operands share its shape; the rounded copy is 16-bit.
  view = adamwOver(2, false);
  std::swap(view.inputs[1], view.inputs[5]);
  EXPECT_EQ(message(checkKernel(view, {})),
            "operand shapes differ: [4] and [3]");
  view = adamwOver(2, true);
  view.operands.back().dtype = DType::F32;
  EXPECT_EQ(message(checkKernel(view, {})),
            "the rounded parameter must be bf16 or f16 with the parameter's "
            "shape");
  view = adamwOver(2, true);
  view.operands.back().shape = {4};
  EXPECT_EQ(message(checkKernel(view, {})),
            "the rounded parameter must be bf16 or f16 with the parameter's "
            "shape");
  view = adamwOver(2, false);
  view.floats.back() = -0.5;
  EXPECT_EQ(message(checkKernel(view, {})),
            "invalid betas, epsilon or weight decay");
  view = adamwOver(2, false);
  view.operands[view.inputs[8]].shape = {1};
  EXPECT_EQ(message(checkKernel(view, {})), "lr must be an f32 scalar");
}

/// A matmul [4 x 8] . [8 x 4] -> [4 x 4] with epilogue `code`, a bias of
/// `bias` values (of `biasType`) and, when `keep`, a pre-activation [4 x 4].
KernelView fusedMatmul(EpilogueCode code, int64_t bias = 4,
                       DType biasType = DType::F32, bool keep = false) {
  KernelView view = matmul({0, 0, static_cast<int64_t>(code)});
  view.operands.push_back({biasType, {bias}, "bias"});
  view.inputs.push_back(3);
  if (keep) {
    view.operands.push_back(f32({4, 4}, "pre"));
    view.outputs.push_back(4);
  }
  return view;
}

TEST(KernelContract, ChecksMatmulEpilogues) {
  EXPECT_TRUE(checkKernel(fusedMatmul(EpilogueCode::Bias), {}).ok());
  EXPECT_TRUE(checkKernel(fusedMatmul(EpilogueCode::BiasGeluTanh, 4, DType::F32,
                                      /*keep=*/true),
                          {})
                  .ok());
  EXPECT_TRUE(checkKernel(fusedMatmul(EpilogueCode::BiasRelu), {}).ok());
  // An epilogue of None is the plain product.
  EXPECT_TRUE(checkKernel(matmul({0, 0, 0}), {}).ok());

  EXPECT_EQ(message(checkKernel(matmul({0, 0, kLastEpilogueCode + 1}), {})),
            "unknown epilogue 8 (0 to 7)");
  EXPECT_EQ(message(checkKernel(matmul({0, 0, -1}), {})),
            "unknown epilogue -1 (0 to 7)");
  EXPECT_EQ(message(checkKernel(matmul({0, 0, 1}), {})),
            "expects 3 inputs, 1 outputs, 3 ints and 0 floats; has 2, 1, 3 "
            "and 0");
  KernelView noEpilogue = fusedMatmul(EpilogueCode::Bias);
  noEpilogue.ints.pop_back();
  EXPECT_EQ(message(checkKernel(noEpilogue, {})),
            "expects 2 inputs, 1 outputs, 2 ints and 0 floats; has 3, 1, 2 "
            "and 0");
  EXPECT_EQ(message(checkKernel(fusedMatmul(EpilogueCode::Bias, 4, DType::F32,
                                            /*keep=*/true),
                                {})),
            "only an epilogue with an activation writes a pre-activation, and "
            "only a gradient epilogue a bias gradient (a second output)");
  const std::string badBias = "the bias must be [4] (the result's last "
                              "dimension), f32 or of the result's type";
  EXPECT_EQ(message(checkKernel(fusedMatmul(EpilogueCode::Bias, 8), {})),
            badBias);
  EXPECT_EQ(
      message(checkKernel(fusedMatmul(EpilogueCode::Bias, 4, DType::BF16), {})),
      badBias);
  // A 16-bit product adds an f32 bias or one of its own type.
  KernelView sixteen = fusedMatmul(EpilogueCode::BiasRelu, 4, DType::BF16);
  for (int operand : {0, 1, 2})
    sixteen.operands[operand].dtype = DType::BF16;
  EXPECT_TRUE(checkKernel(sixteen, {}).ok());
  sixteen.operands[3].dtype = DType::F32;
  EXPECT_TRUE(checkKernel(sixteen, {}).ok());
  sixteen.operands[3].dtype = DType::F16;
  EXPECT_EQ(message(checkKernel(sixteen, {})), badBias);

  KernelView wrongPre = fusedMatmul(EpilogueCode::BiasGeluTanh, 4, DType::F32,
                                    /*keep=*/true);
  wrongPre.operands[4].dtype = DType::BF16;
  EXPECT_EQ(message(checkKernel(wrongPre, {})),
            "the pre-activation must have the result's shape [4, 4] and "
            "element type");
  wrongPre.operands[4] = f32({4, 8}, "pre");
  EXPECT_EQ(message(checkKernel(wrongPre, {})),
            "the pre-activation must have the result's shape [4, 4] and "
            "element type");
  KernelView samePre = fusedMatmul(EpilogueCode::BiasRelu);
  samePre.outputs.push_back(samePre.outputs[0]);
  EXPECT_EQ(message(checkKernel(samePre, {})),
            "the pre-activation must be a buffer of its own");
  // The epilogue adds no products' work.
  EXPECT_EQ(kernelFlops(fusedMatmul(EpilogueCode::Bias)), 2.0 * 4 * 4 * 8);
}

/// A matmul [4 x 8] . [8 x 4] of `operands`' type added, times an f32
/// scalar weight, to its accumulator [4 x 4] of `accumulator`'s type.
KernelView accumulatingMatmul(DType operands = DType::BF16,
                              DType accumulator = DType::F32) {
  KernelView view =
      matmul({1, 0, static_cast<int64_t>(EpilogueCode::Accumulate)});
  view.operands[0].shape = {8, 4}; // transposed: [4 x 8]
  view.operands[0].dtype = view.operands[1].dtype = operands;
  view.operands[2].dtype = accumulator;
  view.operands.push_back(f32({}, "weight"));
  view.inputs = {0, 1, 2, 3};
  return view;
}

TEST(KernelContract, ChecksTheAccumulatingEpilogue) {
  EXPECT_TRUE(checkKernel(accumulatingMatmul(), {}).ok());
  EXPECT_TRUE(checkKernel(accumulatingMatmul(DType::F32, DType::F32), {}).ok());
  // A 16-bit accumulator of the operands' type (grad-accumulation=param).
  EXPECT_TRUE(checkKernel(accumulatingMatmul(DType::F16, DType::F16), {}).ok());
  EXPECT_EQ(
      message(checkKernel(accumulatingMatmul(DType::BF16, DType::F16), {})),
      "the accumulator must be f32 or of the operands' type");
  KernelView elsewhere = accumulatingMatmul();
  elsewhere.operands.push_back(f32({4, 4}, "other"));
  elsewhere.outputs = {4};
  EXPECT_EQ(message(checkKernel(elsewhere, {})),
            "the result must be the accumulator (input 2) itself");
  KernelView vectorWeight = accumulatingMatmul();
  vectorWeight.operands[3].shape = {1};
  EXPECT_EQ(message(checkKernel(vectorWeight, {})),
            "the weight (input 3) must be an f32 scalar");
  KernelView mixed = accumulatingMatmul();
  mixed.operands[1].dtype = DType::F32;
  EXPECT_EQ(message(checkKernel(mixed, {})),
            "the operands of an accumulating product must have one type");
  // A square f32 product whose lhs is its accumulator.
  KernelView overOperand = accumulatingMatmul(DType::F32, DType::F32);
  overOperand.operands[0].shape = overOperand.operands[1].shape = {4, 4};
  overOperand.inputs[0] = 2;
  EXPECT_EQ(message(checkKernel(overOperand, {})),
            "the accumulator must not be an operand of the product or its "
            "weight (it is written while they are read)");
  KernelView noWeight = accumulatingMatmul();
  noWeight.inputs.pop_back();
  EXPECT_EQ(message(checkKernel(noWeight, {})),
            "expects 4 inputs, 1 outputs, 3 ints and 0 floats; has 3, 1, 3 "
            "and 0");
  // The product's work, as a plain product's.
  EXPECT_EQ(kernelFlops(accumulatingMatmul()), 2.0 * 4 * 4 * 8);
}

TEST(KernelContract, ChecksTheAddingEpilogues) {
  // c = product + addend (6), or product + bias + addend (7).
  KernelView added = matmul({0, 0, static_cast<int64_t>(EpilogueCode::Addend)});
  added.operands.push_back(f32({4, 4}, "addend"));
  added.inputs.push_back(3);
  EXPECT_TRUE(checkKernel(added, {}).ok());
  KernelView biased = fusedMatmul(EpilogueCode::BiasAddend);
  biased.operands.push_back(f32({4, 4}, "addend"));
  biased.inputs.push_back(4);
  EXPECT_TRUE(checkKernel(biased, {}).ok());

  KernelView noAddend = fusedMatmul(EpilogueCode::BiasAddend);
  EXPECT_EQ(message(checkKernel(noAddend, {})),
            "expects 4 inputs, 1 outputs, 3 ints and 0 floats; has 3, 1, 3 "
            "and 0");
  KernelView wrongShape = added;
  wrongShape.operands[3].shape = {4};
  EXPECT_EQ(message(checkKernel(wrongShape, {})),
            "the addend must have the result's shape [4, 4] and element type");
  KernelView wrongType = added;
  wrongType.operands[3].dtype = DType::BF16;
  EXPECT_EQ(message(checkKernel(wrongType, {})),
            "the addend must have the result's shape [4, 4] and element type");
  KernelView itself = added;
  itself.inputs[2] = 2; // c
  EXPECT_EQ(message(checkKernel(itself, {})),
            "the addend must be a buffer of its own (the product is written "
            "while it is read)");
}

/// A matmul [4 x 8] . [8 x 4] -> [4 x 4] with the GELU's gradient epilogue:
/// the activation's input [4 x 4] (of `inputType`) and, when `biasGrad`,
/// a bias gradient of `biasGrad` values (of `biasGradType`).
KernelView gradientMatmul(DType inputType = DType::F32,
                          std::optional<int64_t> biasGrad = 4,
                          DType biasGradType = DType::F32) {
  KernelView view =
      matmul({0, 0, static_cast<int64_t>(EpilogueCode::GeluTanhGrad)});
  view.operands.push_back({inputType, {4, 4}, "pre"});
  view.inputs.push_back(3);
  if (biasGrad) {
    view.operands.push_back({biasGradType, {*biasGrad}, "dbias"});
    view.outputs.push_back(4);
  }
  return view;
}

TEST(KernelContract, ChecksTheGradientEpilogue) {
  EXPECT_TRUE(checkKernel(gradientMatmul(), {}).ok());
  // The bias gradient is optional.
  EXPECT_TRUE(checkKernel(gradientMatmul(DType::F32, std::nullopt), {}).ok());
  // A 16-bit product: the input of its type, the bias gradient f32 or of
  // its type.
  for (DType biasGradType : {DType::BF16, DType::F32}) {
    KernelView sixteen = gradientMatmul(DType::BF16, 4, biasGradType);
    for (int operand : {0, 1, 2})
      sixteen.operands[operand].dtype = DType::BF16;
    EXPECT_TRUE(checkKernel(sixteen, {}).ok());
  }

  EXPECT_EQ(message(checkKernel(gradientMatmul(DType::BF16), {})),
            "the activation's input must have the result's shape [4, 4] and "
            "element type");
  KernelView wrongShape = gradientMatmul();
  wrongShape.operands[3].shape = {4};
  EXPECT_EQ(message(checkKernel(wrongShape, {})),
            "the activation's input must have the result's shape [4, 4] and "
            "element type");
  const std::string badGrad = "the bias gradient must be [4] (the result's "
                              "last dimension), f32 or of the result's type";
  EXPECT_EQ(message(checkKernel(gradientMatmul(DType::F32, 8), {})), badGrad);
  EXPECT_EQ(message(checkKernel(gradientMatmul(DType::F32, 4, DType::F16), {})),
            badGrad);
  KernelView sameGrad = gradientMatmul();
  sameGrad.outputs[1] = sameGrad.outputs[0];
  EXPECT_EQ(message(checkKernel(sameGrad, {})),
            "the bias gradient must be a buffer of its own");
  KernelView overwrites = gradientMatmul(DType::F32, std::nullopt);
  overwrites.outputs[0] = overwrites.inputs[2];
  EXPECT_EQ(message(checkKernel(overwrites, {})),
            "the result must not overwrite the activation's input (the "
            "product is written before the input is read)");
  KernelView missing = gradientMatmul();
  missing.inputs.pop_back();
  EXPECT_EQ(message(checkKernel(missing, {})),
            "expects 3 inputs, 2 outputs, 3 ints and 0 floats; has 2, 2, 3 "
            "and 0");

  MatmulAttrs attrs = matmulAttrs(std::vector<int64_t>{
      0, 0, static_cast<int64_t>(EpilogueCode::GeluTanhGrad)});
  EXPECT_TRUE(attrs.fused());
  EXPECT_FALSE(attrs.hasBias());
  EXPECT_EQ(attrs.activation(), std::nullopt);
  EXPECT_EQ(attrs.gradient(), ActivationCode::GeluTanh);
  EXPECT_EQ(matmulAttrs(std::vector<int64_t>{0, 0, 2}).gradient(),
            std::nullopt);
}

TEST(KernelContract, CountsTheFlopsOfProductsAndAttention) {
  // [4 x 8] . [8 x 4]: 2 m n k.
  EXPECT_EQ(kernelFlops(matmul({0, 0})), 2.0 * 4 * 4 * 8);
  // A batch of 3 [5 x 6]^T . [5 x 7]: m = 6, k = 5, n = 7.
  KernelView batched;
  batched.op = OpCode::Matmul;
  batched.operands = {f32({3, 5, 6}, "a"), f32({3, 5, 7}, "b"),
                      f32({3, 6, 7}, "c")};
  batched.inputs = {0, 1};
  batched.outputs = {2};
  batched.ints = {1, 0};
  ASSERT_TRUE(checkKernel(batched, {}).ok());
  EXPECT_EQ(kernelFlops(batched), 2.0 * 3 * 6 * 7 * 5);
  // Attention of batch 2, 4 heads of width 8, 16 queries and keys:
  // 4 b h sq sk d forward, twice that backward.
  KernelView attention;
  attention.op = OpCode::Attention;
  attention.operands = {f32({2, 16, 32}, "q"), f32({2, 16, 32}, "k"),
                        f32({2, 16, 32}, "v"), f32({2, 16, 32}, "out")};
  attention.inputs = {0, 1, 2};
  attention.outputs = {3};
  attention.ints = {4, 4, static_cast<int64_t>(MaskCode::Causal), 0, 0};
  attention.floats = {0.125};
  ASSERT_TRUE(checkKernel(attention, {}).ok())
      << message(checkKernel(attention, {}));
  EXPECT_EQ(kernelFlops(attention), 4.0 * 2 * 4 * 16 * 16 * 8);
  attention.op = OpCode::AttentionGrad;
  EXPECT_EQ(kernelFlops(attention), 8.0 * 2 * 4 * 16 * 16 * 8);
  // Element-wise kernels count nothing.
  KernelView add = matmul({0, 0});
  add.op = OpCode::Add;
  EXPECT_EQ(kernelFlops(add), 0.0);
}

/// An embedding of a [vocab x 8] table piece; ints [group] when given.
KernelView embedding(int64_t rows, std::vector<int64_t> ints) {
  KernelView view;
  view.op = OpCode::Embedding;
  view.operands = {{DType::I32, {2, 4}, "ids"},
                   f32({rows, 8}, "table"),
                   f32({2, 4, 8}, "out")};
  view.inputs = {0, 1};
  view.outputs = {2};
  view.ints = std::move(ints);
  return view;
}

TEST(KernelContract, ChecksWhatTheHeaderSaysOnlyWhenItIsKnown) {
  KernelContext header;
  header.known = true;
  header.vocab = 16;
  header.tp = 2;
  header.groupSizes = {2};
  EXPECT_TRUE(checkKernel(embedding(16, {}), header).ok());
  EXPECT_TRUE(checkKernel(embedding(8, {0}), header).ok());
  EXPECT_EQ(message(checkKernel(embedding(32, {}), header)),
            "the table has more rows than the vocabulary");
  EXPECT_EQ(message(checkKernel(embedding(16, {0}), header)),
            "the table has more rows than the vocabulary");
  EXPECT_EQ(message(checkKernel(embedding(8, {1}), header)),
            "group 1 is not one of the 1 communicator groups");
  // Without the header (an IR fragment), nothing of this is known.
  EXPECT_TRUE(checkKernel(embedding(32, {}), {}).ok());
  EXPECT_TRUE(checkKernel(embedding(8, {1}), {}).ok());
}

TEST(KernelContract, DecodesAttributesByName) {
  std::vector<int64_t> attentionInts = {8, 2, 1, 1, 0};
  std::vector<double> attentionFloats = {0.125};
  AttentionAttrs attention = attentionAttrs(attentionInts, attentionFloats);
  EXPECT_EQ(attention.heads, 8);
  EXPECT_EQ(attention.kvHeads, 2);
  EXPECT_EQ(attention.mask, MaskCode::Prefix);
  EXPECT_TRUE(attention.hasPrefix);
  EXPECT_FALSE(attention.hasSlopes);
  EXPECT_EQ(attention.scale, 0.125);

  RopeAttrs rope = ropeAttrs(std::vector<int64_t>{4, 16},
                             std::vector<double>{10000.0, -1.0});
  EXPECT_EQ(rope.heads, 4);
  EXPECT_EQ(rope.rotaryDim, 16);
  EXPECT_EQ(rope.base, 10000.0);
  EXPECT_EQ(rope.direction, -1.0);

  DropoutAttrs plain =
      dropoutAttrs(std::vector<int64_t>{3, 100}, std::vector<double>{0.1});
  EXPECT_EQ(plain.stream, 3u);
  EXPECT_EQ(plain.firstIndex, 100u);
  EXPECT_EQ(plain.group, -1);
  EXPECT_EQ(plain.microbatches, 1);
  EXPECT_EQ(plain.probability, 0.1);
  DropoutAttrs piece = dropoutAttrs(std::vector<int64_t>{3, 100, 2, 4},
                                    std::vector<double>{0.1});
  EXPECT_EQ(piece.group, 2);
  EXPECT_EQ(piece.microbatches, 4);
  EXPECT_EQ(piece.seqGroup, -1);
  DropoutAttrs sequence = dropoutAttrs(std::vector<int64_t>{3, 100, -1, 1, 5},
                                       std::vector<double>{0.1});
  EXPECT_EQ(sequence.group, -1);
  EXPECT_EQ(sequence.seqGroup, 5);

  LrScheduleAttrs schedule = lrScheduleAttrs(std::vector<int64_t>{10, 100},
                                             std::vector<double>{3e-4, 3e-5});
  EXPECT_EQ(schedule.warmupSteps, 10);
  EXPECT_EQ(schedule.decaySteps, 100);
  EXPECT_EQ(schedule.peak, 3e-4);
  EXPECT_EQ(schedule.floor, 3e-5);

  AdamWAttrs adamw = adamWAttrs(std::vector<double>{0.9, 0.95, 1e-8, 0.1});
  EXPECT_EQ(adamw.beta1, 0.9);
  EXPECT_EQ(adamw.beta2, 0.95);
  EXPECT_EQ(adamw.epsilon, 1e-8);
  EXPECT_EQ(adamw.weightDecay, 0.1);

  LossScaleAttrs scale =
      lossScaleAttrs(std::vector<int64_t>{2000}, std::vector<double>{2.0, 0.5});
  EXPECT_EQ(scale.growthInterval, 2000);
  EXPECT_EQ(scale.growth, 2.0);
  EXPECT_EQ(scale.backoff, 0.5);

  EXPECT_EQ(activationAttr(std::vector<int64_t>{4}), ActivationCode::Silu);

  MatmulAttrs product = matmulAttrs(std::vector<int64_t>{1, 0});
  EXPECT_TRUE(product.transposeA);
  EXPECT_FALSE(product.transposeB);
  EXPECT_EQ(product.epilogue, EpilogueCode::None);
  EXPECT_FALSE(product.hasBias());
  EXPECT_EQ(product.activation(), std::nullopt);
  MatmulAttrs biased = matmulAttrs(std::vector<int64_t>{0, 1, 1});
  EXPECT_TRUE(biased.transposeB);
  EXPECT_TRUE(biased.hasBias());
  EXPECT_EQ(biased.activation(), std::nullopt);
  EXPECT_EQ(matmulAttrs(std::vector<int64_t>{0, 0, 2}).activation(),
            ActivationCode::GeluTanh);
  EXPECT_EQ(matmulAttrs(std::vector<int64_t>{0, 0, 3}).activation(),
            ActivationCode::Relu);
}

} // namespace
} // namespace triad::plan
