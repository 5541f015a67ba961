// The bf16 GEMM of the cpu-bf16 backend (gemm_bf16.h): tiles of the product shared out over the OpenMP threads,
// each tile summed chunk by chunk along K (oneDNN's matmul, or our emulation of it), then handed to the epilogue.
//
// Tiles: Mt rows (a multiple of 64, or of 16 below 64; at most 512) by Nt columns, the fp32 tile about 1 MB, so it is still in cache
// when the epilogue reads it. A tile whose rows run past M (the last one, when Mt does not divide M) is computed
// from a zero-padded copy of its rows of A, so oneDNN sees a few tile shapes per GEMM rather than one per batch
// size (each new shape costs a JIT compilation). oneDNN packs each tile's B chunk itself; that copy is about 1/Mt
// of the tile's work.
#include "backends/cpu/gemm_bf16.h"

#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/buffer.h"
#include "core/errors.h"

#ifdef BERTPERF_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace bertperf::cpu {

namespace {

constexpr int kMaxTileRows = 512;
constexpr int kMaxTileCols = 2048;
constexpr size_t kTileFloats = 256 * 1024;

int round_up(int x, int m) { return (x + m - 1) / m * m; }
int ceil_div(int x, int m) { return (x + m - 1) / m; }

struct Tiling {
  int Mt, Nt, m_tiles, n_tiles, k_chunks;
};

Tiling tiling(const Bf16Gemm& g) {
  // Row tiles of equal size (so a last tile is not mostly padding), a multiple of 64 (of 16 below 64 rows): a CPU
  // batch's token count changes from step to step, and each tile height is a primitive (a JIT compilation) per GEMM,
  // so few heights, at most 12, at the cost of up to 63 padded rows.
  const int rows = ceil_div(g.M, ceil_div(g.M, kMaxTileRows));
  const int Mt = std::min(kMaxTileRows, round_up(rows, rows < 64 ? 16 : 64));
  const int Nt = std::min(std::clamp(static_cast<int>(kTileFloats / Mt) / 64 * 64, 64, kMaxTileCols), g.N);
  return {Mt, Nt, ceil_div(g.M, Mt), ceil_div(g.N, Nt), std::max(1, ceil_div(g.K, kGemmKChunk))};
}

// Per-thread working memory, grown when a larger tile comes (OpenMP's threads live as long as the process).
struct ThreadBuffers {
  AlignedBuffer<float> tile, part, af, bf;
  AlignedBuffer<bf16> a_pad, b_packed;
  AlignedBuffer<unsigned char> scratchpad;
};

template <typename T>
T* grown(AlignedBuffer<T>& b, size_t n) {
  if (b.size() < n) b.resize(n);
  return b.data();
}

ThreadBuffers& thread_buffers() {
  thread_local ThreadBuffers buffers;
  return buffers;
}

// The rows [m0, m0 + rows) of A's chunk [k0, k0 + kc), zero-padded to Mt rows: (Mt, kc) with ld kc, or for a
// transposed A (kc, Mt) with ld Mt, the layouts the padded primitives are made for.
const bf16* padded_a(const Bf16Gemm& g, int m0, int rows, int Mt, int k0, int kc, ThreadBuffers& tb) {
  bf16* pad = grown(tb.a_pad, static_cast<size_t>(Mt) * kc);
  std::memset(static_cast<void*>(pad), 0, static_cast<size_t>(Mt) * kc * sizeof(bf16));
  if (!g.trans_a) {
    for (int m = 0; m < rows; ++m)
      std::memcpy(pad + static_cast<size_t>(m) * kc, g.A + static_cast<size_t>(m0 + m) * g.lda + k0, kc * sizeof(bf16));
  } else {
    for (int k = 0; k < kc; ++k)
      std::memcpy(pad + static_cast<size_t>(k) * Mt, g.A + static_cast<size_t>(k0 + k) * g.lda + m0, rows * sizeof(bf16));
  }
  return pad;
}

// ---- the emulation ------------------------------------------------------------------------------------------

// Sets the FTZ and DAZ flags for a scope (VDPBF16PS flushes subnormal inputs and results whatever MXCSR says).
class FlushSubnormals {
 public:
  FlushSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040u);
#endif
  }
  ~FlushSubnormals() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved_);
#endif
  }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned saved_ = 0;
};

constexpr int kEmuCols = 64;

// out (rows, nt) ld ldo = the chunk's sums: af (rows, kc) fp32 rows, bf (kc, nt) fp32 rows, pairs k + 1 then k.
void emulated_chunk(float* out, int ldo, const float* af, const float* bf, int rows, int nt, int kc) {
  FlushSubnormals flush;
  for (int n0 = 0; n0 < nt; n0 += kEmuCols) {
    const int w = std::min(kEmuCols, nt - n0);
    for (int m = 0; m < rows; ++m) {
      const float* a = af + static_cast<size_t>(m) * kc;
      float acc[kEmuCols] = {};
      int k = 0;
      for (; k + 1 < kc; k += 2) {
        const float a1 = a[k + 1], a0 = a[k];
        const float* b1 = bf + static_cast<size_t>(k + 1) * nt + n0;
        const float* b0 = bf + static_cast<size_t>(k) * nt + n0;
#pragma omp simd
        for (int j = 0; j < kEmuCols; ++j) acc[j] = std::fma(a0, b0[j], std::fma(a1, b1[j], acc[j]));
      }
      if (k < kc) {  // an odd chunk: the last pair's second product is a padded 0 x 0
        const float a0 = a[k];
        const float* b0 = bf + static_cast<size_t>(k) * nt + n0;
#pragma omp simd
        for (int j = 0; j < kEmuCols; ++j) acc[j] = std::fma(a0, b0[j], std::fma(0.0f, 0.0f, acc[j]));
      }
      std::copy(acc, acc + w, out + static_cast<size_t>(m) * ldo + n0);
    }
  }
}

void emulated_tile(const Bf16Gemm& g, int m0, int rows, int n0, int nt, float* tile, int ld, ThreadBuffers& tb) {
  for (int k0 = 0, c = 0; k0 < g.K || c == 0; k0 += kGemmKChunk, ++c) {
    const int kc = std::min(kGemmKChunk, g.K - k0);
    float* af = grown(tb.af, static_cast<size_t>(rows) * std::max(kc, 1));
    float* bf = grown(tb.bf, static_cast<size_t>(std::max(kc, 1)) * nt);
    for (int m = 0; m < rows; ++m)
      for (int k = 0; k < kc; ++k)
        af[static_cast<size_t>(m) * kc + k] =
            to_float(g.trans_a ? g.A[static_cast<size_t>(k0 + k) * g.lda + m0 + m] : g.A[static_cast<size_t>(m0 + m) * g.lda + k0 + k]);
    for (int k = 0; k < kc; ++k)
      for (int n = 0; n < nt; ++n)
        bf[static_cast<size_t>(k) * nt + n] =
            to_float(g.trans_b ? g.B[static_cast<size_t>(n0 + n) * g.ldb + k0 + k] : g.B[static_cast<size_t>(k0 + k) * g.ldb + n0 + n]);
    if (c == 0) {
      emulated_chunk(tile, ld, af, bf, rows, nt, kc);
    } else {
      float* part = grown(tb.part, static_cast<size_t>(rows) * nt);
      emulated_chunk(part, nt, af, bf, rows, nt, kc);
      for (int m = 0; m < rows; ++m) {
        float* t = tile + static_cast<size_t>(m) * ld;
        const float* p = part + static_cast<size_t>(m) * nt;
#pragma omp simd
        for (int n = 0; n < nt; ++n) t[n] += p[n];
      }
    }
  }
}

// ---- oneDNN ---------------------------------------------------------------------------------------------------

#ifdef BERTPERF_HAVE_DNNL
// One matmul primitive per tile shape: A (M, K) and the fp32 out (M, N) dense (oneDNN 2.6 runs strided operands on
// another kernel, which sums in blocks of 256), B (K, N) in the blocked layout the primitive asks for, packed from
// the strided source by a reorder (the copy oneDNN would make itself), and the sum post-op (out += product) for
// every K chunk after the first.
struct PrimitiveKey {
  int M, N, K, ldb, ldc;
  bool trans_a, trans_b, sum;
  auto tie() const { return std::tie(M, N, K, ldb, ldc, trans_a, trans_b, sum); }
  bool operator<(const PrimitiveKey& o) const { return tie() < o.tie(); }
};

