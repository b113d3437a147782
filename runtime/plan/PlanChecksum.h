//===- PlanChecksum.h - the content checksum of a plan file ------*- C++ -*-===//
//
// A plan file ends with two fixed-width fields, in field-number order:
// Plan.checksum (field 14, fixed64) and Plan.trailer (field 15, fixed32).
// The checksum is a 64-bit FNV-1a hash of every byte before it, i.e. of the
// serialized content. Hashing the bytes as written (not a re-serialization)
// makes any change to a file, even one protobuf would parse to the same
// message, a mismatch, and needs no canonical serialization across protobuf
// versions. It detects corruption and stray edits, not deliberate forgery.
//
// Writers call sealPlan() last (after every program is added): the message's
// ordinary serialization then ends with the right checksum and trailer.
// Readers call verifyPlanChecksum() on the file's bytes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_PLAN_PLANCHECKSUM_H
#define PARTITA_RUNTIME_PLAN_PLANCHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace partita::plan {

class Plan;

/// Plan.trailer of every complete plan ("PLAN" little-endian).
constexpr uint32_t kPlanTrailer = 0x4e414c50;

/// The checksum of `size` content bytes (never 0: proto3 would omit a zero
/// field, and the file would lose its fixed-size end).
uint64_t planContentChecksum(const void *data, size_t size);

/// Sets `plan`'s checksum and trailer from its content: SerializeAsString()
/// then yields a file that verifyPlanChecksum() accepts.
void sealPlan(Plan &plan);

/// Checks that `bytes` end with a checksum field and the trailer field, and
/// that the checksum matches the bytes before it. Returns "" when it does,
/// else what is wrong (for an error message that names the file).
std::string verifyPlanChecksum(const std::string &bytes);

} // namespace partita::plan

#endif // PARTITA_RUNTIME_PLAN_PLANCHECKSUM_H
