//===- AttentionMmaKernels.h - attention on tensor cores, flash style -*- C++ -*-===//
//
// attention and attention_grad of the cuda backend on tensor cores
// (`--attention tensor`), f32 only, head_dim up to kMmaMaxDim; written once
// over the execution context like every kernel of Kernels.h (which includes
// this header part way: include Kernels.h, not this file).
//
// Layout and semantics are those of AttentionKernels.h (q, dy [batch,
// seqQ, heads, headDim]; k, v [batch, seqKV, kvHeads, headDim]; grouped kv
// heads; queryOffset; causal). Every product runs as m16n8k8 TF32 mma
// tiles (KernelContext.h's mmaTf32, fragments by MmaTf32Layout), each warp
// owning 16 rows:
//   - In f32 (the default) each operand x is split into two TF32 parts,
//     big = tf32(x) and small = tf32(x - big), and a product takes three
//     mmas, small*big + big*small + big*big (the "3xTF32" of CUTLASS's
//     OpMultiplyAddFastF32, which PyTorch's memory-efficient attention runs
//     for f32 on sm_80 and later): about f32's accuracy at tensor-core speed.
//     With `op` bit kMmaOneTf32 (the backend's --tf32) one mma, big*big.
//   - Forward (AttentionMmaForward): one block of 4 warps per (batch, head,
//     64 queries); key and value tiles of 64 rows staged in shared memory;
//     S = Q K^T into mma accumulators, an online softmax on them (a row's
//     max and sum over the 4 lanes that hold it, by shuffles), and O += P V
//     with P moved from the accumulator layout to the A-operand layout by
//     shuffles within each group of 4 lanes. Stats modes write per query
//     row lse = m + log(l) and D = dO . O (the gradients' statistics) to a
//     workspace [2, batch * heads * seqQ] instead of O; the output mode
//     writes lse to out[1] too when it is not null (attention's lse
//     result). With the forward's O and lse saved, AttentionRows (op 2)
//     writes the same workspace from them instead.
//   - dq (AttentionMmaGradQ): blocks of 64 queries over key tiles of 32:
//     P = exp(scale S - lse), dP = dO V^T, dS = P (dP - D), dq += dS K,
//     times scale at the end.
//   - dk and dv (AttentionMmaGradKV): blocks of 64 keys over the query heads
//     of their kv head and query tiles of 32 (q, dO, lse and D staged):
//     P^T = exp(scale K Q^T - lse), dv += P^T dO, dP^T = V dO^T,
//     dS^T = P^T (dP^T - D), dk += dS^T Q (times scale at the end).
//     out[0] dk, out[1] dv (either may be null); each has the bits of its
//     own single-letter call.
// Causal blocks skip the key (query) tiles no row of theirs sees. Every
// output element is one lane's accumulator, summed in a fixed order (keys,
// or heads then queries, ascending): deterministic, no atomics.
//
// KernelParams: in q, k, v, dy, stats; out as above; shape batch, seqQ,
// seqKV, heads, kvHeads, headDim; a: scale, queryOffset, causal; op: the
// forward's AttnMode, plus kMmaOneTf32; n: work items; bits 1: 16-byte
// global loads (head_dim a multiple of 4, every pointer 16-byte aligned).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_ATTENTIONMMAKERNELS_H
#define PARTITA_RUNTIME_LIB_CUDA_ATTENTIONMMAKERNELS_H

