//===- AttentionKernels.h - attention and its gradients, flash style -*- C++ -*-===//
//
// attention and attention_grad of the cuda backend, written once over the
// execution context like every kernel of Kernels.h (which includes this
// header part way, after its helpers: include Kernels.h, not this file).
//
// Layout (the cpu backend's): q, dy [batch, seqQ, heads, headDim], k, v
// [batch, seqKV, kvHeads, headDim]; query head h reads kv head h / (heads /
// kvHeads); query i sits at position queryOffset + i and, when causal, sees
// keys 0..queryOffset + i.
//
// No [seqQ, seqKV] matrix is ever stored (flash-attention style, online
// softmax):
//   - forward (AttentionForward, op 0): one block per (batch, head, tile of
//     blockSize / tpr * kRows queries); a group of `tpr` lanes (a power of
//     two <= 32, a warp's aligned lanes) owns kRows query rows (2 for f32,
//     1 for f64), each lane a slice of kDims head dimensions of each (16-byte
//     chunks dealt round the group's lanes, attnDim), held in registers
//     (q, the output accumulator). Key and value tiles of
//     `cols` rows are staged in shared memory; one shared load feeds the
//     lane's rows; each lane forms its partial q.k, the group adds them with
//     an xor butterfly (every lane gets the same sum), and a row's running
//     maximum m and denominator l rescale its accumulator once per
//     kAttnScoreKeys keys.
//   - the gradients (any of dq, dk, dv a call): the forward kernel in
//     statistics mode (op 1, or op 2 without D when only dv is asked for)
//     writes per query row m, 1/l and D = dO . O (= rowsum(P * dP)) to a
//     workspace of 3 x batch x heads x seqQ elements; then one launch per
//     gradient:
//       dq (AttentionGradQ): blocks of query rows as the forward, over key
//         tiles: P = exp(s - m) / l, dP = dO . v, dS = P (dP - D),
//         dq = scale * sum dS k;
//       dk, dv (AttentionGradKV, op 0 / 1): blocks of key rows (kRows a
//         group of tpr lanes), over the query heads of the kv head's group and
//         tiles of their queries (q, dO and the statistics staged):
//         dv = sum P dO, dk = scale * sum dS q.
// Accumulation is in the element type (f32 for float, f64 for double); each
// output element is summed by one thread in a fixed order (keys ascending;
// for dk/dv heads, then queries ascending), so results are deterministic
// and independent of timing. No atomics.
//
// Register tiles have compile-time sizes only (no run-time indexed arrays,
// so no local memory): kDims = 16 dimensions per lane, padded with zeros
// up to tpr * kDims, so any head_dim up to 32 * kDims = 512 works; the
// forward keeps kAttnScoreKeys scores a row in registers; the gradients
// step kAttnChunk keys or queries at a time. Launches are at most
// kAttnMaxBlock threads (the kernels' __launch_bounds__(256, 1), so the
// compiler may use up to 255 registers: 220-232 for f32, 198-253 for f64 at
// sm_90, no spills).
//
// Measured on an H100 (f32, batch 16, seq 1024, 12 heads, head_dim 64,
// causal, blocks of 128; bench/gpu-gpt/attention_bench.cpp): forward 3.7 ms
// (7.0 TFLOP/s executed), dq 8.0 ms, dk 8.4 ms, dv 6.2 ms (8.1, 7.7, 6.3
// TFLOP/s, each with its statistics pass); ncu: 12.5% occupancy (200
// registers), the shared-memory pipe about half busy.
//
// KernelParams: in q, k, v, dy, stats; out[0] the result (out, dq, dk or
// dv), out[1] the statistics (stats mode) or, in output mode, null or each
// row's lse = m + log(l) ([batch, heads, seqQ]); shape: batch, seqQ, seqKV,
// heads, kvHeads, headDim; a: scale, queryOffset, causal; cols: the rows of
// a staged tile (a multiple of kAttnChunk, <= kAttnMaxKeys); inner: tpr; n:
// work items (tiles over batch and heads; blocks loop with a grid stride);
// bits: 1 when head_dim is a multiple of 16 bytes and every input pointer
// is 16-byte aligned (staging then loads 16 bytes at a time).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_ATTENTIONKERNELS_H
#define PARTITA_RUNTIME_LIB_CUDA_ATTENTIONKERNELS_H

