//===- NNCollectiveLowerings.h - exact local forms of split ops -*- C++ -*-===//
//
// The collective-aware local forms of ops whose collective factor is split:
// plain nn ops on local tensors plus dist.all_reduce, exact up to floating
// point reassociation. Each builder takes the local operands and the mesh
// axes that split the op's collective dimension. Also the local forms of ops
// whose kernels read global positions along a split sequence (rotary, causal
// attention and its gradient: context parallelism): positions come from
// dist.axis_index, position tables from global constants cut by dist.slice,
// so every device runs the same program.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNCOLLECTIVELOWERINGS_H
#define PARTITA_DIALECTS_NN_IR_NNCOLLECTIVELOWERINGS_H

#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <utility>

namespace partita::nn {

/// Softmax of `input` along `dim`, that dimension split over `axes`:
///   m = all_reduce_max(reduce_max(x, dim));  e = exp(x - m)
///   y = e / all_reduce_sum(reduce_sum(e, dim))
mlir::Value buildSplitSoftmax(mlir::OpBuilder &builder, mlir::Location loc,
                              mlir::FlatSymbolRefAttr mesh,
                              mlir::ArrayAttr axes, mlir::Value input,
                              int64_t dim);

/// Layer norm (with `beta`) or RMS norm (without) of `input` over its last
/// dimension, of global size `globalSize`, split over `axes`; `gamma` and
/// `beta` are the local slices of the scale and shift:
///   layer norm: mu = all_reduce_sum(reduce_sum(x)) / H;  c = x - mu
///               v = all_reduce_sum(reduce_sum(c * c)) / H
///               y = c * rsqrt(v + eps) * gamma + beta
///   rms norm:   v = all_reduce_sum(reduce_sum(x * x)) / H
///               y = x * rsqrt(v + eps) * gamma
mlir::Value buildSplitNorm(mlir::OpBuilder &builder, mlir::Location loc,
                           mlir::FlatSymbolRefAttr mesh, mlir::ArrayAttr axes,
                           mlir::Value input, mlir::Value gamma,
                           std::optional<mlir::Value> beta, double epsilon,
                           int64_t globalSize);

/// Vocabulary-parallel embedding (Megatron-LM): `table` is this device's
/// block of rows, the vocabulary split over `axes`; the result is this
/// device's partial sum (over `axes`) of the lookup. With r the local row
/// count and s = axis_index(axes) * r the shard's first row:
///   l = ids - s;  c = clamp(l, 0, r - 1)      (integer max and sub)
///   keep = max(1 - |l - c|, 0)                (1 inside the shard, else 0)
///   y = embedding(table, c) * embedding([[0], [1]], keep)
/// so rows outside the shard contribute zeros and the sum over the shards
/// is the global lookup.
mlir::Value buildVocabParallelEmbedding(mlir::OpBuilder &builder,
                                        mlir::Location loc,
                                        mlir::FlatSymbolRefAttr mesh,
                                        mlir::ArrayAttr axes,
                                        mlir::Value table, mlir::Value ids,
                                        mlir::RankedTensorType resultType);

/// Vocabulary-parallel cross entropy (Megatron-LM): `logits` are this
/// device's block of the vocabulary, split over `axes` (`vocabShards`
/// blocks); the result is this device's partial sum (over `axes`) of the
/// mean over its tokens:
///   lse = log(all_reduce_sum(sum(exp(l - m)))) + m,  m = all_reduce_max(max(l))
///   p   = the label's logit where this block holds it, else 0 (a lookup in
///         the logits flattened to [tokens * rows, 1] at
///         token * rows + clamped local label, masked as for the embedding)
///   y   = mean over tokens of (lse / vocabShards - p)
mlir::Value buildVocabParallelCrossEntropy(
    mlir::OpBuilder &builder, mlir::Location loc, mlir::FlatSymbolRefAttr mesh,
    mlir::ArrayAttr axes, int64_t vocabShards, mlir::Value logits,
    mlir::Value labels, mlir::RankedTensorType resultType);

/// Rotary embedding of `input` ([b, s, n, d] local) whose sequence is split
/// over `axes` into `shards` blocks, at the global positions of its rows.
/// The kernel's angles are p * theta^(-2i/d) for the pair (2i, 2i + 1) at
/// position p; global tables C[p, 2i] = C[p, 2i + 1] = cos(angle) and
/// S[p, 2i] = S[p, 2i + 1] = sin(angle) for every position (computed here
/// in double, rounded to the element type as the kernel rounds them) are
/// sliced to this device's rows by dist.slice, so
///   y = x * C + swap(x) * S
/// where swap(x)[2i] = -x[2i + 1] and swap(x)[2i + 1] = x[2i],
/// with swap an einsum of x as [b, s, n, d/2, 2] with [[0, 1], [-1, 0]].
/// With `inverse` the rotation is by minus the angle (rotary_grad).
/// The sliced tables (and the pair-turning matrix) are built once per
/// function: `cache` (PartitionState::functionCache) keeps them for later
/// rotary ops of the same theta, element type, shape and split (every
/// layer's query and key), so a plan holds one copy instead of one per op;
/// likewise the causal biases of attention and attention_grad.
using SeqSplitCache = llvm::StringMap<mlir::Value>;
mlir::Value buildSplitSeqRotary(mlir::OpBuilder &builder, mlir::Location loc,
                                mlir::FlatSymbolRefAttr mesh,
                                mlir::ArrayAttr axes, int64_t shards,
                                mlir::Value input, double theta,
                                bool inverse, SeqSplitCache &cache);

/// Attention (`query` [b, s, n, d], `key` and `value` [b, t, k, d], local)
/// whose query sequence is split over `queryAxes` and/or whose key sequence
/// is split over `keyAxes` (either may be empty, not both):
///   scores = scale * einsum(q as [b, s, k, g, d], key) : [b, k, g, s, t]
///   causal: scores += bias[s, t], 0 where the key's global position is at
///           most the query's, -inf elsewhere; a global position is the
///           local index plus axis_index(axes) * the local length
///   keys whole: o = einsum(softmax(scores, t), value)
///   keys split (the exact log-sum-exp merge of Flash / Ring Attention):
///           m = all_reduce_max(max_t scores);  e = exp(scores - m)
///           l = all_reduce_sum(sum_t e);       o = einsum(e / l, value)
///           o is this device's partial sum (over `keyAxes`) of the output.
/// `scale` is the op's (default 1/sqrt(d)); the bias is built once per
/// function (`cache`).
mlir::Value buildSplitSeqAttention(mlir::OpBuilder &builder,
                                   mlir::Location loc,
                                   mlir::FlatSymbolRefAttr mesh,
                                   mlir::ArrayAttr queryAxes,
                                   mlir::ArrayAttr keyAxes, mlir::Value query,
                                   mlir::Value key, mlir::Value value,
                                   bool causal, double scale,
                                   SeqSplitCache &cache);

/// nn.attention_grad with its query sequence split over `queryAxes` (the
/// keys whole): the probabilities P recomputed as in buildSplitSeqAttention
/// (masked with the queries' global positions when causal), then in the
/// grouped layout, with O = P V:
///   dV = P^T dy;  dS = scale * P * (dy V^T - rowsum(dy * O))
///   dK = dS^T Q;  dQ = dS K
/// dQ is this device's rows; dK and dV are its partial sums over
/// `queryAxes` (each device holds a share of the query positions).
mlir::Value buildSplitSeqAttentionGrad(
    mlir::OpBuilder &builder, mlir::Location loc, mlir::FlatSymbolRefAttr mesh,
    mlir::ArrayAttr queryAxes, mlir::Value query, mlir::Value key,
    mlir::Value value, mlir::Value dy, AttentionGradWrt wrt, bool causal,
    double scale, SeqSplitCache &cache);

} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNCOLLECTIVELOWERINGS_H
