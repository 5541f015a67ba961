// cuDNN's fused SDPA over our sequence layout, through the header-only cudnn-frontend (attention_impl.h).
//
// The layout in cuDNN's terms: a batch of b = `sequences` sequences of at most s = max_seqlen tokens, tensors of
// dims (b, h, s, d) with strides (-, d, 3H, 1) for q, k and v (read in place from the packed qkv; k and v start H
// and 2H elements in) and (-, d, H, 1) for ctx, each sequence placed by a ragged offset (cu_seqlens * 3H or * H
// elements), its length given by seq_len (padding mask). The statistics are the packed (b, h, s, 1) f32 log-sum-exp
// that cuDNN's backward reads. The graphs are built once per shape (the device pointers go in at execution) and
// cached; building happens at a shape's first call, which the training step makes before it captures a CUDA graph.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
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

struct Shape {
  cudnnHandle_t handle;
  int N, sequences, max_seqlen, heads, head_dim;
  float drop_prob;
  auto key() const { return std::tie(handle, N, sequences, max_seqlen, heads, head_dim, drop_prob); }
  bool operator<(const Shape& o) const { return key() < o.key(); }
};

struct Entry {
  bool ok = false;
  std::string why;  // what cuDNN said when it refused
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t forward_workspace = 0, backward_workspace = 0;
};

std::mutex cache_mutex;
std::map<Shape, Entry> cache;

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

std::shared_ptr<fe::graph::Graph> forward_graph(const Shape& s) {
  auto g = new_graph();
  const Inputs in = add_inputs(*g, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
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

// Builds both graphs of a shape (a shape runs on cuDNN only if its forward and backward both do, since their
// dropout masks must agree).
Entry build(CudaContext& ctx, const Shape& s) {
  Entry e;
  auto attempt = [&](std::shared_ptr<fe::graph::Graph> g, const char* what, int64_t& workspace) {
    fe::error_t status = g->build(ctx.cudnn, {fe::HeurMode_t::A});
    if (status.is_good()) status = g->get_workspace_size(workspace);
    if (status.is_bad()) {
      e.why = std::string("cuDNN SDPA ") + what + ": " + status.get_message();
      return std::shared_ptr<fe::graph::Graph>();
    }
    return g;
  };
  try {
    e.forward = attempt(forward_graph(s), "forward", e.forward_workspace);
    if (e.forward) e.backward = attempt(backward_graph(s, ctx.sm), "backward", e.backward_workspace);
  } catch (const std::exception& x) {  // the frontend throws for some unsupported configurations
    e.why = std::string("cuDNN SDPA: ") + x.what();
    e.forward.reset();
  }
  e.ok = e.forward && e.backward;
  return e;
}

const Entry& entry(CudaContext& ctx, const Shape& s) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(s);
  if (it == cache.end()) it = cache.emplace(s, build(ctx, s)).first;
  return it->second;
}

// The entry for a call: a refused shape throws when cuDNN was asked for by name, and reads "use the kernel" else.
const Entry* usable(CudaContext& ctx, const Shape& s) {
  const Entry& e = entry(ctx, s);
  if (e.ok) return &e;
  BERT_CHECK(ctx.attention != AttentionImpl::CUDNN, "attention \"cudnn\", but ", e.why);
  return nullptr;
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

}  // namespace

size_t cudnn_attention_workspace_bound(int tokens, int sequences, int max_seqlen, int heads, int head_dim) {
  // The backward's f32 dq accumulator over the real tokens (max_total_seq_len) and its per-row f32 sums, with room.
  const size_t rows = static_cast<size_t>(tokens) * heads;
  const size_t padded_rows = static_cast<size_t>(sequences) * heads * max_seqlen;
  return rows * head_dim * sizeof(float) + 4 * padded_rows * sizeof(float) + (size_t{16} << 20);
}

bool cudnn_attention_supported(CudaContext& ctx, int N, int sequences, int max_seqlen, int heads, int head_dim,
                               float drop_prob) {
  return entry(ctx, {ctx.cudnn, N, sequences, max_seqlen, heads, head_dim, drop_prob}).ok;
}

bool cudnn_attention_forward(CudaContext& ctx, const ops::AttentionForward& p, const AttentionSaved& l) {
  const Shape s{ctx.cudnn, p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout.prob};
  const Entry* e = usable(ctx, s);
  if (!e) return false;
  BERT_CHECK(static_cast<size_t>(e->forward_workspace) <= ctx.workspace_bytes, "cuDNN SDPA forward needs ",
             e->forward_workspace, " bytes of workspace; the context has ", ctx.workspace_bytes);
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
  execute(ctx, *e->forward, pack, ctx.workspace, "forward");
  return true;
}

bool cudnn_attention_backward(CudaContext& ctx, const ops::AttentionBackward& p, const AttentionSaved& l) {
  const Shape s{ctx.cudnn, p.N, p.sequences, p.max_seqlen, p.heads, p.head_dim, p.dropout.prob};
  const Entry* e = usable(ctx, s);
  if (!e) return false;
  const size_t have = attention_workspace_bytes(p.N, p.sequences, p.max_seqlen, p.heads);
  BERT_CHECK(static_cast<size_t>(e->backward_workspace) <= have, "cuDNN SDPA backward needs ",
             e->backward_workspace, " bytes of workspace; Backend::attention_workspace_bytes gives ", have);
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
  execute(ctx, *e->backward, pack, p.workspace, "backward");
  return true;
}

}  // namespace bertperf::cuda
