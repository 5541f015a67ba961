// The backend-conformance test: every op of the vocabulary (backends/ops.h), on every backend of the registry
// (registry/registry.h) that this build can run here (available_backends(); the others are reported as skipped),
// against the CPU backend in fp64 as the
// oracle, on random shapes from small to BERT-base sizes, including variable-length layouts (several sequences per
// batch, lengths 1 to S, filler tokens past the last sequence). A backend that is not here is reported as skipped.
//
// How a case runs: its tensors are uploaded into each backend's dtypes (upload_floats; the values are fp32 numbers,
// so every backend starts from the same inputs), outputs are poisoned with NaN first (so an output an op fails to
// write shows up), parameter gradients and other accumulated outputs start non-zero (so "+=" is checked), and the
// case's ops run. What is compared is what is backend-independent: outputs, gradients, and the saved tensors a
// later op reads (log-sum-exp, mean and rstd, pre-activations, sums), not `saved` or `workspace`, whose layout is
// the backend's own.
//
// Tolerances follow the backend's dtypes. A backend with fp32 activations (the CPU) must agree with the fp64
// oracle to a small multiple of fp32 rounding (per element, relative to the tensor's largest value). A backend
// with bf16 in any dtype must have an error (L2 against the oracle) of at most twice that of the same math done
// naively at its precision: the CPU's fp32 ops run on inputs rounded to bf16 wherever the backend keeps bf16, with
// those outputs rounded to bf16 as well (naive_bf16 below). A device backend whose dtypes a host backend shares (CUDA
// and cpu-bf16, which round where ops.h's rounding table says) must also be at least as close to that twin as to the
// oracle, except in the cases the backend declares its options take off the table (BackendEntry::off_table, each
// named in the output). Each backend runs under the ctest label it declares, with the option sets it declares
// besides its defaults (BackendInfo::test_label, test_variants): this file names no backend but the CPU oracle.
//
// Every backend runs each case twice and must give the same bits both times, except for the ops it declares
// non-deterministic (Capabilities::nondeterministic; the CUDA attention backward off Hopper).
//
// Dropout is compared with masks on, since every backend draws ops.h's Philox masks. A backend that draws its own
// masks for an op declares it (Capabilities::own_dropout_masks); that op is then compared with dropout off, and the
// forward ops' drop rate and scaling are checked statistically (which every backend's forward ops also get here).
// The attention, forward and backward, is also compared with dropout on, on the masks the backend drew (read back
// from a forward over one-hot values), with an fp64 reference of its own (AttentionBackwardWithDropout).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/fp8.h"
#include "backends/kernel_math.h"
#include "backends/ops.h"
#include "core/errors.h"
#include "flat_problem.h"
#include "registry/registry.h"

namespace bertperf {
namespace {

using ops::Activation;
using ops::WeightLayout;
using Vec = std::vector<double>;
using Ids = std::vector<int32_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The ops a case runs, by the names in its op field ("lamb_moments + lamb_apply").
ops::OpMask ops_of(const std::string& case_op) {
  ops::OpMask mask;
  for (int i = 0; i < ops::kOpCount; ++i) {
    const auto op = static_cast<ops::Op>(i);
    const std::string name = ops::op_name(op);
    for (size_t at = case_op.find(name); at != std::string::npos; at = case_op.find(name, at + 1)) {
      const size_t end = at + name.size();
      const auto is_word = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
      if ((at == 0 || !is_word(case_op[at - 1])) && (end == case_op.size() || !is_word(case_op[end]))) mask.add(op);
    }
  }
  return mask;
}

// ---- bf16 ------------------------------------------------------------------------------------------------

// x rounded to bf16 (round to nearest even, as the backends' conversions), as a float.
float round_bf16(float x) {
  if (std::isnan(x)) return x;
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xFFFF0000u);
}

// ---- test tensors and cases ------------------------------------------------------------------------------

// A tensor's element type: one of the backend's three float dtypes (ops.h: A, W, F), a fixed type, or raw bytes
// (structs such as StepScalars, and the attention buffers whose size and layout are the backend's).
enum class Kind : uint8_t { A, W, F, F32, F64, I32, I64, U8, BYTES, SCALARS, RECORDS, ATTN_SAVED, ATTN_WORKSPACE };
// IN: uploaded, not compared. OUT: poisoned, compared. INOUT: uploaded, compared (accumulated outputs).
// SCRATCH: poisoned, not compared.
enum class Role : uint8_t { IN, OUT, INOUT, SCRATCH };

bool is_float(Kind k) { return k == Kind::A || k == Kind::W || k == Kind::F || k == Kind::F32 || k == Kind::F64; }

struct Tensor {
  std::string name;
  Kind kind;
  Role role;
  size_t n = 0;                // elements (bytes for BYTES and SCALARS)
  Vec values;                  // initial values of a float kind
  std::vector<uint8_t> bytes;  // initial contents of the other kinds
  int attention[4] = {};       // tokens, sequences, max_seqlen, heads of an attention buffer
};

struct Case {
  std::string op, shape;
  std::vector<Tensor> tensors = {};
  // Runs the case's ops on a backend, given the backend pointer of every tensor.
  std::function<void(Backend&, const std::vector<void*>&)> run = {};
  double rtol = 1e-5;  // fp32 backends: per element, relative to the tensor's largest value
  // The op and shape a backend's exceptions to ops.h's rounding table are decided by (BackendEntry::off_table); none:
  // every backend follows the table here, so a device backend must be closer to its host twin than to the oracle.
  std::optional<CaseShape> rounding = {};

  int add(Tensor t) {
    tensors.push_back(std::move(t));
    return static_cast<int>(tensors.size()) - 1;
  }
  int in(const std::string& name, Kind kind, Vec values, Role role = Role::IN) {
    const size_t n = values.size();
    return add({name, kind, role, n, std::move(values), {}, {}});
  }
  int inout(const std::string& name, Kind kind, Vec values) { return in(name, kind, std::move(values), Role::INOUT); }
  int out(const std::string& name, Kind kind, size_t n, Role role = Role::OUT) {
    return add({name, kind, role, n, {}, {}, {}});
  }
  int scratch(const std::string& name, Kind kind, size_t n) { return out(name, kind, n, Role::SCRATCH); }
  template <typename T>
  int raw(const std::string& name, Kind kind, const std::vector<T>& v, Role role = Role::IN) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    const size_t n = kind == Kind::BYTES || kind == Kind::SCALARS || kind == Kind::RECORDS ? b.size() : v.size();
    return add({name, kind, role, n, {}, std::move(b), {}});
  }
  int attention(const std::string& name, Kind kind, int tokens, int sequences, int max_seqlen, int heads) {
    return add({name, kind, Role::SCRATCH, 0, {}, {}, {tokens, sequences, max_seqlen, heads}});
  }
};

// A backend's three float dtypes (ops.h: A, W, F).
struct Dtypes {
  DType act, weight, master;
  static Dtypes of(const Backend& b) { return {b.act_dtype(), b.weight_dtype(), b.master_dtype()}; }
  bool any_bf16() const { return act == DType::BF16 || weight == DType::BF16 || master == DType::BF16; }
};

DType dtype_of(Kind k, const Dtypes& d) {
  switch (k) {
    case Kind::A: return d.act;
    case Kind::W: return d.weight;
    case Kind::F: return d.master;
    case Kind::F64: return DType::F64;
    default: return DType::F32;
  }
}
DType dtype_of(Kind k, const Backend& b) { return dtype_of(k, Dtypes::of(b)); }

size_t bytes_of(const Tensor& t, const Backend& b) {
  const int* a = t.attention;
  switch (t.kind) {
    case Kind::I32: return 4 * t.n;
    case Kind::I64: return 8 * t.n;
    case Kind::U8: case Kind::BYTES: case Kind::SCALARS: case Kind::RECORDS: return t.n;
    case Kind::ATTN_SAVED: return b.attention_saved_bytes(a[0], a[1], a[2], a[3]);
    case Kind::ATTN_WORKSPACE: return b.attention_workspace_bytes(a[0], a[1], a[2], a[3]);
    default: return t.n * dtype_size(dtype_of(t.kind, b));
  }
}

// What a run leaves in the compared tensors: values of float kinds, bytes of SCALARS.
struct Results {
  std::vector<Vec> values;
  std::vector<std::vector<uint8_t>> bytes;
};

// Runs `c` on backend `b`. With `bf16_like` set (run on the CPU in fp32), the run is the naive reference at those
// dtypes' precision: inputs and outputs of every kind kept in bf16 there are rounded to bf16 on the way in and out.
Results run_case(Backend& b, const Case& c, const Dtypes* bf16_like = nullptr) {
  auto rounds = [&](Kind k) { return bf16_like && is_float(k) && dtype_of(k, *bf16_like) == DType::BF16; };
  std::vector<DeviceBuffer> buffers;
  std::vector<void*> ptrs;
  for (const Tensor& t : c.tensors) {
    const size_t bytes = bytes_of(t, b);
    buffers.emplace_back(b, std::max<size_t>(bytes, 1));
    void* p = buffers.back().data();
    ptrs.push_back(p);
    const bool given = t.role == Role::IN || t.role == Role::INOUT;
    if (t.kind == Kind::F64) {
      std::vector<double> host = given ? t.values : Vec(t.n, kNaN);
      b.upload(p, host.data(), bytes);
    } else if (is_float(t.kind)) {
      std::vector<float> host(t.n, std::numeric_limits<float>::quiet_NaN());
      if (given)
        for (size_t i = 0; i < t.n; ++i) host[i] = rounds(t.kind) ? round_bf16(float(t.values[i])) : float(t.values[i]);
      upload_floats(b, p, dtype_of(t.kind, b), host.data(), t.n);
    } else {
      // Raw kinds: their bytes, or all ones (a NaN in any float type) as poison.
      std::vector<uint8_t> host = given ? t.bytes : std::vector<uint8_t>(bytes, 0xFF);
      b.upload(p, host.data(), host.size());
    }
  }
  b.synchronize();
  c.run(b, ptrs);
  b.synchronize();
  Results r;
  r.values.resize(c.tensors.size());
  r.bytes.resize(c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const Tensor& t = c.tensors[i];
    if (t.role != Role::OUT && t.role != Role::INOUT) continue;
    if (t.kind == Kind::SCALARS || t.kind == Kind::RECORDS) {
      r.bytes[i].resize(t.n);
      b.download(r.bytes[i].data(), ptrs[i], t.n);
    } else if (dtype_of(t.kind, b) == DType::F64) {
      r.values[i].resize(t.n);
      b.download(r.values[i].data(), ptrs[i], t.n * sizeof(double));
    } else {
      std::vector<float> host(t.n);
      download_floats(b, host.data(), ptrs[i], dtype_of(t.kind, b), t.n);
      for (float& x : host)
        if (rounds(t.kind)) x = round_bf16(x);
      r.values[i].assign(host.begin(), host.end());
    }
  }
  b.synchronize();  // the downloads have landed
  return r;
}

double l2(const Vec& a, const Vec* b = nullptr) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = b ? a[i] - (*b)[i] : a[i];
    if (!std::isnan(d)) s += d * d;
  }
  return std::sqrt(s);
}

