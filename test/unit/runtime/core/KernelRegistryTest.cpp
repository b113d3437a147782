//===- KernelRegistryTest.cpp - custom kernels: registry, attrs, executor -===//

#include "partita/runtime/Executor.h"
#include "partita/runtime/KernelRegistry.h"
#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

using namespace partita::runtime;
namespace plan = partita::plan;

namespace {

constexpr uint32_t kTrailer = 0x4e414c50;

/// x[4] -> y[4] through one CUSTOM kernel named `name`, with an int
/// attribute "add" (the kernels below add it to every element) and one of
/// every other kind.
std::string customPlan(const std::string &name) {
  plan::Plan p;
  p.set_format_version(kPlanFormatVersion);
  p.set_trailer(kTrailer);
  plan::Program *prog = p.add_programs();
  prog->set_name("main");
  for (plan::Role role : {plan::INPUT, plan::ACTIVATION}) {
    plan::Buffer *b = prog->add_buffers();
    b->set_id(prog->buffers_size() - 1);
    b->set_role(role);
    b->add_local_shape(4);
    b->add_global_shape(4);
    if (role == plan::INPUT)
      prog->add_arguments(b->id());
    else
      b->set_last_use(1);
  }
  plan::Kernel *k = prog->add_instructions()->mutable_kernel();
  k->set_kind(plan::Kernel::CUSTOM);
  k->set_custom_name(name);
  k->add_inputs(0);
  k->add_outputs(1);
  auto attr = [&](const std::string &n) {
    plan::NamedAttr *a = k->add_custom_attrs();
    a->set_name(n);
    return a->mutable_value();
  };
  attr("add")->set_int_value(3);
  attr("ints")->mutable_ints_value()->add_values(5);
  attr("scale")->set_float_value(0.5);
  attr("tag")->set_string_value("t");
  attr("yes")->set_bool_value(true);
  prog->add_results(1);
  prog->set_arena_bytes(16);
  plan::sealPlan(p);
  return p.SerializeAsString();
}

/// `p`'s bytes after an edit, with its checksum renewed (the loader checks
/// it before anything else).
std::string resealed(plan::Plan &p) {
  plan::sealPlan(p);
  return p.SerializeAsString();
}

std::vector<float> runMain(const std::string &bytes) {
  auto file = PlanFile::parse(bytes);
  auto backend = createCpuBackend(1);
  Executor ex(file, "main", nullptr, *backend);
  Tensor x(DType::F32, {4});
  for (int i = 0; i < 4; ++i)
    x.data<float>()[i] = float(i);
  ex.setInputs({x});
  ex.run();
  Tensor y = ex.gatherResults().at(0);
  return std::vector<float>(y.data<float>(), y.data<float>() + 4);
}

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

// Tests that a registered kernel is found for its backend only, that a
// second registration of the name fails, and that names are listed.
TEST(KernelRegistry, RegistersOncePerBackend) {
  CustomKernel k = [](const KernelCall &) {};
  registerKernel("cpu", "test.registry_once", k);
  EXPECT_NE(findKernel("cpu", "test.registry_once"), nullptr);
  EXPECT_EQ(findKernel("cuda", "test.registry_once"), nullptr);
  EXPECT_EQ(findKernel("cpu", "test.never_registered"), nullptr);
  EXPECT_EQ(errorOf([&] { registerKernel("cpu", "test.registry_once", k); }),
            "kernel 'test.registry_once' is already registered for the cpu "
            "backend");
  EXPECT_EQ(errorOf([&] { registerKernel("cpu", "", k); }),
            "cannot register a kernel with an empty name");
  std::vector<std::string> names = registeredKernels("cpu");
  EXPECT_NE(std::find(names.begin(), names.end(), "test.registry_once"),
            names.end());
}

// Tests CustomAttrs' getters: values, defaults, an int read as a float,
// and errors naming the attribute for a missing one or another kind.
TEST(KernelRegistry, CustomAttrsGetters) {
  CustomAttrs a;
  a.set("n", int64_t(4));
  a.set("x", 1.5);
  a.set("b", true);
  a.set("s", std::string("hi"));
  a.set("l", std::vector<int64_t>{1, 2});
  EXPECT_EQ(a.getInt("n"), 4);
  EXPECT_EQ(a.getFloat("n"), 4.0);
  EXPECT_EQ(a.getFloat("x"), 1.5);
  EXPECT_TRUE(a.getBool("b"));
  EXPECT_EQ(a.getString("s"), "hi");
  EXPECT_EQ(a.getInts("l"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.getInt("missing", 7), 7);
  EXPECT_EQ(a.getFloat("missing", 2.5), 2.5);
  EXPECT_FALSE(a.getBool("missing", false));
  EXPECT_EQ(errorOf([&] { a.getInt("missing"); }),
            "kernel attribute 'missing' (int) is missing");
  EXPECT_EQ(errorOf([&] { a.getInt("x"); }),
            "kernel attribute 'x' is float, expected int");
  EXPECT_EQ(errorOf([&] { a.getInts("s"); }),
            "kernel attribute 's' is string, expected int list");
}

// Tests that the cpu backend runs a CUSTOM kernel with the registered
// function, which sees the plan's attributes of every kind.
TEST(KernelRegistry, ExecutorRunsRegisteredCustomKernel) {
  registerKernel("cpu", "test.add_attr", [](const KernelCall &call) {
    EXPECT_EQ(call.customName, "test.add_attr");
    EXPECT_EQ(call.attrs.custom.getInts("ints"), std::vector<int64_t>{5});
    EXPECT_EQ(call.attrs.custom.getFloat("scale"), 0.5);
    EXPECT_EQ(call.attrs.custom.getString("tag"), "t");
    EXPECT_TRUE(call.attrs.custom.getBool("yes"));
    int64_t add = call.attrs.custom.getInt("add");
    const float *x = call.inputs[0].as<float>();
    float *y = call.outputs[0].as<float>();
    for (int64_t i = 0; i < call.inputs[0].numElements(); ++i)
      y[i] = x[i] + float(add);
  });
  EXPECT_EQ(runMain(customPlan("test.add_attr")),
            (std::vector<float>{3, 4, 5, 6}));
}

// Tests that a custom kernel's Error reaches the caller prefixed by the
// instruction and the kernel's name.
TEST(KernelRegistry, CustomKernelErrorNamesKernel) {
  registerKernel("cpu", "test.throws",
                 [](const KernelCall &) { throw Error("bad shape"); });
  EXPECT_EQ(errorOf([&] { runMain(customPlan("test.throws")); }),
            "instruction 0: test.throws: bad shape");
}

// Tests that a plan naming a kernel nobody registered fails when the
// executor is built (before any step), naming the kernel and the program.
TEST(KernelRegistry, UnregisteredCustomKernelFailsAtLoad) {
  std::string error = errorOf([&] { runMain(customPlan("test.missing")); });
  EXPECT_NE(error.find("program 'main': instruction 0 runs custom kernel "
                       "'test.missing', which no kernel library has "
                       "registered for the cpu backend"),
            std::string::npos)
      << error;
}

// Tests that the plan loader rejects a CUSTOM kernel without a name and
// one with an attribute given twice.
TEST(KernelRegistry, PlanFileValidatesCustomKernels) {
  plan::Plan p;
  ASSERT_TRUE(p.ParseFromString(customPlan("")));
  EXPECT_EQ(errorOf([&] { PlanFile::parse(resealed(p), "p.pb"); }),
            "p.pb: program 'main': instruction 0 is a custom kernel with no "
            "custom_name");
  ASSERT_TRUE(p.ParseFromString(customPlan("test.dup")));
  plan::Kernel *k = p.mutable_programs(0)->mutable_instructions(0)
                        ->mutable_kernel();
  *k->add_custom_attrs() = k->custom_attrs(0);
  EXPECT_EQ(errorOf([&] { PlanFile::parse(resealed(p), "p.pb"); }),
            "p.pb: program 'main': instruction 0 (custom kernel 'test.dup') "
            "has attribute 'add' twice");
}

// Tests that loading a kernel library names the path when it cannot be
// loaded.
TEST(KernelRegistry, LoadKernelLibraryNamesPath) {
  std::string error =
      errorOf([] { loadKernelLibrary("/nonexistent/libnothing.so"); });
  EXPECT_EQ(error.rfind("kernel library /nonexistent/libnothing.so: cannot "
                        "be loaded: ",
                        0),
            0u)
      << error;
}

} // namespace