#if defined(__CUDA_ARCH__)
#define PARTITA_UNROLL _Pragma("unroll")
#else
#define PARTITA_UNROLL
#endif

namespace partita::runtime::gpu {

/// Head dimensions per thread (16: 32 lanes cover head_dim 512; at 32
/// dims the f32 gradients used every register and spilled on sm_80) and
/// elements per 16-byte shared load.
template <typename T> struct AttnTile {
  static constexpr int kDims = 16;
  static constexpr int kVec = 16 / int(sizeof(T));
  /// Rows a lane group owns (each shared load feeds them all): 2 for f32,
  /// 1 for f64 (whose registers are twice as many per element).
  static constexpr int kRows = sizeof(T) == 4 ? 2 : 1;
};
/// Rows of a staged key (or query) tile at most.
constexpr int kAttnMaxKeys = 32;
/// The forward's scores in registers: keys of a tile a step, each step one
/// rescale of the accumulator. (A compile-time knob for tuning builds.)
#ifndef PARTITA_ATTN_SCORE_KEYS
#define PARTITA_ATTN_SCORE_KEYS 16
#endif
constexpr int kAttnScoreKeys = PARTITA_ATTN_SCORE_KEYS;
/// The gradients' unrolled step over keys or queries; tiles are multiples.
constexpr int kAttnChunk = 4;
/// Threads per block of the attention launches (their __launch_bounds__).
constexpr int kAttnMaxBlock = 256;
/// Threads of a tensor-core attention block (AttentionMmaKernels.h): 4
/// warps of 16 rows each.
constexpr int kMmaBlock = 128;
/// The __launch_bounds__ of kernel K's __global__ wrapper.
constexpr int maxBlockOf(GpuKernel k) {
  return k == GpuKernel::AttentionForward || k == GpuKernel::AttentionGradQ ||
                 k == GpuKernel::AttentionGradKV
             ? kAttnMaxBlock
         : k == GpuKernel::AttentionMmaForward ||
                 k == GpuKernel::AttentionMmaGradQ ||
                 k == GpuKernel::AttentionMmaGradKV
             ? kMmaBlock
             : 1024;
}
/// The minimum blocks an SM of kernel K's __launch_bounds__ (1: the
/// compiler may use 255 registers; a tuning build may ask for more).
#ifndef PARTITA_ATTN_MIN_BLOCKS
#define PARTITA_ATTN_MIN_BLOCKS 1
#endif
constexpr int minBlocksOf(GpuKernel k) {
  return maxBlockOf(k) == kAttnMaxBlock ? PARTITA_ATTN_MIN_BLOCKS : 1;
}

/// Forward modes (KernelParams::op of AttentionForward).
enum class AttnMode : int { Output = 0, Stats = 1, StatsNoD = 2 };

/// What every attention launch passes (these kernels' and the tensor-core
/// ones'): shape batch, seqQ, seqKV, heads, kvHeads, headDim; a: scale,
/// queryOffset, causal; bits 1.
struct AttnShape {
  int64_t batch, seqQ, seqKV, heads, kvHeads, headDim, offset;
  bool causal;
  double scale;
  bool vec; // head_dim and every pointer allow 16-byte global loads
};

PARTITA_HD inline AttnShape attnShape(const KernelParams &p) {
  AttnShape a;
  a.batch = p.shape[0];
  a.seqQ = p.shape[1];
  a.seqKV = p.shape[2];
  a.heads = p.shape[3];
  a.kvHeads = p.shape[4];
  a.headDim = p.shape[5];
  a.scale = p.a[0];
  a.offset = int64_t(p.a[1]);
  a.causal = p.a[2] != 0;
  a.vec = (p.bits & 1) != 0;
  return a;
}

/// The operands of an attention launch (in q, k, v, dy, stats; the ones a
/// kernel does not read are null) and their row strides.
template <typename T> struct AttnOperands {
  const T *q, *k, *v, *dy, *stats;
  int64_t group;     // query heads a kv head
  int64_t ldq, ldkv; // elements between rows of q (and dy), of k and v
};

template <typename T>
PARTITA_HD AttnOperands<T> attnOperands(const KernelParams &p,
                                        const AttnShape &a) {
  return {static_cast<const T *>(p.in[0]),
          static_cast<const T *>(p.in[1]),
          static_cast<const T *>(p.in[2]),
          static_cast<const T *>(p.in[3]),
          static_cast<const T *>(p.in[4]),
          a.heads / a.kvHeads,
          a.heads * a.headDim,
          a.kvHeads * a.headDim};
}

/// The CUDA-core kernels' launch: the shape, and inner: tpr, cols: tile.
struct AttnDims : AttnShape {
  int tpr, tile;
  int ldShift; // log2 of a staged row's length, tpr * kDims
};

PARTITA_HD inline AttnDims attnDims(const KernelParams &p) {
  AttnDims a;
  static_cast<AttnShape &>(a) = attnShape(p);
  a.tpr = int(p.inner);
  a.tile = int(p.cols);
  a.ldShift = 4; // kDims = 16
  for (int t = a.tpr; t > 1; t >>= 1)
    ++a.ldShift;
  return a;
}

/// The sum of `v` over the tpr lanes of a row (aligned, a power of two):
/// an xor butterfly, so every lane gets the same bits. Every lane of the
/// warp calls it.
template <typename T, typename Ctx>
PARTITA_HD T attnRowSum(const Ctx &c, T v, int tpr) {
  for (int m = 1; m < tpr; m <<= 1)
    v += c.shuffleXor(v, m);
  return v;
}

/// Which head dimensions a lane holds: its slice of kDims elements is
/// kVec-element chunks dealt round the tpr lanes of its group (chunk i of
/// lane j is the row's chunk j + tpr i), so at each step of a loop over
/// the slice the group reads consecutive chunks of a staged row: a quarter
/// warp's 16-byte loads in one wavefront (with a lane's dims contiguous,
/// lanes kDims apart, the loads took 2x to 8x that at head_dim 64 to 128:
/// the block emulator's bank counts). Element x of lane j's slice is head
/// dimension attnDim(j, x).
template <typename T> PARTITA_HD int attnDim(int lane, int tpr, int x) {
  constexpr int VN = AttnTile<T>::kVec;
  return VN * (lane + tpr * (x / VN)) + x % VN;
}

/// out[r] = the sum over the thread's kDims of x[r][i] * (its slice of the
/// staged row whose first chunk of the lane's is at `at`, chunks `stride`
/// apart) (a partial), for its R rows: one shared load feeds every row.
template <int R, typename T, typename S>
PARTITA_HD void attnDots(const S &s, int64_t at, int stride,
                         const T (&x)[R][AttnTile<T>::kDims], T (&out)[R]) {
  constexpr int DPT = AttnTile<T>::kDims, VN = AttnTile<T>::kVec;
  T part[R][VN];
  PARTITA_UNROLL
  for (int r = 0; r < R; ++r)
    PARTITA_UNROLL
    for (int y = 0; y < VN; ++y)
      part[r][y] = T(0);
  PARTITA_UNROLL
  for (int x0 = 0; x0 < DPT; x0 += VN) {
    T w[VN];
    s.load16(at + x0 / VN * stride, w);
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r)
      PARTITA_UNROLL
      for (int y = 0; y < VN; ++y)
        part[r][y] += x[r][x0 + y] * w[y];
  }
  PARTITA_UNROLL
  for (int r = 0; r < R; ++r) {
    out[r] = part[r][0];
    PARTITA_UNROLL
    for (int y = 1; y < VN; ++y)
      out[r] += part[r][y];
  }
}