namespace partita::runtime::gpu {

/// Head dimensions of the tensor-core kernels (smaller head_dims are
/// padded with zeros to it).
constexpr int kMmaMaxDim = 64;
constexpr int kMmaRows = 64;      // rows a block owns (queries, or keys)
constexpr int kMmaFwdKeys = 64;   // the forward's key tile
constexpr int kMmaGradTile = 32;  // the gradients' key (query) tile
/// KernelParams::op bit: one TF32 mma a product instead of three.
constexpr int kMmaOneTf32 = 8;

/// Staged tiles: rows kMmaLd floats apart, the second four of every eight
/// rows shifted by 4 floats (mmaTileAt), so that the B-fragment loads of
/// an 8 x 8 tile hit 32 different banks read either way: as (row g,
/// column t) for a tile used transposed (K in Q K^T) and as (row t, column
/// g) for one used as is (V in P V). The gradients read K, q and dO both
/// ways, which no plain row padding serves (a pad of 4 floats suits the
/// first reading, 8 the second, each costing the other 2 wavefronts a
/// load). The shift depends on the row's last three bits only, which a
/// fragment's lane fixes (or its unrolled index, read as is), so offsets
/// stay affine in the unrolled loops; 16-byte quads stay whole.
constexpr int kMmaLd = kMmaMaxDim + 8;
PARTITA_HD inline int64_t mmaTileAt(int64_t tile, int row, int col) {
  return tile + int64_t(row) * kMmaLd + col + (row & 4);
}

/// Shared-memory floats of each kernel (K and V tiles, or q, dO and the
/// two statistics).
constexpr int64_t mmaSharedFloats(GpuKernel k) {
  return k == GpuKernel::AttentionMmaForward
             ? int64_t(kMmaFwdKeys) * 2 * kMmaLd
         : k == GpuKernel::AttentionMmaGradQ
             ? int64_t(kMmaGradTile) * 2 * kMmaLd
             : int64_t(kMmaGradTile) * (2 * kMmaLd + 2);
}
// A launch gets 48 KiB of dynamic shared memory without
// cudaFuncSetAttribute (which the backend does not call), and each of the
// block's warps owns 16 of its kMmaRows rows.
static_assert(mmaSharedFloats(GpuKernel::AttentionMmaForward) * 4 <= int64_t(kMaxDynamicSharedBytes) &&
                  mmaSharedFloats(GpuKernel::AttentionMmaGradQ) * 4 <= int64_t(kMaxDynamicSharedBytes) &&
                  mmaSharedFloats(GpuKernel::AttentionMmaGradKV) * 4 <= int64_t(kMaxDynamicSharedBytes),
              "a tensor-core attention kernel's tiles outgrow 48 KiB of shared memory");
static_assert(kMmaBlock / 32 * 16 == kMmaRows,
              "a tensor-core attention block is one warp per 16 rows");

/// The launch's shape, with its scale in f32 and whether products are
/// split in three TF32 mmas (op without kMmaOneTf32).
struct MmaAttn : AttnShape {
  float scalef;
  bool split;
};

PARTITA_HD inline MmaAttn mmaAttn(const KernelParams &p) {
  MmaAttn a;
  static_cast<AttnShape &>(a) = attnShape(p);
  a.scalef = float(a.scale);
  a.split = (p.op & kMmaOneTf32) == 0;
  return a;
}

/// x as two TF32 parts, x ~ big + small.
PARTITA_HD inline void tf32Split(float x, uint32_t &big, uint32_t &small) {
  big = half::toTF32Bits(x);
  small = half::toTF32Bits(x - half::floatOf(big));
}

/// d += A B for split operands: three mmas (small terms first), or one.
template <typename Ctx>
PARTITA_HD void mma3(const Ctx &c, float (&d)[4], const uint32_t (&aBig)[4],
                     const uint32_t (&aSmall)[4], const uint32_t (&bBig)[2],
                     const uint32_t (&bSmall)[2], bool split) {
  if (split)
    c.mmaTf32x3(d, aBig, aSmall, bBig, bSmall);
  else
    c.mmaTf32(d, aBig, bBig);
}

template <int N>
PARTITA_HD void tf32SplitAll(const float (&x)[N], uint32_t (&big)[N],
                             uint32_t (&small)[N]) {
  PARTITA_UNROLL
  for (int r = 0; r < N; ++r)
    tf32Split(x[r], big[r], small[r]);
}

/// The A fragment of the 16 x 8 tile whose accumulator fragment this lane
/// holds as `acc` (rows g and g + 8, columns 2t and 2t + 1): the lane needs
/// columns t and t + 4, held by lanes t / 2 and t / 2 + 2 of its group of 4.
template <typename Ctx>
PARTITA_HD void accToA(const Ctx &c, const float (&acc)[4], float (&a)[4]) {
  int lane = c.threadIndex() % kWarpSize, t = lane % 4;
  int src = (lane & ~3) | (t >> 1);
  bool odd = t & 1;
  PARTITA_UNROLL
  for (int half = 0; half < 2; ++half) { // columns t, then t + 4
    int from = src + 2 * half;
    float x0 = c.shuffle(acc[0], from), x1 = c.shuffle(acc[1], from);
    float y0 = c.shuffle(acc[2], from), y1 = c.shuffle(acc[3], from);
    a[2 * half] = odd ? x1 : x0;     // row g
    a[2 * half + 1] = odd ? y1 : y0; // row g + 8
  }
}

/// The sum (or max) of v over the 4 lanes of a group (the lanes of a row
/// in an accumulator fragment); every lane gets the same bits.
template <typename Ctx> PARTITA_HD float quadSum(const Ctx &c, float v) {
  v += c.shuffleXor(v, 1);
  return v + c.shuffleXor(v, 2);
}
template <typename Ctx> PARTITA_HD float quadMax(const Ctx &c, float v) {
  v = fmaxf(v, c.shuffleXor(v, 1));
  return fmaxf(v, c.shuffleXor(v, 2));
}

/// Stages rows r0 .. r0 + rows of a head (rows `ld` floats apart from
/// `src`) into the tile at `dst` (mmaTileAt), kMmaMaxDim columns: zeros
/// past headDim and at rows >= rowEnd. With a.vec 16 bytes a global load;
/// 16 bytes a shared store.
template <typename Ctx, typename S>
PARTITA_HD void mmaStage(const Ctx &c, const S &s, int64_t dst,
                         const float *src, int64_t ld, int64_t r0,
                         int64_t rowEnd, int rows, const MmaAttn &a) {
  constexpr int Q = kMmaMaxDim / 4; // 4-float quads a row
  int n = rows * Q;
  for (int e = c.threadIndex(); e < n; e += c.blockSize()) {
    int r = e / Q, d = (e % Q) * 4;
    int64_t row = r0 + r;
    const float *from = src + row * ld + d;
    bool ok = row < rowEnd;
    int64_t at = mmaTileAt(dst, r, d);
    float v[4] = {};
    if (a.vec && ok && d < a.headDim)
      vecLoad16(from, v);
    else if (!a.vec)
      for (int y = 0; y < 4; ++y)
        v[y] = ok && d + y < a.headDim ? from[y] : 0.f;
    s.store16(at, v);
  }
}

/// A fragments of 16 rows x kMmaMaxDim of a head in global memory (rows
/// `ld` apart from `base`, the warp's first row `row0`): frag[ks] covers
/// columns 8 ks .. 8 ks + 8; zeros past rowEnd and headDim.
template <int KS>
PARTITA_HD void mmaLoadA(const float *base, int64_t ld, int64_t row0,
                         int64_t rowEnd, int64_t headDim, int lane,
                         float (&frag)[KS][4]) {
  PARTITA_UNROLL
  for (int ks = 0; ks < KS; ++ks)
    PARTITA_UNROLL
    for (int r = 0; r < 4; ++r) {
      int64_t row = row0 + MmaTf32Layout::aRow(lane, r);
      int col = 8 * ks + MmaTf32Layout::aCol(lane, r);
      frag[ks][r] = row < rowEnd && col < headDim ? base[row * ld + col] : 0.f;
    }
}

/// B fragment of the 8 x 8 tile at (k0, n0) of a matrix B staged at `at`
/// (mmaTileAt) transposed (B[k][n] is element (n, k): key rows of K for
/// Q K^T) or as is (element (k, n)).
template <typename S>
PARTITA_HD void mmaLoadB(const S &s, int64_t at, int k0, int n0,
                         bool transposed, int lane, uint32_t (&big)[2],
                         uint32_t (&small)[2]) {
  PARTITA_UNROLL
  for (int r = 0; r < 2; ++r) {
    int k = k0 + MmaTf32Layout::bRow(lane, r), n = n0 + MmaTf32Layout::bCol(lane, r);
    float x = s.load(transposed ? mmaTileAt(at, n, k) : mmaTileAt(at, k, n));
    tf32Split(x, big[r], small[r]);
  }
}

/// acc[nt] += A B_nt for NT 8-column tiles: A the lane's fragment `a` of
/// one k-step (rows k0 .. k0 + 8 of B), B from shared memory (mmaLoadB).
template <int NT, typename Ctx, typename S>
PARTITA_HD void mmaKStep(const Ctx &c, const float (&a)[4], const S &s,
                         int64_t at, int k0, bool transposed, bool split,
                         float (&acc)[NT][4]) {
  int lane = c.threadIndex() % kWarpSize;
  uint32_t aBig[4], aSmall[4];
  tf32SplitAll(a, aBig, aSmall);
  PARTITA_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    uint32_t bBig[2], bSmall[2];
    mmaLoadB(s, at, k0, 8 * nt, transposed, lane, bBig, bSmall);
    mma3(c, acc[nt], aBig, aSmall, bBig, bSmall, split);
  }
}