// The bf16 criterion: the L2 error of `got` against the oracle `ref` is at most twice that of the naive bf16 math
// (plus a floor at fp32 rounding, for outputs the naive math gets exactly).
bool within_twice_naive(const Vec& got, const Vec& ref, const Vec& naive, std::string* why) {
  const double err = l2(got, &ref), naive_err = l2(naive, &ref);
  if (err <= 2 * naive_err + 1e-6 * l2(ref) + 1e-30) return true;
  *why = "L2 error " + std::to_string(err) + " against " + std::to_string(naive_err) + " for the naive bf16 math";
  return false;
}

void expect_scalars_match(const std::vector<uint8_t>& got_bytes, const std::vector<uint8_t>& ref_bytes,
                          const std::string& what) {
  ops::StepScalars got, ref;
  std::memcpy(&got, got_bytes.data(), sizeof got);
  std::memcpy(&ref, ref_bytes.data(), sizeof ref);
  EXPECT_EQ(got.dropout.seed, ref.dropout.seed) << what;
  EXPECT_EQ(got.dropout.step, ref.dropout.step) << what;
  EXPECT_EQ(got.updates, ref.updates) << what;
  EXPECT_EQ(got.max_grad_norm, ref.max_grad_norm) << what;
  // The scheduled floats within 2 ulp: a GPU's double pow may differ from the host's in its last bits (kernel_math.h).
  auto ulps = [](float a, float b) { return std::fabs(a - b) <= 0x1p-22f * std::fabs(b); };
  EXPECT_TRUE(ulps(got.learning_rate, ref.learning_rate))
      << what << ": learning_rate " << got.learning_rate << ", oracle " << ref.learning_rate;
  EXPECT_TRUE(ulps(got.inv_bias_correction1, ref.inv_bias_correction1))
      << what << ": inv_bias_correction1 " << got.inv_bias_correction1 << ", oracle " << ref.inv_bias_correction1;
  EXPECT_TRUE(ulps(got.inv_bias_correction2, ref.inv_bias_correction2))
      << what << ": inv_bias_correction2 " << got.inv_bias_correction2 << ", oracle " << ref.inv_bias_correction2;
  auto near = [](double a, double b) { return (std::isnan(a) && std::isnan(b)) || std::fabs(a - b) <= 1e-5 * std::fabs(b); };
  EXPECT_TRUE(near(got.grad_norm_sq, ref.grad_norm_sq))
      << what << ": grad_norm_sq " << got.grad_norm_sq << ", oracle " << ref.grad_norm_sq;
  EXPECT_TRUE(near(got.clip_scale, ref.clip_scale))
      << what << ": clip_scale " << got.clip_scale << ", oracle " << ref.clip_scale;
  EXPECT_EQ(got.nonfinite, ref.nonfinite) << what << ": nonfinite";
}

// Runs `c` on the backend under test and on the oracle, and compares every OUT and INOUT tensor. With `twin` (the
// host backend of a device backend's dtypes: cpu-bf16 for CUDA), each tensor must also be at least as close to the
// twin's as to the oracle's: both round at ops.h's rounding table's points, so most of their rounding errors are the
// same ones; `off_table` (non-empty) says why this case is not compared with the twin.
void expect_conformance(Backend& backend, Backend& oracle, Backend& cpu_fp32, const Case& c, Backend* twin = nullptr,
                        const std::string& off_table = "") {
  const std::string what = c.op + " [" + c.shape + "] on " + backend.name();
  SCOPED_TRACE(what);
  const Results got = run_case(backend, c), ref = run_case(oracle, c);
  Results twin_got;
  if (twin && off_table.empty()) twin_got = run_case(*twin, c);
  if (twin && !off_table.empty())
    std::printf("[ NOTE     ] %s: not compared with %s: %s\n", what.c_str(), twin->name().c_str(), off_table.c_str());
  // Deterministic, except where the backend says otherwise: the case again, the same bits.
  if (!ops_of(c.op).intersects(backend.capabilities().nondeterministic)) {
    const Results again = run_case(backend, c);
    for (size_t i = 0; i < c.tensors.size(); ++i) {
      const bool same = got.bytes[i] == again.bytes[i] && got.values[i].size() == again.values[i].size() &&
                        (got.values[i].empty() || std::memcmp(got.values[i].data(), again.values[i].data(),
                                                              got.values[i].size() * sizeof(double)) == 0);
      EXPECT_TRUE(same) << c.tensors[i].name << " differs between two runs of the same case";
    }
  }
  const Dtypes dtypes = Dtypes::of(backend);
  const bool bf16 = dtypes.any_bf16();
  Results naive;
  if (bf16) naive = run_case(cpu_fp32, c, &dtypes);
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const Tensor& t = c.tensors[i];
    if (t.role != Role::OUT && t.role != Role::INOUT) continue;
    if (t.kind == Kind::SCALARS) {
      expect_scalars_match(got.bytes[i], ref.bytes[i], t.name);
      continue;
    }
    if (t.kind == Kind::RECORDS) {  // copies and counts: the same bits on every backend
      EXPECT_TRUE(got.bytes[i] == ref.bytes[i]) << t.name << " differs from the oracle's";
      continue;
    }
    const Vec& g = got.values[i];
    const Vec& r = ref.values[i];
    ASSERT_EQ(g.size(), r.size()) << t.name;
    // Both NaN: an element no backend writes (columns past the groups, row padding). One NaN: a missed write, or
    // a write where none belongs, or a non-finite result.
    int failures = 0;
    for (size_t e = 0; e < g.size(); ++e)
      if (std::isnan(g[e]) != std::isnan(r[e]) && failures++ < 3)
        ADD_FAILURE() << t.name << "[" << e << "]: got " << g[e] << ", oracle " << r[e];
    if (failures) continue;
    double scale = 0;
    for (double x : r)
      if (!std::isnan(x)) scale = std::max(scale, std::fabs(x));
    if (!twin_got.values.empty()) {
      const double to_twin = l2(g, &twin_got.values[i]), to_oracle = l2(g, &r);
      EXPECT_LE(to_twin, to_oracle + 1e-30) << t.name << ": L2 distance " << to_twin << " to " << twin->name() << ", " << to_oracle
                                             << " to the fp64 oracle";
    }
    if (bf16) {
      std::string why;
      EXPECT_TRUE(within_twice_naive(g, r, naive.values[i], &why)) << t.name << ": " << why;
    } else {
      for (size_t e = 0; e < g.size(); ++e)
        if (!std::isnan(r[e]) && !(std::fabs(g[e] - r[e]) <= c.rtol * scale) && failures++ < 3)
          ADD_FAILURE() << t.name << "[" << e << "]: got " << g[e] << ", oracle " << r[e] << " (largest "
                        << scale << ", rtol " << c.rtol << ")";
    }
  }
}

// ---- random problems -------------------------------------------------------------------------------------

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  // Values that are fp32 numbers, so that every backend is handed exactly the same inputs.
  Vec uniform(size_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> d(lo, hi);
    Vec v(n);
    for (double& x : v) x = static_cast<float>(d(rng));
    return v;
  }
  Ids ints(size_t n, int bound) {
    std::uniform_int_distribution<int32_t> d(0, bound - 1);
    Ids v(n);
    for (int32_t& x : v) x = d(rng);
    return v;
  }
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
};

// A variable-length layout over a budget of `tokens`: sequences of random lengths in [1, S] (the first of length
// 1 and one of length S where they fit, and a length-0 sequence when asked), then at least one filler token.
struct SeqLayout {
  Ids cu;
  int tokens, S;
  int sequences() const { return static_cast<int>(cu.size()) - 1; }
  int real_tokens() const { return cu.back(); }
};

SeqLayout random_layout(Gen& g, int tokens, int S, bool with_empty = false) {
  SeqLayout l{{0}, tokens, S};
  const int budget = tokens - g.between(1, std::min(S, tokens - 1));
  for (int k = 0;; ++k) {
    int len = k == 0 ? 1 : k == 1 ? S : g.between(1, S);
    if (with_empty && k == 2) len = 0;
    if (l.cu.back() + len > budget) break;
    l.cu.push_back(l.cu.back() + len);
  }
  return l;
}

ops::Dropout dropout_at(const std::vector<void*>& t, int counter, float p, uint32_t site) {
  return {p, static_cast<const ops::DropoutCounter*>(t[counter]), 1, site};
}

int add_counter(Case& c, uint64_t seed) {
  return c.raw("dropout counter", Kind::BYTES, std::vector<ops::DropoutCounter>{{seed, 11, 0}});
}

template <typename T = void>
T* at(const std::vector<void*>& t, int i) {
  return static_cast<T*>(t[i]);
}

// ---- the cases, one factory per op ---------------------------------------------------------------------------

struct LinearShape {
  int N, I, O, groups, ldo;
  WeightLayout layout;
  Activation act;
  bool bias;
};

std::string describe(const LinearShape& s) {
  return "N " + std::to_string(s.N) + ", I " + std::to_string(s.I) + ", O " + std::to_string(s.O) + " x" +
         std::to_string(s.groups) + ", ldo " + std::to_string(s.ldo) +
         (s.layout == WeightLayout::OUT_IN ? ", out-in" : "") +
         (s.act == Activation::GELU ? ", gelu" : s.act == Activation::TANH ? ", tanh" : "") + (s.bias ? ", bias" : "");
}

std::vector<LinearShape> linear_shapes() {
  return {
      {37, 45, 29, 1, 29, WeightLayout::IN_OUT, Activation::NONE, true},
      {23, 31, 17, 1, 17, WeightLayout::OUT_IN, Activation::NONE, false},
      {19, 24, 8, 3, 29, WeightLayout::IN_OUT, Activation::NONE, true},   // fused QKV, wide rows
      {41, 33, 52, 1, 52, WeightLayout::IN_OUT, Activation::GELU, true},
      {9, 40, 40, 1, 40, WeightLayout::IN_OUT, Activation::TANH, true},
      // BERT-base: the fused QKV of 128 tokens, the FFN up-projection; the tied MLM decoder's rows of the whole
      // vocabulary (over a narrower hidden size, to keep the table small).
      {128, 768, 768, 3, 2304, WeightLayout::IN_OUT, Activation::NONE, true},
      {128, 768, 3072, 1, 3072, WeightLayout::IN_OUT, Activation::GELU, true},
      {20, 64, 30522, 1, 30528, WeightLayout::OUT_IN, Activation::NONE, true},
  };
}

// The scales of an FP8 case (ops.h: GemmPrecision), by operand: input, weight, gradient.
using Fp8Scales = std::array<float, kFp8Operands>;

// Adds an FP8 case's scale (in) and amax (accumulated, starting at 1/4) tensors; their indices.
std::pair<int, int> add_fp8_tensors(Case& c, const Fp8Scales* fp8) {
  if (!fp8) return {-1, -1};
  const int scale = c.in("fp8 scale", Kind::F32, Vec(fp8->begin(), fp8->end()));
  return {scale, c.inout("amax", Kind::F32, Vec(kFp8Operands, 0.25))};
}

ops::GemmPrecision precision_at(const std::vector<void*>& t, std::pair<int, int> fp8) {
  if (fp8.first < 0) return {};
  return {static_cast<const float*>(t[fp8.first]), static_cast<float*>(t[fp8.second])};
}

