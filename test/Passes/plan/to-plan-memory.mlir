// RUN: partita-translate --to-plan --plan-text %s | FileCheck %s

// Tests that buffers, instructions and the greedy first-fit memory plan
// follow the live ranges: relu (0..1) at 0, exp (1..2) beside it at 64 (the
// next 64-byte boundary), neg (2..3) back at 0 once relu is dead, and the
// result add (3..end) over neg at 0 (it reads neg for the last time and
// writes each element over the one it reads: `reuses: 3`); the arena is
// 64 + 32 bytes. (Protobuf's text format leaves out zeros: no line is
// offset 0.)

// CHECK:      format_version: 2
// CHECK:      programs {
// CHECK-NEXT:   name: "forward"
// CHECK-NEXT:   buffers {
// CHECK-NEXT:     local_shape: 2
// CHECK-NEXT:     local_shape: 4
// CHECK-NEXT:     global_shape: 2
// CHECK-NEXT:     global_shape: 4
// CHECK-NEXT:     role: INPUT
// CHECK-NEXT:     name: "x"
// CHECK-NEXT:   }
// CHECK-NEXT:   buffers {
// CHECK-NEXT:     id: 1
// CHECK-NOT:      offset
// CHECK-NOT:      first_use
// CHECK:          last_use: 1
// CHECK-NEXT:   }
// CHECK-NEXT:   buffers {
// CHECK-NEXT:     id: 2
// CHECK:          offset: 64
// CHECK-NEXT:     first_use: 1
// CHECK-NEXT:     last_use: 2
// CHECK-NEXT:   }
// CHECK-NEXT:   buffers {
// CHECK-NEXT:     id: 3
// CHECK-NOT:      offset
// CHECK:          global_shape: 4
// CHECK-NEXT:     first_use: 2
// CHECK-NEXT:     last_use: 3
// CHECK-NEXT:   }
// CHECK-NEXT:   buffers {
// CHECK-NEXT:     id: 4
// CHECK:          name: "y"
// CHECK-NEXT:     first_use: 3
// CHECK-NEXT:     last_use: 4
// CHECK-NEXT:     reuses: 3
// CHECK-NEXT:   }
// CHECK-NEXT:   instructions {
// CHECK-NEXT:     kernel {
// CHECK-NEXT:       kind: RELU
// CHECK-NEXT:       attrs {
// CHECK-NEXT:       }
// CHECK-NEXT:       inputs: 0
// CHECK-NEXT:       outputs: 1
// CHECK-NEXT:       flops: 8
// CHECK-NEXT:       bytes: 64
// CHECK-NEXT:     }
// CHECK-NEXT:     location: "a"
// CHECK-NEXT:   }
// CHECK:          kind: EXP
// CHECK:          kind: NEG
// CHECK:          kind: ADD
// CHECK-NEXT:       attrs {
// CHECK-NEXT:       }
// CHECK-NEXT:       inputs: 3
// CHECK-NEXT:       inputs: 3
// CHECK-NEXT:       outputs: 4
// CHECK:        arguments: 0
// CHECK-NEXT:   results: 4
// CHECK-NEXT:   arena_bytes: 96
// CHECK-NEXT: }
// CHECK-NEXT: checksum: {{[0-9]+}}
// CHECK-NEXT: trailer: 1312902224
func.func @forward(%x: tensor<2x4xf32> {nn.input = "x"})
    -> (tensor<2x4xf32> {nn.output = "y"}) {
  %a = nn.relu %x : tensor<2x4xf32> loc("a")
  %b = nn.exp %a : tensor<2x4xf32>
  %c = nn.neg %b : tensor<2x4xf32>
  %d = nn.add %c, %c : tensor<2x4xf32>
  return %d : tensor<2x4xf32>
}
