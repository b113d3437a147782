//===- TestReshardPlan.cpp - print the resharding plan of constraints -----===//
//
// -test-reshard-plan: for every dist.constraint, plans the resharding from
// its operand's sharding (the operand's `dist.sharding`, or the sharding of
// the dist.constraint that produced it) to the constraint's sharding, and
// emits a remark with the plan, or an error saying why there is none.
// Options come from attributes of the enclosing function, so that one lit
// file can vary them per case: `test.axis_weights = {x = 8.0}` (cost weight
// per mesh axis) and `test.max_states = N` (the search bound).
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"
#include "dialects/dist/IR/ShardingAdapters.h"
#include "passes/partition/Reshard.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
namespace partition = partita::partition;

namespace partita::test {
namespace {

/// Bytes of one element, or nothing for types without a fixed size.
std::optional<int64_t> elementBytes(Type type) {
  if (auto complex = dyn_cast<ComplexType>(type)) {
    std::optional<int64_t> part = elementBytes(complex.getElementType());
    return part ? std::optional<int64_t>(2 * *part) : std::nullopt;
  }
  if (isa<IndexType>(type))
    return 8;
  if (type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  return std::nullopt;
}

/// Reads the options from the attributes of `func`.
FailureOr<partition::ReshardOptions> readOptions(Operation *func) {
  partition::ReshardOptions options;
  if (Attribute attr = func->getAttr("test.axis_weights")) {
    auto dict = dyn_cast<DictionaryAttr>(attr);
    if (!dict)
      return func->emitError()
             << "test.axis_weights must be a dictionary from axis name to "
                "number";
    for (NamedAttribute entry : dict) {
      double weight;
      if (auto f = dyn_cast<FloatAttr>(entry.getValue()))
        weight = f.getValueAsDouble();
      else if (auto i = dyn_cast<IntegerAttr>(entry.getValue()))
        weight = double(i.getInt());
      else
        return func->emitError()
               << "test.axis_weights: the weight of axis '"
               << entry.getName().getValue() << "' is not a number";
      options.axisWeights[entry.getName().str()] = weight;
    }
  }
  if (Attribute attr = func->getAttr("test.max_states")) {
    auto count = dyn_cast<IntegerAttr>(attr);
    if (!count || count.getInt() < 0 || count.getInt() > UINT32_MAX)
      return func->emitError()
             << "test.max_states must be a non-negative 32-bit integer";
    options.maxStates = count.getInt();
  }
  return options;
}

/// The sharding `value` has before a constraint reshards it.
dist::ShardingAttr sourceSharding(Value value) {
  if (auto constraint = value.getDefiningOp<dist::ConstraintOp>())
    return constraint.getSharding();
  return dist::getSharding(value);
}

LogicalResult printPlan(dist::ConstraintOp op) {
  dist::ShardingAttr target = op.getSharding();
  dist::ShardingAttr source = sourceSharding(op.getInput());
  if (!source)
    return op.emitError() << "operand has no 'dist.sharding' to reshard from";
  if (source.getMeshName() != target.getMeshName())
    return op.emitError() << "the operand is sharded on mesh "
                          << source.getMeshName() << " but the constraint on "
                          << target.getMeshName()
                          << "; resharding stays within one mesh";
  // The verifier checked that the constraint's mesh exists (and
  // dist::meshFromAttr reports a null one).
  dist::MeshAttr meshAttr = dist::lookupMeshAttr(op, target);

  auto type = cast<RankedTensorType>(op.getInput().getType());
  for (auto [i, size] : llvm::enumerate(type.getShape()))
    if (ShapedType::isDynamic(size))
      return op.emitError() << "cannot reshard: dimension " << i << " of "
                            << type << " is dynamic";
  std::optional<int64_t> bytes = elementBytes(type.getElementType());
  if (!bytes)
    return op.emitError() << "cannot reshard: element type "
                          << type.getElementType() << " has no fixed size";

  FailureOr<partition::ReshardOptions> options =
      readOptions(op->getParentOfType<FunctionOpInterface>());
  if (failed(options))
    return failure();

  auto fail = [&](llvm::Error error) {
    return op.emitError() << "cannot reshard: "
                          << llvm::toString(std::move(error));
  };
  // The mesh and shardings through the model's adapters; the planner itself
  // checks the shardings against the mesh, with its own messages.
  auto emitFail = [&] { return op.emitError() << "cannot reshard: "; };
  FailureOr<dist::Mesh> mesh =
      dist::meshFromAttr(meshAttr, target.getMeshName().getValue(), emitFail);
  if (failed(mesh))
    return failure();
  FailureOr<dist::Sharding> from = dist::shardingFromAttr(source, emitFail);
  if (failed(from))
    return failure();
  FailureOr<dist::Sharding> to = dist::shardingFromAttr(target, emitFail);
  if (failed(to))
    return failure();
  partition::TensorInfo tensor{
      llvm::SmallVector<int64_t, 4>(type.getShape()), *bytes};
  llvm::Expected<partition::ReshardPlan> plan =
      partition::planReshard(*mesh, tensor, *from, *to, *options);
  if (!plan)
    return fail(plan.takeError());
  op.emitRemark() << plan->toString();
  return success();
}

struct TestReshardPlanPass
    : public PassWrapper<TestReshardPlanPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestReshardPlanPass)

  StringRef getArgument() const final { return "test-reshard-plan"; }
  StringRef getDescription() const final {
    return "Print the resharding plan of every dist.constraint as a remark.";
  }
  void runOnOperation() final {
    getOperation()->walk([&](dist::ConstraintOp op) {
      if (failed(printPlan(op)))
        signalPassFailure();
    });
  }
};
} // namespace

void registerTestReshardPlanPass() { PassRegistration<TestReshardPlanPass>(); }
} // namespace partita::test
