// The rule by which one step's parameter gradients from a backend under test agree with a reference backend's
// (test_gpu_step holds the CUDA backend to it against the CPU; test_gradient_agreement checks the rule itself on the
// CPU: fp32 against fp64 passes, planted errors are caught).
//
// Per tensor of the table, with G the whole reference gradient (every tensor together):
//  - a tensor whose reference gradient matters, |g_ref| >= negligible |G|: cosine(g, g_ref) >= min_cosine;
//  - a tensor whose reference gradient is negligible: |g - g_ref| <= absolute |G|, an absolute bound. The attention
//    key bias is one: its exact gradient is zero, since softmax is unchanged by adding one constant to all scores of
//    a query row and the key bias adds q_i . b_k to every score of row i (dropout or not), so each backend returns
//    its own rounding noise, and the cosine of two noise vectors says nothing.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/tensor_table.h"

namespace bertperf {

// The defaults hold the CUDA backend's bf16 step to the CPU's fp32 one. In the small BERT of small_bert_step.h the
// whole gradient's norm is 2.8, the key biases' are rounding noise (4e-11 in fp32; about 5e-6 from a simulation of
// the bf16 attention backward), and the smallest gradients that matter are the query biases' (2.6e-5 and 3.7e-5 of
// the whole, which bf16 noise of that size would tilt to a cosine near 0.998): below 1e-4 of the whole, a tensor is
// held to 1e-5 of the whole, which the noise passes and a lost or zeroed query or key bias gradient does not.
struct GradientTolerance {
  double min_cosine = 0.999;
  double negligible = 1e-4;
  double absolute = 1e-5;
};

// Each tensor's reference gradient norm relative to the whole reference gradient's.
inline std::vector<double> relative_gradient_norms(const TensorTable& table, const FlatTensors& ref) {
  std::vector<double> norms;
  double total = 0;
  for (const TensorInfo& t : table.tensors()) {
    const float* r = ref.get(t);
    double s = 0;
    for (size_t i = 0; i < t.numel; ++i) s += double(r[i]) * r[i];
    norms.push_back(s);
    total += s;
  }
  for (double& n : norms) n = total > 0 ? std::sqrt(n / total) : 0.0;
  return norms;
}

// The tensors that break the rule, one line each ("name: why"); empty when the gradients agree.
inline std::vector<std::string> gradient_disagreements(const TensorTable& table, const FlatTensors& got,
                                                        const FlatTensors& ref, const GradientTolerance& tol = {}) {
  double total = 0;
  for (const TensorInfo& t : table.tensors()) {
    const float* r = ref.get(t);
    for (size_t i = 0; i < t.numel; ++i) total += double(r[i]) * r[i];
  }
  total = std::sqrt(total);
  std::vector<std::string> out;
  if (!(total > 0)) return {"the reference gradient is zero or not finite"};
  for (const TensorInfo& t : table.tensors()) {
    const float* a = got.get(t);
    const float* b = ref.get(t);
    double ab = 0, aa = 0, bb = 0, dd = 0;
    for (size_t i = 0; i < t.numel; ++i) {
      ab += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
      dd += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    }
    if (!std::isfinite(aa)) {
      out.push_back(t.name + ": not finite");
    } else if (std::sqrt(bb) >= tol.negligible * total) {
      const double cosine = aa > 0 ? ab / std::sqrt(aa * bb) : 0.0;
      if (!(cosine >= tol.min_cosine))
        out.push_back(cat(t.name, ": cosine similarity ", cosine, " of the gradients, under ", tol.min_cosine));
    } else if (!(std::sqrt(dd) <= tol.absolute * total)) {
      out.push_back(cat(t.name, ": a gradient negligible in the reference (", std::sqrt(bb) / total,
                        " of the whole) differs from it by ", std::sqrt(dd) / total, " of the whole, over ",
                        tol.absolute));
    }
  }
  return out;
}

}  // namespace bertperf
