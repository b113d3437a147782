//===- Checkpoint.cpp - training checkpoints ------------------------------===//

#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Npy.h"

#include <filesystem>
#include <fstream>

namespace partita::runtime {

namespace {
constexpr const char *kCheckpointHeader = "partita checkpoint 1";

std::string join(const std::string &dir, const std::string &name) {
  return (std::filesystem::path(dir) / name).string();
}
} // namespace

TrainState readCheckpoint(const PlanFile &plan, const std::string &program,
                          const std::string &dir) {
  std::string what = "checkpoint '" + dir + "'";
  std::string info = join(dir, "checkpoint.txt");
  std::ifstream in(info);
  if (!in)
    throw Error(what + ": cannot open '" + info +
                "' (write checkpoints with --save-checkpoint)");
  std::string header, key;
  TrainState ck;
  if (!std::getline(in, header) || header != kCheckpointHeader ||
      !(in >> key >> ck.steps) || key != "steps" || ck.steps < 0)
    throw Error(what + ": '" + info + "' is not a checkpoint description " +
                "(expected '" + kCheckpointHeader + "' and 'steps N')");
  for (const ProgramValue &value : plan.persistent(program)) {
    std::string path = join(dir, value.name + ".npy");
    std::string role = value.isState ? "state" : "parameter";
    if (!std::filesystem::exists(path))
      throw Error(what + " has no '" + value.name + ".npy': the plan's " +
                  role + " '" + value.name +
                  "' (was it saved from another model or optimizer?)");
    Tensor t = readNpy(path);
    if (t.getDType() != value.dtype || t.getShape() != value.globalShape)
      throw Error(what + ": '" + value.name + ".npy' is " +
                  describeTensor(t.getDType(), t.getShape()) +
                  ", but the plan's " + role + " '" + value.name + "' is " +
                  describeTensor(value.dtype, value.globalShape));
    ck.buffers.emplace(value.name, std::move(t));
  }
  return ck;
}

void writeCheckpoint(const std::string &dir,
                     const std::vector<std::pair<std::string, Tensor>> &state,
                     int64_t steps) {
  NamedArrays arrays;
  for (const auto &[name, tensor] : state)
    arrays.emplace_back(name, &tensor);
  writeNpyDirectory(dir, arrays);
  std::string info = join(dir, "checkpoint.txt");
  std::ofstream out(info);
  out << kCheckpointHeader << "\nsteps " << steps << "\n";
  out.close();
  if (!out)
    throw Error("cannot write '" + info + "'");
}

} // namespace partita::runtime