/// acc[r][i] += f[r] * (element i of the slice at `at`, as attnDots)
/// over the thread's kDims and R rows.
template <int R, typename T, typename S>
PARTITA_HD void attnAxpys(const S &s, int64_t at, int stride, const T (&f)[R],
                          T (&acc)[R][AttnTile<T>::kDims]) {
  constexpr int DPT = AttnTile<T>::kDims, VN = AttnTile<T>::kVec;
  PARTITA_UNROLL
  for (int x0 = 0; x0 < DPT; x0 += VN) {
    T w[VN];
    s.load16(at + x0 / VN * stride, w);
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r)
      PARTITA_UNROLL
      for (int y = 0; y < VN; ++y)
        acc[r][x0 + y] += f[r] * w[y];
  }
}

/// Loads lane `lane`'s slice (attnDim) of row `row` of a head (rows `ld`
/// apart from `base`), zeros past headDim or when !ok.
template <typename T>
PARTITA_HD void attnLoadRow(const T *base, int64_t row, int64_t ld, int lane,
                            int tpr, int64_t headDim, bool ok,
                            T (&out)[AttnTile<T>::kDims]) {
  constexpr int DPT = AttnTile<T>::kDims;
  PARTITA_UNROLL
  for (int x = 0; x < DPT; ++x) {
    int d = attnDim<T>(lane, tpr, x);
    out[x] = (ok && d < headDim) ? base[row * ld + d] : T(0);
  }
}

