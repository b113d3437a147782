//===- TokenData.cpp - token batches for training language models ---------===//

#include "partita/runtime/TokenData.h"
#include "partita/runtime/Tensor.h"

#include "runtime/lib/core/FileIO.h"

namespace partita::runtime {

TokenData TokenData::load(const std::string &path, unsigned tokenBytes) {
  if (tokenBytes != 1 && tokenBytes != 2 && tokenBytes != 4)
    throw Error("--token-bytes must be 1, 2 or 4, got " +
                std::to_string(tokenBytes));
  // A regular file (a FIFO would block, a directory fails to read), its
  // size known before anything is allocated for it.
  io::InputFile file(path, "the training data");
  if (file.size() > (uint64_t(1) << 40))
    throw file.error("it holds " + std::to_string(file.size()) +
                     " bytes, more than the 2^40 a token file may have");
  std::string bytes(size_t(file.size()), '\0');
  file.readAt(0, bytes.data(), bytes.size());
  if (bytes.empty())
    throw Error("the training data '" + path + "' is empty");
  if (bytes.size() % tokenBytes)
    throw Error("the training data '" + path + "' has " +
                std::to_string(bytes.size()) +
                " bytes, not a whole number of " + std::to_string(tokenBytes) +
                "-byte tokens");
  TokenData data;
  data.path = path;
  data.tokenBytes = tokenBytes;
  data.tokens.resize(bytes.size() / tokenBytes);
  const auto *p = reinterpret_cast<const uint8_t *>(bytes.data());
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    uint32_t id = 0;
    for (unsigned b = 0; b < tokenBytes; ++b)
      id |= uint32_t(p[i * tokenBytes + b]) << (8 * b);
    data.tokens[i] = id;
  }
  return data;
}

void TokenData::check(int64_t batch, int64_t seq, int64_t vocab) const {
  int64_t needed = batch * (seq + 1);
  if (size() < needed)
    throw Error("the training data '" + path + "' holds " +
                std::to_string(size()) + " tokens, fewer than one batch of " +
                std::to_string(batch) + " windows of " +
                std::to_string(seq + 1) + " tokens (" +
                std::to_string(needed) + ")");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (int64_t(tokens[i]) >= vocab)
      throw Error("token " + std::to_string(i) + " of the training data '" +
                  path + "' is " + std::to_string(tokens[i]) +
                  ", outside the model's vocabulary of " +
                  std::to_string(vocab) + " (ids must be below " +
                  std::to_string(vocab) +
                  ": make the model with a larger --vocab, or check "
                  "--token-bytes, now " +
                  std::to_string(tokenBytes) + ")");
}

TokenData TokenData::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || end > size() || begin >= end)
    throw Error("cannot take tokens [" + std::to_string(begin) + ", " +
                std::to_string(end) + ") of the training data '" + path +
                "' (" + std::to_string(size()) + " tokens)");
  TokenData out;
  out.path = path + "[" + std::to_string(begin) + ":" + std::to_string(end) +
             "]";
  out.tokenBytes = tokenBytes;
  out.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
  return out;
}

void TokenData::batch(int64_t step, int64_t batch, int64_t seq, int32_t *ids,
                      int32_t *labels) const {
  rows(step, batch, seq, 0, batch, ids, labels);
}

int64_t TokenData::rows(int64_t step, int64_t batch, int64_t seq,
                        int64_t rowBegin, int64_t rowEnd, int32_t *ids,
                        int32_t *labels) const {
  uint64_t n = tokens.size();
  int64_t read = 0;
  for (int64_t row = rowBegin; row < rowEnd; ++row) {
    // Modulo n in 128 bits: any step a checkpoint may hold gives the
    // window an uninterrupted run would reach, without wrapping.
    using u128 = unsigned __int128;
    uint64_t window = uint64_t((u128(uint64_t(step)) * uint64_t(batch) +
                                uint64_t(row)) %
                               n);
    uint64_t start = uint64_t(u128(window) * uint64_t(seq + 1) % n);
    int64_t out = (row - rowBegin) * seq;
    for (int64_t j = 0; j < seq; ++j) {
      ids[out + j] = int32_t(tokens[(start + j) % n]);
      labels[out + j] = int32_t(tokens[(start + j + 1) % n]);
    }
    read += seq + 1;
  }
  return read;
}

} // namespace partita::runtime