/// acc[nt] += A B over ks for NT 8-column tiles: A the lane's fragments
/// a[ks] (KS k-steps of 8), B from shared memory (mmaLoadB).
template <int KS, int NT, typename Ctx, typename S>
PARTITA_HD void mmaRowTimesShared(const Ctx &c, const float (&a)[KS][4],
                                  const S &s, int64_t at, bool transposed,
                                  bool split, float (&acc)[NT][4]) {
  PARTITA_UNROLL
  for (int ks = 0; ks < KS; ++ks)
    mmaKStep(c, a[ks], s, at, 8 * ks, transposed, split, acc);
}

/// acc[nt] += P B with P the warp's 16 x (8 KT) accumulator tiles p[kt]
/// (moved to A fragments by accToA) and B (8 KT x 8 NT) from shared memory
/// as is.
template <int KT, int NT, typename Ctx, typename S>
PARTITA_HD void mmaAccTimesShared(const Ctx &c, const float (&p)[KT][4],
                                  const S &s, int64_t at, bool split,
                                  float (&acc)[NT][4]) {
  PARTITA_UNROLL
  for (int kt = 0; kt < KT; ++kt) {
    float a[4];
    accToA(c, p[kt], a);
    mmaKStep(c, a, s, at, 8 * kt, /*transposed=*/false, split, acc);
  }
}

