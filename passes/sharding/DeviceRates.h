//===- DeviceRates.h - the devices and links a step is priced on -*- C++ -*-===//
//
// The rates both cost models share: the strategy search's
// (passes/search/StrategySearch.h, CostModel) and dist-auto-shard's
// (passes/autoshard/OpShardingSearch.h, CostRates), and the one formula
// both price a kernel by. Each adds what only it prices. Plain C++, no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_SHARDING_DEVICERATES_H
#define PARTITA_PASSES_SHARDING_DEVICERATES_H

#include <cstdint>

namespace partita::sharding {

struct DeviceRates {
  /// FLOP/s a device sustains.
  double deviceFlops = 100e12;
  /// Bytes a second a device sends to a device of its node (each ring
  /// step's link).
  double linkBytesPerSecond = 100e9;
  /// Devices a node holds, numbered consecutively (the mesh is laid out
  /// row-major over device numbers, its last axis fastest); 0: one node.
  int64_t devicesPerNode = 0;
  /// Bytes a second a device sends to another node: a collective whose
  /// group spans nodes runs at this rate.
  double nodeLinkBytesPerSecond = 25e9;
  /// Fixed cost of a communicator call (latency, launch), seconds.
  double callSeconds = 20e-6;
  /// Bytes a second a device reads or writes its memory.
  double memoryBytesPerSecond = 2e12;

  /// Seconds of kernels doing `flops` FLOPs and moving `bytes` bytes of
  /// memory (the dialect's CostOpInterface counts, dist::OpCost): each at
  /// its rate, added (no overlap of the two within a kernel).
  double kernelSeconds(double flops, double bytes) const {
    return flops / deviceFlops + bytes / memoryBytesPerSecond;
  }
};

} // namespace partita::sharding

#endif // PARTITA_PASSES_SHARDING_DEVICERATES_H
