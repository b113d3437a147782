//===- Checkpoint.h - sharded training checkpoints --------------*- C++ -*-===//
//
// A checkpoint is a directory of shards and one manifest:
//
//   DIR/manifest.txt         partita checkpoint 3
//                            steps 3
//                            tensor wte parameter f32 256x32
//                            shard wte wte.shard-0-0.npy 0,0 64,32 8320 1a2b3c4d 0
//                            ...
//                            end 5e6f7a8b
//   DIR/<name>[.shard-<offsets>].npy   one .npy per block a rank owns
//
// Tensors are named as in the model IR (parameters and optimizer state),
// with dtypes and global shapes; each shard records its offsets and shape
// in the global array, its size, its CRC-32 and the rank that wrote it;
// the last line is the CRC-32 of all lines before it.
//
// Saving is collective: each rank writes only the blocks it owns (a block
// replicated over mesh axes is written by the copy at coordinate 0 of
// them), reading nothing but its own memory; then rank 0 writes the
// manifest. Everything goes to DIR.partial first, every file is fsynced
// and every write, fsync and close checked (an error names the file and
// errno: a full disk fails the save and leaves the previous checkpoint);
// the manifest comes last, and DIR.partial replaces DIR only when complete
// (DIR moves to DIR.old for the instant of the swap, and a load finds it
// there), so a save that dies at any point leaves either the previous
// checkpoint or the new one loadable, also when it overwrites the one it
// started from.
//
// Loading reads the manifest (a regular file; its CRC-32 first), checks
// every field: the step count (0 to kMaxCheckpointSteps), each tensor's
// dtype, shape and role against the plan (every parameter and state buffer
// the plan has, none it has not: an untied lm_head does not load into a
// tied model), each shard's file name, size and region (the shards of a
// tensor tile it), and, where the optimizer counts steps, its counter
// against the step count (the data position). Then each rank assembles its
// own blocks from the shards that overlap them, checking each file's size
// before reading it and its checksum after: any mesh and strategy of the
// same model loads it. Plain C++17; errors are runtime::Error naming the
// directory and file.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CHECKPOINT_H
#define PARTITA_RUNTIME_CHECKPOINT_H

#include "partita/runtime/Executor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace partita::runtime {

/// The most steps a checkpoint records (and a run resumed from it reaches):
/// step numbers stay exact in a double, and adding a run's steps to it
/// cannot overflow.
inline constexpr int64_t kMaxCheckpointSteps = int64_t(1) << 53;

/// CRC-32 (IEEE 802.3, zlib's) of `size` bytes, continuing from `crc`.
uint32_t crc32(const void *data, size_t size, uint32_t crc = 0);

struct CheckpointShard {
  std::string file; // relative to the checkpoint directory
  std::vector<int64_t> offsets, shape;
  uint64_t bytes = 0; // of the .npy file
  uint32_t crc = 0;   // of the .npy file
  int rank = 0;       // that wrote it
};

struct CheckpointTensor {
  bool isState = false;
  DType dtype = DType::F32;
  std::vector<int64_t> globalShape;
  std::vector<CheckpointShard> shards;
};

/// A checkpoint's manifest.
struct Checkpoint {
  /// The directory the shards are in (DIR, or DIR.old when a save died
  /// between its two renames).
  std::string dir;
  int64_t steps = 0;
  std::map<std::string, CheckpointTensor> tensors;
};

/// Reads DIR's manifest and checks it against `program` of `plan`: every
/// parameter (and, unless `paramsOnly`, every state buffer) must be there
/// with the plan's dtype and global shape. Throws Error naming what is
/// missing or wrong.
Checkpoint openCheckpoint(const PlanFile &plan, const std::string &program,
                          const std::string &dir, bool paramsOnly);

/// Sets this rank's blocks of the program's parameters (and, unless
/// `paramsOnly`, state) from the shards that overlap them, after checking
/// each shard file's size and checksum. Local: reads files, no collective.
void loadCheckpoint(const Checkpoint &checkpoint, Executor &executor,
                    const PlanFile &plan, const std::string &program,
                    bool paramsOnly);

/// Loads parameters from `dir`: a checkpoint (it has a manifest), or a
/// directory of global arrays DIR/<name>.npy (`--save-params`). Local.
void loadParameters(const std::string &dir, Executor &executor,
                    const PlanFile &plan, const std::string &program);

/// The points of a save's commit that `CheckpointSaveOptions::failAtStage`
/// names: every rank's shards written; the manifest written and synced;
/// DIR moved aside to DIR.old; DIR.partial renamed to DIR.
inline constexpr const char *kCheckpointSaveStages[] = {
    "shards-written", "manifest-written", "moved-aside", "renamed"};

/// Testing only: where a save dies (std::_Exit, no clean-up, as a killed
/// save would) or fails as on a full disk. Counts are this rank's.
struct CheckpointSaveOptions {
  /// Dies after writing this many files. -1: never.
  int failAfterFiles = -1;
  /// Dies after writing this many bytes (part way through a file). -1: never.
  int64_t failAfterBytes = -1;
  /// Dies at this stage of the commit (kCheckpointSaveStages; rank 0).
  std::string failAtStage;
  /// Writes past this many bytes fail with ENOSPC, as on a full disk: the
  /// save throws Error naming the file and errno. -1: never.
  int64_t diskFullAfterBytes = -1;
  /// The rank the failures above apply to (one process of an MPI job dies
  /// while the others wait for it). -1: every rank.
  int failRank = -1;
  /// Prefixes the line printed before dying.
  std::string toolName = "partita-run";
};

/// Reads a test-only failure point: N or files:N, bytes:N, full:N (see
/// CheckpointSaveOptions) or stage:NAME, optionally followed by @RANK (the
/// one rank it applies to). False when `spec` is none.
bool parseCheckpointFault(const std::string &spec,
                          CheckpointSaveOptions &options);

/// What a save wrote, by rank (from the manifest; on rank 0 only).
struct CheckpointSaveReport {
  std::vector<int64_t> files, bytes; // per rank
  int64_t tensors = 0;
};

/// Writes this rank's owned blocks of every parameter and state buffer of
/// `program` into checkpoint `dir` after `steps` steps. Collective over the
/// ranks of a partitioned program (`comm`; null when it is not): every rank
/// must call it. Rank 0 returns the report; the others an empty one.
CheckpointSaveReport saveCheckpoint(Executor &executor, Communicator *comm,
                                    const PlanFile &plan,
                                    const std::string &program,
                                    const std::string &dir, int64_t steps,
                                    const CheckpointSaveOptions &options = {});

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CHECKPOINT_H
