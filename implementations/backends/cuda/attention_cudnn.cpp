// cuDNN's fused SDPA over our sequence layout, through the header-only cudnn-frontend (attention_impl.h).
//
// The layout in cuDNN's terms: a batch of b = `sequences` sequences of at most s = max_seqlen tokens, tensors of
// dims (b, h, s, d) with strides (-, d, 3H, 1) for q, k and v (read in place from the packed qkv; k and v start H
// and 2H elements in) and (-, d, H, 1) for ctx, each sequence placed by a ragged offset (cu_seqlens * 3H or * H
// elements), its length given by seq_len (padding mask). The statistics are the packed (b, h, s, 1) f32 log-sum-exp
// that cuDNN's backward reads. The graphs are built once per shape (the device pointers go in at execution) and kept
// by the backend's CudnnAttention, with the one workspace they share; building happens at a shape's first call, which
// the training step makes before it captures a CUDA graph.
//
// The workspace is what the built graphs ask for (get_workspace_size), not a formula: cudnn-frontend 1.32 decomposes
// the backward in ways whose workspace differs by orders of magnitude. With set_deterministic_algorithm (Hopper
// here) it takes the dP-workspace path, at least sequences x heads x pad64(S)^2 x 2 bytes; otherwise an f32 dQ
// accumulator laid out on dQ's own row stride (3H here), or padded to sequences x heads x S x d on SM8x.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_impl.h"

namespace bertperf::cuda {

namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant packs.
enum Uid : int64_t {
  UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV,
  UID_SEQ_LEN, UID_RAGGED_Q, UID_RAGGED_K, UID_RAGGED_V, UID_RAGGED_CTX, UID_SEED, UID_OFFSET,
};

using Shape = AttentionShape;

using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// The index tensors and q, k, v of one graph.
// q, k and v have one offset tensor each (the same device array: their rows share a stride), as cuDNN's
// samples give every ragged tensor its own; their gradients reuse them, and ctx's gradient ctx's.
struct Inputs {
  Tensor q, k, v, seq_len, ragged_q, ragged_k, ragged_v, ragged_ctx, seed, offset;
};

Inputs add_inputs(fe::graph::Graph& g, const Shape& s) {
  const int64_t b = s.sequences, h = s.heads, S = s.max_seqlen, d = s.head_dim, H = h * d;
  auto index = [&](const char* name, int64_t uid, int64_t n) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT32));
  };
  Inputs in;
  in.seq_len = index("seq_len", UID_SEQ_LEN, b);
  in.ragged_q = index("ragged_q", UID_RAGGED_Q, b + 1);
  in.ragged_k = index("ragged_k", UID_RAGGED_K, b + 1);
  in.ragged_v = index("ragged_v", UID_RAGGED_V, b + 1);
  in.ragged_ctx = index("ragged_ctx", UID_RAGGED_CTX, b + 1);
  auto packed = [&](const char* name, int64_t uid, const Tensor& ragged) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({b, h, S, d})
                        .set_stride({S * 3 * H, d, 3 * H, 1}).set_data_type(fe::DataType_t::BFLOAT16)
                        .set_ragged_offset(ragged));
  };
  in.q = packed("q", UID_Q, in.ragged_q);
  in.k = packed("k", UID_K, in.ragged_k);
  in.v = packed("v", UID_V, in.ragged_v);
  if (s.drop_prob > 0.0f) {
    auto scalar = [&](const char* name, int64_t uid) {
      return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, 1, 1, 1})
                          .set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::INT64));
    };
    in.seed = scalar("seed", UID_SEED);
    in.offset = scalar("offset", UID_OFFSET);
  }
  return in;
}

// A (b, h, s, d) tensor in ctx's layout: rows of H, placed by the ragged ctx offsets.
void ctx_layout(fe::graph::Tensor_attributes& t, const Shape& s, const Inputs& in, int64_t uid) {
  const int64_t b = s.sequences, h = s.heads, S = s.max_seqlen, d = s.head_dim, H = h * d;
  t.set_uid(uid).set_dim({b, h, S, d}).set_stride({S * H, d, H, 1}).set_data_type(fe::DataType_t::BFLOAT16)
      .set_ragged_offset(in.ragged_ctx);
}

