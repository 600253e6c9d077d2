// y = x W^T + b with int8 weights (one scale per output channel) and 7-bit activations (one
// scale per row), for a few rows at a time on an AVX2 CPU (mirror_sd/cpu/int8.py).
//
// Every row is quantized on its own and its dot products are exact int32 sums, finished by
// the same float ops in the same order: a row's output is bit-identical whatever other rows
// share the call, so verifying k tokens gives the bits of decoding them one by one.
// Activations are 7-bit (|q| <= 63) and stored offset by 64 as unsigned bytes (1..127);
// weights are symmetric int8 (|q| <= 127). vpmaddubsw's pair sums then stay within
// 2 * 127 * 127 = 32258 (no int16 saturation), and the offset comes off exactly at the end:
// sum (q + 64) w - 64 sum w, with sum w per channel computed once with the weights.
#include <torch/types.h>  // not torch/extension.h: a third of the compile time
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kAlign = 32;  // K is padded to whole 32-byte vectors (zeros)
constexpr float kActMax = 63.f;  // 7-bit activations ...
constexpr int kOffset = 64;  // ... stored as q + 64 (1..127)
// Rows per pass over a channel block: a verify window of up to 7 tokens (8 rows) reads each
// weight once; the accumulators (8) and operands fit AVX2's 16 registers.
constexpr int64_t kRowBlock = 8;

inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// dots[r] = sum_k u[r][k] * w[k] for R rows of offset activations u (R accumulators in
// registers); prefetches the weights ahead, since one row (a decode step) is bound by how
// fast they stream in.
template <int R>
inline void dot_rows(const int8_t* w, const uint8_t* u, int64_t kp, int64_t vecs,
                     int32_t* dots) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
  for (int64_t v = 0; v < vecs; ++v) {
    _mm_prefetch(reinterpret_cast<const char*>(w + v * kAlign + 1024), _MM_HINT_T0);
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + v * kAlign));
    for (int r = 0; r < R; ++r) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + r * kp + v * kAlign));
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(a, wv), ones));
    }
  }
  for (int r = 0; r < R; ++r) dots[r] = hsum(acc[r]);
}

// Quantize row x[0..k) into u[0..kp) (q + 64 as unsigned bytes, q = 0 in the padding);
// returns the row's scale.
float quantize_row(const float* x, int64_t k, int64_t kp, uint8_t* u) {
  float peak = 0.f;
  bool finite = true;
  for (int64_t i = 0; i < k; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && std::isfinite(a);
    peak = std::max(peak, a);
  }
  if (!finite || !(peak > 0.f)) {  // a NaN or inf row stays NaN; an all-zero row gives the bias
    for (int64_t i = 0; i < kp; ++i) u[i] = kOffset;
    return finite ? 0.f : NAN;
  }
  const float inv = kActMax / peak;
  for (int64_t i = 0; i < k; ++i) {
    float v = std::nearbyint(x[i] * inv);
    v = std::min(kActMax, std::max(-kActMax, v));
    u[i] = static_cast<uint8_t>(static_cast<int>(v) + kOffset);
  }
  for (int64_t i = k; i < kp; ++i) u[i] = kOffset;
  return peak / kActMax;
}

}  // namespace

