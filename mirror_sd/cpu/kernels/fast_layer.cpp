// A Qwen2/Llama decoder layer in two calls (mirror_sd/cpu/fast_layers.py): everything but the KV
// cache update, which stays in Python between them.
//
//   layer_pre:  RMSNorm -> fused q/k/v projection -> rotary  => q, k, v [B, heads, S, D]
//   layer_post: attention over the updated cache -> o_proj -> residual -> RMSNorm ->
//               fused gate/up -> silu(gate) * up -> down_proj -> residual
//
// At one decode row the layer's own arithmetic is small; what costs is the ~45 tensor ops and
// the Python around them (docs/performance.md). Every query row is computed on its
// own (its norm, its attention over the keys it may see, in a fixed order, by one thread), and
// the linear layers are the row-exact kernels of this extension, so a row's output is
// bit-identical whatever other rows share the call and whatever the thread count.
#include <torch/types.h>  // not torch/extension.h: a third of the compile time
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

torch::Tensor row_int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                              torch::Tensor wsum, torch::Tensor bias);
torch::Tensor row_int4_linear(torch::Tensor x, torch::Tensor w, torch::Tensor sc, torch::Tensor z,
                              torch::Tensor d, torch::Tensor bias);

namespace {

// One of this extension's linear layers: int8 [w int8, scale, wsum, bias] or int4 [w uint8,
// group scales, zero points, scale, bias]; bias may be empty.
torch::Tensor linear(const torch::Tensor& x, const std::vector<torch::Tensor>& p) {
  if (p.size() == 4 && p[0].scalar_type() == torch::kChar) return row_int8_linear(x, p[0], p[1], p[2], p[3]);
  TORCH_CHECK(p.size() == 5 && p[0].scalar_type() == torch::kByte, "linear: int8 or int4 parameters");
  return row_int4_linear(x, p[0], p[1], p[2], p[3], p[4]);
}

inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float a, const float* x, float* y, int64_t n) {  // y += a x
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// out[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)) for rows of length h
// Row-wise work this small runs on the calling thread unless there are many rows: waking the
// pool costs more than a decode row's norm or rotary.
constexpr int64_t kRowGrain = 32;

void rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t h, float* out) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * h;
      const float inv = 1.f / std::sqrt(dot(xr, xr, h) / static_cast<float>(h) + eps);
      for (int64_t i = 0; i < h; ++i) out[r * h + i] = w[i] * (xr[i] * inv);
    }
  });
}

}  // namespace

// h: [B, S, H]; cos, sin: [B, S, D] or [1, S, D] (one set of positions for the batch). Returns q [B, nq, S, D], k and v [B, nk, S, D].
std::vector<torch::Tensor> layer_pre(torch::Tensor h, torch::Tensor norm_w, double eps,
                                     std::vector<torch::Tensor> qkv, torch::Tensor cos,
                                     torch::Tensor sin, int64_t nq, int64_t nk) {
  TORCH_CHECK(h.dim() == 3 && h.scalar_type() == torch::kFloat, "h: [B, S, H] float32");
  h = h.contiguous();
  cos = cos.to(torch::kFloat).contiguous();
  sin = sin.to(torch::kFloat).contiguous();
  const int64_t b = h.size(0), s = h.size(1), hid = h.size(2), rows = b * s;
  const int64_t d = cos.size(-1);
  const bool shared = cos.numel() == s * d && b > 1;  // [1, S, D]: every row of the batch
  TORCH_CHECK((cos.numel() == rows * d || shared) && sin.numel() == cos.numel(), "cos, sin: [B or 1, S, D]");
  auto x = torch::empty({rows, hid}, h.options());
  rms_norm(h.data_ptr<float>(), norm_w.contiguous().data_ptr<float>(), static_cast<float>(eps),
           rows, hid, x.data_ptr<float>());
  auto y = linear(x, qkv);  // [rows, (nq + 2 nk) d]
  TORCH_CHECK(y.size(1) == (nq + 2 * nk) * d, "q/k/v sizes do not match the heads");
  auto q = torch::empty({b, nq, s, d}, h.options());
  auto k = torch::empty({b, nk, s, d}, h.options());
  auto v = torch::empty({b, nk, s, d}, h.options());
  const float* yp = y.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t width = (nq + 2 * nk) * d, half = d / 2;
  at::parallel_for(0, rows, kRowGrain, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const int64_t bi = r / s, si = r % s;
      const float* c = cp + (shared ? si : r) * d;
      const float* sn = sp + (shared ? si : r) * d;
      for (int64_t head = 0; head < nq + 2 * nk; ++head) {
        const float* src = yp + r * width + head * d;
        float* dst;
        if (head < nq) dst = q.data_ptr<float>() + ((bi * nq + head) * s + si) * d;
        else if (head < nq + nk) dst = k.data_ptr<float>() + ((bi * nk + head - nq) * s + si) * d;
        else { dst = v.data_ptr<float>() + ((bi * nk + head - nq - nk) * s + si) * d; }
        if (head >= nq + nk) {
          std::copy(src, src + d, dst);
          continue;
        }
        for (int64_t i = 0; i < d; ++i) {  // x cos + rotate_half(x) sin
          const float rot = i < half ? -src[i + half] : src[i - half];
          dst[i] = src[i] * c[i] + rot * sn[i];
        }
      }
    }
  });
  return {q, k, v};
}

