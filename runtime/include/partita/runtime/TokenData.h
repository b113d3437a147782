//===- TokenData.h - token batches for training language models -*- C++ -*-===//
//
// Training data for language models is a flat binary file of token ids
// (1, 2 or 4 bytes each, little-endian, unsigned). Batches are consecutive
// windows of seq + 1 tokens, wrapping around the end of the file: window w
// starts at token (w * (seq + 1)) mod N, and step k's batch holds windows
// k * batch .. k * batch + batch - 1, one per row. A row's ids are the
// window's first seq tokens, its labels the last seq (the next token).
// Every rank and every run reads the same batches, so a partitioned run and
// its one-rank reference see identical data, and a run resumed at step k
// draws the batches an uninterrupted run would. Plain C++17; errors are
// runtime::Error naming the file.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TOKENDATA_H
#define PARTITA_RUNTIME_TOKENDATA_H

#include <cstdint>
#include <string>
#include <vector>

namespace partita::runtime {

/// The file training reads when no data is given: plain English text, read
/// byte by byte (ids 0..255, `partita model gpt --vocab 256`).
inline constexpr const char *kDefaultTrainData =
    "/usr/share/common-licenses/GPL-3";

class TokenData {
public:
  /// Reads `path` as tokens of `tokenBytes` (1, 2 or 4; else an Error
  /// naming the --token-bytes flag of the tools) bytes. Throws
  /// Error, saying why, when the file cannot be read, is empty, or its size
  /// is not a whole number of tokens.
  static TokenData load(const std::string &path, unsigned tokenBytes);

  /// Checks that one batch fits (the file holds at least batch * (seq + 1)
  /// tokens) and that every id is below `vocab`, the model's vocabulary.
  void check(int64_t batch, int64_t seq, int64_t vocab) const;

  /// Fills `ids` and `labels` (batch * seq each, row-major) with step
  /// `step`'s batch.
  void batch(int64_t step, int64_t batch, int64_t seq, int32_t *ids,
             int32_t *labels) const;
  /// Rows [rowBegin, rowEnd) of step `step`'s batch alone ((rowEnd -
  /// rowBegin) * seq each): a data-parallel rank's block. Returns the
  /// number of tokens it read from the data (seq + 1 a row).
  int64_t rows(int64_t step, int64_t batch, int64_t seq, int64_t rowBegin,
               int64_t rowEnd, int32_t *ids, int32_t *labels) const;

  /// Tokens [begin, end) of this data as data of their own (a train or
  /// validation split), named "<path>[begin:end]". Throws Error for an empty
  /// or out-of-range slice.
  TokenData slice(int64_t begin, int64_t end) const;

  int64_t size() const { return int64_t(tokens.size()); }
  const std::string &getPath() const { return path; }

private:
  std::string path;
  unsigned tokenBytes = 1;
  std::vector<uint32_t> tokens;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TOKENDATA_H