Case linear_forward_case(Gen& g, const LinearShape& s, const Fp8Scales* fp8 = nullptr) {
  Case c{"linear_forward", describe(s)};
  const size_t ws = static_cast<size_t>(s.I) * s.O, bs = s.O;
  const int out = c.out("out", Kind::A, static_cast<size_t>(s.N) * s.ldo);
  const int pre = s.act == Activation::GELU ? c.out("pre", Kind::A, static_cast<size_t>(s.N) * s.ldo) : -1;
  const int inp = c.in("inp", Kind::A, g.uniform(static_cast<size_t>(s.N) * s.I));
  const double w_scale = 1.0 / std::sqrt(double(s.I));
  const int w = c.in("weight", Kind::W, g.uniform(ws * s.groups, -w_scale, w_scale));
  const int b = s.bias ? c.in("bias", Kind::W, g.uniform(bs * s.groups)) : -1;
  c.rounding = CaseShape{ops::Op::LINEAR_FORWARD, s.act, s.groups, s.ldo};
  const std::pair<int, int> f = add_fp8_tensors(c, fp8);
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    be.linear_forward({t[out], pre >= 0 ? t[pre] : nullptr, t[inp], t[w], b >= 0 ? t[b] : nullptr, s.N, s.I, s.O,
                       s.groups, ws, bs, s.ldo, s.layout, s.act, precision_at(t, f)});
  };
  return c;
}

Case linear_backward_case(Gen& g, const LinearShape& s, bool accumulate_dinp, Activation dinp_act,
                          const Fp8Scales* fp8 = nullptr) {
  Case c{"linear_backward", describe(s) + (accumulate_dinp ? ", dinp +=" : "") +
                                (dinp_act == Activation::GELU ? ", dinp gelu" : dinp_act == Activation::TANH ? ", dinp tanh" : "")};
  const size_t ws = static_cast<size_t>(s.I) * s.O, bs = s.O, NI = static_cast<size_t>(s.N) * s.I;
  const int dinp = accumulate_dinp ? c.inout("dinp", Kind::A, g.uniform(NI)) : c.out("dinp", Kind::A, NI);
  const int dw = c.inout("dweight", Kind::F, g.uniform(ws * s.groups, -0.5, 0.5));
  const int db = s.bias ? c.inout("dbias", Kind::F, g.uniform(bs * s.groups, -0.5, 0.5)) : -1;
  const int dout = c.in("dout", Kind::A, g.uniform(static_cast<size_t>(s.N) * s.ldo));
  const int inp = c.in("inp", Kind::A, g.uniform(NI));
  const int w = c.in("weight", Kind::W, g.uniform(ws * s.groups, -0.1, 0.1));
  const int saved = dinp_act != Activation::NONE
                        ? c.in("dinp_act_saved", Kind::A, dinp_act == Activation::GELU ? g.uniform(NI, -3, 3) : g.uniform(NI))
                        : -1;
  const int dab = dinp_act != Activation::NONE ? c.inout("dinp_act_dbias", Kind::F, g.uniform(s.I, -0.5, 0.5)) : -1;
  c.rtol = 2e-5;
  c.rounding = CaseShape{ops::Op::LINEAR_BACKWARD, dinp_act, s.groups, s.I};
  const std::pair<int, int> f = add_fp8_tensors(c, fp8);
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    ops::LinearBackward p{t[dinp], t[dw], db >= 0 ? t[db] : nullptr, t[dout], t[inp], t[w], s.N, s.I, s.O,
                          s.groups, ws, bs, s.ldo, s.layout, accumulate_dinp};
    p.dinp_act = dinp_act;
    p.dinp_act_saved = saved >= 0 ? t[saved] : nullptr;
    p.dinp_act_dbias = dab >= 0 ? t[dab] : nullptr;
    p.precision = precision_at(t, f);
    be.linear_backward(p);
  };
  return c;
}

Case activation_backward_case(Gen& g, size_t n, Activation act) {
  Case c{"activation_backward", std::to_string(n) + (act == Activation::GELU ? " gelu" : " tanh")};
  const int dinp = c.out("dinp", Kind::A, n);
  const int dout = c.in("dout", Kind::A, g.uniform(n));
  const int saved = c.in("saved", Kind::A, act == Activation::GELU ? g.uniform(n, -5, 5) : g.uniform(n));
  c.run = [=](Backend& be, const std::vector<void*>& t) { be.activation_backward({t[dinp], t[dout], t[saved], n, act}); };
  return c;
}

struct EmbeddingShape {
  int N, C, V, T, P;
};

// The embedding forward, and with `backward` its backward after it.
Case embedding_case(Gen& g, const EmbeddingShape& s, float p, bool backward) {
  Case c{backward ? "embedding_backward" : "embedding_forward",
         "N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + ", V " + std::to_string(s.V) + ", p " +
             std::to_string(p)};
  const size_t NC = static_cast<size_t>(s.N) * s.C;
  const Role saved_role = backward ? Role::SCRATCH : Role::OUT;
  const int out = c.out("out", Kind::A, NC, saved_role);
  const int sum = c.out("sum", Kind::A, NC);
  const int mean = c.out("mean", Kind::F, s.N), rstd = c.out("rstd", Kind::F, s.N);
  Ids ids = g.ints(s.N, s.V), types = g.ints(s.N, s.T), positions = g.ints(s.N, s.P);
  if (s.N > 3) ids[3] = ids[0];  // repeated rows add up in the backward
  const int id = c.raw("ids", Kind::I32, ids), ty = c.raw("types", Kind::I32, types),
            po = c.raw("positions", Kind::I32, positions);
  const int word = c.in("word", Kind::W, g.uniform(static_cast<size_t>(s.V) * s.C));
  const int type = c.in("type", Kind::W, g.uniform(static_cast<size_t>(s.T) * s.C));
  const int pos = c.in("pos", Kind::W, g.uniform(static_cast<size_t>(s.P) * s.C));
  const int gamma = c.in("gamma", Kind::W, g.uniform(s.C, 0.5, 1.5)), beta = c.in("beta", Kind::W, g.uniform(s.C));
  const int counter = add_counter(c, 77);
  int dword = -1, dtype = -1, dpos = -1, dgamma = -1, dbeta = -1, scratch = -1, dout = -1;
  if (backward) {
    dword = c.inout("dword", Kind::F, g.uniform(static_cast<size_t>(s.V) * s.C, -0.5, 0.5));
    dtype = c.inout("dtype", Kind::F, g.uniform(static_cast<size_t>(s.T) * s.C, -0.5, 0.5));
    dpos = c.inout("dpos", Kind::F, g.uniform(static_cast<size_t>(s.P) * s.C, -0.5, 0.5));
    dgamma = c.inout("dgamma", Kind::F, g.uniform(s.C, -0.5, 0.5));
    dbeta = c.inout("dbeta", Kind::F, g.uniform(s.C, -0.5, 0.5));
    scratch = c.scratch("scratch", Kind::A, 2 * NC);
    dout = c.in("dout", Kind::A, g.uniform(NC));
  }
  c.rtol = 2e-5;
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    const ops::Dropout d = dropout_at(t, counter, p, 0);
    be.embedding_forward({t[out], t[sum], t[mean], t[rstd], at<int32_t>(t, id), at<int32_t>(t, ty),
                          at<int32_t>(t, po), t[word], t[type], t[pos], t[gamma], t[beta], s.N, s.C, d});
    if (!backward) return;
    be.embedding_backward({t[dword], t[dtype], t[dpos], t[dgamma], t[dbeta], t[scratch], t[dout], t[sum], t[mean],
                           t[rstd], t[gamma], at<int32_t>(t, id), at<int32_t>(t, ty), at<int32_t>(t, po), s.N, s.C,
                           d});
  };
  return c;
}

struct ResidualLnShape {
  int N, C;
  bool bias, residual;
};

Case residual_layernorm_case(Gen& g, const ResidualLnShape& s, float p, bool backward) {
  const bool plain = !s.bias && !s.residual && p == 0.0f;
  Case c{backward ? "residual_layernorm_backward" : "residual_layernorm_forward",
         "N " + std::to_string(s.N) + ", C " + std::to_string(s.C) + (s.bias ? ", bias" : "") +
             (s.residual ? ", residual" : "") + ", p " + std::to_string(p)};
  const size_t NC = static_cast<size_t>(s.N) * s.C;
  const int out = c.out("out", Kind::A, NC, backward ? Role::SCRATCH : Role::OUT);
  const int sum = plain ? -1 : c.out("sum", Kind::A, NC);
  const int mean = c.out("mean", Kind::F, s.N), rstd = c.out("rstd", Kind::F, s.N);
  const int inp = c.in("inp", Kind::A, g.uniform(NC, -2, 2));
  const int bias = s.bias ? c.in("bias", Kind::W, g.uniform(s.C)) : -1;
  const int res = s.residual ? c.in("residual", Kind::A, g.uniform(NC)) : -1;
  const int gamma = c.in("gamma", Kind::W, g.uniform(s.C, 0.5, 1.5)), beta = c.in("beta", Kind::W, g.uniform(s.C));
  const int counter = add_counter(c, 78);
  int dinp = -1, dres = -1, dbias = -1, dgamma = -1, dbeta = -1, dout = -1;
  if (backward) {
    dinp = c.out("dinp", Kind::A, NC);
    dres = plain ? -1 : c.out("dresidual", Kind::A, NC);
    dbias = s.bias ? c.inout("dbias", Kind::F, g.uniform(s.C, -0.5, 0.5)) : -1;
    dgamma = c.inout("dgamma", Kind::F, g.uniform(s.C, -0.5, 0.5));
    dbeta = c.inout("dbeta", Kind::F, g.uniform(s.C, -0.5, 0.5));
    dout = c.in("dout", Kind::A, g.uniform(NC));
  }
  c.rtol = 2e-5;
  auto ptr = [](const std::vector<void*>& t, int i) { return i >= 0 ? t[i] : nullptr; };
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    const ops::Dropout d = dropout_at(t, counter, p, 5);
    be.residual_layernorm_forward({t[out], ptr(t, sum), t[mean], t[rstd], t[inp], ptr(t, bias), ptr(t, res),
                                   t[gamma], t[beta], s.N, s.C, d});
    if (!backward) return;
    be.residual_layernorm_backward({t[dinp], ptr(t, dres), ptr(t, dbias), t[dgamma], t[dbeta], t[dout],
                                    plain ? t[inp] : t[sum], t[mean], t[rstd], t[gamma], s.N, s.C, d});
  };
  return c;
}

struct AttentionShape {
  int tokens, S, heads, D;
  bool with_empty;
};

