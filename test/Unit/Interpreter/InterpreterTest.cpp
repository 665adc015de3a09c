//===- InterpreterTest.cpp - the reference interpreter on whole IR --------===//

#include "triad/Interpreter/Interpreter.h"
#include "triad/Interpreter/Kernels.h"
#include "triad/Models/ModelBuilder.h"

#include "dialects/Triad/TriadOps.h"
#include "runtime/init/Init.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace triad;
using namespace triad::interp;

namespace {

struct Fixture : public ::testing::Test {
  Fixture() {
    context.loadDialect<TriadDialect, mlir::func::FuncDialect,
                        mlir::arith::ArithDialect>();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &diag) {
          diagnostics += diag.str() + "\n";
          return mlir::success();
        });
  }
  mlir::OwningOpRef<mlir::ModuleOp> parse(llvm::StringRef source) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    EXPECT_TRUE(module) << diagnostics;
    return module;
  }

  mlir::MLIRContext context;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  std::string diagnostics;
};

constexpr const char *kSmallModel = R"mlir(
triad.param @w : tensor<3x2xf32> init <normal, std = 0.5>
triad.param @b : tensor<2xf32> init <ones>
func.func @forward(%x: tensor<2x3xf32>) -> tensor<2x2xf32> {
  %y = triad.layer transformer 0 (%x) : (tensor<2x3xf32>) -> tensor<2x2xf32> {
  ^bb0(%a: tensor<2x3xf32>):
    %w = triad.get_param @w : tensor<3x2xf32>
    %b = triad.get_param @b : tensor<2xf32>
    %m = triad.matmul %a, %w : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
    %r = triad.bias_add %m, %b : tensor<2x2xf32>, tensor<2xf32>
    triad.yield %r : tensor<2x2xf32>
  }
  return %y : tensor<2x2xf32>
}
func.func @ids(%t: tensor<4xi32>) -> tensor<4x2xf32> {
  %w = triad.get_param @w : tensor<3x2xf32>
  %e = triad.embedding %t, %w : tensor<4xi32>, tensor<3x2xf32> -> tensor<4x2xf32>
  return %e : tensor<4x2xf32>
}
)mlir";

TEST_F(Fixture, ParametersStartFromTheRuntimeInit) {
  auto module = parse(kSmallModel);
  Interpreter interpreter(*module, {/*seed=*/5});
  interpreter.initializeParameters();
  const Tensor &w = interpreter.parameters()["w"];
  ASSERT_EQ(w.shape, (std::vector<int64_t>{3, 2}));
  std::vector<float> expected(6);
  rt::fillNormal(5, "w", 0.5, 0, 6, expected.data());
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(w.data[i], static_cast<double>(expected[i]));
  EXPECT_EQ(interpreter.parameters()["b"].data, (std::vector<double>{1, 1}));
}

TEST_F(Fixture, RunsLayersAndParameters) {
  auto module = parse(kSmallModel);
  Interpreter interpreter(*module);
  interpreter.initializeParameters();
  interpreter.parameters()["w"] = Tensor({3, 2}, {1, 0, 0, 1, 1, 1});
  auto results =
      interpreter.call("forward", {Tensor({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(mlir::succeeded(results)) << diagnostics;
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].data, (std::vector<double>{5, 6, 11, 12}));
}

TEST_F(Fixture, ReportsBadCallsAtTheirSource) {
  auto module = parse(kSmallModel);
  Interpreter interpreter(*module);
  interpreter.initializeParameters();
  EXPECT_TRUE(mlir::failed(interpreter.call("missing", {})));
  EXPECT_NE(diagnostics.find("no function @missing to interpret"),
            std::string::npos);
  EXPECT_TRUE(mlir::failed(interpreter.call("forward", {})));
  EXPECT_NE(diagnostics.find("@forward takes 1 arguments, got 0"),
            std::string::npos);
  EXPECT_TRUE(mlir::failed(interpreter.call("forward", {Tensor({3, 2})})));
  EXPECT_NE(diagnostics.find("argument 0 of @forward has type "
                             "'tensor<2x3xf32>' but the given value has "
                             "shape [3x2]"),
            std::string::npos);
  EXPECT_TRUE(
      mlir::failed(interpreter.call("ids", {Tensor({4}, {0, 1, 2, 7})})));
  EXPECT_NE(diagnostics.find("token id 7 at position 3 is outside the "
                             "vocabulary [0, 3)"),
            std::string::npos);
}

TEST_F(Fixture, NativePrecisionRoundsResults) {
  auto module = parse(R"mlir(
func.func @f(%x: tensor<2xbf16>) -> tensor<2xbf16> {
  %y = triad.scale %x by 0.1 : tensor<2xbf16>
  return %y : tensor<2xbf16>
}
)mlir");
  Interpreter exact(*module);
  Interpreter native(*module, {0, 0, /*nativePrecision=*/true});
  Tensor x({2}, {1.0, 3.0});
  auto wide = exact.call("f", {x});
  auto narrow = native.call("f", {x});
  ASSERT_TRUE(mlir::succeeded(wide) && mlir::succeeded(narrow));
  EXPECT_DOUBLE_EQ((*wide)[0].data[0], 0.1);
  // bf16 keeps 8 significant bits: 0.1 rounds to 0.10009765625.
  EXPECT_DOUBLE_EQ((*narrow)[0].data[0], 0.10009765625);
  EXPECT_DOUBLE_EQ(roundTo(mlir::Float16Type::get(&context), 0.1),
                   0.0999755859375);
}

TEST_F(Fixture, TinyModelStartsNearUniformLoss) {
  llvm::Expected<ModelConfig> config = getPreset("tiny");
  ASSERT_TRUE(static_cast<bool>(config));
  auto module = buildModel(context, *config);
  ASSERT_TRUE(module);
  Interpreter interpreter(*module, {/*seed=*/1});
  interpreter.initializeParameters();
  Tensor tokens({8, 64}), labels({8, 64});
  for (int i = 0; i < 8 * 64; ++i) {
    tokens.data[i] = (i * 37) % 256;
    labels.data[i] = (i * 11 + 3) % 256;
  }
  auto loss = interpreter.call("forward", {tokens, labels});
  ASSERT_TRUE(mlir::succeeded(loss)) << diagnostics;
  ASSERT_EQ((*loss)[0].rank(), 0);
  // Small initial weights give nearly uniform predictions: ln 256 = 5.545.
  EXPECT_NEAR((*loss)[0].data[0], std::log(256.0), 0.05);
}

} // namespace
