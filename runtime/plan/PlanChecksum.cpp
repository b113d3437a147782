//===- PlanChecksum.cpp - sealing plans and verifying their checksum ------===//

#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <cstdio>

namespace partita::plan {

namespace {
// Wire tags: field 14 as fixed64 (wire type 1), field 15 as fixed32 (5).
constexpr unsigned char kChecksumTag = (14 << 3) | 1;
constexpr unsigned char kTrailerTag = (15 << 3) | 5;
// The fixed end of a sealed file: tag, 8 bytes, tag, 4 bytes.
constexpr size_t kSealBytes = 1 + 8 + 1 + 4;
} // namespace

uint64_t planContentChecksum(const void *data, size_t size) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a 64-bit offset basis
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull; // FNV prime
  }
  return h ? h : 1;
}

void sealPlan(Plan &plan) {
  plan.clear_checksum();
  plan.clear_trailer();
  // Fields serialize in field-number order and these two have the highest
  // numbers, so the content is exactly what precedes them in the file.
  std::string content = plan.SerializeAsString();
  plan.set_checksum(planContentChecksum(content.data(), content.size()));
  plan.set_trailer(kPlanTrailer);
}

std::string verifyPlanChecksum(const std::string &bytes) {
  size_t n = bytes.size();
  if (n < kSealBytes ||
      static_cast<unsigned char>(bytes[n - kSealBytes]) != kChecksumTag ||
      static_cast<unsigned char>(bytes[n - 5]) != kTrailerTag)
    return "the plan has no content checksum before its end-of-plan marker "
           "(written by an older compiler, or edited: compile it again with "
           "`partita plan`)";
  uint64_t stored = 0;
  for (int i = 7; i >= 0; --i)
    stored = (stored << 8) |
             static_cast<unsigned char>(bytes[n - kSealBytes + 1 + i]);
  uint64_t actual = planContentChecksum(bytes.data(), n - kSealBytes);
  if (stored == actual)
    return "";
  char text[96];
  std::snprintf(text, sizeof text, "%016llx but its content hashes to %016llx",
                static_cast<unsigned long long>(stored),
                static_cast<unsigned long long>(actual));
  return std::string("content checksum mismatch: the plan records ") + text +
         " (the file was corrupted or edited after compilation)";
}

} // namespace partita::plan
