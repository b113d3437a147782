// A kernel that needs local memory (a dynamically indexed array): with the
// cuda build's flags (PARTITA_CUDA_STRICT_FLAGS) ptxas must refuse it, so a
// kernel that spills can never slip into the build.
__global__ void __launch_bounds__(1024) plantedSpill(float *p, int n) {
  float a[64];
  for (int i = 0; i < 64; ++i)
    a[i] = p[i * n + threadIdx.x];
  float s = 0;
  for (int i = 0; i < 64; ++i)
    s += a[(i * 7 + threadIdx.x) % 64];
  p[threadIdx.x] = s;
}
