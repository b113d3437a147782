//===- Passes.td - automatic differentiation --------------*- tablegen -*-===//
//
// Passes that turn a forward function into a training step.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PASSES_AUTODIFF_PASSES
#define PARTITA_PASSES_AUTODIFF_PASSES

include "mlir/Pass/PassBase.td"

def NNAutodiff : Pass<"nn-autodiff", "::mlir::ModuleOp"> {
  let summary = "Replaces @forward with a training step: forward, backward "
                "(reverse-mode, from the loss) and the optimizer update.";
  let description = [{
    Preconditions: the module holds a `func.func @forward` of one block of
    `nn` ops whose arguments each carry `nn.param = "<name>"` (a float
    parameter) or `nn.input = "<name>"`, with one result marked
    `nn.output = "loss"`, a rank-0 float tensor. Every op on a path from a
    parameter to the loss implements `VJPOpInterface` (all nn forward ops
    do).

    The pass sweeps `@forward` in reverse from the loss (cotangent 1.0),
    asking each op for its operands' cotangents (VJPOpInterface, rules in
    `passes/autodiff/VJPRules.cpp`) and summing the cotangents of a value
    used several times with `nn.add`. Only values that depend on a
    parameter get a cotangent; integer operands (ids, labels) never do; a
    parameter the loss does not depend on gets a zero gradient. Every op it
    emits for the backward keeps the location of the forward op it
    differentiates and carries `nn.grad_kind = "W"` when it computes the
    gradient of a value that depends on parameters only (a weight, a
    broadcast bias), else `"B"`; the optimizer ops (and the clipping and
    step count) carry `nn.grad_kind = "update"`.

    With `clip-norm` c > 0 the gradients are scaled by
    c / max(norm + 1e-6, c), norm = sqrt(sum over the gradients of
    reduce-sum(g * g)), all built from nn ops; a train step (optimizer
    adamw or sgd) then also returns that norm, before scaling, as its last
    result `nn.output = "grad_norm"` (after the loss).

    With `recompute=full`, each layer's forward ops (the ops carrying one
    `nn.layer = <i>` index, which `partita model` writes on every op of a
    repeated block; names and locations play no part) that the backward
    needs are cloned into the backward, before the first backward op that
    reads one, so the forward's activations of the layer die in the
    forward; `selective` recomputes only the attention core
    (`nn.attention`). Clones keep `nn.layer` and carry `nn.grad_kind = "B"`
    and `nn.recompute`. Ops without `nn.layer` are never recomputed.

    With `precision=bf16-mixed` or `fp16-mixed` (an f32 model; the
    mixed-precision recipe of Micikevicius et al. 2018) every parameter
    argument and every float value of the forward becomes bf16 (f16), float
    inputs are narrowed where they enter (`nn.convert`), and the op that
    computes the loss reads its float operands widened to f32 and keeps an
    f32 result (a loss computed in f32, as autocast does). The backward is
    then in the compute type. Each parameter `<name>` gets an f32 master
    copy, the optimizer state `<name>.master` (first in its group), which
    the runtime initializes with the parameter's initializer; the optimizer
    updates the master with the gradient widened to f32 and f32 moments,
    and the new parameter is the new master narrowed (`nn.convert`). With
    `reduce-dtype=compute` (default) a gradient's data-parallel reduction
    runs in the compute type, before it is widened; with `fp32` the widening
    convert carries `nn.wide_sum`, which keeps a partial sum partial through
    it, so the reduction runs in f32.

    `fp16-mixed` (adamw only) also scales the loss dynamically (Micikevicius
    et al. 2018): state `loss_scale` (initialized to `loss-scale`) and
    `loss_scale_clean_steps`. The backward starts from the scale instead of
    1.0; the widened gradients are multiplied by 1 / scale; `found` = the sum
    over the gradients of reduce-sum(g * 0) is 0, or NaN when a gradient
    holds an inf or NaN. The step count grows by `finite` =
    greater_equal(found, 0) (1 or 0), and `nn.adamw` gets step + found: a
    NaN step skips the update (parameters, moments unchanged). The scale
    halves on an overflow and doubles after `loss-scale-growth-interval`
    clean steps in a row.

    Afterwards, with `optimizer=adamw` or `sgd`, `@forward` is replaced by
    ```mlir
    func.func @train_step(%p... {nn.param = "<name>"},
                          %s... {nn.state = "<name>.m" | "<name>.v" | "<name>.momentum" | "step"},
                          %in... {nn.input = "..."})
        -> (params'... {nn.param}, state'... {nn.state}, tensor<f32> {nn.output = "loss"})
    ```
    state grouped per parameter in parameter order (`m`, `v` for adamw;
    `momentum` for sgd), then, for adamw, `"step"` (a `tensor<f32>` holding
    the number of steps taken, incremented by the step function, whose new
    value goes to `nn.adamw`). With `optimizer=none` it is replaced by
    `@grads(params..., inputs...) -> (loss {nn.output = "loss"},
    grads... {nn.grad = "<name>"})`.

    For example `nn-autodiff{optimizer=sgd lr=0.1}` turns
    ```mlir
    func.func @forward(%w: tensor<4x2xf32> {nn.param = "w"},
                       %x: tensor<3x4xf32> {nn.input = "x"},
                       %l: tensor<3xi32> {nn.input = "labels"}) -> (tensor<f32> {nn.output = "loss"}) {
      %y = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
      %loss = nn.cross_entropy %y, %l : tensor<3x2xf32>, tensor<3xi32> -> tensor<f32>
      return %loss : tensor<f32>
    }
    ```
    into a `@train_step(%w, %w_momentum, %x, %l)` computing
    `%dy = nn.cross_entropy_grad %y, %l, %one`,
    `%dw = nn.einsum "bc,bh->hc" %dy, %x` and
    `%w2, %m2 = nn.sgd %w, %dw, %w_momentum`, returning `(%w2, %m2, %loss)`.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "Update rule: adamw, sgd, or none (a @grads function instead)">,
    Option<"lr", "lr", "double", /*default=*/"1.0e-3", "Learning rate">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1.0e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "Weight decay (decoupled for AdamW, added to the gradient for SGD)">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"0.0",
           "Clip the gradients' global norm to this (0: no clipping)">,
    Option<"recompute", "recompute", "std::string", /*default=*/"\"none\"",
           "Activation recomputation per layer: none, full or selective">,
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "Precision recipe: fp32, bf16-mixed or fp16-mixed">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"65536.0",
           "fp16-mixed: the initial loss scale (> 0)">,
    Option<"lossScaleGrowthInterval", "loss-scale-growth-interval",
           "int64_t", /*default=*/"2000",
           "fp16-mixed: clean steps after which the loss scale doubles">,
    Option<"reduceDType", "reduce-dtype", "std::string",
           /*default=*/"\"compute\"",
           "Mixed recipes: gradient reductions in the compute type "
           "(compute) or in fp32">,
  ];
  let statistics = [
    Statistic<"numInputGradientOps", "input-gradient-ops",
              "Backward ops tagged nn.grad_kind = \"B\" (recomputed ops included)">,
    Statistic<"numWeightGradientOps", "weight-gradient-ops",
              "Backward ops tagged nn.grad_kind = \"W\"">,
    Statistic<"numUpdateOps", "update-ops",
              "Clipping, step and optimizer ops (nn.grad_kind = \"update\")">,
    Statistic<"numRecomputedOps", "recomputed-ops",
              "Forward ops cloned into the backward (nn.recompute)">,
  ];
  let dependentDialects = ["::partita::nn::NNDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // PARTITA_PASSES_AUTODIFF_PASSES
