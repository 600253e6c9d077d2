// y = x W^T + b with 4-bit weights in groups of 32 and 8-bit activations (one scale per row),
// for a few rows at a time on an AVX2 CPU (mirror_sd/cpu/int4.py).
//
// Weights: w = D * sc_g * (q - z_g) for the 32 weights of group g of a channel: q and the zero
// point z_g in 0..15, the step's integer sc_g in 1..255, D one float per channel (asymmetric
// 4-bit groups of 32, the grain of GGUF's Q4_K sub-blocks).
// Activations: a = round(x * 127 / max|x|) per row, |a| <= 127. Then
//   y = s_x * D * (sum_g sc_g * sum_k q_k a_k  -  sum_g sc_g z_g * sum_k a_k) + b
// where the sums are exact integers (vpmaddubsw pairs <= 2 * 15 * 127; times sc_g <= 255 per
// vpmaddwd lane, over at most 1024 groups: < 2^31 per lane), finished by the same float ops for
// every row: a row's output is bit-identical whatever other rows share the call.
//
// Packing: K is padded to whole 64-weight blocks; byte j of a block holds weight j in its low
// nibble and weight 32 + j in its high nibble, so one 32-byte load gives two groups.
#include <torch/types.h>  // not torch/extension.h: a third of the compile time
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kGroup = 32;
constexpr int64_t kBlock = 64;  // two groups: one 32-byte vector of nibbles
constexpr int64_t kZeroVec = 16;  // zero terms are summed 16 groups per vector
constexpr int64_t kMaxK = 32768;  // keeps every int32 lane below 2^31 (see above)

inline int64_t hsum64(__m256i v) {
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  int64_t s = 0;
  for (int i = 0; i < 8; ++i) s += lanes[i];
  return s;
}

inline int32_t hsum32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// dots[r] = sum_g sc_g sum_k q_k a[r]_k for R rows (registers hold R accumulators).
template <int R>
inline void dot_rows(const uint8_t* w, const int16_t* sc, const int8_t* a, int64_t kp,
                     int64_t blocks, int64_t* dots) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
  for (int64_t b = 0; b < blocks; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(w + b * 32 + 1024), _MM_HINT_T0);
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * 32));
    const __m256i q0 = _mm256_and_si256(packed, low);
    const __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
    const __m256i s0 = _mm256_set1_epi16(sc[2 * b]);
    const __m256i s1 = _mm256_set1_epi16(sc[2 * b + 1]);
    for (int r = 0; r < R; ++r) {
      const int8_t* ar = a + r * kp + b * kBlock;
      const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar));
      const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, a0), s0);
      const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, a1), s1);
      acc[r] = _mm256_add_epi32(acc[r], _mm256_add_epi32(p0, p1));
    }
  }
  for (int r = 0; r < R; ++r) dots[r] = hsum64(acc[r]);
}

// sum_g sc_g z_g asum_g (gp a multiple of 16; zeros past the real groups). sc_g z_g <= 3825,
// |asum_g| <= 4064: a lane adds two such products per 16 groups, below 2^31 up to 1024 groups.
inline int32_t zero_term(const int16_t* sc, const uint8_t* z, const int16_t* asum, int64_t gp) {
  __m256i acc = _mm256_setzero_si256();
  for (int64_t g = 0; g < gp; g += kZeroVec) {
    const __m256i zv = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z + g)));
    const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + g));
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(asum + g));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_mullo_epi16(zv, sv), av));
  }
  return hsum32(acc);
}