template <int NT> PARTITA_HD void mmaZero(float (&acc)[NT][4]) {
  PARTITA_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    PARTITA_UNROLL
    for (int r = 0; r < 4; ++r)
      acc[nt][r] = 0.f;
}

/// Stores the warp's 16 x kMmaMaxDim accumulators (row0 its first row,
/// rows `ld` apart from `base`) times `scale` (per row: scale[0] for row
/// g, scale[1] for g + 8), within rowEnd and headDim.
template <int NT>
PARTITA_HD void mmaStoreRows(float *base, int64_t ld, int64_t row0,
                             int64_t rowEnd, int64_t headDim, int lane,
                             const float (&acc)[NT][4], const float (&scale)[2]) {
  PARTITA_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    PARTITA_UNROLL
    for (int r = 0; r < 4; ++r) {
      int64_t row = row0 + MmaTf32Layout::cRow(lane, r);
      int col = 8 * nt + MmaTf32Layout::cCol(lane, r);
      if (row < rowEnd && col < headDim)
        base[row * ld + col] = acc[nt][r] * scale[r / 2];
    }
}

/// Whether query `query` (its position offset + query) sees key `key`.
PARTITA_HD inline bool mmaSees(const MmaAttn &a, int64_t query, int64_t key) {
  return key < a.seqKV && (!a.causal || key <= a.offset + query);
}

