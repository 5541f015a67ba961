// LAMB, global-norm clipping and gradient accumulation on the CPU (lamb.h).
#include "optim/lamb.h"

#include <cmath>

#include "core/errors.h"
#include "model/bert_params.h"

namespace bertperf {

namespace {

// 32K floats = 128 KiB per chunk: large enough that scheduling costs nothing, small enough that
// the biggest tensor (the word embeddings) spreads over every thread.
constexpr size_t kChunkElements = size_t{1} << 15;

// The chunk list of a table. Tensors are chunked independently so every chunk has one tensor.
std::vector<FlatChunk> make_chunks(const TensorTable& table) {
  std::vector<FlatChunk> chunks;
  for (size_t t = 0; t < table.size(); ++t)
    for (size_t b = 0; b < table[t].numel; b += kChunkElements)
      chunks.push_back({t, b, std::min(b + kChunkElements, table[t].numel)});
  return chunks;
}

// Per-chunk partial sums of squares, then summed in chunk order: deterministic for any thread count.
// `partial` is caller-owned scratch, so repeated calls allocate nothing.
double sum_of_squares(const FlatTensors& x, const std::vector<FlatChunk>& chunks, std::vector<double>& partial) {
  partial.resize(chunks.size());
  const TensorTable& table = x.table();
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t c = 0; c < chunks.size(); ++c) {
    const float* p = x.get(table[chunks[c].tensor]);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = chunks[c].begin; i < chunks[c].end; ++i) s += double(p[i]) * double(p[i]);
    partial[c] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale_all(FlatTensors& x, float scale) {
  float* p = x.data();
  const size_t n = x.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] *= scale;
}

double clip_by_global_norm(FlatTensors& grads, double max_norm, const std::vector<FlatChunk>& chunks,
                           std::vector<double>& partial) {
  BERT_CHECK(max_norm > 0, "max_grad_norm must be positive, got ", max_norm);
  const double norm = std::sqrt(sum_of_squares(grads, chunks, partial));
  if (!std::isfinite(norm)) return norm;
  if (norm > max_norm) scale_all(grads, static_cast<float>(max_norm / norm));
  return norm;
}

}  // namespace

double global_norm(const FlatTensors& grads) {
  std::vector<double> partial;
  return std::sqrt(sum_of_squares(grads, make_chunks(grads.table()), partial));
}

double clip_by_global_norm(FlatTensors& grads, double max_norm) {
  std::vector<double> partial;
  return clip_by_global_norm(grads, max_norm, make_chunks(grads.table()), partial);
}

// ---- LAMB ---------------------------------------------------------------------------------------

Lamb::Lamb(const TensorTable& table, const LambHyperparams& hp)
    : table_(&table), hp_(hp), m_(table), v_(table), excluded_(table.size()), ratio_(table.size()) {
  BERT_CHECK(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, "LAMB betas must be in [0, 1), got ",
             hp.beta1, " and ", hp.beta2);
  BERT_CHECK(hp.epsilon > 0, "LAMB epsilon must be positive, got ", hp.epsilon);
  for (size_t t = 0; t < table.size(); ++t) excluded_[t] = lamb_excluded(table[t].name);
  chunks_ = make_chunks(table);
  w_sq_.resize(chunks_.size());
  u_sq_.resize(chunks_.size());
}

