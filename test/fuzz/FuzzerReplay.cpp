//===- FuzzerReplay.cpp - run a fuzz target over saved inputs -------------===//
//
// A main for fuzz targets built without libFuzzer: runs every file named on
// the command line (or every file in a named directory) through
// LLVMFuzzerTestOneInput once, so the corpus of past findings is a
// regression test that any compiler can build.
//
//===----------------------------------------------------------------------===//

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto &entry : std::filesystem::recursive_directory_iterator(p))
        if (entry.is_regular_file())
          files.push_back(entry.path());
    } else {
      files.push_back(p);
    }
  }
  for (const auto &file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 1;
    }
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                           bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", files.size());
  return 0;
}
