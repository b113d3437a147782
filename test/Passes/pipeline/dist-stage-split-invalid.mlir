// RUN: partita-opt %s -split-input-file -verify-diagnostics --dist-stage-split

// Tests that an update reading two stages' values other than through a sum
// is rejected (only a global norm's sum may span stages).
dist.mesh @mesh <[]>
func.func @step.microbatch(%w0: tensor<4xf32> {nn.param = "w0"}, %w1: tensor<4xf32> {nn.param = "w1"},
                           %x: tensor<4xf32> {nn.input = "x"},
                           %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator},
                           %acc1: tensor<4xf32> {nn.state = "microbatch.acc.1", dist.accumulator})
    -> (tensor<4xf32> {nn.state = "microbatch.acc.0"}, tensor<4xf32> {nn.state = "microbatch.acc.1"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64} {
  %a = nn.mul %x, %w0 {dist.stage = 0 : i64} : tensor<4xf32>
  %b = nn.mul %a, %w1 {dist.stage = 1 : i64} : tensor<4xf32>
  %s0 = nn.add %acc0, %a {dist.stage = 0 : i64} : tensor<4xf32>
  %s1 = nn.add %acc1, %b {dist.stage = 1 : i64} : tensor<4xf32>
  return %s0, %s1 : tensor<4xf32>, tensor<4xf32>
}
// expected-error @+1 {{pipeline stages: 'nn.max' in the once-per-step update reads values of stages 0 and 1 together; only sums over stages (a global gradient norm) may span stages}}
func.func @step(%w0: tensor<4xf32> {nn.param = "w0"}, %w1: tensor<4xf32> {nn.param = "w1"},
                %x: tensor<4xf32> {nn.input = "x"},
                %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator},
                %acc1: tensor<4xf32> {nn.state = "microbatch.acc.1", dist.accumulator})
    -> (tensor<4xf32> {nn.param = "w0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64, dist.microbatches = 1 : i64,
                dist.microbatch_step = @step.microbatch} {
  // expected-note @+1 {{the op}}
  %m = nn.max %acc0, %acc1 : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that optimizer state read per microbatch on two stages is rejected.
dist.mesh @mesh <[]>
// expected-error @+1 {{pipeline stages: state 'scale' is read on stages 0 and 1; only parameters may be shared by stages}}
func.func @step.microbatch(%w0: tensor<4xf32> {nn.param = "w0"}, %scale: tensor<4xf32> {nn.state = "scale"},
                           %x: tensor<4xf32> {nn.input = "x"},
                           %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.state = "microbatch.acc.0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64} {
  %a = nn.mul %x, %scale {dist.stage = 0 : i64} : tensor<4xf32>
  %b = nn.mul %a, %scale {dist.stage = 1 : i64} : tensor<4xf32>
  %s0 = nn.add %acc0, %b {dist.stage = 1 : i64} : tensor<4xf32>
  return %s0 : tensor<4xf32>
}
func.func @step(%w0: tensor<4xf32> {nn.param = "w0"}, %scale: tensor<4xf32> {nn.state = "scale"},
                %x: tensor<4xf32> {nn.input = "x"},
                %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.param = "w0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64, dist.microbatches = 1 : i64,
                dist.microbatch_step = @step.microbatch} {
  %m = nn.add %w0, %acc0 : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that a parameter read on two stages needs an update.
dist.mesh @mesh <[]>
func.func @step.microbatch(%w0: tensor<4xf32> {nn.param = "w0"},
                           %x: tensor<4xf32> {nn.input = "x"},
                           %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.state = "microbatch.acc.0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64} {
  %a = nn.mul %x, %w0 {dist.stage = 0 : i64} : tensor<4xf32>
  %b = nn.mul %a, %w0 {dist.stage = 1 : i64} : tensor<4xf32>
  %s0 = nn.add %acc0, %b {dist.stage = 1 : i64} : tensor<4xf32>
  return %s0 : tensor<4xf32>
}
// expected-error @+1 {{pipeline stages: parameter 'w0' is read on several stages but no stage updates it}}
func.func @step(%w0: tensor<4xf32> {nn.param = "w0"},
                %x: tensor<4xf32> {nn.input = "x"},
                %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.output = "loss"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64, dist.microbatches = 1 : i64,
                dist.microbatch_step = @step.microbatch} {
  %m = nn.reshape %acc0 : tensor<4xf32> -> tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that the pipeline axis is the stage split's to add.
// expected-error @+1 {{pipeline stages: the mesh already has an axis named 'pp'; the pipeline axis is added by the stage split}}
dist.mesh @mesh <["pp"=2]>
func.func @step.microbatch(%w0: tensor<4xf32> {nn.param = "w0"},
                           %x: tensor<4xf32> {nn.input = "x"},
                           %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.state = "microbatch.acc.0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64} {
  %a = nn.mul %x, %w0 {dist.stage = 0 : i64} : tensor<4xf32>
  %s0 = nn.add %acc0, %a {dist.stage = 0 : i64} : tensor<4xf32>
  return %s0 : tensor<4xf32>
}
func.func @step(%w0: tensor<4xf32> {nn.param = "w0"},
                %x: tensor<4xf32> {nn.input = "x"},
                %acc0: tensor<4xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<4xf32> {nn.param = "w0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64, dist.microbatches = 1 : i64,
                dist.microbatch_step = @step.microbatch} {
  %m = nn.add %w0, %acc0 : tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// Tests that a step whose ops come from a dialect without
// dist::TensorBuilderInterface (ptest, test/lib) cannot be split into stages:
// the pieces need zeros and copies built in the model's dialect.
dist.mesh @mesh <[]>
func.func @step.microbatch(%w0: tensor<8x16xf32> {nn.param = "w0"},
                           %acc0: tensor<8x16xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<8x16xf32> {nn.state = "microbatch.acc.0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64} {
  %a = "ptest.sum_normalize"(%w0) {dist.stage = 0 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %b = "ptest.sum_normalize"(%a) {dist.stage = 1 : i64} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %b : tensor<8x16xf32>
}
// expected-error @+1 {{pipeline stages: no dialect of the step's ops builds the zeros and copies the stages need (dist::TensorBuilderInterface)}}
func.func @step(%w0: tensor<8x16xf32> {nn.param = "w0"},
                %acc0: tensor<8x16xf32> {nn.state = "microbatch.acc.0", dist.accumulator})
    -> (tensor<8x16xf32> {nn.param = "w0"})
    attributes {dist.mesh = @mesh, dist.pipeline_stages = 2 : i64, dist.microbatches = 1 : i64,
                dist.microbatch_step = @step.microbatch} {
  %m = "ptest.sum_normalize"(%acc0) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %m : tensor<8x16xf32>
}