// Attention forward (and backward) over a random variable-length layout. `qkv_values`, when given, replaces the
// random qkv (the statistics check's one-hot values).
Case attention_case(Gen& g, const AttentionShape& s, float p, bool backward, const Vec* qkv_values = nullptr,
                    const SeqLayout* fixed_layout = nullptr) {
  const SeqLayout l = fixed_layout ? *fixed_layout : random_layout(g, s.tokens, s.S, s.with_empty);
  Case c{backward ? "attention_backward" : "attention_forward",
         std::to_string(l.sequences()) + " sequences in " + std::to_string(s.tokens) + " tokens, S " +
             std::to_string(s.S) + ", " + std::to_string(s.heads) + "x" + std::to_string(s.D) + ", p " +
             std::to_string(p)};
  const int H = s.heads * s.D, N = s.tokens;
  const int ctx = c.out("ctx", Kind::A, static_cast<size_t>(N) * H);
  const int saved = c.attention("saved", Kind::ATTN_SAVED, N, l.sequences(), s.S, s.heads);
  const int qkv = c.in("qkv", Kind::A, qkv_values ? *qkv_values : g.uniform(static_cast<size_t>(N) * 3 * H, -2, 2));
  const int cu = c.raw("cu_seqlens", Kind::I32, l.cu);
  const int counter = add_counter(c, 79);
  int dqkv = -1, work = -1, dctx = -1;
  if (backward) {
    dqkv = c.out("dqkv", Kind::A, static_cast<size_t>(N) * 3 * H);
    work = c.attention("workspace", Kind::ATTN_WORKSPACE, N, l.sequences(), s.S, s.heads);
    dctx = c.in("dctx", Kind::A, g.uniform(static_cast<size_t>(N) * H));
  }
  c.rtol = 2e-5;
  c.rounding = CaseShape{backward ? ops::Op::ATTENTION_BACKWARD : ops::Op::ATTENTION_FORWARD};
  const int sequences = l.sequences();
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    const ops::Dropout d = dropout_at(t, counter, p, 9);
    be.attention_forward({t[ctx], t[saved], t[qkv], at<int32_t>(t, cu), N, sequences, s.S, s.heads, s.D, d});
    if (!backward) return;
    be.attention_backward({t[dqkv], t[work], t[dctx], t[ctx], t[qkv], t[saved], at<int32_t>(t, cu), N, sequences,
                           s.S, s.heads, s.D, d});
  };
  return c;
}

Case gather_case(Gen& g, int N, int M, int C, bool backward, bool accumulate) {
  Case c{backward ? "gather_backward" : "gather_forward",
         "M " + std::to_string(M) + " of N " + std::to_string(N) + ", C " + std::to_string(C) +
             (accumulate ? ", +=" : "")};
  Ids rows = g.ints(M, N);
  if (M > 2) rows[2] = rows[0];
  const int r = c.raw("rows", Kind::I32, rows);
  if (!backward) {
    const int out = c.out("out", Kind::A, static_cast<size_t>(M) * C);
    const int inp = c.in("inp", Kind::A, g.uniform(static_cast<size_t>(N) * C));
    c.run = [=](Backend& be, const std::vector<void*>& t) { be.gather_forward({t[out], t[inp], at<int32_t>(t, r), M, C}); };
  } else {
    const size_t NC = static_cast<size_t>(N) * C;
    const int dinp = accumulate ? c.inout("dinp", Kind::A, g.uniform(NC)) : c.out("dinp", Kind::A, NC);
    const int dout = c.in("dout", Kind::A, g.uniform(static_cast<size_t>(M) * C));
    c.run = [=](Backend& be, const std::vector<void*>& t) {
      be.gather_backward({t[dinp], t[dout], at<int32_t>(t, r), M, N, C, accumulate});
    };
  }
  return c;
}

struct CrossEntropyShape {
  int M, V, ldl;
};

Case cross_entropy_case(Gen& g, const CrossEntropyShape& s, bool backward, bool in_place) {
  Case c{backward ? "cross_entropy_backward" : "cross_entropy_forward",
         "M " + std::to_string(s.M) + ", V " + std::to_string(s.V) + (in_place ? ", in place" : "")};
  const size_t n = static_cast<size_t>(s.M) * s.ldl;
  Ids labels = g.ints(s.M, s.V);
  Vec logits = g.uniform(n, -4, 4);
  for (int i = 0; i < s.M; i += 3) logits[i * s.ldl + labels[i]] = 6;  // some rows predicted right
  Vec loss_weight = g.uniform(s.M, 0, 1), count_weight = g.uniform(s.M, 0.5, 1);
  // Filler rows: weight 0 and a label nothing may read.
  loss_weight[s.M - 1] = count_weight[s.M - 1] = 0;
  labels[s.M - 1] = s.V + 5;
  for (int i = 0; i < s.M; ++i)
    for (int j = s.V; j < s.ldl; ++j) logits[i * s.ldl + j] = kNaN;  // row padding: never read
  const int lse = c.out("lse", Kind::F, s.M, backward ? Role::SCRATCH : Role::OUT);
  const int stats = c.inout("stats", Kind::F64, {0.25, 0.5});
  const int lg = c.in("logits", Kind::A, logits, in_place ? Role::INOUT : Role::IN);
  const int lb = c.raw("labels", Kind::I32, labels);
  const int lwi = c.in("loss_weight", Kind::F32, loss_weight), cwi = c.in("count_weight", Kind::F32, count_weight);
  const int dl = backward && !in_place ? c.out("dlogits", Kind::A, n) : -1;
  c.rtol = 2e-5;
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    be.cross_entropy_forward({t[lse], at<double>(t, stats), t[lg], at<int32_t>(t, lb), at<float>(t, lwi),
                              at<float>(t, cwi), s.M, s.V, s.ldl});
    if (!backward) return;
    be.cross_entropy_backward({in_place ? t[lg] : t[dl], t[lg], t[lse], at<int32_t>(t, lb), at<float>(t, lwi), s.M,
                               s.V, s.ldl, 0.75f});
  };
  return c;
}

// Values inside a flat buffer's tensors; NaN in the padding, which no op may touch or read.
Vec flat_values(const FlatProblem& f, Gen& g, double lo, double hi) {
  Vec v(f.total, kNaN);
  for (size_t t = 0; t < f.numel.size(); ++t) {
    const Vec x = g.uniform(f.numel[t], lo, hi);
    std::copy(x.begin(), x.end(), v.begin() + f.offset[t]);
  }
  return v;
}

struct ChunkIds {
  int tensor, begin, end;
};

ChunkIds add_chunks(Case& c, const FlatProblem& f) {
  return {c.raw("chunk tensors", Kind::I32, f.chunk_tensor), c.raw("chunk begins", Kind::I64, f.chunk_begin),
          c.raw("chunk ends", Kind::I64, f.chunk_end)};
}

ops::Chunks chunks_at(const std::vector<void*>& t, ChunkIds ids, int first, int count) {
  return {at<int32_t>(t, ids.tensor), at<int64_t>(t, ids.begin), at<int64_t>(t, ids.end), first, count};
}

ops::StepScalars step_scalars(int update, float lr, float max_norm) {
  ops::StepScalars s;
  s.dropout = {123, 4, 0};
  s.learning_rate = lr;
  s.inv_bias_correction1 = static_cast<float>(1.0 / (1.0 - std::pow(0.9, update)));
  s.inv_bias_correction2 = static_cast<float>(1.0 / (1.0 - std::pow(0.999, update)));
  s.max_grad_norm = max_norm;
  s.grad_norm_sq = -1;
  s.clip_scale = -1;
  return s;
}

std::string describe(const FlatProblem& f) {
  return std::to_string(f.numel.size()) + " tensors, " + std::to_string(f.chunks()) + " chunks";
}

// GradientClip over all chunks (or, with `sharded`, partial sums of two shards summed and finished by
// GradientClipFinish), then GradientAccumulate. With `nonfinite`, that gradient has a NaN and a second, finite
// micro-batch follows: it is added, the first is not.
Case clip_case(Gen& g, const FlatProblem& f, float max_norm, bool sharded, bool nonfinite) {
  Case c{sharded ? "gradient_clip (partial) + gradient_clip_finish + gradient_accumulate"
                 : "gradient_clip + gradient_accumulate",
         describe(f) + ", max norm " + std::to_string(max_norm) + (nonfinite ? ", a NaN gradient" : "")};
  Vec grads = flat_values(f, g, -1, 1);
  if (nonfinite) grads[f.offset.back()] = kNaN;
  const int gr = c.in("grads", Kind::F, grads);
  const int gr2 = nonfinite ? c.in("grads of the next micro-batch", Kind::F, flat_values(f, g, -1, 1)) : -1;
  const int sum = c.inout("sum", Kind::F, flat_values(f, g, -1, 1));
  const int sc = c.raw("scalars", Kind::SCALARS, std::vector<ops::StepScalars>{step_scalars(1, 0, max_norm)},
                       Role::INOUT);
  const int partial = sharded ? c.out("partials", Kind::F64, 2) : -1;
  const ChunkIds ch = add_chunks(c, f);
  const int n = f.chunks();
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    auto* s = at<ops::StepScalars>(t, sc);
    if (sharded) {
      double* parts = at<double>(t, partial);
      be.gradient_clip({s, parts, t[gr], chunks_at(t, ch, 0, n / 2)});
      be.gradient_clip({s, parts + 1, t[gr], chunks_at(t, ch, n / 2, n - n / 2)});
      // The cross-rank sum of partials, here on the host, as a reducer would leave it.
      double host[2];
      be.download(host, parts, sizeof host);
      ops::StepScalars hs;
      be.download(&hs, s, sizeof hs);
      be.synchronize();
      hs.grad_norm_sq = host[0] + host[1];
      be.upload(s, &hs, sizeof hs);
      be.gradient_clip_finish({s});
    } else {
      be.gradient_clip({s, nullptr, t[gr], chunks_at(t, ch, 0, n)});
    }
    be.gradient_accumulate({t[sum], t[gr], s, chunks_at(t, ch, 0, n), 0.25f});
    if (gr2 >= 0) {
      be.gradient_clip({s, nullptr, t[gr2], chunks_at(t, ch, 0, n)});
      be.gradient_accumulate({t[sum], t[gr2], s, chunks_at(t, ch, 0, n), 0.25f});
    }
  };
  return c;
}

// Both LAMB stages: moments (optionally in two shards), then apply, with a weight copy.
Case lamb_case(Gen& g, const FlatProblem& f, bool grad_scale, bool sharded, bool nonfinite) {
  Case c{"lamb_moments + lamb_apply",
         describe(f) + (grad_scale ? ", grad scale" : "") + (sharded ? ", sharded moments" : "") +
             (nonfinite ? ", after a non-finite clip" : "")};
  std::vector<uint8_t> excluded(f.numel.size(), 0);
  for (size_t t = 1; t < excluded.size(); t += 2) excluded[t] = 1;
  Vec master = flat_values(f, g, -1, 1);
  for (size_t i = 0; i < f.numel[0]; ++i) master[f.offset[0] + i] = 0;  // a zero tensor: trust ratio 1
  const int m = c.inout("m", Kind::F, flat_values(f, g, -0.01, 0.01));
  const int v = c.inout("v", Kind::F, flat_values(f, g, 0, 1e-4));
  const int norms = c.inout("norms", Kind::F64, Vec(2 * f.numel.size(), 0.0));
  const int gr = c.in("grads", Kind::F, flat_values(f, g, -0.1, 0.1));
  const int ma = c.inout("master", Kind::F, master);
  const int weights = c.out("weights", Kind::W, f.total);
  const int ex = c.raw("excluded", Kind::U8, excluded);
  const int gs = grad_scale ? c.in("grad scale", Kind::F32, {0.5}) : -1;
  ops::StepScalars scalars = step_scalars(3, 0.01f, 1);
  scalars.nonfinite = nonfinite ? 1 : 0;
  const int sc = c.raw("scalars", Kind::SCALARS, std::vector<ops::StepScalars>{scalars}, Role::INOUT);
  const ChunkIds ch = add_chunks(c, f);
  const int n = f.chunks();
  c.run = [=](Backend& be, const std::vector<void*>& t) {
    auto* s = at<ops::StepScalars>(t, sc);
    ops::LambMoments mo{t[m], t[v], at<double>(t, norms), t[gr], t[ma], at<uint8_t>(t, ex),
                        gs >= 0 ? at<float>(t, gs) : nullptr, s, chunks_at(t, ch, 0, n)};
    mo.one_minus_beta1 = static_cast<float>(1.0 - 0.9);
    mo.one_minus_beta2 = static_cast<float>(1.0 - 0.999);
    if (sharded) {
      mo.chunks = chunks_at(t, ch, 0, n / 3);
      be.lamb_moments(mo);
      mo.chunks = chunks_at(t, ch, n / 3, n - n / 3);
    }
    be.lamb_moments(mo);
    be.lamb_apply({t[ma], t[weights], t[m], t[v], at<double>(t, norms), at<uint8_t>(t, ex), s,
                   chunks_at(t, ch, 0, n)});
  };
  return c;
}