// w: [N, Kp] int8 (Kp a multiple of 32, zero padded), wscale: [N] float, wsum: [N] int32 (the
// channel's int8 weights summed), bias: [N] float or
// an empty tensor; x: [M, K] float. Returns [M, N] float.
torch::Tensor row_int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                              torch::Tensor wsum, torch::Tensor bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "x: [M, K] float32");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kChar && w.is_contiguous(), "w: [N, Kp] int8");
  x = x.contiguous();
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0), kp = w.size(1);
  TORCH_CHECK(kp % kAlign == 0 && kp >= k && kp - k < kAlign, "w's K must be x's padded to 32");
  TORCH_CHECK(wscale.numel() == n && wscale.scalar_type() == torch::kFloat, "wscale: [N] float32");
  TORCH_CHECK(wsum.numel() == n && wsum.scalar_type() == torch::kInt, "wsum: [N] int32");
  const bool has_bias = bias.numel() > 0;
  TORCH_CHECK(!has_bias || (bias.numel() == n && bias.scalar_type() == torch::kFloat), "bias: [N] float32");

  // each row quantized on its own
  std::vector<uint8_t> qs(static_cast<size_t>(m * kp));
  std::vector<float> xs(static_cast<size_t>(m));
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, m, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) xs[r] = quantize_row(xp + r * k, k, kp, qs.data() + r * kp);
  });


  auto y = torch::empty({m, n}, x.options());
  float* yp = y.data_ptr<float>();
  const int8_t* wp = w.data_ptr<int8_t>();
  const float* sp = wscale.data_ptr<float>();
  const float* bp = has_bias ? bias.contiguous().data_ptr<float>() : nullptr;
  const uint8_t* qsp = qs.data();
  const int32_t* wsp = wsum.data_ptr<int32_t>();
  const float* xsp = xs.data();
  const int64_t vecs = kp / kAlign;
  // about 64 KiB of weights per task: large enough to amortize, small enough to split evenly
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / kp);

  // Channels in blocks of about 16 KiB of weights, so that with many rows (a prompt) each
  // block of kRowBlock rows of activations is read from L1 for the whole channel block
  // instead of once per channel. Integer sums are exact in any order: the blocking does not
  // change a bit.
  const int64_t block = std::max<int64_t>(1, (16 * 1024) / kp);
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c0 = begin; c0 < end; c0 += block) {
      const int64_t c1 = std::min(end, c0 + block);
      for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
        const int64_t rows = std::min<int64_t>(kRowBlock, m - r0);
        const uint8_t* xq = qsp + r0 * kp;
        for (int64_t c = c0; c < c1; ++c) {
          const int8_t* wrow = wp + c * kp;
          int32_t dots[kRowBlock];
          switch (rows) {
            case 1: dot_rows<1>(wrow, xq, kp, vecs, dots); break;
            case 2: dot_rows<2>(wrow, xq, kp, vecs, dots); break;
            case 3: dot_rows<3>(wrow, xq, kp, vecs, dots); break;
            case 4: dot_rows<4>(wrow, xq, kp, vecs, dots); break;
            case 5: dot_rows<5>(wrow, xq, kp, vecs, dots); break;
            case 6: dot_rows<6>(wrow, xq, kp, vecs, dots); break;
            case 7: dot_rows<7>(wrow, xq, kp, vecs, dots); break;
            default: dot_rows<8>(wrow, xq, kp, vecs, dots); break;
          }
          for (int64_t r = 0; r < rows; ++r) {
            float out = static_cast<float>(dots[r] - kOffset * wsp[c]) * xsp[r0 + r];
            out = out * sp[c];
            if (bp) out = out + bp[c];
            yp[(r0 + r) * n + c] = out;
          }
        }
      }
    }
  });
  return y;
}

// Weights -> (int8 [N, Kp], scale [N], sum of each channel's int8 weights [N]): one symmetric
// scale per output channel, |q| <= 127.
std::vector<torch::Tensor> quantize_weight(torch::Tensor weight) {
  TORCH_CHECK(weight.dim() == 2, "weight: [N, K]");
  auto wf = weight.to(torch::kFloat).contiguous();
  const int64_t n = wf.size(0), k = wf.size(1), kp = (k + kAlign - 1) / kAlign * kAlign;
  auto q = torch::zeros({n, kp}, torch::dtype(torch::kChar));
  auto s = torch::empty({n}, torch::dtype(torch::kFloat));
  auto sum = torch::empty({n}, torch::dtype(torch::kInt));
  int32_t* sump = sum.data_ptr<int32_t>();
  const float* src = wf.data_ptr<float>();
  int8_t* qp = q.data_ptr<int8_t>();
  float* sp = s.data_ptr<float>();
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const float* row = src + c * k;
      float peak = 0.f;
      for (int64_t i = 0; i < k; ++i) peak = std::max(peak, std::fabs(row[i]));
      const float scale = peak > 0.f ? peak / 127.f : 1.f;
      sp[c] = scale;
      int32_t total = 0;
      for (int64_t i = 0; i < k; ++i) {
        float v = std::nearbyint(row[i] / scale);
        qp[c * kp + i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, v)));
        total += qp[c * kp + i];
      }
      sump[c] = total;
    }
  });
  return {q, s, sum};
}
