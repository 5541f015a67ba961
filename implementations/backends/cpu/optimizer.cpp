// CPU optimizer ops over flat buffers (ops.h): global-norm clipping, gradient accumulation and the two LAMB
// stages (cpu_ops.h). The arithmetic is the reference's, element for element in T, with norms in double: per-chunk
// partial sums in parallel, then added in chunk order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_math.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"
#include "core/errors.h"

namespace bertperf::cpu {

namespace {

// Calls body(c, begin, n, tensor) for every chunk of `chunks` (n elements from flat offset begin), c counted from 0,
// in parallel. Chunks are similar in size (at most the table's chunk length) but the last of each tensor is short:
// dynamic scheduling. Bodies index from local pointers (x = buffer + begin, x[i] for i < n): GCC vectorises that
// form with plain loads, but gathers when a captured pointer is indexed with the chunk's flat offsets.
template <typename Body>
void for_chunks(const ops::Chunks& chunks, Body body) {
#pragma omp parallel for schedule(dynamic, 4)
  for (int c = 0; c < chunks.count; ++c) {
    const int at = chunks.first + c;
    body(c, static_cast<size_t>(chunks.begin[at]), static_cast<size_t>(chunks.end[at] - chunks.begin[at]),
         chunks.tensor[at]);
  }
}

double* partial_sums(std::span<double> scratch, size_t n) {
  BERT_CHECK(scratch.size() >= n, "an optimizer op over chunks needs ", n, " partial sums, handed ", scratch.size());
  return scratch.data();
}

}  // namespace

template <typename T>
void gradient_clip(const ops::GradientClip& p, std::span<double> scratch) {
  const T* g = static_cast<const T*>(p.grads);
  double* partial = partial_sums(scratch, scratch_doubles(p));
  for_chunks(p.chunks, [=](int c, size_t begin, size_t n, int32_t) {
    const T* x = g + begin;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
    partial[c] = s;
  });
  double total = 0;
  for (int c = 0; c < p.chunks.count; ++c) total += partial[c];
  if (p.partial) {
    *p.partial = total;
    return;
  }
  p.scalars->grad_norm_sq = total;
  gradient_clip_finish({p.scalars});
}

void gradient_clip_finish(const ops::GradientClipFinish& p) {
  ops::StepScalars& s = *p.scalars;
  const double max_norm = s.max_grad_norm;
  BERT_CHECK(max_norm > 0, "max_grad_norm must be positive, got ", max_norm);
  const double norm = std::sqrt(s.grad_norm_sq);
  s.clip_scale = 1.0f;
  if (!std::isfinite(norm)) {
    ++s.nonfinite;
  } else if (norm > max_norm) {
    s.clip_scale = static_cast<float>(max_norm / norm);
  }
}

void schedule_step(const ops::ScheduleStep& p) {
  BERT_CHECK(p.schedule.train_steps > 0, "the step's schedule needs train_steps > 0, got ", p.schedule.train_steps);
  ops::apply_schedule_step(p);
}

void record_step(const ops::RecordStep& p) {
  BERT_CHECK(p.slots > 0, "a ring of step records needs a slot, got ", p.slots);
  ops::apply_record_step(p);
}

template <typename T>
void gradient_accumulate(const ops::GradientAccumulate& p) {
  // A micro-batch whose clip saw a non-finite norm adds nothing (the step's update is skipped anyway).
  if (!std::isfinite(p.scalars->grad_norm_sq)) return;
  // g * clip_scale, then * scale: the order of the reference's clip-then-add.
  const T clip = static_cast<T>(p.scalars->clip_scale), scale = static_cast<T>(p.scale);
  const T* g = static_cast<const T*>(p.grads);
  T* sum = static_cast<T*>(p.sum);
  for_chunks(p.chunks, [=](int, size_t begin, size_t n, int32_t) {
    const T* x = g + begin;
    T* y = sum + begin;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) y[i] += x[i] * clip * scale;
  });
}

namespace {

kmath::LambElementParams lamb_element_params(const ops::StepScalars& s, float beta1, float one_minus_beta1,
                                             float beta2, float one_minus_beta2, float epsilon, float decay) {
  return {beta1, one_minus_beta1, beta2, one_minus_beta2, s.inv_bias_correction1, s.inv_bias_correction2,
          epsilon, decay};
}

}  // namespace