// ---- the test, once per backend ----------------------------------------------------------------------------

// A test parameter: a backend name, with its options after a colon ("cpu-bf16:gemm=emulated,threads=2").
BackendSpec spec_of(const std::string& param) {
  const size_t colon = param.find(':');
  std::vector<std::string> options;
  for (size_t at = colon; at != std::string::npos && at < param.size();) {
    const size_t comma = param.find(',', at + 1);
    options.push_back(param.substr(at + 1, (comma == std::string::npos ? param.size() : comma) - at - 1));
    at = comma;
  }
  return backend_spec(param.substr(0, colon), options, "test parameter " + param);
}

class BackendOps : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::vector<std::string> here = available_backends();
    if (std::find(here.begin(), here.end(), spec_of(GetParam()).name) == here.end())
      GTEST_SKIP() << "backend '" << GetParam() << "' is not available here (this build has no such backend, or "
                   << "there is no device for it)";
    spec_ = spec_of(GetParam());
    const BackendSpec& spec = spec_;
    try {
      backend_ = make_backend(spec);
    } catch (const InputError& e) {
      // A declared variant this device cannot run (the CUDA backend's FP8 below compute capability 8.9) says why.
      if (GetParam().find(':') == std::string::npos) throw;
      GTEST_SKIP() << "backend '" << GetParam() << "' cannot run here: " << e.what();
    }
    oracle_ = make_cpu_backend(DType::F64, 0);
    cpu_fp32_ = make_cpu_backend(DType::F32, 0);
    // A device backend's twin: the host backend with its dtypes (cpu-bf16 for a bf16 GPU), built like any other.
    const BackendInfo& info = backend_info(spec.name, spec.where);
    if (!info.host_memory) {
      for (const BackendInfo& b : backend_infos())
        if (b.host_memory && b.built && b.act == info.act && b.weight == info.weight && b.master == info.master) {
          twin_ = make_backend(backend_spec(b.name));
          if (backend_->fp8_recipe()) fp8_twin_ = make_backend(backend_spec(b.name, {"precision=fp8"}, "FP8 twin"));
        }
    }
  }
  // Runs the case against the oracle (dropout off for an op the backend draws its own masks for), and a device
  // backend against its host twin too, where its options keep it on ops.h's rounding table.
  void check(const Case& c) {
    const std::string off = twin_ && c.rounding ? off_table(spec_, *c.rounding) : "";
    expect_conformance(*backend_, *oracle_, *cpu_fp32_, c, twin_.get(), off);
  }
  float dropout_for(const std::string& op, float p) const {
    return ops_of(op).intersects(backend_->capabilities().own_dropout_masks) ? 0.0f : p;
  }

  BackendSpec spec_;
  std::unique_ptr<Backend> backend_, oracle_, cpu_fp32_, twin_, fp8_twin_;  // fp8_twin_: the twin in FP8
};

TEST_P(BackendOps, Memory) {
  Backend& b = *backend_;
  EXPECT_FALSE(b.describe().empty());
  for (MemoryKind kind : {MemoryKind::DEVICE, MemoryKind::HOST, MemoryKind::PINNED}) {
    DeviceBuffer buf(b, 1000, kind);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 256, 0u);
    if (kind != MemoryKind::DEVICE) {
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(buf.as<uint8_t>()[i], 0) << "zero-filled";
    }
  }
  // upload, copy, download; fill_zero; convert to and from every dtype the backend has.
  std::vector<float> host(777), back(777);
  Gen g(1);
  const Vec v = g.uniform(host.size());
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(v[i]);
  DeviceBuffer a(b, 777 * sizeof(float)), c(b, 777 * sizeof(float)), z(b, 777 * sizeof(float));
  b.upload(a.data(), host.data(), 777 * sizeof(float));
  b.copy(c.data(), a.data(), 777 * sizeof(float));
  b.download(back.data(), c.data(), 777 * sizeof(float));
  b.synchronize();
  EXPECT_EQ(back, host);
  b.fill_zero(c.data(), 777 * sizeof(float));
  b.download(back.data(), c.data(), 777 * sizeof(float));
  b.synchronize();
  EXPECT_EQ(back, std::vector<float>(777, 0.0f));
  for (DType t : {b.act_dtype(), b.weight_dtype(), b.master_dtype()}) {
    DeviceBuffer typed(b, 777 * dtype_size(t));
    b.convert(typed.data(), t, a.data(), DType::F32, 777);
    b.convert(z.data(), DType::F32, typed.data(), t, 777);
    b.download(back.data(), z.data(), 777 * sizeof(float));
    b.synchronize();
    for (size_t i = 0; i < host.size(); ++i) {
      const float want = t == DType::BF16 ? round_bf16(host[i]) : host[i];
      ASSERT_EQ(back[i], want) << dtype_name(t) << " round trip of element " << i;
    }
  }
  // The attention buffers grow with the layout they must hold.
  EXPECT_GE(b.attention_saved_bytes(256, 2, 128, 12), b.attention_saved_bytes(128, 1, 128, 12));
}

