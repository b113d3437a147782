// RUN: partita-opt %s -split-input-file -verify-diagnostics \
// RUN:   -allow-unregistered-dialect -dist-auto-shard=mesh=x=2
// RUN: not partita-opt %s -split-input-file -dist-auto-shard 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NO-MESH
// RUN: not partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=x=2 link-gbytes=0" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=RATE
// RUN: not partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=x=2 call-us=-1" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NEGATIVE

// Every input the per-op search cannot take is an error at the op or value
// that makes it so.

// RUN: not partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=x=2 solver=glpk" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SOLVER
// RUN: not partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=x=2 solver=greedy memory-per-device-gib=1" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=GREEDY-MEMORY
// RUN: not partita-opt %s -split-input-file \
// RUN:   -dist-auto-shard="mesh=x=2 overlap-share=1.5" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=OVERLAP

// NO-MESH: error: module has no mesh @mesh; declare one or pass the mesh option
// SOLVER: error: dist-auto-shard: solver must be cbc, greedy or one-axis, got 'glpk'
// GREEDY-MEMORY: error: dist-auto-shard: solver=greedy does not take memory-per-device-gib (only the integer program keeps a limit)
// RATE: error: dist-auto-shard: link-gbytes must be positive, got 0
// OVERLAP: error: dist-auto-shard: overlap-share must lie between 0 and 1, got 1.5
// NEGATIVE: error: dist-auto-shard: devices-per-node, call-us and memory-per-device-gib must not be negative

func.func private @callee(tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @caller(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{dist-auto-shard does not take calls yet; inline the callee first}}
  %y = func.call @callee(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @regions(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @below {{dist-auto-shard does not take ops with regions yet}}
  %y = "test.wrap"(%x) ({
    "test.yield"(%x) : (tensor<4x8xf32>) -> ()
  }) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @dynamic(%x: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // expected-error @below {{dist-auto-shard needs static shapes, but result #0 is 'tensor<?x8xf32>'}}
  %y = "test.dynamic"(%x) : (tensor<4x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// A pinned argument may not be partial: it is what a caller passes in.
dist.mesh @mesh <["x"=2]>
// expected-error @below {{dist-auto-shard takes argument annotations without partial axes or sub-axes}}
func.func @partial(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}], partial={"x"}>}) -> tensor<4x8xf32> {
  %y = nn.gelu %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// expected-error @below {{dist-auto-shard takes a function of one block}}
func.func @blocks(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  "test.br"()[^next] : () -> ()
^next:
  return %x : tensor<4x8xf32>
}
