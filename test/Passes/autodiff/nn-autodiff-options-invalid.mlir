// Tests that each out-of-range option is an error naming the option.
// RUN: not partita-opt %s -nn-autodiff=optimizer=rmsprop 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not partita-opt %s -nn-autodiff=recompute=some 2>&1 | FileCheck %s --check-prefix=RECOMPUTE
// RUN: not partita-opt %s -nn-autodiff=lr=-1 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not partita-opt %s -nn-autodiff=momentum=-0.5 2>&1 | FileCheck %s --check-prefix=MOMENTUM
// RUN: not partita-opt %s -nn-autodiff=beta1=1 2>&1 | FileCheck %s --check-prefix=BETA1
// RUN: not partita-opt %s -nn-autodiff=beta2=-0.1 2>&1 | FileCheck %s --check-prefix=BETA2
// RUN: not partita-opt %s -nn-autodiff=eps=0 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not partita-opt %s -nn-autodiff=weight-decay=-1 2>&1 | FileCheck %s --check-prefix=WD
// RUN: not partita-opt %s -nn-autodiff=clip-norm=-2 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not partita-opt %s -nn-autodiff=lr=inf 2>&1 | FileCheck %s --check-prefix=LRINF

// OPT: error: nn-autodiff: unknown optimizer 'rmsprop'; expected adamw, sgd or none{{$}}
// RECOMPUTE: error: nn-autodiff: unknown recompute mode 'some'; expected none, full or selective{{$}}
// LR: error: nn-autodiff: lr must be finite and >= 0, got -1{{$}}
// MOMENTUM: error: nn-autodiff: momentum must be finite and >= 0, got -0.5{{$}}
// BETA1: error: nn-autodiff: beta1 must be in [0, 1), got 1{{$}}
// BETA2: error: nn-autodiff: beta2 must be in [0, 1), got -0.1{{$}}
// EPS: error: nn-autodiff: eps must be finite and > 0, got 0{{$}}
// WD: error: nn-autodiff: weight-decay must be finite and >= 0, got -1{{$}}
// CLIP: error: nn-autodiff: clip-norm must be finite and >= 0, got -2{{$}}
// LRINF: error: nn-autodiff: lr must be finite and >= 0, got inf{{$}}

func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %l = nn.reduce sum %x dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