// Row x[0..k) -> a[0..kp) (zeros in the padding) and its group sums; returns the row's scale.
float quantize_row(const float* x, int64_t k, int64_t kp, int64_t gp, int8_t* a, int16_t* asum) {
  float peak = 0.f;
  bool finite = true;
  for (int64_t i = 0; i < k; ++i) {
    const float v = std::fabs(x[i]);
    finite = finite && std::isfinite(v);
    peak = std::max(peak, v);
  }
  std::fill(a, a + kp, 0);
  std::fill(asum, asum + gp, 0);
  if (!finite || !(peak > 0.f)) return finite ? 0.f : NAN;  // NaN rows stay NaN; zero rows give b
  const float inv = 127.f / peak;
  for (int64_t i = 0; i < k; ++i) {
    float v = std::nearbyint(x[i] * inv);
    v = std::min(127.f, std::max(-127.f, v));
    a[i] = static_cast<int8_t>(v);
    asum[i / kGroup] = static_cast<int16_t>(asum[i / kGroup] + a[i]);
  }
  return peak / 127.f;
}

inline int64_t padded(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

// x: [M, K] float; w: [N, Kp/2] uint8 (Kp = K padded to 64); sc: [N, Gp] int16 and z: [N, Gp]
// uint8 (Gp = Kp/32 padded to 16, zeros past the real groups); d: [N] float; bias: [N] float
// or empty.
torch::Tensor row_int4_linear(torch::Tensor x, torch::Tensor w, torch::Tensor sc, torch::Tensor z,
                              torch::Tensor d, torch::Tensor bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "x: [M, K] float32");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kByte && w.is_contiguous(), "w: [N, Kp/2] uint8");
  x = x.contiguous();
  const int64_t rows_m = x.size(0), k = x.size(1), n = w.size(0), kp = w.size(1) * 2;
  const int64_t groups = kp / kGroup, gp = padded(groups, kZeroVec);
  TORCH_CHECK(kp % kBlock == 0 && kp >= k && kp - k < kBlock, "w's K must be x's padded to 64");
  TORCH_CHECK(kp <= kMaxK, "K above 32768 could overflow int32 sums");
  TORCH_CHECK(sc.scalar_type() == torch::kShort && sc.is_contiguous() && sc.numel() == n * gp, "sc: [N, Gp] int16");
  TORCH_CHECK(z.scalar_type() == torch::kByte && z.is_contiguous() && z.numel() == n * gp, "z: [N, Gp] uint8");
  TORCH_CHECK(d.numel() == n && d.scalar_type() == torch::kFloat, "d: [N] float32");
  const bool has_bias = bias.numel() > 0;
  TORCH_CHECK(!has_bias || (bias.numel() == n && bias.scalar_type() == torch::kFloat), "bias: [N] float32");

  std::vector<int8_t> qa(static_cast<size_t>(rows_m * kp));
  std::vector<int16_t> qsum(static_cast<size_t>(rows_m * gp));
  std::vector<float> xs(static_cast<size_t>(rows_m));
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, rows_m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      xs[r] = quantize_row(xp + r * k, k, kp, gp, qa.data() + r * kp, qsum.data() + r * gp);
  });

  auto y = torch::empty({rows_m, n}, x.options());
  float* yp = y.data_ptr<float>();
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int16_t* scp = sc.data_ptr<int16_t>();
  const uint8_t* zp = z.data_ptr<uint8_t>();
  const float* dp = d.data_ptr<float>();
  const torch::Tensor b = has_bias ? bias.contiguous() : bias;
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  const int64_t blocks = kp / kBlock, wbytes = kp / 2;
  const int64_t grain = std::max<int64_t>(1, (32 * 1024) / wbytes);
  const int64_t chunk = std::max<int64_t>(1, (8 * 1024) / wbytes);  // channels per L1 block
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c0 = begin; c0 < end; c0 += chunk) {
      const int64_t c1 = std::min(end, c0 + chunk);
      for (int64_t r0 = 0; r0 < rows_m; r0 += 4) {
        const int64_t rows = std::min<int64_t>(4, rows_m - r0);
        const int8_t* ar = qa.data() + r0 * kp;
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t* wc = wp + c * wbytes;
          const int16_t* sc_c = scp + c * gp;
          int64_t dots[4];
          switch (rows) {
            case 1: dot_rows<1>(wc, sc_c, ar, kp, blocks, dots); break;
            case 2: dot_rows<2>(wc, sc_c, ar, kp, blocks, dots); break;
            case 3: dot_rows<3>(wc, sc_c, ar, kp, blocks, dots); break;
            default: dot_rows<4>(wc, sc_c, ar, kp, blocks, dots); break;
          }
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t sum = dots[r] - zero_term(sc_c, zp + c * gp, qsum.data() + (r0 + r) * gp, gp);
            float out = static_cast<float>(sum) * xs[r0 + r];
            out = out * dp[c];
            if (bp) out = out + bp[c];
            yp[(r0 + r) * n + c] = out;
          }
        }
      }
    }
  });
  return y;
}