// f64 -> bf16 rounds once (ops.h: round to nearest even), on doubles just off the midpoint of two bf16 neighbours,
// where rounding through float first would take the even neighbour instead of the nearer one: the backend's result
// must be kmath::bf16_bits', which tests/cpp/test_kernel_math_bf16.cpp checks against an exact reference.
TEST_P(BackendOps, ConvertsF64ToBf16InOneRounding) {
  Backend& b = *backend_;
  const Dtypes d = Dtypes::of(b);
  if (!d.any_bf16()) GTEST_SKIP() << "backend '" << GetParam() << "' has no bf16 memory";
  std::vector<double> x;
  for (uint32_t lower = 0x0001; lower < 0x7F7F; lower += 97) {
    const double lo = std::bit_cast<float>(lower << 16), hi = std::bit_cast<float>((lower + 1) << 16);
    const double mid = (lo + hi) / 2;
    for (double v : {mid + std::ldexp(mid, -30), mid - std::ldexp(mid, -30), mid}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  const size_t n = x.size();
  DeviceBuffer f64(b, n * sizeof(double)), bf16(b, n * 2), f32(b, n * sizeof(float));
  b.upload(f64.data(), x.data(), n * sizeof(double));
  b.convert(bf16.data(), DType::BF16, f64.data(), DType::F64, n);
  b.convert(f32.data(), DType::F32, bf16.data(), DType::BF16, n);  // exact
  std::vector<float> back(n);
  b.download(back.data(), f32.data(), n * sizeof(float));
  b.synchronize();  // the download has landed (device.h)
  int failures = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = std::bit_cast<float>(static_cast<uint32_t>(kmath::bf16_bits(x[i])) << 16);
    if (back[i] != want && failures++ < 5)
      ADD_FAILURE() << "f64 " << x[i] << " converted to bf16 " << back[i] << ", not " << want;
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(BackendOps, LinearForward) {
  for (uint64_t seed : {1, 2}) {
    Gen g(seed);
    for (const LinearShape& s : linear_shapes()) {
      if (seed == 2 && s.N * s.O > 100000) continue;  // one seed of the large shapes keeps the test short
      check(linear_forward_case(g, s));
    }
  }
}

TEST_P(BackendOps, LinearBackward) {
  for (uint64_t seed : {3, 4}) {
    Gen g(seed);
    for (const LinearShape& s : linear_shapes()) {
      if (seed == 4 && s.N * s.O > 100000) continue;
      check(linear_backward_case(g, s, false, Activation::NONE));
      if (s.groups > 1) check(linear_backward_case(g, s, true, Activation::NONE));
    }
    // The fused backward of the activation that produced the input: the FFN down-projection (GELU) and the NSP
    // classifier over the pooler (tanh).
    check(linear_backward_case(g, {37, 61, 23, 1, 23, WeightLayout::IN_OUT, Activation::NONE, true}, false,
                               Activation::GELU));
    check(linear_backward_case(g, {11, 32, 2, 1, 2, WeightLayout::OUT_IN, Activation::NONE, true}, false,
                               Activation::TANH));
  }
  Gen g(5);
  check(linear_backward_case(g, {128, 3072, 768, 1, 768, WeightLayout::IN_OUT, Activation::NONE, true}, false,
                             Activation::GELU));
}

// ---- FP8 (ops.h's FP8 column) -------------------------------------------------------------------------------
// The FP8 rule. A linear op run with scales (GemmPrecision) solves a quantized problem: its operands replaced by their
// FP8 values scaled back, the backend's bf16 input quantized as fp8.h defines (checked over all 256 codes in
// test_fp8.cpp). Each output must be
//   (a) a bf16-accurate answer to that problem: its L2 error against the fp64 oracle on the quantized operands at most
//       twice that of the naive bf16 math on them (the bf16 rule; this is what makes the quantization exact), and
//   (b) an FP8-accurate answer to the op's own problem: its L2 error against the fp64 oracle on the raw operands at
//       most twice that of the naive FP8 math (the naive bf16 math on the quantized operands);
// bias gradients come from the unquantized gradient, so they follow the bf16 rule on the raw operands. The amaxes
// must be the exact max |x| of the operands the op quantizes first (a saturating operand too), maxed into what was
// there.

// x as the FP8 GEMM sees it: the backend's bf16 value, quantized with `scale` to `type`, then scaled back.
double dequantized(double x, float scale, DType type) {
  const Fp8Format& f = fp8_format(type);
  return static_cast<double>(kmath::fp8_value(kmath::fp8_bits(round_bf16(static_cast<float>(x)) * scale, f), f)) /
         scale;
}

// max |bf16(x)| over the first `cols` of each row of `ld`.
double bf16_amax(const Vec& v, size_t ld, size_t cols) {
  double m = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (i % ld < cols) m = std::max(m, std::fabs(static_cast<double>(round_bf16(static_cast<float>(v[i])))));
  return m;
}

Tensor& tensor_named(Case& c, const std::string& name) {
  for (Tensor& t : c.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// `make(fp8)` builds the same case (the same values) with the scales, or without them for fp8 null.
void expect_fp8_conformance(Backend& backend, Backend& oracle, Backend& cpu_fp32,
                            const std::function<Case(const Fp8Scales*)>& make, const Fp8Scales& scales, bool backward,
                            size_t ldo, size_t gemm_cols, Backend* twin = nullptr) {
  const Case fp8 = make(&scales), raw = make(nullptr);
  Case quantized = make(nullptr);
  const std::string what = fp8.op + " [" + fp8.shape + "] in FP8 on " + backend.name();
  SCOPED_TRACE(what);
  auto quantize = [&](const std::string& name, int operand) {
    for (double& x : tensor_named(quantized, name).values) x = dequantized(x, scales[operand], fp8_type(operand));
  };
  quantize("inp", FP8_INPUT);
  quantize("weight", FP8_WEIGHT);
  if (backward) quantize("dout", FP8_GRAD);
  const Dtypes dtypes = Dtypes::of(backend);
  const Results got = run_case(backend, fp8), again = run_case(backend, fp8), ref = run_case(oracle, raw),
                ref_q = run_case(oracle, quantized), naive_q = run_case(cpu_fp32, quantized, &dtypes),
                naive_raw = run_case(cpu_fp32, raw, &dtypes);
  const Results twin_got = twin ? run_case(*twin, fp8) : Results{};
  for (size_t i = 0; i < fp8.tensors.size(); ++i) {
    const Tensor& t = fp8.tensors[i];
    if (t.role != Role::OUT && t.role != Role::INOUT) continue;
    EXPECT_TRUE(got.values[i].size() == again.values[i].size() &&
                std::memcmp(got.values[i].data(), again.values[i].data(), got.values[i].size() * sizeof(double)) == 0)
        << t.name << " differs between two runs of the same case";
    std::string why;
    if (t.name == "amax") {
      Vec want(kFp8Operands, 0.25);
      if (backward) {
        want[FP8_GRAD] = std::max(0.25, bf16_amax(tensor_named(const_cast<Case&>(raw), "dout").values, ldo, gemm_cols));
      } else {
        const Vec& inp = tensor_named(const_cast<Case&>(raw), "inp").values;
        const Vec& w = tensor_named(const_cast<Case&>(raw), "weight").values;
        want[FP8_INPUT] = std::max(0.25, bf16_amax(inp, inp.size(), inp.size()));
        want[FP8_WEIGHT] = std::max(0.25, bf16_amax(w, w.size(), w.size()));
      }
      EXPECT_EQ(got.values[i], want) << "amax";
    } else if (t.name == "dbias") {
      EXPECT_TRUE(within_twice_naive(got.values[i], ref.values[i], naive_raw.values[i], &why)) << t.name << ": " << why;
    } else {
      EXPECT_TRUE(within_twice_naive(got.values[i], ref_q.values[i], naive_q.values[i], &why))
          << t.name << " against the quantized problem: " << why;
      EXPECT_TRUE(within_twice_naive(got.values[i], ref.values[i], naive_q.values[i], &why))
          << t.name << " against the op's own problem: " << why;
    }
    // A device backend's FP8 against its CPU twin (the twin rule): the twin quantizes as it does, so the amaxes are
    // equal and every output nearer the twin's than the op's own unquantized problem's.
    if (twin && t.name == "amax") {
      EXPECT_EQ(got.values[i], twin_got.values[i]) << "amax against " << twin->name();
    } else if (twin) {
      const double to_twin = l2(got.values[i], &twin_got.values[i]), to_raw = l2(got.values[i], &ref.values[i]);
      EXPECT_LE(to_twin, to_raw + 1e-30) << t.name << ": L2 distance " << to_twin << " to the FP8 twin, " << to_raw
                                         << " to the unquantized problem";
    }
  }
}

// The scales delayed scaling would give these operands (fp8_max / amax), the input's times `input_boost` (8: a
// saturating input, as a step whose amax jumped).
Fp8Scales scales_for(const Case& c, bool backward, size_t ldo, size_t gemm_cols, float input_boost = 1) {
  Case& m = const_cast<Case&>(c);
  const Vec& inp = tensor_named(m, "inp").values;
  const Vec& w = tensor_named(m, "weight").values;
  Fp8Scales s{static_cast<float>(kE4M3.max / bf16_amax(inp, inp.size(), inp.size())) * input_boost,
              static_cast<float>(kE4M3.max / bf16_amax(w, w.size(), w.size())), 1.0f};
  if (backward) s[FP8_GRAD] = static_cast<float>(kE5M2.max / bf16_amax(tensor_named(m, "dout").values, ldo, gemm_cols));
  return s;
}

TEST_P(BackendOps, Fp8Linear) {
  if (!backend_->fp8_recipe()) GTEST_SKIP() << "backend '" << GetParam() << "' runs no FP8 GEMMs";
  // Sizes multiples of 16, as a GPU's FP8 GEMMs need (one-byte operands, 16-byte aligned rows) and the encoder's are.
  const std::vector<LinearShape> shapes = {
      {48, 64, 32, 1, 32, WeightLayout::IN_OUT, Activation::NONE, true},
      {32, 48, 16, 3, 56, WeightLayout::IN_OUT, Activation::NONE, true},  // fused QKV, wide rows
      {64, 48, 80, 1, 80, WeightLayout::IN_OUT, Activation::GELU, true},  // the FFN up-projection
      {32, 48, 16, 1, 16, WeightLayout::OUT_IN, Activation::NONE, false},
      {128, 768, 3072, 1, 3072, WeightLayout::IN_OUT, Activation::GELU, true},
  };
  uint64_t seed = 60;
  for (const LinearShape& s : shapes) {
    const size_t cols = static_cast<size_t>(s.groups) * s.O;
    for (float boost : {1.0f, 8.0f}) {
      ++seed;
      auto forward = [&](const Fp8Scales* f) {
        Gen g(seed);
        return linear_forward_case(g, s, f);
      };
      expect_fp8_conformance(*backend_, *oracle_, *cpu_fp32_, forward, scales_for(forward(nullptr), false, s.ldo, cols, boost),
                             false, s.ldo, cols, fp8_twin_.get());
      for (bool accumulate : {false, true}) {
        if (accumulate && s.groups == 1) continue;
        auto backward = [&](const Fp8Scales* f) {
          Gen g(seed);
          return linear_backward_case(g, s, accumulate, Activation::NONE, f);
        };
        expect_fp8_conformance(*backend_, *oracle_, *cpu_fp32_, backward,
                               scales_for(backward(nullptr), true, s.ldo, cols, boost), true, s.ldo, cols,
                               fp8_twin_.get());
      }
    }
  }
  // The FFN down-projection's backward with the GELU backward fused.
  for (const LinearShape& s : {LinearShape{48, 80, 32, 1, 32, WeightLayout::IN_OUT, Activation::NONE, true},
                               LinearShape{128, 3072, 768, 1, 768, WeightLayout::IN_OUT, Activation::NONE, true}}) {
    auto backward = [&](const Fp8Scales* f) {
      Gen g(70);
      return linear_backward_case(g, s, false, Activation::GELU, f);
    };
    expect_fp8_conformance(*backend_, *oracle_, *cpu_fp32_, backward, scales_for(backward(nullptr), true, s.ldo, s.O),
                           true, s.ldo, s.O, fp8_twin_.get());
  }
}

// The scale update is f32 bookkeeping every backend runs: the oracle's results, on histories of random amaxes with
// zeros among them (test_fp8.cpp checks the rule itself against a written-out reference).
TEST_P(BackendOps, Fp8ScaleUpdate) {
  for (int history : {1, 3}) {
    Gen g(80 + history);
    const int count = 4 * kFp8Operands;
    Case c{"fp8_scale_update", "history " + std::to_string(history)};
    Vec amaxes = g.uniform(static_cast<size_t>(history) * count, 0, 1000);
    for (size_t i = 0; i < amaxes.size(); i += 5) amaxes[i] = 0;
    const int scale = c.inout("scale", Kind::F32, g.uniform(count, 0.5, 2));
    const int hist = c.inout("history", Kind::F32, amaxes);
    c.run = [=](Backend& be, const std::vector<void*>& t) {
      be.fp8_scale_update({at<float>(t, scale), at<float>(t, hist), count, history, history == 3 ? 1.0f : 0.0f});
    };
    c.rtol = 0;
    check(c);
  }
}

// The step's schedule from the device's update count, through warmup (from 0 and from a negative start), the decay
// (powers 1 and 0.5), its end, and a dropout step past 2^32.
TEST_P(BackendOps, ScheduleStep) {
  struct Sched {
    int64_t warmup, start;
    double power;
  };
  for (Sched sc : {Sched{10, 0, 1.0}, Sched{287, -76, 1.0}, Sched{0, 0, 0.5}}) {
    for (int64_t updates : {int64_t{0}, int64_t{9}, int64_t{10}, int64_t{211}, int64_t{599}, int64_t{600},
                            int64_t{750}, int64_t{3} << 31}) {
      Case c{"schedule_step", "warmup " + std::to_string(sc.warmup) + " from " + std::to_string(sc.start) +
                                  ", power " + std::to_string(sc.power) + ", after " + std::to_string(updates)};
      ops::StepScalars s = step_scalars(1, -1, 1);
      s.updates = updates;
      s.nonfinite = 3;  // the last record's: kept
      const int scalars = c.raw("scalars", Kind::SCALARS, std::vector<ops::StepScalars>{s}, Role::INOUT);
      const kmath::StepSchedule schedule{.learning_rate = 0.00288293, .beta1 = 0.9, .beta2 = 0.999,
                                         .poly_power = sc.power, .train_steps = 600, .warmup_steps = sc.warmup,
                                         .start_warmup_step = sc.start};
      c.run = [=](Backend& be, const std::vector<void*>& t) {
        be.schedule_step({at<ops::StepScalars>(t, scalars), schedule, 16, 3});
      };
      check(c);
    }
  }
}

// The step's record: filed in its slot of rings of 1, 3 and 16 (the other slots untouched), the count advanced, for
// a finite step, clips that saw a non-finite norm, and losses that are NaN or infinite; and at a count past 2^32.
TEST_P(BackendOps, RecordStep) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Sums {
    const char* what;
    std::vector<double> sums;
  };
  for (const Sums& v : {Sums{"finite", {12.5, 301, 1.25, 7, 0}}, Sums{"2 non-finite clips", {3, 1, 0.5, 2, 2}},
                        Sums{"a NaN loss", {kNaN, 0, 0.5, 1, 0}}, Sums{"an infinite NSP loss", {1, 2, inf, 3, 0}}}) {
    for (int slots : {1, 3, 16}) {
      for (int64_t updates : {int64_t{0}, int64_t{7}, (int64_t{1} << 32) + 5}) {
        Case c{"record_step", std::string(v.what) + ", " + std::to_string(slots) + " slots, after " +
                                  std::to_string(updates)};
        ops::StepScalars s = step_scalars(1, 0.00125f, 1);
        s.updates = updates;
        s.grad_norm_sq = 2.75;
        const int scalars = c.raw("scalars", Kind::SCALARS, std::vector<ops::StepScalars>{s}, Role::INOUT);
        const int sums = c.raw("sums", Kind::BYTES, v.sums);
        std::vector<ops::StepRecord> earlier(static_cast<size_t>(slots));
        for (int k = 0; k < slots; ++k) earlier[size_t(k)] = {.mlm_loss = 100.0 + k, .updates = -1 - k};
        const int ring = c.raw("ring", Kind::RECORDS, earlier, Role::INOUT);
        c.run = [=](Backend& be, const std::vector<void*>& t) {
          be.record_step({at<ops::StepScalars>(t, scalars), at<double>(t, sums), at<ops::StepRecord>(t, ring), slots});
        };
        check(c);
      }
    }
  }
}

TEST_P(BackendOps, ActivationBackward) {
  for (uint64_t seed : {6, 7}) {
    Gen g(seed);
    check(activation_backward_case(g, 1001, Activation::GELU));
    check(activation_backward_case(g, 4099, Activation::TANH));
  }
  Gen g(8);
  check(activation_backward_case(g, 20 * 768, Activation::GELU));
}

TEST_P(BackendOps, EmbeddingForwardAndBackward) {
  for (bool backward : {false, true}) {
    const std::string op = backward ? "embedding_backward" : "embedding_forward";
    for (uint64_t seed : {9, 10}) {
      Gen g(seed);
      check(embedding_case(g, {53, 40, 97, 2, 64}, dropout_for(op, 0.1f), backward));
      check(embedding_case(g, {7, 16, 11, 2, 8}, 0.0f, backward));
    }
    Gen g(11);
    check(embedding_case(g, {256, 768, 2048, 2, 512}, dropout_for(op, 0.1f), backward));
  }
}

TEST_P(BackendOps, ResidualLayerNormForwardAndBackward) {
  for (bool backward : {false, true}) {
    const std::string op = backward ? "residual_layernorm_backward" : "residual_layernorm_forward";
    for (uint64_t seed : {12, 13}) {
      Gen g(seed);
      check(residual_layernorm_case(g, {37, 65, true, true}, dropout_for(op, 0.1f), backward));
      check(residual_layernorm_case(g, {19, 48, false, true}, dropout_for(op, 0.25f), backward));
      check(residual_layernorm_case(g, {23, 33, true, false}, 0.0f, backward));
      check(residual_layernorm_case(g, {20, 64, false, false}, 0.0f, backward));  // the MLM head's plain LayerNorm
    }
    Gen g(14);
    check(residual_layernorm_case(g, {256, 768, true, true}, dropout_for(op, 0.1f), backward));
  }
}

TEST_P(BackendOps, AttentionForwardAndBackward) {
  for (bool backward : {false, true}) {
    const std::string op = backward ? "attention_backward" : "attention_forward";
    for (uint64_t seed : {15, 16, 17}) {
      Gen g(seed);
      check(attention_case(g, {40, 9, 2, 4, seed == 16}, dropout_for(op, 0.1f), backward));
      check(attention_case(g, {67, 33, 3, 8, false}, dropout_for(op, 0.2f), backward));
      check(attention_case(g, {12, 5, 1, 2, false}, 0.0f, backward));
    }
    // BERT-base: 12 heads of 64, sequences up to 128 in a budget of 384 tokens.
    Gen g(18);
    check(attention_case(g, {384, 128, 12, 64, false}, dropout_for(op, 0.1f), backward));
    if (!backend_->capabilities().host_memory) {  // a GPU: BERT-large, 16 heads of 64, sequences up to 512
      Gen large(19);
      check(attention_case(large, {1024, 512, 16, 64, true}, dropout_for(op, 0.1f), backward));
    }
  }
}

TEST_P(BackendOps, GatherForwardAndBackward) {
  for (uint64_t seed : {19, 20}) {
    Gen g(seed);
    check(gather_case(g, 50, 17, 24, false, false));
    check(gather_case(g, 50, 17, 24, true, false));
    check(gather_case(g, 50, 17, 24, true, true));
  }
  Gen g(21);
  check(gather_case(g, 384, 60, 768, false, false));
  check(gather_case(g, 384, 60, 768, true, false));
  check(gather_case(g, 384, 3, 768, true, true));
}

TEST_P(BackendOps, CrossEntropyForwardAndBackward) {
  for (bool backward : {false, true}) {
    for (uint64_t seed : {22, 23}) {
      Gen g(seed);
      check(cross_entropy_case(g, {13, 1001, 1004}, backward, false));
      check(cross_entropy_case(g, {9, 2, 2}, backward, false));  // NSP
    }
    Gen g(24);
    check(cross_entropy_case(g, {40, 30522, 30528}, backward, false));
  }
  Gen g(25);
  check(cross_entropy_case(g, {17, 1001, 1001}, true, true));
  check(cross_entropy_case(g, {20, 30522, 30528}, true, true));
}

TEST_P(BackendOps, GradientClipAndAccumulate) {
  for (uint64_t seed : {26, 27}) {
    Gen g(seed);
    const FlatProblem f({5000, 7, 3001, 1, 12000}, 1024);
    check(clip_case(g, f, 1.0f, false, false));     // clipped
    check(clip_case(g, f, 1000.0f, false, false));  // under the threshold
    check(clip_case(g, f, 1.0f, true, false));      // in shards
    check(clip_case(g, f, 1.0f, false, true));      // non-finite
  }
}

TEST_P(BackendOps, LambMomentsAndApply) {
  for (uint64_t seed : {28, 29}) {
    Gen g(seed);
    const FlatProblem f({3000, 17, 70000, 768, 5}, 32768);
    check(lamb_case(g, f, false, false, false));
    check(lamb_case(g, f, true, true, false));
    check(lamb_case(g, f, false, false, true));
  }
}

// Drop rate and scaling of the masks each forward op draws, read back through the op's own outputs: with masks
// M in {0, 1/(1-p)}, an output over the same inputs with and without dropout differs by M elementwise.
void expect_mask_statistics(const Vec& with, const Vec& without, float p, double rel_tol, const std::string& what) {
  size_t considered = 0, dropped = 0;
  double scale = 0;
  for (double x : without) scale = std::max(scale, std::fabs(x));
  int failures = 0;
  for (size_t i = 0; i < with.size(); ++i) {
    if (!(std::fabs(without[i]) > 1e-3 * scale)) continue;
    ++considered;
    if (with[i] == 0) {
      ++dropped;
    } else if (!(std::fabs(with[i] / without[i] * (1.0 - p) - 1.0) <= rel_tol) && failures++ < 3) {
      ADD_FAILURE() << what << "[" << i << "]: " << with[i] << " with dropout, " << without[i] << " without";
    }
  }
  ASSERT_GT(considered, 10000u) << what;
  const double n = static_cast<double>(considered);
  EXPECT_NEAR(static_cast<double>(dropped), p * n, 5 * std::sqrt(n * p * (1 - p))) << what << ": drop rate";
}

size_t index_of(const Case& c, const std::string& name) {
  for (size_t i = 0; i < c.tensors.size(); ++i)
    if (c.tensors[i].name == name) return i;
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

TEST_P(BackendOps, DropoutMasksHaveTheirRateAndScale) {
  Backend& b = *backend_;
  const double tol = Dtypes::of(b).any_bf16() ? 1.6e-2 : 1e-5;
  const float p = 0.1f;
  {  // residual LayerNorm: sum = dropout(inp + bias)
    Gen g1(40), g0(40);
    const Case with = residual_layernorm_case(g1, {64, 768, true, false}, p, false);
    const Case without = residual_layernorm_case(g0, {64, 768, true, false}, 0.0f, false);
    const size_t at = index_of(with, "sum");
    expect_mask_statistics(run_case(b, with).values[at], run_case(b, without).values[at], p, tol,
                           "residual_layernorm_forward sum");
  }
  {  // embeddings: out = dropout(LayerNorm(...))
    Gen g1(41), g0(41);
    const Case with = embedding_case(g1, {64, 768, 1000, 2, 128}, p, false);
    const Case without = embedding_case(g0, {64, 768, 1000, 2, 128}, 0.0f, false);
    const size_t at = index_of(with, "out");
    expect_mask_statistics(run_case(b, with).values[at], run_case(b, without).values[at], p, tol,
                           "embedding_forward out");
  }
  {  // attention: with v one-hot over each sequence's keys (v of key j = e_j), ctx[i][j] = probs[i][j] * mask
    const int S = 32, heads = 4, D = 32, H = heads * D, N = 32 * 40;
    SeqLayout l{{0}, N, S};
    Gen gl(42);
    while (l.cu.back() + S <= N - 1) l.cu.push_back(l.cu.back() + gl.between(S / 2, S));
    Vec qkv = gl.uniform(static_cast<size_t>(N) * 3 * H, -0.5, 0.5);
    for (int s = 0; s < l.sequences(); ++s)
      for (int j = l.cu[s]; j < l.cu[s + 1]; ++j)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < D; ++d) qkv[static_cast<size_t>(j) * 3 * H + 2 * H + h * D + d] = d == j - l.cu[s];
    Gen g1(43), g0(43);
    const Case with = attention_case(g1, {N, S, heads, D, false}, p, false, &qkv, &l);
    const Case without = attention_case(g0, {N, S, heads, D, false}, 0.0f, false, &qkv, &l);
    const size_t at = index_of(with, "ctx");
    expect_mask_statistics(run_case(b, with).values[at], run_case(b, without).values[at], p, tol,
                           "attention_forward ctx");
  }
}

// The attention of one layout in fp64, forward and backward, with the dropout masks given (keep(s, h, i, j): whether
// query i of sequence s keeps key j in head h): ctx and dqkv, 0 past the layout's tokens.
struct AttentionReference {
  Vec ctx, dqkv;
};
AttentionReference attention_reference(const Vec& qkv, const Vec& dctx, const SeqLayout& l, int heads, int D, float p,
                                       const std::function<bool(int, int, int, int)>& keep) {
  const int H = heads * D, N = l.tokens;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D)), kept = 1.0 / (1.0 - p);
  AttentionReference r{Vec(static_cast<size_t>(N) * H, 0.0), Vec(static_cast<size_t>(N) * 3 * H, 0.0)};
  auto q = [&](int t, int h, int d) { return qkv[static_cast<size_t>(t) * 3 * H + h * D + d]; };
  auto k = [&](int t, int h, int d) { return qkv[static_cast<size_t>(t) * 3 * H + H + h * D + d]; };
  auto v = [&](int t, int h, int d) { return qkv[static_cast<size_t>(t) * 3 * H + 2 * H + h * D + d]; };
  for (int s = 0; s < l.sequences(); ++s) {
    const int c0 = l.cu[s], len = l.cu[s + 1] - l.cu[s];
    for (int h = 0; h < heads; ++h) {
      std::vector<Vec> P(len, Vec(len)), dP(len, Vec(len));
      for (int i = 0; i < len; ++i) {
        double top = -1e300;
        for (int j = 0; j < len; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q(c0 + i, h, d) * k(c0 + j, h, d);
          P[i][j] = dot * scale;
          top = std::max(top, P[i][j]);
        }
        double sum = 0;
        for (int j = 0; j < len; ++j) sum += P[i][j] = std::exp(P[i][j] - top);
        for (int j = 0; j < len; ++j) P[i][j] /= sum;
      }
      for (int i = 0; i < len; ++i)
        for (int j = 0; j < len; ++j) {
          const double m = keep(s, h, i, j) ? kept : 0.0, pd = P[i][j] * m;
          double dpd = 0;
          for (int d = 0; d < D; ++d) {
            const double dc = dctx[static_cast<size_t>(c0 + i) * H + h * D + d];
            r.ctx[static_cast<size_t>(c0 + i) * H + h * D + d] += pd * v(c0 + j, h, d);
            r.dqkv[static_cast<size_t>(c0 + j) * 3 * H + 2 * H + h * D + d] += pd * dc;  // dv
            dpd += dc * v(c0 + j, h, d);
          }
          dP[i][j] = dpd * m;
        }
      for (int i = 0; i < len; ++i) {
        double row = 0;
        for (int j = 0; j < len; ++j) row += P[i][j] * dP[i][j];
        for (int j = 0; j < len; ++j) {
          const double ds = P[i][j] * (dP[i][j] - row) * scale;
          for (int d = 0; d < D; ++d) {
            r.dqkv[static_cast<size_t>(c0 + i) * 3 * H + h * D + d] += ds * k(c0 + j, h, d);      // dq
            r.dqkv[static_cast<size_t>(c0 + j) * 3 * H + H + h * D + d] += ds * q(c0 + i, h, d);  // dk
          }
        }
      }
    }
  }
  return r;
}

// The attention backward with dropout on, on the masks the forward drew, whoever draws them: ops.h's Philox, or
// cuDNN's own generator (which the other attention cases must run with dropout off, so this is the one case that
// checks the dropout path training runs). The masks are read back from a forward with v one-hot over each sequence's
// keys (ctx[i][h, j] = probs[i][j] * mask[i][j] / (1 - p): a dropped key is an exact 0), with the counter of the
// run under test, which then runs forward and backward on random q, k, v; both are compared with the fp64
// reference on those masks, by relative L2 error per part (ctx, dq, dk, dv).
TEST_P(BackendOps, AttentionBackwardWithDropout) {
  Backend& b = *backend_;
  const float p = 0.1f;
  const int S = 48, heads = 2, D = 64, H = heads * D, N = 8 * S;  // D >= S: a one-hot column for every key
  Gen gl(44);
  const SeqLayout l = random_layout(gl, N, S, false);
  // The inputs as the backend holds them (bf16 where it keeps activations in bf16), so the reference starts there.
  const bool bf16 = Dtypes::of(b).act == DType::BF16;
  auto held = [&](Vec x) {
    if (bf16)
      for (double& e : x) e = round_bf16(static_cast<float>(e));
    return x;
  };
  const Vec qkv = held(gl.uniform(static_cast<size_t>(N) * 3 * H, -1, 1));
  Vec onehot = qkv;
  for (int s = 0; s < l.sequences(); ++s)
    for (int j = l.cu[s]; j < l.cu[s + 1]; ++j)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < D; ++d) onehot[static_cast<size_t>(j) * 3 * H + 2 * H + h * D + d] = d == j - l.cu[s];
  Gen g1(45), g2(45);
  const Case masks = attention_case(g1, {N, S, heads, D, false}, p, false, &onehot, &l);
  const Case c = attention_case(g2, {N, S, heads, D, false}, p, true, &qkv, &l);
  const Vec mask_ctx = run_case(b, masks).values[index_of(masks, "ctx")];
  size_t considered = 0, dropped = 0;
  auto keep = [&](int s, int h, int i, int j) {
    return mask_ctx[static_cast<size_t>(l.cu[s] + i) * H + h * D + j] != 0.0;
  };
  for (int s = 0; s < l.sequences(); ++s)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < l.cu[s + 1] - l.cu[s]; ++i)
        for (int j = 0; j < l.cu[s + 1] - l.cu[s]; ++j, ++considered) dropped += !keep(s, h, i, j);
  ASSERT_GT(considered, 5000u);
  const double n = static_cast<double>(considered);
  ASSERT_NEAR(static_cast<double>(dropped), p * n, 5 * std::sqrt(n * p * (1 - p))) << "the masks read back";

  const Results got = run_case(b, c);
  const AttentionReference want =
      attention_reference(qkv, held(c.tensors[index_of(c, "dctx")].values), l, heads, D, p, keep);
  // bf16 storage of ctx, dq, dk, dv (and of the probabilities in cuDNN's fused kernel): a relative L2 error of a few
  // bf16 roundings; fp32: of fp32 sums over a sequence.
  const double tol = bf16 ? 2e-2 : 1e-5;
  auto part = [&](const Vec& x, int third) {
    Vec out;
    for (int t = 0; t < l.real_tokens(); ++t)
      for (int e = 0; e < H; ++e) out.push_back(x[static_cast<size_t>(t) * 3 * H + third * H + e]);
    return out;
  };
  const Vec& ctx = got.values[index_of(c, "ctx")];
  const Vec& dqkv = got.values[index_of(c, "dqkv")];
  EXPECT_LT(l2(ctx, &want.ctx) / l2(want.ctx), tol) << "ctx";
  const char* names[3] = {"dq", "dk", "dv"};
  for (int third = 0; third < 3; ++third) {
    const Vec g = part(dqkv, third), w = part(want.dqkv, third);
    EXPECT_LT(l2(g, &w) / l2(w), tol) << names[third];
  }
}