/// attention, or the gradients' statistics (AttnMode). See the file comment.
template <typename Ctx>
PARTITA_HD void attentionMmaForwardKernel(const Ctx &c, const KernelParams &p) {
  constexpr int KS = kMmaMaxDim / 8, NS = kMmaFwdKeys / 8, NO = kMmaMaxDim / 8;
  const MmaAttn a = mmaAttn(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<float>(p, a);
  auto mode = static_cast<AttnMode>(p.op & 3);
  int lane = c.threadIndex() % kWarpSize, warp = c.threadIndex() / kWarpSize;
  int64_t qTiles = (a.seqQ + kMmaRows - 1) / kMmaRows, pairs = a.batch * a.heads;
  auto sh = c.template shared<float>();
  const int64_t kAt = 0, vAt = int64_t(kMmaFwdKeys) * kMmaLd;
  const float negInf = -infinity<float>();
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    // The longest (causal) query tiles first.
    int64_t qt = qTiles - 1 - w / pairs, pair = w % pairs;
    int64_t b = pair / a.heads, h = pair % a.heads, g = h / group;
    int64_t qBlock = qt * kMmaRows, q0 = qBlock + 16 * warp;
    const float *qh = q + b * a.seqQ * ldq + h * a.headDim;
    const float *kh = k + b * a.seqKV * ldkv + g * a.headDim;
    const float *vh = v + b * a.seqKV * ldkv + g * a.headDim;
    float qa[KS][4], o[NO][4], m[2] = {negInf, negInf}, l[2] = {0.f, 0.f};
    mmaLoadA(qh, ldq, q0, a.seqQ, a.headDim, lane, qa);
    mmaZero(o);
    int64_t rows[2] = {q0 + lane / 4, q0 + lane / 4 + 8};
    int64_t kEnd = a.seqKV;
    if (a.causal && a.offset + qBlock + kMmaRows < kEnd)
      kEnd = a.offset + qBlock + kMmaRows;
    for (int64_t k0 = 0; k0 < kEnd; k0 += kMmaFwdKeys) {
      c.barrier(); // the previous tile's reads are done
      mmaStage(c, sh, kAt, kh, ldkv, k0, a.seqKV, kMmaFwdKeys, a);
      mmaStage(c, sh, vAt, vh, ldkv, k0, a.seqKV, kMmaFwdKeys, a);
      c.barrier();
      float s[NS][4];
      mmaZero(s);
      mmaRowTimesShared(c, qa, sh, kAt, /*transposed=*/true, a.split, s);
      // Scale and mask; the rows' maxima over the tile.
      float tileMax[2] = {negInf, negInf};
      PARTITA_UNROLL
      for (int nt = 0; nt < NS; ++nt)
        PARTITA_UNROLL
        for (int r = 0; r < 4; ++r) {
          int64_t key = k0 + 8 * nt + MmaTf32Layout::cCol(lane, r);
          // Padded query rows (past seqQ) see the keys unmasked: finite.
          bool ok = rows[r / 2] >= a.seqQ ? key < a.seqKV
                                          : mmaSees(a, rows[r / 2], key);
          s[nt][r] = ok ? s[nt][r] * a.scalef : negInf;
          tileMax[r / 2] = fmaxf(tileMax[r / 2], s[nt][r]);
        }
      float alpha[2];
      PARTITA_UNROLL
      for (int i = 0; i < 2; ++i) {
        float mNew = fmaxf(m[i], quadMax(c, tileMax[i]));
        // Key 0 is in the first tile and every row sees it, so mNew is
        // finite from the first tile on.
        alpha[i] = kexp(m[i] - mNew);
        m[i] = mNew;
        l[i] *= alpha[i];
      }
      PARTITA_UNROLL
      for (int nt = 0; nt < NS; ++nt)
        PARTITA_UNROLL
        for (int r = 0; r < 4; ++r) {
          s[nt][r] = kexp(s[nt][r] - m[r / 2]);
          l[r / 2] += s[nt][r];
        }
      PARTITA_UNROLL
      for (int nt = 0; nt < NO; ++nt)
        PARTITA_UNROLL
        for (int r = 0; r < 4; ++r)
          o[nt][r] *= alpha[r / 2];
      mmaAccTimesShared(c, s, sh, vAt, a.split, o);
    }
    float inv[2];
    PARTITA_UNROLL
    for (int i = 0; i < 2; ++i) {
      l[i] = quadSum(c, l[i]);
      inv[i] = 1.f / l[i];
    }
    if (mode == AttnMode::Output) {
      float *out = static_cast<float *>(p.out[0]);
      mmaStoreRows(out + b * a.seqQ * ldq + h * a.headDim, ldq, q0, a.seqQ,
                   a.headDim, lane, o, inv);
      // The optional lse output [batch, heads, seqQ], as the stats modes'.
      if (float *lse = static_cast<float *>(p.out[1]))
        PARTITA_UNROLL
        for (int i = 0; i < 2; ++i)
          if (lane % 4 == 0 && rows[i] < a.seqQ)
            lse[pair * a.seqQ + rows[i]] = m[i] + klog(l[i]);
      continue;
    }
    // Statistics: lse, and D = dO . O (0 for StatsNoD).
    const float *dyh = dy + b * a.seqQ * ldq + h * a.headDim;
    float dsum[2] = {0.f, 0.f};
    if (mode == AttnMode::Stats)
      PARTITA_UNROLL
      for (int nt = 0; nt < NO; ++nt)
        PARTITA_UNROLL
        for (int r = 0; r < 4; ++r) {
          int64_t row = rows[r / 2];
          int col = 8 * nt + MmaTf32Layout::cCol(lane, r);
          if (row < a.seqQ && col < a.headDim)
            dsum[r / 2] += o[nt][r] * inv[r / 2] * dyh[row * ldq + col];
        }
    float *statsOut = static_cast<float *>(p.out[1]);
    int64_t plane = a.batch * a.heads * a.seqQ;
    PARTITA_UNROLL
    for (int i = 0; i < 2; ++i) {
      float d = quadSum(c, dsum[i]);
      if (lane % 4 == 0 && rows[i] < a.seqQ) {
        int64_t at = pair * a.seqQ + rows[i];
        statsOut[at] = m[i] + klog(l[i]);
        statsOut[plane + at] = d;
      }
    }
  }
}