// Weights [N, K] -> (w [N, Kp/2] uint8, sc [N, Gp] int16, z [N, Gp] uint8, d [N] float): per
// group of 32 the range [min, max] (widened to hold 0) on a 16-level grid whose step D * sc_g
// is rounded up, so that the range fits, and whose zero point z_g is the nearest level to 0.
std::vector<torch::Tensor> quantize_weight4(torch::Tensor weight) {
  TORCH_CHECK(weight.dim() == 2, "weight: [N, K]");
  auto wf = weight.to(torch::kFloat).contiguous();
  const int64_t n = wf.size(0), k = wf.size(1), kp = padded(k, kBlock);
  TORCH_CHECK(kp <= kMaxK, "4-bit weights take K up to 32768");
  const int64_t groups = kp / kGroup, gp = padded(groups, kZeroVec);
  auto w = torch::zeros({n, kp / 2}, torch::dtype(torch::kByte));
  auto sc = torch::zeros({n, gp}, torch::dtype(torch::kShort));
  auto z = torch::zeros({n, gp}, torch::dtype(torch::kByte));
  auto d = torch::empty({n}, torch::dtype(torch::kFloat));
  const float* src = wf.data_ptr<float>();
  uint8_t* wp = w.data_ptr<uint8_t>();
  int16_t* scp = sc.data_ptr<int16_t>();
  uint8_t* zp = z.data_ptr<uint8_t>();
  float* dp = d.data_ptr<float>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> lows(groups), highs(groups);
    std::vector<uint8_t> q(kp);
    for (int64_t c = begin; c < end; ++c) {
      const float* row = src + c * k;
      float top = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        float mn = 0.f, mx = 0.f;
        for (int64_t i = g * kGroup; i < std::min(k, (g + 1) * kGroup); ++i) {
          mn = std::min(mn, row[i]);
          mx = std::max(mx, row[i]);
        }
        lows[g] = mn;
        highs[g] = mx;
        top = std::max(top, (mx - mn) / 15.f);
      }
      const float dd = top > 0.f ? top / 255.f : 1.f;
      dp[c] = dd;
      std::fill(q.begin(), q.end(), 0);
      for (int64_t g = 0; g < groups; ++g) {
        const int s = std::min(255, std::max(1, static_cast<int>(std::ceil((highs[g] - lows[g]) / 15.f / dd))));
        const float unit = dd * s;
        const int zero = std::min(15, std::max(0, static_cast<int>(std::nearbyint(-lows[g] / unit))));
        scp[c * gp + g] = static_cast<int16_t>(s);
        zp[c * gp + g] = static_cast<uint8_t>(zero);
        for (int64_t i = g * kGroup; i < std::min(k, (g + 1) * kGroup); ++i) {
          const float v = std::nearbyint(row[i] / unit) + zero;
          q[i] = static_cast<uint8_t>(std::min(15.f, std::max(0.f, v)));
        }
      }
      uint8_t* out = wp + c * (kp / 2);
      for (int64_t blk = 0; blk < kp / kBlock; ++blk)
        for (int64_t j = 0; j < 32; ++j)
          out[blk * 32 + j] = static_cast<uint8_t>(q[blk * kBlock + j] | (q[blk * kBlock + 32 + j] << 4));
    }
  });
  return {w, sc, z, d};
}