struct Primitive {
  dnnl::matmul matmul;
  dnnl::reorder pack_b;
  dnnl::memory::desc a, b_source, b, c, scratchpad;
  std::string impl;
};

struct Onednn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::map<PrimitiveKey, Primitive> primitives;

  const Primitive& get(const PrimitiveKey& k) {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = primitives.find(k);
    if (found != primitives.end()) return found->second;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc a({k.M, k.K}, dt::bf16, k.trans_a ? dims{1, k.M} : dims{k.K, 1});
    const dnnl::memory::desc b_source({k.K, k.N}, dt::bf16, k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1});
    const dnnl::memory::desc b_any({k.K, k.N}, dt::bf16, dnnl::memory::format_tag::any);
    const dnnl::memory::desc c({k.M, k.N}, dt::f32, dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.sum) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), attr, engine);
    const dnnl::memory::desc b = pd.weights_desc();
    const dnnl::reorder::primitive_desc pack(engine, b_source, engine, b);
    Primitive p{dnnl::matmul(pd), dnnl::reorder(pack), a, b_source, b, c, pd.scratchpad_desc(), pd.impl_info_str()};
    // Only the brgemm kernels sum in the bf16 GEMM order (gemm_bf16.h).
    if (p.impl.rfind("brg:", 0) != 0)
      throw InternalError(cat("oneDNN chose ", p.impl, " for a ", k.M, "x", k.N, "x", k.K, " bf16 tile, not brgemm"));
    return primitives.emplace(k, std::move(p)).first->second;
  }
};

Onednn& onednn() {
  static Onednn o;
  return o;
}

// Tile shapes of a GEMM through oneDNN: the row tile is always Mt (a short last tile is zero-padded), so the keys
// are the column tile (full or last), the K chunk (full or last) and first or later.
std::vector<PrimitiveKey> primitive_keys(const Bf16Gemm& g, const Tiling& t) {
  std::vector<PrimitiveKey> keys;
  for (int nt : {t.Nt, g.N - (t.n_tiles - 1) * t.Nt})
    for (int c = 0; c < t.k_chunks; ++c) {
      const int kc = std::min(kGemmKChunk, g.K - c * kGemmKChunk);
      if (kc > 0) keys.push_back({t.Mt, nt, kc, g.ldb, nt, g.trans_a, g.trans_b, c > 0});
    }
  return keys;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(onednn().engine);
  return stream;
}

// B's chunk packed into the primitive's layout.
void pack_b(const Primitive& p, const bf16* b_source, bf16* packed) {
  dnnl::memory bs(p.b_source, onednn().engine, const_cast<bf16*>(b_source)), bm(p.b, onednn().engine, packed);
  p.pack_b.execute(thread_stream(), bs, bm);
}