/// dq. See the file comment.
template <typename Ctx>
PARTITA_HD void attentionMmaGradQKernel(const Ctx &c, const KernelParams &p) {
  constexpr int KS = kMmaMaxDim / 8, NS = kMmaGradTile / 8, NO = kMmaMaxDim / 8;
  const MmaAttn a = mmaAttn(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<float>(p, a);
  float *dq = static_cast<float *>(p.out[0]);
  int lane = c.threadIndex() % kWarpSize, warp = c.threadIndex() / kWarpSize;
  int64_t qTiles = (a.seqQ + kMmaRows - 1) / kMmaRows, pairs = a.batch * a.heads;
  int64_t plane = a.batch * a.heads * a.seqQ;
  auto sh = c.template shared<float>();
  const int64_t kAt = 0, vAt = int64_t(kMmaGradTile) * kMmaLd;
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    int64_t qt = qTiles - 1 - w / pairs, pair = w % pairs;
    int64_t b = pair / a.heads, h = pair % a.heads, g = h / group;
    int64_t qBlock = qt * kMmaRows, q0 = qBlock + 16 * warp;
    int64_t qOff = b * a.seqQ * ldq + h * a.headDim;
    const float *kh = k + b * a.seqKV * ldkv + g * a.headDim;
    const float *vh = v + b * a.seqKV * ldkv + g * a.headDim;
    float qa[KS][4], da[KS][4], acc[NO][4];
    mmaLoadA(q + qOff, ldq, q0, a.seqQ, a.headDim, lane, qa);
    mmaLoadA(dy + qOff, ldq, q0, a.seqQ, a.headDim, lane, da);
    mmaZero(acc);
    int64_t rows[2] = {q0 + lane / 4, q0 + lane / 4 + 8};
    float lse[2], dd[2];
    PARTITA_UNROLL
    for (int i = 0; i < 2; ++i) {
      bool ok = rows[i] < a.seqQ;
      lse[i] = ok ? stats[pair * a.seqQ + rows[i]] : 0.f;
      dd[i] = ok ? stats[plane + pair * a.seqQ + rows[i]] : 0.f;
    }
    int64_t kEnd = a.seqKV;
    if (a.causal && a.offset + qBlock + kMmaRows < kEnd)
      kEnd = a.offset + qBlock + kMmaRows;
    for (int64_t k0 = 0; k0 < kEnd; k0 += kMmaGradTile) {
      c.barrier();
      mmaStage(c, sh, kAt, kh, ldkv, k0, a.seqKV, kMmaGradTile, a);
      mmaStage(c, sh, vAt, vh, ldkv, k0, a.seqKV, kMmaGradTile, a);
      c.barrier();
      float s[NS][4], dp[NS][4];
      mmaZero(s);
      mmaZero(dp);
      mmaRowTimesShared(c, qa, sh, kAt, true, a.split, s);
      mmaRowTimesShared(c, da, sh, vAt, true, a.split, dp);
      PARTITA_UNROLL
      for (int nt = 0; nt < NS; ++nt)
        PARTITA_UNROLL
        for (int r = 0; r < 4; ++r) {
          int64_t key = k0 + 8 * nt + MmaTf32Layout::cCol(lane, r);
          int64_t row = rows[r / 2];
          float pr = row < a.seqQ && mmaSees(a, row, key)
                         ? kexp(s[nt][r] * a.scalef - lse[r / 2])
                         : 0.f;
          s[nt][r] = pr * (dp[nt][r] - dd[r / 2]); // dS
        }
      // dq += dS K (K's rows as they are: B[key][dim]).
      mmaAccTimesShared(c, s, sh, kAt, a.split, acc);
    }
    float scale[2] = {a.scalef, a.scalef};
    mmaStoreRows(dq + qOff, ldq, q0, a.seqQ, a.headDim, lane, acc, scale);
  }
}