/// Stores lane `lane`'s slice of row `row` (attnDim), times `factor`,
/// within headDim.
template <typename T>
PARTITA_HD void attnStoreRow(T *base, int64_t row, int64_t ld, int lane,
                             int tpr, int64_t headDim,
                             const T (&v)[AttnTile<T>::kDims], T factor) {
  constexpr int DPT = AttnTile<T>::kDims;
  PARTITA_UNROLL
  for (int x = 0; x < DPT; ++x) {
    int d = attnDim<T>(lane, tpr, x);
    if (d < headDim)
      base[row * ld + d] = v[x] * factor;
  }
}

/// Stages rows r0 .. r0 + tile of a head (rows `ld` apart from `src`) into
/// shared memory at `dst`, rows 2^ldShift apart; zeros past headDim and past
/// row `rowEnd` (so padded lanes and rows add 0, never the emulator's NaN).
/// With a.vec, 16 bytes a load and a store on the device.
template <typename T, typename Ctx, typename S>
PARTITA_HD void attnStage(const Ctx &c, const S &s, int64_t dst, const T *src,
                          int64_t ld, int64_t r0, int64_t rowEnd, int tile,
                          const AttnDims &a) {
  constexpr int VN = AttnTile<T>::kVec, vnShift = VN == 4 ? 2 : 1;
  int t = c.threadIndex(), bs = c.blockSize();
  if (!a.vec) {
    int n = tile << a.ldShift, mask = (1 << a.ldShift) - 1;
    for (int e = t; e < n; e += bs) {
      int r = e >> a.ldShift, d = e & mask;
      int64_t row = r0 + r;
      s.store(dst + e,
              (row < rowEnd && d < a.headDim) ? src[row * ld + d] : T(0));
    }
    return;
  }
  int shift = a.ldShift - vnShift, mask = (1 << shift) - 1;
  int n = tile << shift;
  for (int e = t; e < n; e += bs) {
    int r = e >> shift, d = (e & mask) * VN;
    int64_t row = r0 + r;
    bool ok = row < rowEnd && d < a.headDim;
    T v[VN] = {};
    if (ok)
      vecLoad16(src + row * ld + d, v);
    s.store16(dst + int64_t(e) * VN, v);
  }
}