// h: [B, S, H]; q: [B, nq, S, D]; key, value: [B, nk, T, D] (the cache after this step's
// update); mask: empty (causal: query i sees keys up to T - S + i), or [B, 1, S, T] bool (true:
// seen) or float (added to the scores). Returns the layer's output hidden states [B, S, H].
torch::Tensor layer_post(torch::Tensor h, torch::Tensor q, torch::Tensor key, torch::Tensor value,
                         torch::Tensor mask, double scaling, std::vector<torch::Tensor> o_proj,
                         torch::Tensor norm_w, double eps, std::vector<torch::Tensor> gate_up,
                         std::vector<torch::Tensor> down) {
  h = h.contiguous();
  q = q.contiguous();
  key = key.to(torch::kFloat).contiguous();
  value = value.to(torch::kFloat).contiguous();
  const int64_t b = h.size(0), s = h.size(1), hid = h.size(2), rows = b * s;
  const int64_t nq = q.size(1), d = q.size(3), nk = key.size(1), t = key.size(2);
  TORCH_CHECK(q.size(0) == b && q.size(2) == s && key.size(0) == b && key.size(3) == d && nq % nk == 0,
              "q, key: [B, heads, S or T, D]");
  TORCH_CHECK(t >= s, "the cache must hold this step's keys");
  const bool has_mask = mask.numel() > 0;
  const bool bool_mask = has_mask && mask.scalar_type() == torch::kBool;
  torch::Tensor maskf;
  if (has_mask) {
    TORCH_CHECK(mask.dim() == 4 && mask.size(0) == b && mask.size(2) == s && mask.size(3) == t,
                "mask: [B, 1, S, T]");
    maskf = bool_mask ? mask.contiguous() : mask.to(torch::kFloat).contiguous();
  }
  const int64_t mask_heads = has_mask ? mask.size(1) : 1;
  auto attn = torch::empty({rows, nq * d}, h.options());  // [B, S, nq, D]
  const float* qp = q.data_ptr<float>();
  const float* kp = key.data_ptr<float>();
  const float* vp = value.data_ptr<float>();
  float* ap = attn.data_ptr<float>();
  const int64_t group = nq / nk;
  const float scale = static_cast<float>(scaling);
  // a job is one query row of one head: about t * d multiply-adds twice
  const int64_t grain = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, t * d));
  at::parallel_for(0, b * nq * s, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(t);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t bi = job / (nq * s), head = (job / s) % nq, si = job % s;
      const int64_t kv = head / group;
      const float* qr = qp + ((bi * nq + head) * s + si) * d;
      const float* kb = kp + (bi * nk + kv) * t * d;
      const float* vb = vp + (bi * nk + kv) * t * d;
      float* out = ap + (bi * s + si) * nq * d + head * d;
      const int64_t mrow = ((bi * mask_heads + (mask_heads > 1 ? head : 0)) * s + si) * t;
      const int64_t last = has_mask ? t : t - s + si + 1;  // keys [0, last) may be seen
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < last; ++j) {
        float sc = dot(qr, kb + j * d, d) * scale;
        if (bool_mask) {
          if (!maskf.data_ptr<bool>()[mrow + j]) sc = -std::numeric_limits<float>::infinity();
        } else if (has_mask) {
          sc += maskf.data_ptr<float>()[mrow + j];
        }
        scores[j] = sc;
        top = std::max(top, sc);
      }
      std::fill(out, out + d, 0.f);
      if (!(top > -std::numeric_limits<float>::infinity())) continue;  // sees nothing: zeros
      float total = 0.f;
      for (int64_t j = 0; j < last; ++j) {
        scores[j] = std::exp(scores[j] - top);
        total += scores[j];
      }
      const float inv = 1.f / total;
      for (int64_t j = 0; j < last; ++j)
        if (scores[j] != 0.f) axpy(scores[j] * inv, vb + j * d, out, d);
    }
  });
  auto hidden = h.view({rows, hid}) + linear(attn, o_proj);
  auto x = torch::empty_like(hidden);
  rms_norm(hidden.data_ptr<float>(), norm_w.contiguous().data_ptr<float>(), static_cast<float>(eps),
           rows, hid, x.data_ptr<float>());
  auto gu = linear(x, gate_up);  // [rows, 2 I]
  const int64_t inter = gu.size(1) / 2;
  auto act = torch::empty({rows, inter}, h.options());
  const float* gp = gu.data_ptr<float>();
  float* actp = act.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, (64 * 1024) / inter), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r)
      for (int64_t i = 0; i < inter; ++i) {
        const float g = gp[r * 2 * inter + i];
        actp[r * inter + i] = g / (1.f + std::exp(-g)) * gp[r * 2 * inter + inter + i];
      }
  });
  hidden.add_(linear(act, down));
  return hidden.view({b, s, hid});
}