void Lamb::step(FlatTensors& params, const FlatTensors& grads, double lr) {
  BERT_CHECK(&params.table() == table_ && &grads.table() == table_,
             "LAMB: parameters and gradients must be laid out by the optimizer's table");
  ++t_;
  const std::vector<FlatChunk>& chunks = chunks_;
  const TensorTable& table = *table_;
  // 1 - beta formed in double, as the reference does with its Python-float betas.
  const float b1 = static_cast<float>(hp_.beta1), one_minus_b1 = static_cast<float>(1.0 - hp_.beta1);
  const float b2 = static_cast<float>(hp_.beta2), one_minus_b2 = static_cast<float>(1.0 - hp_.beta2);
  const float eps = static_cast<float>(hp_.epsilon), wd = static_cast<float>(hp_.weight_decay);
  // Bias corrections as reciprocals, formed in double so a large t loses nothing before the cast.
  const float inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(hp_.beta1, double(t_))));
  const float inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(hp_.beta2, double(t_))));

  // The update direction u of element i; computed in both passes rather than stored, so LAMB needs
  // no buffer beyond m and v. `decay` is weight_decay, or 0 for an excluded tensor (branch-free, so
  // the loops vectorise).
  auto direction = [=](float m, float v, float w, float decay) {
    return (m * inv_c1) / (std::sqrt(v * inv_c2) + eps) + decay * w;
  };

  // Pass 1: moments, and per-chunk |w|^2 and |u|^2 (w before the update).
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t c = 0; c < chunks.size(); ++c) {
    const TensorInfo& info = table[chunks[c].tensor];
    const float decay = excluded_[chunks[c].tensor] ? 0.0f : wd;
    const float* g = grads.get(info);
    const float* w = params.get(info);
    float* m = m_.get(info);
    float* v = v_.get(info);
    double w_sq = 0, u_sq = 0;
#pragma omp simd reduction(+ : w_sq, u_sq)
    for (size_t i = chunks[c].begin; i < chunks[c].end; ++i) {
      m[i] = b1 * m[i] + one_minus_b1 * g[i];
      v[i] = b2 * v[i] + one_minus_b2 * g[i] * g[i];
      const float u = direction(m[i], v[i], w[i], decay);
      w_sq += double(w[i]) * double(w[i]);
      u_sq += double(u) * double(u);
    }
    w_sq_[c] = w_sq;
    u_sq_[c] = u_sq;
  }

  // Trust ratios, per tensor, from the chunk sums in chunk order.
  for (size_t c = 0, t = 0; t < table.size(); ++t) {
    double w_sq = 0, u_sq = 0;
    for (; c < chunks.size() && chunks[c].tensor == t; ++c) {
      w_sq += w_sq_[c];
      u_sq += u_sq_[c];
    }
    const double w_norm = std::sqrt(w_sq), u_norm = std::sqrt(u_sq);
    ratio_[t] = (excluded_[t] || !(w_norm > 0) || !(u_norm > 0)) ? 1.0f : static_cast<float>(w_norm / u_norm);
  }

  // Pass 2: the update.
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t c = 0; c < chunks.size(); ++c) {
    const TensorInfo& info = table[chunks[c].tensor];
    const float decay = excluded_[chunks[c].tensor] ? 0.0f : wd;
    const float step = ratio_[chunks[c].tensor] * static_cast<float>(lr);
    const float* m = m_.get(info);
    const float* v = v_.get(info);
    float* w = params.get(info);
#pragma omp simd
    for (size_t i = chunks[c].begin; i < chunks[c].end; ++i) w[i] -= step * direction(m[i], v[i], w[i], decay);
  }
}

// ---- gradient accumulation ----------------------------------------------------------------------

GradAccumulator::GradAccumulator(const TensorTable& table, int micro_batches, double max_grad_norm)
    : micro_batches_(micro_batches), max_grad_norm_(max_grad_norm), sum_(table), chunks_(make_chunks(table)) {
  BERT_CHECK(micro_batches > 0, "gradient accumulation needs at least one micro-batch, got ", micro_batches);
  BERT_CHECK(max_grad_norm > 0, "max_grad_norm must be positive, got ", max_grad_norm);
}

double GradAccumulator::add(FlatTensors& micro) {
  BERT_CHECK(&micro.table() == &sum_.table(), "GradAccumulator: gradient laid out by another table");
  BERT_CHECK(added_ < micro_batches_, "GradAccumulator: ", added_, " micro-batches added without a reset");
  const double norm = clip_by_global_norm(micro, max_grad_norm_, chunks_, partial_);
  if (!std::isfinite(norm)) return norm;
  const float inv_n = 1.0f / static_cast<float>(micro_batches_);
  const float* g = micro.data();
  float* s = sum_.data();
  const size_t n = sum_.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) s[i] += g[i] * inv_n;
  ++added_;
  return norm;
}

void GradAccumulator::reset() {
  sum_.zero();
  added_ = 0;
}

}  // namespace bertperf