/// The forward pass (op Output), or the per-row statistics of the
/// gradients (op Stats: m, 1/l and D = dO . O into out[1]; StatsNoD: m and
/// 1/l, D = 0, without the value pass). See the file comment.
template <typename T, typename Ctx>
PARTITA_HD void attentionForwardKernel(const Ctx &c, const KernelParams &p) {
  constexpr int DPT = AttnTile<T>::kDims, BC = kAttnScoreKeys,
                R = AttnTile<T>::kRows;
  const AttnDims a = attnDims(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<T>(p, a);
  auto mode = static_cast<AttnMode>(p.op);
  bool values = mode != AttnMode::StatsNoD;
  int t = c.threadIndex(), tpr = a.tpr, bc = a.tile;
  int groups = c.blockSize() / tpr, rows = groups * R;
  // The lane's first chunk in a staged row, its chunks vs apart.
  int grp = t / tpr, lane = t % tpr, ldS = tpr * DPT;
  int vs = tpr * AttnTile<T>::kVec, d0 = lane * AttnTile<T>::kVec;
  int64_t qTiles = (a.seqQ + rows - 1) / rows, pairs = a.batch * a.heads;
  auto sh = c.template shared<T>();
  const T scale = T(a.scale), negInf = -infinity<T>();
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    // The longest (causal) query tiles first.
    int64_t qt = qTiles - 1 - w / pairs, pair = w % pairs;
    int64_t b = pair / a.heads, h = pair % a.heads, g = h / group;
    int64_t q0 = qt * rows;
    int64_t qOff = b * a.seqQ * ldq + h * a.headDim;
    const T *kh = k + b * a.seqKV * ldkv + g * a.headDim;
    const T *vh = v + b * a.seqKV * ldkv + g * a.headDim;
    // Row r of this lane's group: query q0 + grp + r * groups.
    int64_t i[R], myEnd[R];
    bool rowOk[R];
    T qr[R][DPT], o[R][DPT], m[R], l[R];
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r) {
      i[r] = q0 + grp + int64_t(r) * groups;
      rowOk[r] = i[r] < a.seqQ;
      attnLoadRow(q + qOff, i[r], ldq, lane, tpr, a.headDim, rowOk[r], qr[r]);
      PARTITA_UNROLL
      for (int x = 0; x < DPT; ++x)
        o[r][x] = T(0);
      m[r] = negInf;
      l[r] = T(0);
      myEnd[r] = a.seqKV;
      if (a.causal && a.offset + i[r] + 1 < a.seqKV)
        myEnd[r] = a.offset + i[r] + 1;
    }
    int64_t lastRow = (q0 + rows < a.seqQ ? q0 + rows : a.seqQ) - 1;
    int64_t keyEnd = a.seqKV;
    if (a.causal && a.offset + lastRow + 1 < a.seqKV)
      keyEnd = a.offset + lastRow + 1;
    for (int64_t k0 = 0; k0 < keyEnd; k0 += bc) {
      c.barrier(); // every read of the previous tile is done
      attnStage(c, sh, 0, kh, ldkv, k0, a.seqKV, bc, a);
      if (values)
        attnStage(c, sh, int64_t(bc) * ldS, vh, ldkv, k0, a.seqKV, bc, a);
      c.barrier();
      // Keys of the tile some row of the block sees (the same for the block),
      // BC at a time.
      int jEnd = keyEnd - k0 < bc ? int(keyEnd - k0) : bc;
      for (int j0 = 0; j0 < jEnd; j0 += BC) {
        T s[R][BC], tileMax[R];
        PARTITA_UNROLL
        for (int r = 0; r < R; ++r)
          tileMax[r] = negInf;
        PARTITA_UNROLL
        for (int jj = 0; jj < BC; ++jj) {
          int j = j0 + jj;
          PARTITA_UNROLL
          for (int r = 0; r < R; ++r)
            s[r][jj] = negInf;
          if (j < jEnd) {
            T part[R];
            attnDots(sh, int64_t(j) * ldS + d0, vs, qr, part);
            PARTITA_UNROLL
            for (int r = 0; r < R; ++r) {
              T dot = attnRowSum(c, part[r], tpr);
              if (k0 + j < myEnd[r])
                s[r][jj] = dot * scale;
              tileMax[r] = maxOf(tileMax[r], s[r][jj]);
            }
          }
        }
        PARTITA_UNROLL
        for (int r = 0; r < R; ++r) {
          T mNew = maxOf(m[r], tileMax[r]);
          T alpha = m[r] == negInf ? T(0) : kexp(m[r] - mNew);
          m[r] = mNew;
          l[r] *= alpha;
          PARTITA_UNROLL
          for (int x = 0; x < DPT; ++x)
            o[r][x] *= alpha;
        }
        PARTITA_UNROLL
        for (int jj = 0; jj < BC; ++jj) {
          int j = j0 + jj;
          if (j < jEnd) {
            T pj[R];
            PARTITA_UNROLL
            for (int r = 0; r < R; ++r) {
              pj[r] = s[r][jj] == negInf ? T(0) : kexp(s[r][jj] - m[r]);
              l[r] += pj[r];
            }
            if (values)
              attnAxpys(sh, int64_t(bc + j) * ldS + d0, vs, pj, o);
          }
        }
      }
    }
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r) {
      T inv = T(1) / l[r];
      if (mode == AttnMode::Output) {
        if (rowOk[r])
          attnStoreRow(static_cast<T *>(p.out[0]) + qOff, i[r], ldq, lane,
                       tpr, a.headDim, o[r], inv);
        // The optional lse output [batch, heads, seqQ]: m + log(l).
        if (p.out[1] && rowOk[r] && d0 == 0)
          static_cast<T *>(p.out[1])[(b * a.heads + h) * a.seqQ + i[r]] =
              m[r] + klog(l[r]);
        continue;
      }
      T dd = T(0);
      if (mode == AttnMode::Stats) {
        T g2[DPT];
        attnLoadRow(dy + qOff, i[r], ldq, lane, tpr, a.headDim, rowOk[r], g2);
        T part = T(0);
        PARTITA_UNROLL
        for (int x = 0; x < DPT; ++x)
          part += g2[x] * o[r][x];
        dd = attnRowSum(c, part, tpr) * inv;
      }
      if (rowOk[r] && d0 == 0) {
        T *stats = static_cast<T *>(p.out[1]);
        int64_t count = pairs * a.seqQ, at = (b * a.heads + h) * a.seqQ + i[r];
        stats[at] = m[r];
        stats[count + at] = inv;
        stats[2 * count + at] = dd;
      }
    }
  }
}