// Where a backend cannot run (not in this build, or no device for it), asking for it is one clear line naming it.
TEST(BackendChoice, OneThatCannotRunHereIsOneInputErrorLine) {
  const std::vector<std::string> here = available_backends();
  int checked = 0;
  for (const BackendInfo& b : backend_infos()) {
    if (b.oracle || std::find(here.begin(), here.end(), b.name) != here.end()) continue;
    SCOPED_TRACE(b.name);
    try {
      make_backend(backend_spec(b.name));
      ADD_FAILURE() << "make_backend(\"" << b.name << "\") returned a backend that cannot run here";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(b.name), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "every backend can run here, so the cannot-run path cannot be taken";
}

// The naive bf16 reference that a bf16 backend is held to, checked here so that it is right before one is: its
// results are bf16 numbers, their error against fp64 is of bf16 size, and the 2x criterion separates an error of
// 1.5x from one of 3x.
TEST(NaiveBf16Reference, RoundsWhereTheBackendKeepsBf16AndBoundsTheError) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 1.0f / 256), 1.0f);                 // a tie rounds to even
  EXPECT_EQ(round_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);    // a tie rounds to even, upwards
  EXPECT_EQ(round_bf16(1.0f + 1.0f / 128 + 1.0f / 1024), 1.0f + 1.0f / 128);
  std::unique_ptr<Backend> oracle = make_cpu_backend(DType::F64, 0), cpu = make_cpu_backend(DType::F32, 0);
  const Dtypes bf16_acts{DType::BF16, DType::BF16, DType::F32};
  Gen g(50);
  const Case c = linear_backward_case(g, {64, 96, 80, 1, 80, WeightLayout::IN_OUT, Activation::NONE, true}, false,
                                      Activation::NONE);
  const Results ref = run_case(*oracle, c), naive = run_case(*cpu, c, &bf16_acts), fp32 = run_case(*cpu, c);
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const Tensor& t = c.tensors[i];
    if (t.role != Role::OUT && t.role != Role::INOUT) continue;
    SCOPED_TRACE(t.name);
    const Vec& n = naive.values[i];
    const bool bf16_kind = dtype_of(t.kind, bf16_acts) == DType::BF16;
    if (bf16_kind) {
      for (double x : n) ASSERT_EQ(static_cast<float>(x), round_bf16(static_cast<float>(x)));
    }
    // bf16 keeps 8 bits: a relative L2 error between 2^-12 and 2^-6 (fp32 master gradients of bf16 inputs too).
    const double rel = l2(n, &ref.values[i]) / l2(ref.values[i]);
    EXPECT_GT(rel, 1.0 / 4096);
    EXPECT_LT(rel, 1.0 / 64);
    EXPECT_LT(l2(fp32.values[i], &ref.values[i]) / l2(ref.values[i]), 1e-6);
    Vec close(n.size()), far(n.size());
    for (size_t e = 0; e < n.size(); ++e) {
      close[e] = ref.values[i][e] + 1.5 * (n[e] - ref.values[i][e]);
      far[e] = ref.values[i][e] + 3.0 * (n[e] - ref.values[i][e]);
    }
    std::string why;
    EXPECT_TRUE(within_twice_naive(close, ref.values[i], n, &why)) << why;
    EXPECT_FALSE(within_twice_naive(far, ref.values[i], n, &why));
  }
}

