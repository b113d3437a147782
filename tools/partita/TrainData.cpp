//===- TrainData.cpp - token batches for `partita run --steps` ------------===//

#include "tools/partita/TrainData.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace llvm;

namespace partita::driver {

Expected<TokenData> TokenData::load(StringRef path, unsigned tokenBytes) {
  if (tokenBytes != 1 && tokenBytes != 2 && tokenBytes != 4)
    return createStringError("--token-bytes must be 1, 2 or 4, got " +
                             Twine(tokenBytes));
  ErrorOr<std::unique_ptr<MemoryBuffer>> file =
      MemoryBuffer::getFile(path, /*IsText=*/false,
                            /*RequiresNullTerminator=*/false);
  if (!file)
    return createStringError("cannot read the training data '" + path +
                             "': " + file.getError().message());
  StringRef bytes = (*file)->getBuffer();
  if (bytes.empty())
    return createStringError("the training data '" + path + "' is empty");
  if (bytes.size() % tokenBytes)
    return createStringError(
        "the training data '" + path + "' has " + Twine(bytes.size()) +
        " bytes, not a whole number of " + Twine(tokenBytes) + "-byte tokens");
  TokenData data;
  data.path = path.str();
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

Error TokenData::check(int64_t batch, int64_t seq, int64_t vocab) const {
  int64_t needed = batch * (seq + 1);
  if (size() < needed)
    return createStringError(
        "the training data '" + path + "' holds " + Twine(size()) +
        " tokens, fewer than one batch of " + Twine(batch) + " windows of " +
        Twine(seq + 1) + " tokens (" + Twine(needed) + ")");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (int64_t(tokens[i]) >= vocab)
      return createStringError(
          "token " + Twine(i) + " of the training data '" + path + "' is " +
          Twine(tokens[i]) + ", outside the model's vocabulary of " +
          Twine(vocab) + " (ids must be below " + Twine(vocab) +
          ": make the "
          "model with a larger --vocab, or check --token-bytes, now " +
          Twine(tokenBytes) + ")");
  return Error::success();
}

void TokenData::batch(int64_t step, int64_t batch, int64_t seq, int32_t *ids,
                      int32_t *labels) const {
  uint64_t n = tokens.size();
  for (int64_t row = 0; row < batch; ++row) {
    uint64_t window = uint64_t(step) * batch + row;
    uint64_t start = (window % n) * uint64_t(seq + 1) % n;
    for (int64_t j = 0; j < seq; ++j) {
      ids[row * seq + j] = int32_t(tokens[(start + j) % n]);
      labels[row * seq + j] = int32_t(tokens[(start + j + 1) % n]);
    }
  }
}

} // namespace partita::driver