/// dq (see the file comment): in q, k, v, dy, stats -> out[0].
template <typename T, typename Ctx>
PARTITA_HD void attentionGradQKernel(const Ctx &c, const KernelParams &p) {
  constexpr int DPT = AttnTile<T>::kDims, CH = kAttnChunk,
                R = AttnTile<T>::kRows;
  const AttnDims a = attnDims(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<T>(p, a);
  int t = c.threadIndex(), tpr = a.tpr, bc = a.tile;
  int groups = c.blockSize() / tpr, rows = groups * R;
  // The lane's first chunk in a staged row, its chunks vs apart.
  int grp = t / tpr, lane = t % tpr, ldS = tpr * DPT;
  int vs = tpr * AttnTile<T>::kVec, d0 = lane * AttnTile<T>::kVec;
  int64_t qTiles = (a.seqQ + rows - 1) / rows, pairs = a.batch * a.heads;
  int64_t count = pairs * a.seqQ;
  auto sh = c.template shared<T>();
  const T scale = T(a.scale);
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    int64_t qt = qTiles - 1 - w / pairs, pair = w % pairs;
    int64_t b = pair / a.heads, h = pair % a.heads, g = h / group;
    int64_t q0 = qt * rows;
    int64_t qOff = b * a.seqQ * ldq + h * a.headDim;
    const T *kh = k + b * a.seqKV * ldkv + g * a.headDim;
    const T *vh = v + b * a.seqKV * ldkv + g * a.headDim;
    int64_t i[R], myEnd[R];
    bool rowOk[R];
    T qr[R][DPT], gr[R][DPT], acc[R][DPT], m[R], inv[R], dd[R];
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r) {
      i[r] = q0 + grp + int64_t(r) * groups;
      rowOk[r] = i[r] < a.seqQ;
      attnLoadRow(q + qOff, i[r], ldq, lane, tpr, a.headDim, rowOk[r], qr[r]);
      attnLoadRow(dy + qOff, i[r], ldq, lane, tpr, a.headDim, rowOk[r], gr[r]);
      PARTITA_UNROLL
      for (int x = 0; x < DPT; ++x)
        acc[r][x] = T(0);
      int64_t at = (b * a.heads + h) * a.seqQ + i[r];
      m[r] = rowOk[r] ? stats[at] : T(0);
      inv[r] = rowOk[r] ? stats[count + at] : T(0);
      dd[r] = rowOk[r] ? stats[2 * count + at] : T(0);
      myEnd[r] = a.seqKV;
      if (a.causal && a.offset + i[r] + 1 < a.seqKV)
        myEnd[r] = a.offset + i[r] + 1;
      if (!rowOk[r])
        myEnd[r] = 0;
    }
    int64_t lastRow = (q0 + rows < a.seqQ ? q0 + rows : a.seqQ) - 1;
    int64_t keyEnd = a.seqKV;
    if (a.causal && a.offset + lastRow + 1 < a.seqKV)
      keyEnd = a.offset + lastRow + 1;
    for (int64_t k0 = 0; k0 < keyEnd; k0 += bc) {
      c.barrier();
      attnStage(c, sh, 0, kh, ldkv, k0, a.seqKV, bc, a);
      attnStage(c, sh, int64_t(bc) * ldS, vh, ldkv, k0, a.seqKV, bc, a);
      c.barrier();
      int jEnd = keyEnd - k0 < bc ? int(keyEnd - k0) : bc;
      for (int j0 = 0; j0 < jEnd; j0 += CH) {
        T s[R][CH], dp[R][CH];
        PARTITA_UNROLL
        for (int jj = 0; jj < CH; ++jj) {
          int64_t kr = int64_t(j0 + jj) * ldS + d0;
          T ps[R], pd[R];
          attnDots(sh, kr, vs, qr, ps);
          attnDots(sh, int64_t(bc) * ldS + kr, vs, gr, pd);
          PARTITA_UNROLL
          for (int r = 0; r < R; ++r) {
            s[r][jj] = attnRowSum(c, ps[r], tpr);
            dp[r][jj] = attnRowSum(c, pd[r], tpr);
          }
        }
        PARTITA_UNROLL
        for (int jj = 0; jj < CH; ++jj) {
          T f[R];
          PARTITA_UNROLL
          for (int r = 0; r < R; ++r) {
            T pj = k0 + j0 + jj < myEnd[r]
                       ? kexp(s[r][jj] * scale - m[r]) * inv[r]
                       : T(0);
            f[r] = pj * (dp[r][jj] - dd[r]);
          }
          attnAxpys(sh, int64_t(j0 + jj) * ldS + d0, vs, f, acc);
        }
      }
    }
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r)
      if (rowOk[r])
        attnStoreRow(static_cast<T *>(p.out[0]) + qOff, i[r], ldq, lane, tpr,
                     a.headDim, acc[r], scale);
  }
}