// acc (+)= the product of one K chunk of a tile, through oneDNN on the calling thread.
void onednn_chunk(const Primitive& p, const bf16* a, const bf16* b_packed, float* c, ThreadBuffers& tb) {
  Onednn& o = onednn();
  unsigned char* scratch = grown(tb.scratchpad, std::max<size_t>(p.scratchpad.get_size(), 1));
  dnnl::memory am(p.a, o.engine, const_cast<bf16*>(a)), bm(p.b, o.engine, const_cast<bf16*>(b_packed)),
      cm(p.c, o.engine, c), sm(p.scratchpad, o.engine, scratch);
  p.matmul.execute(thread_stream(),
                   {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
}

const bf16* b_chunk(const Bf16Gemm& g, int n0, int k0) {
  return g.trans_b ? g.B + static_cast<size_t>(n0) * g.ldb + k0 : g.B + static_cast<size_t>(k0) * g.ldb + n0;
}

// B packed once per GEMM when several row tiles share it: pack (column tile ni, chunk c) at packed + offset[ni * chunks
// + c] elements. One buffer for the process, grown when a larger GEMM comes (the backend runs one op at a time).
struct PackedB {
  AlignedBuffer<bf16> buffer;
  std::vector<size_t> offset;
};

PackedB& packed_b() {
  static PackedB packed;
  return packed;
}

void onednn_tile(const Bf16Gemm& g, const Tiling& t, int m0, int rows, int ni, float* tile, ThreadBuffers& tb,
                 const PackedB* packed) {
  Onednn& o = onednn();
  const int n0 = ni * t.Nt, nt = std::min(t.Nt, g.N - n0);
  for (int k0 = 0, c = 0; k0 < g.K || c == 0; k0 += kGemmKChunk, ++c) {
    const int kc = std::min(kGemmKChunk, g.K - k0);
    if (kc <= 0) {  // K = 0: the product is 0
      for (int m = 0; m < rows; ++m) std::fill_n(tile + static_cast<size_t>(m) * nt, nt, 0.0f);
      return;
    }
    // A as the dense (Mt, kc) or (kc, Mt) block the primitive reads: in place where the operand already is one.
    const bool dense = rows == t.Mt && (g.trans_a ? g.lda == t.Mt : g.lda == kc);
    const bf16* a = !dense                ? padded_a(g, m0, rows, t.Mt, k0, kc, tb)
                    : g.trans_a ? g.A + static_cast<size_t>(k0) * g.lda + m0
                                : g.A + static_cast<size_t>(m0) * g.lda + k0;
    const Primitive& p = o.get({t.Mt, nt, kc, g.ldb, nt, g.trans_a, g.trans_b, c > 0});
    const bf16* b;
    if (packed) {
      b = packed->buffer.data() + packed->offset[static_cast<size_t>(ni) * t.k_chunks + c];
    } else {
      bf16* own = grown(tb.b_packed, p.b.get_size() / sizeof(bf16) + 1);
      pack_b(p, b_chunk(g, n0, k0), own);
      b = own;
    }
    onednn_chunk(p, a, b, tile, tb);
  }
}

// Packs every (column tile, chunk) of B, in parallel; returns null when there is one row tile (each tile packs its
// own then, at no extra cost) or the GEMM runs inside a parallel region.
const PackedB* pack_all_b(const Bf16Gemm& g, const Tiling& t) {
  if (t.m_tiles == 1 || omp_in_parallel() || g.K <= 0) return nullptr;
  PackedB& packed = packed_b();
  const int packs = t.n_tiles * t.k_chunks;
  packed.offset.resize(packs);
  std::vector<const Primitive*> prims(packs);
  size_t total = 0;
  for (int i = 0; i < packs; ++i) {
    const int ni = i / t.k_chunks, c = i % t.k_chunks;
    const int nt = std::min(t.Nt, g.N - ni * t.Nt), kc = std::min(kGemmKChunk, g.K - c * kGemmKChunk);
    prims[i] = &onednn().get({t.Mt, nt, kc, g.ldb, nt, g.trans_a, g.trans_b, c > 0});
    packed.offset[i] = total;
    total += (prims[i]->b.get_size() / sizeof(bf16) + 127) / 128 * 128;
  }
  if (packed.buffer.size() < total) packed.buffer.resize(total);
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < packs; ++i) {
    const int ni = i / t.k_chunks, c = i % t.k_chunks;
    pack_b(*prims[i], b_chunk(g, ni * t.Nt, c * kGemmKChunk), packed.buffer.data() + packed.offset[i]);
  }
  return &packed;
}
#endif

void run_tiles(const Bf16Gemm& g, TileEpilogue epilogue, GemmPath path) {
  if (g.M <= 0 || g.N <= 0) return;
  const Tiling t = tiling(g);
  const int tiles = t.m_tiles * t.n_tiles;
#ifdef BERTPERF_HAVE_DNNL
  // The primitives first, outside the threads (a JIT compilation the first time a shape comes), then B packed.
  const PackedB* packed = nullptr;
  if (path == GemmPath::ONEDNN) {
    for (const PrimitiveKey& k : primitive_keys(g, t)) onednn().get(k);
    packed = pack_all_b(g, t);
  }
#endif
  auto one_tile = [&](int i) {
    const int mi = i / t.n_tiles, ni = i % t.n_tiles;
    const int m0 = mi * t.Mt, n0 = ni * t.Nt;
    const int rows = std::min(t.Mt, g.M - m0), nt = std::min(t.Nt, g.N - n0);
    ThreadBuffers& tb = thread_buffers();
    float* tile = grown(tb.tile, static_cast<size_t>(t.Mt) * t.Nt);
#ifdef BERTPERF_HAVE_DNNL
    if (path == GemmPath::ONEDNN) {
      onednn_tile(g, t, m0, rows, ni, tile, tb, packed);
    } else {
      emulated_tile(g, m0, rows, n0, nt, tile, nt, tb);
    }
#else
    emulated_tile(g, m0, rows, n0, nt, tile, nt, tb);
#endif
    epilogue(m0, rows, n0, nt, tile, nt);
  };
  if (omp_in_parallel() || tiles == 1) {
    for (int i = 0; i < tiles; ++i) one_tile(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < tiles; ++i) one_tile(i);
}

// ---- the path, decided once ------------------------------------------------------------------------------------

struct PathChoice {
  GemmPath path = GemmPath::EMULATED;
  bool onednn_available = false;
  std::string describe;
};

// Whether the two paths give the same bits on a few products that cover the chunking, odd K, padded tiles,
// transposed operands and values spanning many binades.
bool paths_agree() {
  std::mt19937 rng(20261203);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int M, N, K;
    bool ta, tb;
  };
  for (const Shape s : {Shape{37, 70, 1100, false, false}, Shape{64, 96, 515, true, false},
                        Shape{20, 130, 77, false, true}}) {
    std::vector<bf16> a(static_cast<size_t>(s.M) * s.K), b(static_cast<size_t>(s.K) * s.N);
    for (bf16& x : a) x = to_bf16(normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10));
    for (bf16& x : b) x = to_bf16(normal(rng));
    const Bf16Gemm g{s.M, s.N, s.K, a.data(), s.ta ? s.M : s.K, s.ta, b.data(), s.tb ? s.K : s.N, s.tb};
    std::vector<float> fast(static_cast<size_t>(s.M) * s.N), emulated(fast.size());
    auto into = [&](std::vector<float>& out) {
      return [&out, &s](int m0, int rows, int n0, int cols, const float* acc, int ld) {
        for (int m = 0; m < rows; ++m)
          std::copy(acc + static_cast<size_t>(m) * ld, acc + static_cast<size_t>(m) * ld + cols,
                    out.begin() + static_cast<size_t>(m0 + m) * s.N + n0);
      };
    };
    const auto to_fast = into(fast), to_emulated = into(emulated);
    run_tiles(g, to_fast, GemmPath::ONEDNN);
    run_tiles(g, to_emulated, GemmPath::EMULATED);
    if (std::memcmp(fast.data(), emulated.data(), fast.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

PathChoice choose_path() {
  PathChoice c;
  const char* forced = std::getenv("BERTPERF_CPU_BF16_GEMM");
  const std::string force = forced ? forced : "";
  if (!force.empty() && force != "onednn" && force != "emulated")
    throw InputError("BERTPERF_CPU_BF16_GEMM is '" + force + "'; expected onednn or emulated");
#ifndef BERTPERF_HAVE_DNNL
  c.describe = "bf16 GEMMs emulated (this build has no oneDNN)";
  if (force == "onednn") throw InputError("BERTPERF_CPU_BF16_GEMM=onednn, but this build has no oneDNN");
  return c;
#else
  const char* isa_env = std::getenv("BERTPERF_CPU_BF16_ISA");
  const std::string isa_name = isa_env ? isa_env : "";
  if (!isa_name.empty() && isa_name != "avx512_bf16" && isa_name != "amx")
    throw InputError("BERTPERF_CPU_BF16_ISA is '" + isa_name + "'; expected avx512_bf16 or amx");
  const bool amx = isa_name == "amx";
  // Capped before the first primitive is made (oneDNN ignores the call after that).
  dnnl::set_max_cpu_isa(amx ? dnnl::cpu_isa::all : dnnl::cpu_isa::avx512_core_bf16);
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const dnnl::version_t* v = dnnl::version();
  const std::string version = cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  const bool has_bf16 = isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  if (!has_bf16) {
    c.describe = cat("bf16 GEMMs emulated (this CPU has no AVX512-BF16; ", version, ")");
    if (force == "onednn") throw InputError("BERTPERF_CPU_BF16_GEMM=onednn, but this CPU has no AVX512-BF16");
    return c;
  }
  c.onednn_available = true;
  std::string impl;
  bool brgemm = true;
  try {
    impl = onednn().get({16, 64, 64, 64, 64, false, false, false}).impl;
  } catch (const std::exception& e) {  // InternalError (not brgemm), or dnnl::error
    impl = e.what();
    brgemm = false;
  }
  if (force == "emulated") {
    c.describe = cat("bf16 GEMMs emulated (BERTPERF_CPU_BF16_GEMM=emulated; ", version, " ", impl, " not used)");
    return c;
  }
  bool agree = false;
  if (brgemm) {
    try {
      agree = paths_agree();
    } catch (const std::exception&) {
      agree = false;  // a tile shape oneDNN runs on another kernel, or refuses
    }
  }
  if (!agree && !amx && force != "onednn") {
    c.onednn_available = false;
    c.describe = cat("bf16 GEMMs emulated (", version, "'s ", impl,
                     " does not sum in the bf16 GEMM order here, so it is not used)");
    return c;
  }
  c.path = GemmPath::ONEDNN;
  c.describe = cat("bf16 GEMMs on ", version, " ", impl,
                   agree ? " (bit-identical to the emulation)" : " (NOT bit-identical to the emulation: AMX sums pairs in "
                                                                 "another order)");
  return c;
#endif
}

const PathChoice& path_choice() {
  static const PathChoice choice = [] {
    PathChoice c = choose_path();
    if (c.path == GemmPath::EMULATED || c.describe.find("NOT") != std::string::npos)
      std::fprintf(stderr, "cpu-bf16: %s\n", c.describe.c_str());
    return c;
  }();
  return choice;
}

}  // namespace

GemmPath bf16_gemm_path() { return path_choice().path; }
std::string bf16_gemm_describe() { return path_choice().describe; }
bool bf16_gemm_onednn_available() { return path_choice().onednn_available; }

void gemm_bf16(const Bf16Gemm& g, TileEpilogue epilogue, GemmPath path) {
  BERT_CHECK(path == GemmPath::EMULATED || bf16_gemm_onednn_available(), "the oneDNN bf16 GEMM is not available here");
  GemmProfile& profile = gemm_profile();
  if (!profile.enabled || omp_in_parallel()) {
    run_tiles(g, epilogue, path);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  run_tiles(g, epilogue, path);
  profile.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profile.flops += 2.0 * g.M * g.N * g.K;
}

void gemm_bf16(const Bf16Gemm& g, TileEpilogue epilogue) { gemm_bf16(g, epilogue, bf16_gemm_path()); }

// ---- conversions (bf16.h) ----------------------------------------------------------------------------------------

void convert_to_bf16(bf16* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}
void convert_to_bf16(bf16* dst, const double* src, size_t n) {
  // Through fp32 would round twice; rounding the double to fp32 first is exact only when it fits, so the double
  // rounds to odd fp32 first (the extra bit keeps the bf16 rounding right), then to bf16.
#pragma omp parallel for schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) {
    const double x = src[i];
    float f = static_cast<float>(x);
    if (std::isfinite(x) && static_cast<double>(f) != x) {
      // Round to odd: truncate toward zero, then set the last bit.
      uint32_t u = std::bit_cast<uint32_t>(f);
      if (std::fabs(static_cast<double>(f)) > std::fabs(x)) --u;
      f = std::bit_cast<float>(u | 1u);
    }
    dst[i] = to_bf16(f);
  }
}
void convert_from_bf16(float* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
void convert_from_bf16(double* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

}  // namespace bertperf::cpu
