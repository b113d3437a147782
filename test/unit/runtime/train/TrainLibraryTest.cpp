//===- TrainLibraryTest.cpp - .npy I/O and token batches of the runtime ---===//

#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Npy.h"
#include "partita/runtime/TokenData.h"
#include "partita/runtime/Train.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include <sys/stat.h>

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

// A data-parallel rank's rows alone: the same ids and labels as those rows
// of the whole batch, and only seq + 1 tokens read a row.
TEST(TokenData, RowsOfABatch) {
  std::string path = tempPath("rows.bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 50; ++i)
      out.put(char(i));
  }
  TokenData data = TokenData::load(path, 1);
  const int64_t batch = 4, seq = 3;
  int32_t ids[12], labels[12];
  data.batch(/*step=*/2, batch, seq, ids, labels);
  int32_t rowIds[6], rowLabels[6];
  EXPECT_EQ(data.rows(2, batch, seq, 1, 3, rowIds, rowLabels), 2 * (seq + 1));
  EXPECT_EQ(std::vector<int32_t>(rowIds, rowIds + 6),
            std::vector<int32_t>(ids + 3, ids + 9));
  EXPECT_EQ(std::vector<int32_t>(rowLabels, rowLabels + 6),
            std::vector<int32_t>(labels + 3, labels + 9));
  EXPECT_EQ(data.rows(2, batch, seq, 4, 4, rowIds, rowLabels), 0);
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

namespace {
std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "no error";
}

/// An .npy header declaring `shape` (text), with no data.
std::string npyWithShape(const std::string &shape) {
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header;
}

// Tests that a shape whose element or byte count does not fit in 64 bits is
// an Error, not a signed overflow and a short allocation (issue 14, item 3).
TEST(Tensor, ShapeTooLargeIsAnError) {
  EXPECT_EQ(errorOf([] { Tensor(DType::F32, {int64_t(1) << 62, 4}); }),
            "a tensor of shape [4611686018427387904x4] has more bytes than "
            "fit in 64 bits");
  EXPECT_EQ(errorOf([] { Tensor(DType::F64, {int64_t(1) << 61}); }),
            "a tensor of shape [2305843009213693952] has more bytes than fit "
            "in 64 bits");
  EXPECT_EQ(Tensor(DType::F32, {0, int64_t(1) << 40}).numElements(), 0);
}

// Tests that .npy headers declaring huge, overflowing or unreadable shapes
// are refused before allocation, naming the file.
TEST(Npy, HostileHeadersNameTheFile) {
  EXPECT_EQ(errorOf([] { parseNpy(npyWithShape("(1000000000, 1000)"), "x"); }),
            "'x' is not a readable .npy file: holds 0 data bytes, but its "
            "header says 4000000000000");
  EXPECT_EQ(errorOf([] { parseNpy(npyWithShape("(4611686018427387904, 4)"), "x"); }),
            "'x' is not a readable .npy file: unreadable dimension "
            "'4611686018427387904' in 'shape'");
  EXPECT_EQ(errorOf([] { parseNpy(npyWithShape("(-0,)"), "x"); }),
            "'x' is not a readable .npy file: unreadable dimension '-0' in "
            "'shape'");
  EXPECT_EQ(
      errorOf([] { parseNpy(npyWithShape("(1099511627776, 1099511627776)"), "x"); }),
      "'x' is not a readable .npy file: its shape is too large");
  // readNpy sees the file's size before it allocates.
  std::string path = tempPath("huge.npy");
  {
    std::ofstream out(path, std::ios::binary);
    out << npyWithShape("(1000000000, 1000)");
  }
  EXPECT_EQ(errorOf([&] { readNpy(path); }),
            "'" + path +
                "' is not a readable .npy file: holds 0 data bytes, but its "
                "header says 4000000000000");
}

// Tests that readers refuse a FIFO at once (it blocked forever) and a
// directory, naming the path.
TEST(Readers, RefuseFifosAndDirectories) {
  std::string fifo = tempPath("fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(errorOf([&] { readNpy(fifo); }),
            "cannot read '" + fifo + "': it is a FIFO, not a regular file");
  EXPECT_EQ(errorOf([&] { TokenData::load(fifo, 1); }),
            "cannot read the training data '" + fifo +
                "': it is a FIFO, not a regular file");
  std::string dir = ::testing::TempDir();
  EXPECT_EQ(errorOf([&] { readNpy(dir); }),
            "cannot read '" + dir + "': it is a directory, not a regular file");
  std::remove(fifo.c_str());
}

// Tests that a step far beyond the file's windows (a checkpoint may hold up
// to 2^53 steps) gives the window the modular rule says, not a wrapped one.
TEST(TokenData, LargeStepsDoNotWrap) {
  std::string path = tempPath("tokens7.bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 7; ++i)
      out.put(char(i));
  }
  TokenData data = TokenData::load(path, 1);
  // step 2^53, batch 2^12: window (2^65 mod 7) = 2^(65 mod 3) = 4, starting
  // at token 4 * 3 mod 7 = 5 (seq 2: windows of 3 tokens).
  int64_t step = int64_t(1) << 53;
  int32_t ids[2 * 4096], labels[2 * 4096];
  data.batch(step, 4096, 2, ids, labels);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 6);
  EXPECT_EQ(labels[1], 0);
}

// Tests the test-only failure points of a checkpoint save.
TEST(Checkpoint, FaultSpecs) {
  CheckpointSaveOptions o;
  EXPECT_TRUE(parseCheckpointFault("20", o));
  EXPECT_EQ(o.failAfterFiles, 20);
  EXPECT_TRUE(parseCheckpointFault("bytes:0", o));
  EXPECT_EQ(o.failAfterBytes, 0);
  EXPECT_TRUE(parseCheckpointFault("full:4096", o));
  EXPECT_EQ(o.diskFullAfterBytes, 4096);
  EXPECT_TRUE(parseCheckpointFault("stage:moved-aside", o));
  EXPECT_EQ(o.failAtStage, "moved-aside");
  EXPECT_EQ(o.failRank, -1);
  EXPECT_TRUE(parseCheckpointFault("bytes:3000@2", o));
  EXPECT_EQ(o.failAfterBytes, 3000);
  EXPECT_EQ(o.failRank, 2);
  for (const char *bad : {"", "0", "files:0", "bytes:-1", "stage:nowhere",
                          "kill:3", "bytes:1x", "bytes:1@", "bytes:1@-1"})
    EXPECT_FALSE(parseCheckpointFault(bad, o)) << bad;
}
} // namespace