void stats_layout(fe::graph::Tensor_attributes& t, const Shape& s) {
  const int64_t b = s.sequences, h = s.heads, S = s.max_seqlen;
  t.set_uid(UID_STATS).set_dim({b, h, S, 1}).set_stride({h * S, S, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float score_scale(const Shape& s) { return 1.0f / std::sqrt(static_cast<float>(s.head_dim)); }

// The forward in one node family (attention_choice.h): pinned, never the frontend's own choice, so that a shape
// without dropout runs the family a shape with dropout must.
std::shared_ptr<fe::graph::Graph> forward_graph(const Shape& s, SdpaFamily family) {
  auto g = new_graph();
  const Inputs in = add_inputs(*g, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_implementation(family == SdpaFamily::COMPOSITE ? fe::AttentionImplementation_t::COMPOSITE
                                                                         : fe::AttentionImplementation_t::UNIFIED)
                     .set_generate_stats(true)
                     .set_attn_scale(score_scale(s))
                     .set_padding_mask(true)
                     .set_seq_len_q(in.seq_len)
                     .set_seq_len_kv(in.seq_len);
  if (s.drop_prob > 0.0f) options.set_dropout(s.drop_prob, in.seed, in.offset);
  auto [o, stats] = g->sdpa(in.q, in.k, in.v, options);
  o->set_output(true);
  ctx_layout(*o, s, in, UID_O);
  stats->set_output(true);
  stats_layout(*stats, s);
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const Shape& s, int sm) {
  auto g = new_graph();
  const Inputs in = add_inputs(*g, s);
  auto o = g->tensor(fe::graph::Tensor_attributes().set_name("o"));
  ctx_layout(*o, s, in, UID_O);
  auto dout = g->tensor(fe::graph::Tensor_attributes().set_name("dout"));
  ctx_layout(*dout, s, in, UID_DO);
  auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats"));
  stats_layout(*stats, s);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_attn_scale(score_scale(s))
                     .set_padding_mask(true)
                     .set_seq_len_q(in.seq_len)
                     .set_seq_len_kv(in.seq_len)
                     .set_max_total_seq_len_q(s.N)
                     .set_max_total_seq_len_kv(s.N)
                     // Bit-identical reruns need the deterministic dq reduction, which cuDNN has for ragged
                     // layouts on Hopper only (attention.h); elsewhere the graph is built without it rather than
                     // refused, and the backend declares the op non-deterministic.
                     .set_deterministic_algorithm(cudnn_attention_deterministic(sm));
  if (s.drop_prob > 0.0f) options.set_dropout(s.drop_prob, in.seed, in.offset);
  auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, o, dout, stats, options);
  const int64_t b = s.sequences, h = s.heads, S = s.max_seqlen, d = s.head_dim, H = h * d;
  auto gradient = [&](const Tensor& t, int64_t uid, const Tensor& ragged) {
    t->set_output(true).set_uid(uid).set_dim({b, h, S, d}).set_stride({S * 3 * H, d, 3 * H, 1})
        .set_data_type(fe::DataType_t::BFLOAT16).set_ragged_offset(ragged);
  };
  gradient(dq, UID_DQ, in.ragged_q);
  gradient(dk, UID_DK, in.ragged_k);
  gradient(dv, UID_DV, in.ragged_v);
  return g;
}

template <typename T>
void* at(T* base, size_t offset) {
  return const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(base)) + offset;
}

void execute(CudaContext& ctx, const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, void* workspace,
             const char* what) {
  CUDNN_CHECK(cudnnSetStream(ctx.cudnn, ctx.stream));
  fe::error_t status = g.execute(ctx.cudnn, pack, workspace);
  BERT_CHECK(status.is_good(), "cuDNN SDPA ", what, ": ", status.get_message());
}

template <typename P>
AttentionShape shape_of(const P& p) {
  return {p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout.prob};
}

}  // namespace

// A shape's graphs, or what cuDNN said when it refused them: `build` is the forward's (with the backward's, for a
// shape with dropout), `backward_build` the backward's once it has been built.
struct CudnnAttention::Graphs {
  CudnnBuild build;
  std::optional<CudnnBuild> backward_build;
  std::shared_ptr<fe::graph::Graph> forward, backward;
};

CudnnAttention::CudnnAttention(const CudaContext& ctx) : workspace_({&ctx}, ctx.capture, "cuDNN attention workspace") {}

CudnnAttention::~CudnnAttention() = default;

namespace {

// Builds a graph and asks it for its workspace, into `b` (the larger of what it held and the graph's); null, with
// what cuDNN said in b.why, when it refuses.
std::shared_ptr<fe::graph::Graph> attempt(CudaContext& ctx, std::shared_ptr<fe::graph::Graph> graph, const char* what,
                                          CudnnBuild& b) {
  fe::error_t status = graph->build(ctx.cudnn, {fe::HeurMode_t::A});
  int64_t workspace = 0;
  if (status.is_good()) status = graph->get_workspace_size(workspace);
  if (status.is_bad()) {
    b.why = std::string("cuDNN SDPA ") + what + ": " + status.get_message();
    return nullptr;
  }
  b.workspace = std::max(b.workspace, static_cast<size_t>(std::max<int64_t>(workspace, 0)));
  return graph;
}

void check_not_capturing(const CudaContext& ctx, const AttentionShape& s, const char* what) {
  BERT_CHECK(!ctx.capture.capturing, "cuDNN attention: the ", what, " graph of a shape (", s.N, " tokens, ",
             s.sequences, " sequences) would be built inside a graph capture; run the shape once before capturing");
}

}  // namespace

// Builds a shape's forward, in the first family that builds (attention_choice.h). With dropout its backward too (a
// shape with dropout runs on cuDNN only if its forward and backward both do, since their masks must agree); without,
// the backward waits for the shape's first backward (build_backward), so a shape only evaluated reserves none.
CudnnBuild CudnnAttention::build(CudaContext& ctx, const AttentionShape& s) {
  auto found = graphs_.find(s);
  if (found != graphs_.end()) return found->second->build;
  check_not_capturing(ctx, s, "forward");
  auto g = std::make_unique<Graphs>();
  const bool dropout = s.drop_prob > 0.0f;
  auto one_family = [&](SdpaFamily family) {
    CudnnBuild b;
    g->forward.reset();
    g->backward.reset();
    try {
      g->forward = attempt(ctx, forward_graph(s, family), "forward", b);
      if (g->forward && dropout) g->backward = attempt(ctx, backward_graph(s, ctx.sm), "backward", b);
    } catch (const std::exception& x) {  // the frontend throws for some unsupported configurations
      b.why = std::string("cuDNN SDPA: ") + x.what();
      g->backward.reset();
    }
    b.ok = g->forward && (g->backward || !dropout);
    if (!b.ok) {  // one graph alone is of no use
      g->forward.reset();
      g->backward.reset();
    }
    return b;
  };
  g->build = build_first_family(dropout, one_family);
  if (dropout) g->backward_build = g->build;
  return graphs_.emplace(s, std::move(g)).first->second->build;
}

CudnnBuild CudnnAttention::build_backward(CudaContext& ctx, const AttentionShape& s) {
  auto found = graphs_.find(s);
  BERT_CHECK(found != graphs_.end() && found->second->build.ok, "cuDNN SDPA backward: the forward of this shape (",
             s.N, " tokens, ", s.sequences, " sequences) was not built");
  Graphs& g = *found->second;
  if (g.backward_build) return *g.backward_build;
  check_not_capturing(ctx, s, "backward");
  CudnnBuild b;
  try {
    g.backward = attempt(ctx, backward_graph(s, ctx.sm), "backward", b);
  } catch (const std::exception& x) {
    b.why = std::string("cuDNN SDPA backward: ") + x.what();
    g.backward.reset();
  }
  b.ok = g.backward != nullptr;
  b.family = g.build.family;
  g.backward_build = b;
  return b;
}

void CudnnAttention::reserve(size_t bytes) { workspace_.get(bytes); }

const CudnnAttention::Graphs& CudnnAttention::built(const AttentionShape& s, bool backward) const {
  const char* what = backward ? "backward" : "forward";
  auto found = graphs_.find(s);
  const CudnnBuild* b = found == graphs_.end() ? nullptr
                        : backward ? (found->second->backward_build ? &*found->second->backward_build : nullptr)
                                   : &found->second->build;
  BERT_CHECK(b && b->ok, "cuDNN SDPA ", what, ": the graph of this shape (", s.N, " tokens, ", s.sequences,
             " sequences) was not built");
  BERT_CHECK(b->workspace <= workspace_.bytes(), "cuDNN SDPA ", what, " needs ", b->workspace,
             " bytes of workspace; ", workspace_.bytes(), " were reserved");
  return *found->second;
}

void CudnnAttention::forward(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& l) {
  const Graphs& g = built(shape_of(p), false);
  const int H = p.heads * p.head_dim;
  std::unordered_map<int64_t, void*> pack = {
      {UID_Q, const_cast<void*>(p.qkv)},
      {UID_K, at(p.qkv, static_cast<size_t>(H) * 2)},
      {UID_V, at(p.qkv, static_cast<size_t>(2 * H) * 2)},
      {UID_O, p.ctx},
      {UID_STATS, at(p.saved, l.stats)},
      {UID_SEQ_LEN, at(p.saved, l.seq_len)},
      {UID_RAGGED_Q, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_K, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_V, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_CTX, at(p.saved, l.ragged_ctx)},
  };
  if (p.dropout.prob > 0.0f) {
    pack[UID_SEED] = at(p.saved, l.rng);
    pack[UID_OFFSET] = at(p.saved, l.rng + sizeof(int64_t));
  }
  execute(ctx, *g.forward, pack, workspace_.data(), "forward");
}

void CudnnAttention::backward(CudaContext& ctx, const ops::AttentionBackward& p, const AttentionSaved& l) {
  const Graphs& g = built(shape_of(p), true);
  const int H = p.heads * p.head_dim;
  const size_t k_at = static_cast<size_t>(H) * 2, v_at = static_cast<size_t>(2 * H) * 2;  // bytes of bf16
  std::unordered_map<int64_t, void*> pack = {
      {UID_Q, const_cast<void*>(p.qkv)},
      {UID_K, at(p.qkv, k_at)},
      {UID_V, at(p.qkv, v_at)},
      {UID_O, const_cast<void*>(p.ctx)},
      {UID_DO, const_cast<void*>(p.dctx)},
      {UID_STATS, at(p.saved, l.stats)},
      {UID_DQ, p.dqkv},
      {UID_DK, at(p.dqkv, k_at)},
      {UID_DV, at(p.dqkv, v_at)},
      {UID_SEQ_LEN, at(p.saved, l.seq_len)},
      {UID_RAGGED_Q, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_K, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_V, at(p.saved, l.ragged_qkv)},
      {UID_RAGGED_CTX, at(p.saved, l.ragged_ctx)},
  };
  if (p.dropout.prob > 0.0f) {
    pack[UID_SEED] = at(p.saved, l.rng);
    pack[UID_OFFSET] = at(p.saved, l.rng + sizeof(int64_t));
  }
  execute(ctx, *g.backward, pack, workspace_.data(), "backward");
}

std::string cudnn_frontend_version() {
  return cat(CUDNN_FRONTEND_MAJOR_VERSION, ".", CUDNN_FRONTEND_MINOR_VERSION, ".", CUDNN_FRONTEND_PATCH_VERSION);
}

}  // namespace bertperf::cuda
