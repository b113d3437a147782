//===- TrainLibraryTest.cpp - .npy I/O and token batches of the runtime ---===//

#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Npy.h"
#include "partita/runtime/TokenData.h"
#include "partita/runtime/Train.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

using namespace partita::runtime;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "partita-train-" + name;
}

// Tests that an array survives a write and a read bit for bit, with its
// dtype and shape, for every dtype .npy holds.
TEST(Npy, RoundTrip) {
  for (DType dtype : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    Tensor t(dtype, {2, 3});
    for (size_t i = 0; i < 6 * sizeOf(dtype); ++i)
      t.data<unsigned char>()[i] = (unsigned char)(i * 37 + 1);
    std::string path = tempPath("round.npy");
    writeNpy(path, t);
    Tensor back = readNpy(path);
    EXPECT_EQ(back.getDType(), dtype);
    EXPECT_EQ(back.getShape(), t.getShape());
    EXPECT_EQ(0, std::memcmp(back.data<char>(), t.data<char>(),
                             6 * sizeOf(dtype)));
  }
  Tensor scalar(DType::F32, {});
  scalar.data<float>()[0] = 2.5f;
  Tensor back = parseNpy(serializeNpy(scalar), "scalar");
  EXPECT_TRUE(back.getShape().empty());
  EXPECT_EQ(back.data<float>()[0], 2.5f);
}

// Tests that damaged files are errors that name the file, not crashes.
TEST(Npy, DamagedFilesNameTheFile) {
  Tensor t(DType::F32, {4});
  std::string good = serializeNpy(t);
  auto message = [](const std::string &bytes) {
    try {
      parseNpy(bytes, "x.npy");
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("hello"),
            "'x.npy' is not a readable .npy file: no NUMPY magic");
  EXPECT_EQ(message(good.substr(0, good.size() - 1)),
            "'x.npy' is not a readable .npy file: holds 15 data bytes, but "
            "its header says 16");
  EXPECT_EQ(message(good.substr(0, 20)),
            "'x.npy' is not a readable .npy file: truncated header");
  EXPECT_THROW(readNpy(tempPath("does-not-exist.npy")), Error);
  EXPECT_THROW(serializeNpy(Tensor(DType::BF16, {1})), Error);
}

// Tests the windows of token batches: consecutive windows of seq + 1
// tokens, wrapping around the file, labels one token ahead.
TEST(TokenData, Windows) {
  std::string path = tempPath("tokens.bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 10; ++i)
      out.put(char(i));
  }
  TokenData data = TokenData::load(path, 1);
  EXPECT_EQ(data.size(), 10);
  data.check(/*batch=*/2, /*seq=*/3, /*vocab=*/10);
  EXPECT_THROW(data.check(2, 3, /*vocab=*/9), Error);
  EXPECT_THROW(data.check(/*batch=*/3, /*seq=*/3, 10), Error);
  int32_t ids[6], labels[6];
  data.batch(/*step=*/1, 2, 3, ids, labels);
  // Step 1 holds windows 2 and 3: tokens 8 9 0 | 1 and 2 3 4 | 5.
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 6),
            (std::vector<int32_t>{8, 9, 0, 2, 3, 4}));
  EXPECT_EQ(std::vector<int32_t>(labels, labels + 6),
            (std::vector<int32_t>{9, 0, 1, 3, 4, 5}));
  EXPECT_THROW(TokenData::load(path, 3), Error);
  EXPECT_THROW(TokenData::load(tempPath("no-such-file"), 1), Error);
}

// Tests the --check comparison: a difference beyond rtol fails its line.
TEST(Check, RelativeDifference) {
  Tensor a(DType::F32, {2}), b(DType::F32, {2});
  a.data<float>()[0] = 1;
  a.data<float>()[1] = 2;
  b.data<float>()[0] = 1;
  b.data<float>()[1] = 2.5;
  double maxAbs;
  EXPECT_DOUBLE_EQ(relativeDifference(a, b, maxAbs), 0.5 / 2.5);
  EXPECT_DOUBLE_EQ(maxAbs, 0.5);
  EXPECT_EQ(relativeDifference(a, a, maxAbs), 0);
}

} // namespace

namespace {
// Tests the checkpoint checksum against CRC-32's published check value
// (whichever implementation was built: zlib's or the built-in one), and
// that it continues over pieces.
TEST(Checkpoint, Crc32CheckValue) {
  EXPECT_EQ(partita::runtime::crc32("123456789", 9), 0xCBF43926u);
  uint32_t first = partita::runtime::crc32("12345", 5);
  EXPECT_EQ(partita::runtime::crc32("6789", 4, first), 0xCBF43926u);
  EXPECT_EQ(partita::runtime::crc32("", 0), 0u);
}
} // namespace