template <typename T>
void lamb_moments(const ops::LambMoments& p, std::span<double> scratch) {
  if (p.scalars->nonfinite > 0) return;
  const T* grads = static_cast<const T*>(p.grads);
  const T* master = static_cast<const T*>(p.master);
  T* m = static_cast<T*>(p.m);
  T* v = static_cast<T*>(p.v);
  double* partial = partial_sums(scratch, scratch_doubles(p));
  const ops::LambMoments& q = p;
  for_chunks(p.chunks, [=, &q](int c, size_t begin, size_t n, int32_t tensor) {
    const kmath::LambElementParams e =
        lamb_element_params(*q.scalars, q.beta1, q.one_minus_beta1, q.beta2, q.one_minus_beta2, q.epsilon,
                            q.excluded[tensor] ? 0.0f : q.weight_decay);
    const T* g = grads + begin;
    const T* w = master + begin;
    T* mc = m + begin;
    T* vc = v + begin;
    double w_sq = 0, u_sq = 0;
    if (q.grad_scale) {
      const T scale = static_cast<T>(*q.grad_scale);
#pragma omp simd reduction(+ : w_sq, u_sq)
      for (size_t i = 0; i < n; ++i) {
        kmath::lamb_moments(mc[i], vc[i], g[i] * scale, e);
        const T u = kmath::lamb_direction(mc[i], vc[i], w[i], e, Sqrt{});
        w_sq += double(w[i]) * double(w[i]);
        u_sq += double(u) * double(u);
      }
    } else {
#pragma omp simd reduction(+ : w_sq, u_sq)
      for (size_t i = 0; i < n; ++i) {
        kmath::lamb_moments(mc[i], vc[i], g[i], e);
        const T u = kmath::lamb_direction(mc[i], vc[i], w[i], e, Sqrt{});
        w_sq += double(w[i]) * double(w[i]);
        u_sq += double(u) * double(u);
      }
    }
    partial[2 * c] = w_sq;
    partial[2 * c + 1] = u_sq;
  });
  for (int c = 0; c < p.chunks.count; ++c) {
    const int32_t t = p.chunks.tensor[p.chunks.first + c];
    p.norms[2 * t] += partial[2 * c];
    p.norms[2 * t + 1] += partial[2 * c + 1];
  }
}

// The bf16 backend (T = bf16) updates its fp32 master weights and writes its bf16 weight copy from them in the same
// pass, as the CUDA backend.
template <typename Tb>
void lamb_apply(const ops::LambApply& p) {
  using T = typename Types<Tb>::F;
  using W = typename Types<Tb>::W;
  if (p.scalars->nonfinite > 0) return;
  T* master = static_cast<T*>(p.master);
  W* weights = static_cast<W*>(p.weights);
  if (static_cast<void*>(weights) == static_cast<void*>(master)) weights = nullptr;
  const T* m = static_cast<const T*>(p.m);
  const T* v = static_cast<const T*>(p.v);
  const float lr = p.scalars->learning_rate;
  const ops::LambApply& q = p;
  for_chunks(p.chunks, [=, &q](int, size_t begin, size_t n, int32_t tensor) {
    const bool excluded = q.excluded[tensor] != 0;
    // The moments' betas play no part here.
    const kmath::LambElementParams e =
        lamb_element_params(*q.scalars, 0, 0, 0, 0, q.epsilon, excluded ? 0.0f : q.weight_decay);
    const float ratio =
        kmath::lamb_trust_ratio(std::sqrt(q.norms[2 * tensor]), std::sqrt(q.norms[2 * tensor + 1]), excluded);
    const T step = static_cast<T>(ratio * lr);
    const T* mc = m + begin;
    const T* vc = v + begin;
    T* w = master + begin;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) w[i] -= step * kmath::lamb_direction(mc[i], vc[i], w[i], e, Sqrt{});
    if (weights) {
      W* out = weights + begin;
#pragma omp simd
      for (size_t i = 0; i < n; ++i) out[i] = store<W>(w[i]);
    }
  });
}

#define BERTPERF_INSTANTIATE(T)                                                           \
  template void gradient_clip<T>(const ops::GradientClip&, std::span<double>);            \
  template void gradient_accumulate<T>(const ops::GradientAccumulate&);                  \
  template void lamb_moments<T>(const ops::LambMoments&, std::span<double>);              \
  template void lamb_apply<T>(const ops::LambApply&);
BERTPERF_INSTANTIATE(float)
BERTPERF_INSTANTIATE(double)
#undef BERTPERF_INSTANTIATE
template void lamb_apply<bf16>(const ops::LambApply&);

}  // namespace bertperf::cpu