// The conformance test of each op: the test of this file whose cases run it (a switch over the op list, so an op
// added to it without a case here does not compile: -Werror=switch).
const char* conformance_test_of(ops::Op op) {
  switch (op) {
    case ops::Op::LINEAR_FORWARD: return "LinearForward";
    case ops::Op::LINEAR_BACKWARD: return "LinearBackward";
    case ops::Op::ACTIVATION_BACKWARD: return "ActivationBackward";
    case ops::Op::EMBEDDING_FORWARD: case ops::Op::EMBEDDING_BACKWARD: return "EmbeddingForwardAndBackward";
    case ops::Op::RESIDUAL_LAYERNORM_FORWARD:
    case ops::Op::RESIDUAL_LAYERNORM_BACKWARD: return "ResidualLayerNormForwardAndBackward";
    case ops::Op::ATTENTION_FORWARD: case ops::Op::ATTENTION_BACKWARD: return "AttentionForwardAndBackward";
    case ops::Op::GATHER_FORWARD: case ops::Op::GATHER_BACKWARD: return "GatherForwardAndBackward";
    case ops::Op::CROSS_ENTROPY_FORWARD:
    case ops::Op::CROSS_ENTROPY_BACKWARD: return "CrossEntropyForwardAndBackward";
    case ops::Op::GRADIENT_CLIP: case ops::Op::GRADIENT_CLIP_FINISH:
    case ops::Op::GRADIENT_ACCUMULATE: return "GradientClipAndAccumulate";
    case ops::Op::LAMB_MOMENTS: case ops::Op::LAMB_APPLY: return "LambMomentsAndApply";
    case ops::Op::FP8_SCALE_UPDATE: return "Fp8ScaleUpdate";
    case ops::Op::SCHEDULE_STEP: return "ScheduleStep";
    case ops::Op::RECORD_STEP: return "RecordStep";
  }
  return "";
}

// The table names tests that exist: every op's conformance test is a test of the BackendOps suite.
TEST(BackendOpsCoverage, EveryOpHasItsConformanceTest) {
  std::vector<std::string> tests;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    if (std::string(suite.name()) != "Backends/BackendOps") continue;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const std::string name = suite.GetTestInfo(t)->name();  // "LinearForward/cpu"
      tests.push_back(name.substr(0, name.find('/')));
    }
  }
  ASSERT_FALSE(tests.empty()) << "no Backends/BackendOps tests registered";
  for (int i = 0; i < ops::kOpCount; ++i) {
    const auto op = static_cast<ops::Op>(i);
    const std::string test = conformance_test_of(op);
    EXPECT_NE(std::find(tests.begin(), tests.end(), test), tests.end())
        << ops::op_name(op) << ": no test BackendOps." << test;
  }
}

// Every backend of the registry but the oracle that declares the ctest label `label`, whether this build or machine
// can run it or not (then: skipped), with its defaults and once more with each option set it declares.
std::vector<std::string> conformance_backends(const std::string& label) {
  std::vector<std::string> names;
  for (const BackendInfo& b : backend_infos()) {
    if (b.oracle || b.test_label != label) continue;
    names.push_back(b.name);
    for (const std::vector<std::string>& variant : b.test_variants) {
      std::string param = b.name;
      for (size_t i = 0; i < variant.size(); ++i) param += (i == 0 ? ":" : ",") + variant[i];
      names.push_back(param);
    }
  }
  return names;
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name)  // test names are letters, digits and '_'
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

// One instantiation per label, named for it: CMake files GpuBackends/* under ctest's label gpu.
INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, testing::ValuesIn(conformance_backends("cpu")), test_name);
INSTANTIATE_TEST_SUITE_P(GpuBackends, BackendOps, testing::ValuesIn(conformance_backends("gpu")), test_name);

}  // namespace
}  // namespace bertperf
