//===- NNKernelsTest.cpp - unit tests of the nn ops' KernelOpInterface ----===//

#include "dialects/dist/IR/KernelInterface.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;
using dist::KernelAttrValue;
using dist::KernelDescription;

namespace {

constexpr const char *kOps = R"mlir(
func.func @ops(%x: tensor<2x8xf32>, %q: tensor<1x4x2x8xf32>,
               %logits: tensor<4x16xf32>, %labels: tensor<4xi32>,
               %d: tensor<2x8xf64>) {
  %0 = nn.add %x, %x : tensor<2x8xf32> loc("add")
  %1 = nn.reduce mean %x dims = [1] : tensor<2x8xf32> -> tensor<2xf32> loc("reduce_mean")
  %2 = nn.attention %q, %q, %q causal scale = 2.5e-01 : tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32> loc("attention")
  %3 = nn.constant dense<2.0> : tensor<2x8xf32> loc("fill")
  %4 = nn.cross_entropy %logits, %labels {nn.mean_count = 8 : i64} : tensor<4x16xf32>, tensor<4xi32> -> tensor<f32> loc("cross_entropy")
  %5 = nn.convert %d : tensor<2x8xf64> to tensor<2x8xbf16> loc("convert_f64_bf16")
  return
}
)mlir";

class NNKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(kOps, &context);
    ASSERT_TRUE(module);
  }

  /// The kernel of the op at location `name`; failure when it has none.
  FailureOr<KernelDescription> kernel(StringRef name) {
    Operation *found = nullptr;
    module->walk([&](Operation *op) {
      if (auto loc = dyn_cast<NameLoc>(op->getLoc()))
        if (loc.getName() == name)
          found = op;
    });
    EXPECT_TRUE(found) << name.str();
    auto iface = dyn_cast_or_null<dist::KernelOpInterface>(found);
    if (!iface)
      return failure();
    return iface.getKernel();
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

// Tests that ops name their kernels by mnemonic, with the KernelAttrs field
// names of plan.proto.
TEST_F(NNKernelsTest, NamesAndAttributes) {
  FailureOr<KernelDescription> add = kernel("add");
  ASSERT_TRUE(succeeded(add));
  EXPECT_EQ(add->name, "add");
  EXPECT_TRUE(add->attrs.empty());

  FailureOr<KernelDescription> mean = kernel("reduce_mean");
  ASSERT_TRUE(succeeded(mean));
  EXPECT_EQ(mean->name, "reduce_mean");
  EXPECT_EQ(mean->attrs.at("dims"), KernelAttrValue(std::vector<int64_t>{1}));

  FailureOr<KernelDescription> attention = kernel("attention");
  ASSERT_TRUE(succeeded(attention));
  EXPECT_EQ(attention->attrs.at("causal"), KernelAttrValue(true));
  EXPECT_EQ(attention->attrs.at("has_scale"), KernelAttrValue(true));
  EXPECT_EQ(attention->attrs.at("scale"), KernelAttrValue(0.25));

  FailureOr<KernelDescription> fill = kernel("fill");
  ASSERT_TRUE(succeeded(fill));
  EXPECT_EQ(fill->name, "fill");
  EXPECT_EQ(fill->attrs.at("fill_value"), KernelAttrValue(2.0));

  FailureOr<KernelDescription> ce = kernel("cross_entropy");
  ASSERT_TRUE(succeeded(ce));
  EXPECT_EQ(ce->attrs.at("mean_count"), KernelAttrValue(int64_t(8)));
}

// Tests that a conversion the runtime has no kernel for fails with a
// diagnostic at the op.
TEST_F(NNKernelsTest, UnsupportedConvertIsDiagnosed) {
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(kernel("convert_f64_bf16")));
  EXPECT_EQ(message, "converts 'f64' to 'bf16', which the runtime cannot (it "
                     "converts f32 <-> f64, f32 <-> f16, f32 <-> bf16, and "
                     "f16 or bf16 to f64)");
}

// Tests that every registered nn op implements KernelOpInterface, so an op
// added without a kernel fails here (and not when a plan is lowered).
TEST(NNKernelsRegistrationTest, EveryNNOpHasAKernel) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect>();
  int count = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    ++count;
    EXPECT_TRUE(name.hasInterface<dist::KernelOpInterface>())
        << name.getStringRef().str()
        << " has no KernelOpInterface: add it to dialects/nn/IR/NNKernels.cpp";
  }
  EXPECT_GT(count, 0);
}

} // namespace