/// dk (op 0) or dv (op 1) (see the file comment): in q, k, v, dy, stats
/// -> out[0].
template <typename T, typename Ctx>
PARTITA_HD void attentionGradKVKernel(const Ctx &c, const KernelParams &p) {
  constexpr int DPT = AttnTile<T>::kDims, CH = kAttnChunk,
                R = AttnTile<T>::kRows;
  const AttnDims a = attnDims(p);
  const auto [q, k, v, dy, stats, group, ldq, ldkv] = attnOperands<T>(p, a);
  bool wantK = p.op == 0;
  int t = c.threadIndex(), tpr = a.tpr, bq = a.tile;
  int groups = c.blockSize() / tpr, rows = groups * R;
  // The lane's first chunk in a staged row, its chunks vs apart.
  int grp = t / tpr, lane = t % tpr, ldS = tpr * DPT;
  int vs = tpr * AttnTile<T>::kVec, d0 = lane * AttnTile<T>::kVec;
  int64_t pairs = a.batch * a.kvHeads;
  int64_t count = a.batch * a.heads * a.seqQ;
  // Shared: q tile, dO tile (bq rows of ldS), then m, 1/l, D (bq each).
  int64_t dyAt = int64_t(bq) * ldS, statAt = 2 * int64_t(bq) * ldS;
  auto sh = c.template shared<T>();
  const T scale = T(a.scale);
  for (int64_t w = c.blockIndex(); w < p.n; w += c.gridSize()) {
    // The first keys are seen by the most (causal) queries: first.
    int64_t kt = w / pairs, pair = w % pairs;
    int64_t b = pair / a.kvHeads, g = pair % a.kvHeads;
    int64_t k0 = kt * rows;
    int64_t kvOff = b * a.seqKV * ldkv + g * a.headDim;
    // Key row r of this lane's group: k0 + grp + r * groups; query i sees
    // it when i >= firstQuery[r].
    int64_t j[R], firstQuery[R];
    bool colOk[R];
    T kr[R][DPT], vr[R][DPT], acc[R][DPT];
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r) {
      j[r] = k0 + grp + int64_t(r) * groups;
      colOk[r] = j[r] < a.seqKV;
      attnLoadRow(k + kvOff, j[r], ldkv, lane, tpr, a.headDim, colOk[r],
                  kr[r]);
      attnLoadRow(v + kvOff, j[r], ldkv, lane, tpr, a.headDim,
                  colOk[r] && wantK, vr[r]);
      PARTITA_UNROLL
      for (int x = 0; x < DPT; ++x)
        acc[r][x] = T(0);
      firstQuery[r] = a.causal ? j[r] - a.offset : 0;
      if (!colOk[r])
        firstQuery[r] = a.seqQ;
    }
    // Causal: query i sees key k0 only from i = k0 - offset on.
    int64_t qStart = 0;
    if (a.causal)
      qStart = k0 - a.offset < 0 ? 0
               : k0 - a.offset < a.seqQ ? k0 - a.offset
                                        : a.seqQ;
    for (int64_t hh = 0; hh < group; ++hh) {
      int64_t h = g * group + hh;
      int64_t qOff = b * a.seqQ * ldq + h * a.headDim;
      int64_t statOff = (b * a.heads + h) * a.seqQ;
      for (int64_t i0 = qStart; i0 < a.seqQ; i0 += bq) {
        c.barrier();
        attnStage(c, sh, 0, q + qOff, ldq, i0, a.seqQ, bq, a);
        attnStage(c, sh, dyAt, dy + qOff, ldq, i0, a.seqQ, bq, a);
        for (int e = t; e < 3 * bq; e += c.blockSize()) {
          int which = e / bq;
          int64_t i = i0 + e % bq;
          sh.store(statAt + e, i < a.seqQ
                                   ? stats[which * count + statOff + i]
                                   : T(0));
        }
        c.barrier();
        int iEnd = a.seqQ - i0 < bq ? int(a.seqQ - i0) : bq;
        for (int c0 = 0; c0 < iEnd; c0 += CH) {
          T s[R][CH], dp[R][CH];
          PARTITA_UNROLL
          for (int ii = 0; ii < CH; ++ii) {
            int64_t at = int64_t(c0 + ii) * ldS + d0;
            T ps[R], pd[R];
            attnDots(sh, at, vs, kr, ps);
            PARTITA_UNROLL
            for (int r = 0; r < R; ++r) {
              s[r][ii] = attnRowSum(c, ps[r], tpr);
              dp[r][ii] = T(0);
            }
            if (wantK) {
              attnDots(sh, dyAt + at, vs, vr, pd);
              PARTITA_UNROLL
              for (int r = 0; r < R; ++r)
                dp[r][ii] = attnRowSum(c, pd[r], tpr);
            }
          }
          PARTITA_UNROLL
          for (int ii = 0; ii < CH; ++ii) {
            int64_t i = i0 + c0 + ii;
            T mi = sh.load(statAt + c0 + ii), invi = sh.load(statAt + bq + c0 + ii);
            T di = wantK ? sh.load(statAt + 2 * bq + c0 + ii) : T(0);
            T f[R];
            PARTITA_UNROLL
            for (int r = 0; r < R; ++r) {
              T pj = (i >= firstQuery[r] && i < a.seqQ)
                         ? kexp(s[r][ii] * scale - mi) * invi
                         : T(0);
              f[r] = wantK ? pj * (dp[r][ii] - di) : pj;
            }
            int64_t at = int64_t(c0 + ii) * ldS + d0;
            attnAxpys(sh, wantK ? at : dyAt + at, vs, f, acc);
          }
        }
      }
    }
    T factor = wantK ? scale : T(1);
    PARTITA_UNROLL
    for (int r = 0; r < R; ++r)
      if (colOk[r])
        attnStoreRow(static_cast<T *>(p.out[0]) + kvOff, j[r], ldkv, lane,
                     tpr, a.headDim, acc[r], factor);
  }
}

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_ATTENTIONKERNELS_H