/// dk (out[0]) and dv (out[1]), either may be null. See the file comment.
template <typename Ctx>
PARTITA_HD void attentionMmaGradKVKernel(const Ctx &c, const KernelParams &p) {
  constexpr int KS = kMmaMaxDim / 8, NQ = kMmaGradTile / 8, NO = kMmaMaxDim / 8;
  const MmaAttn a = mmaAttn(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<float>(p, a);
  float *dkOut = static_cast<float *>(p.out[0]);
  float *dvOut = static_cast<float *>(p.out[1]);
  bool wantK = dkOut != nullptr, wantV = dvOut != nullptr;
  int lane = c.threadIndex() % kWarpSize, warp = c.threadIndex() / kWarpSize;
  int64_t pairs = a.batch * a.kvHeads;
  int64_t plane = a.batch * a.heads * a.seqQ;
  auto sh = c.template shared<float>();
  const int64_t qAt = 0, dAt = int64_t(kMmaGradTile) * kMmaLd,
                lseAt = dAt + int64_t(kMmaGradTile) * kMmaLd,
                ddAt = lseAt + kMmaGradTile;
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    // Key tiles in order: with causal masking the first see most queries.
    int64_t kt = w / pairs, pair = w % pairs;
    int64_t b = pair / a.kvHeads, g = pair % a.kvHeads;
    int64_t kBlock = kt * kMmaRows, k0 = kBlock + 16 * warp;
    int64_t kvOff = b * a.seqKV * ldkv + g * a.headDim;
    float ka[KS][4], va[KS][4], dk[NO][4], dv[NO][4];
    mmaLoadA(k + kvOff, ldkv, k0, a.seqKV, a.headDim, lane, ka);
    mmaLoadA(v + kvOff, ldkv, k0, a.seqKV, a.headDim, lane, va);
    mmaZero(dk);
    mmaZero(dv);
    int64_t keys[2] = {k0 + lane / 4, k0 + lane / 4 + 8};
    // The first query that sees the block's first key, on a tile boundary.
    int64_t qStart = 0;
    if (a.causal && kBlock > a.offset)
      qStart = (kBlock - a.offset) / kMmaGradTile * kMmaGradTile;
    for (int64_t j = 0; j < group; ++j) {
      int64_t h = g * group + j, qh = b * a.heads + h;
      int64_t qOff = b * a.seqQ * ldq + h * a.headDim;
      for (int64_t i0 = qStart; i0 < a.seqQ; i0 += kMmaGradTile) {
        c.barrier();
        mmaStage(c, sh, qAt, q + qOff, ldq, i0, a.seqQ, kMmaGradTile, a);
        mmaStage(c, sh, dAt, dy + qOff, ldq, i0, a.seqQ, kMmaGradTile, a);
        for (int e = c.threadIndex(); e < kMmaGradTile; e += c.blockSize()) {
          int64_t i = i0 + e;
          bool ok = i < a.seqQ;
          sh.store(lseAt + e, ok ? stats[qh * a.seqQ + i] : 0.f);
          sh.store(ddAt + e, ok ? stats[plane + qh * a.seqQ + i] : 0.f);
        }
        c.barrier();
        // P^T = exp(scale K Q^T - lse[query]), masked to 0.
        float pt[NQ][4];
        mmaZero(pt);
        mmaRowTimesShared(c, ka, sh, qAt, true, a.split, pt);
        PARTITA_UNROLL
        for (int nt = 0; nt < NQ; ++nt)
          PARTITA_UNROLL
          for (int r = 0; r < 4; ++r) {
            int col = 8 * nt + MmaTf32Layout::cCol(lane, r);
            int64_t query = i0 + col, key = keys[r / 2];
            pt[nt][r] = query < a.seqQ && mmaSees(a, query, key)
                            ? kexp(pt[nt][r] * a.scalef - sh.load(lseAt + col))
                            : 0.f;
          }
        if (wantV) // dv += P^T dO
          mmaAccTimesShared(c, pt, sh, dAt, a.split, dv);
        if (!wantK)
          continue;
        // dP^T = V dO^T; dS^T = P^T (dP^T - D); dk += dS^T Q.
        float dpt[NQ][4];
        mmaZero(dpt);
        mmaRowTimesShared(c, va, sh, dAt, true, a.split, dpt);
        PARTITA_UNROLL
        for (int nt = 0; nt < NQ; ++nt)
          PARTITA_UNROLL
          for (int r = 0; r < 4; ++r) {
            int col = 8 * nt + MmaTf32Layout::cCol(lane, r);
            pt[nt][r] *= dpt[nt][r] - sh.load(ddAt + col);
          }
        mmaAccTimesShared(c, pt, sh, qAt, a.split, dk);
      }
    }
    float one[2] = {1.f, 1.f}, scale[2] = {a.scalef, a.scalef};
    if (wantK)
      mmaStoreRows(dkOut + kvOff, ldkv, k0, a.seqKV, a.headDim, lane, dk,
                   scale);
    if (wantV)
      mmaStoreRows(dvOut + kvOff, ldkv, k0, a.seqKV, a.headDim, lane, dv, one);
  }
}

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_ATTENTIONMMAKERNELS_H
