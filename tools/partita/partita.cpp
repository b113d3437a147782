//===- partita.cpp - the user's driver ------------------------------------===//
//
// `partita <subcommand> ...`: picks the subcommand and hands over to it.
// The subcommands live beside this file, one per file.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace partita::driver;

#ifndef PARTITA_VERSION
#define PARTITA_VERSION "0.1.0"
#endif

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  const Command commands[] = {getModelCommand(), getPlanCommand(),
                              getRunCommand(), getExplainCommand(),
                              getGradcheckCommand(), getTrainCommand()};

  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "partita " << PARTITA_VERSION << " (MLIR " << LLVM_VERSION_STRING
       << ")\n";
  });
  // An unknown word would otherwise read as a stray positional argument.
  if (argc > 1 && argv[1][0] != '-' &&
      llvm::none_of(commands, [&](const Command &command) {
        return command.subCommand.getName() == argv[1];
      })) {
    std::string known;
    for (const Command &command : commands)
      known += (known.empty() ? "" : ", ") + command.subCommand.getName().str();
    return reportError("", Twine("unknown subcommand '") + argv[1] +
                               "' (expected one of: " + known +
                               "; see 'partita --help')");
  }
  for (const Command &command : commands)
    if (command.runArgs && argc > 1 &&
        command.subCommand.getName() == argv[1])
      return command.runArgs(argc - 2, argv + 2);
  // libLLVM registers hundreds of codegen options at the top level; the
  // subcommands' own options are the only ones a user needs.
  static cl::OptionCategory none("partita");
  cl::HideUnrelatedOptions(none);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Partita: auto-parallelization for training large models\n\n"
      "  partita model gpt --layers 4 -o gpt.mlir\n"
      "  partita plan gpt.mlir --mesh dp=2,tp=4 --strategy dp+megatron\n");

  for (const Command &command : commands)
    if (command.subCommand)
      return command.run();
  return reportError("", "missing subcommand (see 'partita --help')");
}
