// The bf16 GEMM of the cpu-bf16 backend (gemm_bf16.h): tiles of the product shared out over the OpenMP threads,
// each tile summed chunk by chunk along K (oneDNN's matmul, or our emulation of it), then handed to the epilogue.
//
// Tiles: Mt rows (a multiple of 64, or of 16 below 64; at most 512) by Nt columns, the fp32 tile about 1 MB, so it is
// still in cache when the epilogue reads it. A tile whose rows run past M (the last one, when Mt does not divide M)
// is computed from a zero-padded copy of its rows of A, so oneDNN sees a few tile shapes per GEMM rather than one per
// batch size (each new shape costs a JIT compilation). B is packed once per GEMM into oneDNN's layout when several
// row tiles share it, else by each tile.
//
// Memory: everything a call works in belongs to the context (the backend object) and is sized before the threads
// start, for every thread slot at once: a call at shapes seen before grows nothing, makes no primitive and no oneDNN
// memory object (those are made with the primitive, one set per thread slot, and pointed at the call's buffers).
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
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/kernel_math.h"
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

// Chunk c's real length along K, and the length it is summed over (the last chunk padded with zeros, gemm_bf16.h).
int chunk_length(const Bf16Gemm& g, int c) { return std::max(0, std::min(kGemmKChunk, g.K - c * kGemmKChunk)); }
int padded_length(const Bf16Gemm& g, int c) { return std::min(kGemmKChunk, round_up(chunk_length(g, c), kGemmKPad)); }

Tiling tiling(const Bf16Gemm& g, int threads) {
  // Row tiles of equal size (so a last tile is not mostly padding), a multiple of 64 (of 16 below 64 rows): a CPU
  // batch's token count changes from step to step, and each tile height is a primitive (a JIT compilation) per GEMM,
  // so few heights, at most 12, at the cost of up to 63 padded rows. At least one row tile a thread where M has 64
  // rows a thread: each tile is one single-threaded call, and a small product with a long K (a weight gradient,
  // K = tokens) would otherwise leave threads idle.
  const int parts = std::max(ceil_div(g.M, kMaxTileRows), std::min(threads, ceil_div(g.M, 64)));
  const int rows = ceil_div(g.M, parts);
  const int Mt = std::min(kMaxTileRows, round_up(rows, rows < 64 ? 16 : 64));
  const int Nt = std::min(std::clamp(static_cast<int>(kTileFloats / Mt) / 64 * 64, 64, kMaxTileCols), g.N);
  return {Mt, Nt, ceil_div(g.M, Mt), ceil_div(g.N, Nt), std::max(1, ceil_div(g.K, kGemmKChunk))};
}

// One thread slot's working memory, grown (for every slot at once) before the threads start.
struct ThreadBuffers {
  AlignedBuffer<float> tile, part, af, bf;
  AlignedBuffer<bf16> a_pad, b_stage, b_own;
  AlignedBuffer<unsigned char> scratchpad;
};

template <typename T>
void reserve(AlignedBuffer<T>& b, size_t n) {
  if (b.size() < n) b.resize(n);
}

// The rows [m0, m0 + rows) of A's chunk [k0, k0 + kc), zero-padded to Mt rows and kp >= kc columns in `pad`:
// (Mt, kp) with ld kp, or for a transposed A (kp, Mt) with ld Mt, the layouts the padded primitives are made for.
const bf16* padded_a(const Bf16Gemm& g, int m0, int rows, int Mt, int k0, int kc, int kp, bf16* pad) {
  std::memset(static_cast<void*>(pad), 0, static_cast<size_t>(Mt) * kp * sizeof(bf16));
  if (!g.trans_a) {
    for (int m = 0; m < rows; ++m)
      std::memcpy(pad + static_cast<size_t>(m) * kp, g.A + static_cast<size_t>(m0 + m) * g.lda + k0, kc * sizeof(bf16));
  } else {
    for (int k = 0; k < kc; ++k)
      std::memcpy(pad + static_cast<size_t>(k) * Mt, g.A + static_cast<size_t>(k0 + k) * g.lda + m0, rows * sizeof(bf16));
  }
  return pad;
}

// Columns [n0, n0 + nt) of B's chunk [k0, k0 + kc), zero-padded to kp rows in `stage`: (kp, nt) with ld nt, or for a
// transposed B (nt, kp) with ld kp, the source the padded chunk's primitive packs from.
const bf16* padded_b(const Bf16Gemm& g, int n0, int nt, int k0, int kc, int kp, bf16* stage) {
  std::memset(static_cast<void*>(stage), 0, static_cast<size_t>(kp) * nt * sizeof(bf16));
  if (!g.trans_b) {
    for (int k = 0; k < kc; ++k)
      std::memcpy(stage + static_cast<size_t>(k) * nt, g.B + static_cast<size_t>(k0 + k) * g.ldb + n0, nt * sizeof(bf16));
  } else {
    for (int n = 0; n < nt; ++n)
      std::memcpy(stage + static_cast<size_t>(n) * kp, g.B + static_cast<size_t>(n0 + n) * g.ldb + k0, kc * sizeof(bf16));
  }
  return stage;
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

// out (rows, nt) ld ldo = the chunk's sums: af (rows, kc) fp32 rows, bf (kc, nt) fp32 rows, pairs k + 1 then k (kc
// even but for the tests' odd chunks of an unpadded order).
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

// The tile's sums in the emulation, each chunk over its padded length (zeros past its real one); af, bf and part
// hold at least Mt x min(K, chunk), chunk x Nt and Mt x Nt floats.
void emulated_tile(const Bf16Gemm& g, int m0, int rows, int n0, int nt, float* tile, int ld, ThreadBuffers& tb) {
  float* af = tb.af.data();
  float* bf = tb.bf.data();
  for (int k0 = 0, c = 0; k0 < g.K || c == 0; k0 += kGemmKChunk, ++c) {
    const int kc = chunk_length(g, c), kp = padded_length(g, c);
    for (int m = 0; m < rows; ++m)
      for (int k = 0; k < kp; ++k)
        af[static_cast<size_t>(m) * kp + k] =
            k >= kc ? 0.0f
                    : to_float(g.trans_a ? g.A[static_cast<size_t>(k0 + k) * g.lda + m0 + m]
                                         : g.A[static_cast<size_t>(m0 + m) * g.lda + k0 + k]);
    for (int k = 0; k < kp; ++k)
      for (int n = 0; n < nt; ++n)
        bf[static_cast<size_t>(k) * nt + n] =
            k >= kc ? 0.0f
                    : to_float(g.trans_b ? g.B[static_cast<size_t>(n0 + n) * g.ldb + k0 + k]
                                         : g.B[static_cast<size_t>(k0 + k) * g.ldb + n0 + n]);
    if (c == 0) {
      emulated_chunk(tile, ld, af, bf, rows, nt, kp);
    } else {
      float* part = tb.part.data();
      emulated_chunk(part, nt, af, bf, rows, nt, kp);
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
const char* isa_name(Bf16Isa isa) { return isa == Bf16Isa::AMX ? "amx" : "avx512_bf16"; }

// oneDNN takes its ISA cap once per process, before its first primitive: the first context sets it, and a later one
// that asks for another is an input error.
void fix_isa(Bf16Isa isa) {
  static std::mutex mutex;
  static std::optional<Bf16Isa> fixed;
  std::lock_guard<std::mutex> lock(mutex);
  if (!fixed) {
    try {
      dnnl::set_max_cpu_isa(isa == Bf16Isa::AMX ? dnnl::cpu_isa::all : dnnl::cpu_isa::avx512_core_bf16);
    } catch (const dnnl::error&) {
      // Something in the process used oneDNN first; the ISA it runs at is checked by the path choice.
    }
    fixed = isa;
  } else if (*fixed != isa) {
    throw_input("cpu-bf16", cat("\"isa\": \"", isa_name(isa), "\" in a process whose oneDNN already runs at \"",
                                isa_name(*fixed), "\" (oneDNN fixes its ISA once per process)"));
  }
}

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

// A primitive's oneDNN memory objects for one thread slot, without data: each call points them at its buffers.
struct SlotMemory {
  dnnl::memory a, b, c, scratchpad, b_source, pack_scratchpad;
};

struct Primitive {
  dnnl::matmul matmul;
  dnnl::reorder pack_b;
  size_t b_bytes = 0, scratchpad_bytes = 0, pack_scratchpad_bytes = 0;
  std::string impl;
  std::vector<SlotMemory> slots;
};

void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) throw InternalError(cat("oneDNN ", what, " failed (status ", static_cast<int>(status), ")"));
}

// Runs `p` on the calling thread with these arguments (oneDNN's C entry point: the C++ one builds a map per call).
template <size_t N>
void execute(const dnnl::primitive& p, const dnnl::stream& stream, const dnnl_exec_arg_t (&args)[N], int n = N) {
  check(dnnl_primitive_execute(p.get(), stream.get(), n, args), "execute");
}
#endif

// B packed once per GEMM when several row tiles share it: (column tile ni, chunk c) at buffer + offset[ni * chunks + c]
// elements, packed for primitive[ni * chunks + c]. The vectors keep their capacity from call to call.
// omp_set_num_threads(1) for a scope (the calling thread's setting; restored after).
class OneOpenMpThread {
 public:
  OneOpenMpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOpenMpThread() { omp_set_num_threads(saved_); }
  OneOpenMpThread(const OneOpenMpThread&) = delete;
  OneOpenMpThread& operator=(const OneOpenMpThread&) = delete;

 private:
  int saved_;
};

struct PackedB {
  AlignedBuffer<bf16> buffer;
  std::vector<size_t> offset;
#ifdef BERTPERF_HAVE_DNNL
  std::vector<const Primitive*> primitive;
#endif
};

}  // namespace

// ---- the context --------------------------------------------------------------------------------------------------

struct Bf16GemmContext::State {
  int slots;  // thread slots: the most threads a call shares its tiles over
  std::vector<ThreadBuffers> buffers;
  PackedB packed;
  GemmPath path = GemmPath::EMULATED;
  bool onednn_available = false;
  std::string describe;
#ifdef BERTPERF_HAVE_DNNL
  std::optional<dnnl::engine> engine;
  std::vector<dnnl::stream> streams;  // one per slot
  std::map<PrimitiveKey, Primitive> primitives;

  // The primitive for a tile shape, made at its first use (outside the threads). Made single-threaded: our threads
  // share the tiles out and each runs its tile as one call; a primitive made while OpenMP offers more threads plans
  // its work for them and opens a parallel region inside every call, nested in ours (where nesting is on, a team of
  // threads that spin against ours: at K = 128 that made two threads slower than one).
  const Primitive& primitive(const PrimitiveKey& k) {
    auto found = primitives.find(k);
    if (found != primitives.end()) return found->second;
    const OneOpenMpThread one_thread;
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
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), attr, *engine);
    const std::string impl = pd.impl_info_str();
    // Only the brgemm kernels sum in the bf16 GEMM order (gemm_bf16.h).
    if (impl.rfind("brg:", 0) != 0)
      throw InternalError(cat("oneDNN chose ", impl, " for a ", k.M, "x", k.N, "x", k.K, " bf16 tile, not brgemm"));
    const dnnl::memory::desc b = pd.weights_desc();
    dnnl::primitive_attr pack_attr;
    pack_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::reorder::primitive_desc pack(*engine, b_source, *engine, b, pack_attr);
    Primitive p{dnnl::matmul(pd), dnnl::reorder(pack), b.get_size(), pd.scratchpad_desc().get_size(),
                pack.scratchpad_desc().get_size(), impl, {}};
    for (int s = 0; s < slots; ++s) {
      SlotMemory m{dnnl::memory(a, *engine, DNNL_MEMORY_NONE), dnnl::memory(b, *engine, DNNL_MEMORY_NONE),
                   dnnl::memory(c, *engine, DNNL_MEMORY_NONE), {}, dnnl::memory(b_source, *engine, DNNL_MEMORY_NONE), {}};
      if (p.scratchpad_bytes) m.scratchpad = dnnl::memory(pd.scratchpad_desc(), *engine, DNNL_MEMORY_NONE);
      if (p.pack_scratchpad_bytes)
        m.pack_scratchpad = dnnl::memory(pack.scratchpad_desc(), *engine, DNNL_MEMORY_NONE);
      p.slots.push_back(std::move(m));
    }
    return primitives.emplace(k, std::move(p)).first->second;
  }

  // The primitive of tile column ni's chunk c (made before the threads start).
  const Primitive& made(const PrimitiveKey& k) const {
    auto found = primitives.find(k);
    BERT_CHECK(found != primitives.end(), "cpu-bf16 GEMM: a tile shape without its primitive");
    return found->second;
  }

  // A padded chunk packs B from a staging copy (padded_b), whose leading dimension the key names.
  static bool padded(const Bf16Gemm& g, int c) { return padded_length(g, c) != chunk_length(g, c); }
  static PrimitiveKey key(const Bf16Gemm& g, const Tiling& t, int ni, int c) {
    const int nt = std::min(t.Nt, g.N - ni * t.Nt), kp = padded_length(g, c);
    const int ldb = !padded(g, c) ? g.ldb : g.trans_b ? kp : nt;
    return {t.Mt, nt, kp, ldb, nt, g.trans_a, g.trans_b, c > 0};
  }

  static const bf16* b_chunk(const Bf16Gemm& g, int n0, int k0) {
    return g.trans_b ? g.B + static_cast<size_t>(n0) * g.ldb + k0 : g.B + static_cast<size_t>(k0) * g.ldb + n0;
  }

  // B's chunk c of column tile ni packed into the primitive's layout, on slot s.
  void pack_b(const Primitive& p, int s, const Bf16Gemm& g, const Tiling& t, int ni, int c, bf16* packed) {
    const int n0 = ni * t.Nt, k0 = c * kGemmKChunk;
    const bf16* source = !padded(g, c) ? b_chunk(g, n0, k0)
                                       : padded_b(g, n0, std::min(t.Nt, g.N - n0), k0, chunk_length(g, c),
                                                  padded_length(g, c), buffers[s].b_stage.data());
    const SlotMemory& m = p.slots[s];
    m.b_source.set_data_handle(const_cast<bf16*>(source));
    m.b.set_data_handle(packed);
    if (p.pack_scratchpad_bytes) {
      m.pack_scratchpad.set_data_handle(buffers[s].scratchpad.data());
      execute(p.pack_b, streams[s], {{DNNL_ARG_FROM, m.b_source.get()}, {DNNL_ARG_TO, m.b.get()},
                                     {DNNL_ARG_SCRATCHPAD, m.pack_scratchpad.get()}});
    } else {
      execute(p.pack_b, streams[s], {{DNNL_ARG_FROM, m.b_source.get()}, {DNNL_ARG_TO, m.b.get()}});
    }
  }

  // acc (+)= the product of one K chunk of a tile, on slot s.
  void chunk(const Primitive& p, int s, const bf16* a, const bf16* b_packed, float* c) {
    const SlotMemory& m = p.slots[s];
    m.a.set_data_handle(const_cast<bf16*>(a));
    m.b.set_data_handle(const_cast<bf16*>(b_packed));
    m.c.set_data_handle(c);
    if (p.scratchpad_bytes) {
      m.scratchpad.set_data_handle(buffers[s].scratchpad.data());
      execute(p.matmul, streams[s], {{DNNL_ARG_SRC, m.a.get()}, {DNNL_ARG_WEIGHTS, m.b.get()},
                                     {DNNL_ARG_DST, m.c.get()}, {DNNL_ARG_SCRATCHPAD, m.scratchpad.get()}});
    } else {
      execute(p.matmul, streams[s], {{DNNL_ARG_SRC, m.a.get()}, {DNNL_ARG_WEIGHTS, m.b.get()}, {DNNL_ARG_DST, m.c.get()}});
    }
  }

  // One tile on slot s; B from the GEMM's packed copy when shared_b, else packed by the tile.
  void onednn_tile(const Bf16Gemm& g, const Tiling& t, int m0, int rows, int ni, float* tile, int s, bool shared_b) {
    ThreadBuffers& tb = buffers[s];
    const int n0 = ni * t.Nt;
    for (int k0 = 0, c = 0; k0 < g.K || c == 0; k0 += kGemmKChunk, ++c) {
      const int kc = chunk_length(g, c), kp = padded_length(g, c);
      if (kc <= 0) {  // K = 0: the product is 0
        const int nt = std::min(t.Nt, g.N - n0);
        for (int m = 0; m < rows; ++m) std::fill_n(tile + static_cast<size_t>(m) * nt, nt, 0.0f);
        return;
      }
      // A as the dense (Mt, kp) or (kp, Mt) block the primitive reads: in place where the operand already is one.
      const bool dense = rows == t.Mt && kc == kp && (g.trans_a ? g.lda == t.Mt : g.lda == kc);
      const bf16* a = !dense      ? padded_a(g, m0, rows, t.Mt, k0, kc, kp, tb.a_pad.data())
                      : g.trans_a ? g.A + static_cast<size_t>(k0) * g.lda + m0
                                  : g.A + static_cast<size_t>(m0) * g.lda + k0;
      const size_t i = static_cast<size_t>(ni) * t.k_chunks + c;
      const Primitive& p = shared_b ? *packed.primitive[i] : made(key(g, t, ni, c));
      const bf16* b = shared_b ? packed.buffer.data() + packed.offset[i] : tb.b_own.data();
      if (!shared_b) pack_b(p, s, g, t, ni, c, tb.b_own.data());
      chunk(p, s, a, b, tile);
    }
  }

  // Packs every (column tile, chunk) of B over `threads` threads, when several row tiles share it.
  void pack_all_b(const Bf16Gemm& g, const Tiling& t, int threads) {
    const int packs = t.n_tiles * t.k_chunks;
    packed.offset.resize(packs);
    packed.primitive.resize(packs);
    size_t total = 0;
    for (int i = 0; i < packs; ++i) {
      packed.primitive[i] = &made(key(g, t, i / t.k_chunks, i % t.k_chunks));
      packed.offset[i] = total;
      total += (packed.primitive[i]->b_bytes / sizeof(bf16) + 127) / 128 * 128;
    }
    reserve(packed.buffer, total);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int i = 0; i < packs; ++i)
      pack_b(*packed.primitive[i], omp_get_thread_num(), g, t, i / t.k_chunks, i % t.k_chunks,
             packed.buffer.data() + packed.offset[i]);
  }
#endif

  explicit State(int threads) : slots(std::max(1, threads)), buffers(slots) {}

  // Everything a call of this shape needs, for every slot: the primitives, then the buffers.
  void prepare(const Bf16Gemm& g, const Tiling& t, GemmPath path) {
    const size_t kc = std::max(1, padded_length(g, 0));  // the longest chunk
    size_t tile = static_cast<size_t>(t.Mt) * t.Nt, af = 0, bf = 0, part = 0, a_pad = 0, b_stage = 0, b_own = 0,
           scratchpad = 1;
    if (path == GemmPath::EMULATED) {
      af = t.Mt * kc;
      bf = kc * t.Nt;
      part = tile;
    }
#ifdef BERTPERF_HAVE_DNNL
    if (path == GemmPath::ONEDNN && g.K > 0) {
      a_pad = t.Mt * kc;
      if (padded(g, t.k_chunks - 1)) b_stage = kc * t.Nt;
      for (int ni : {0, t.n_tiles - 1})
        for (int c = 0; c < t.k_chunks; ++c) {
          const Primitive& p = primitive(key(g, t, ni, c));
          if (t.m_tiles == 1) b_own = std::max(b_own, p.b_bytes / sizeof(bf16) + 1);
          scratchpad = std::max({scratchpad, p.scratchpad_bytes, p.pack_scratchpad_bytes});
        }
    }
#endif
    for (ThreadBuffers& tb : buffers) {
      reserve(tb.tile, tile);
      reserve(tb.af, af);
      reserve(tb.bf, bf);
      reserve(tb.part, part);
      reserve(tb.a_pad, a_pad);
      reserve(tb.b_stage, b_stage);
      reserve(tb.b_own, b_own);
      reserve(tb.scratchpad, scratchpad);
    }
  }

  void run(const Bf16Gemm& g, TileEpilogue epilogue, GemmPath path) {
    BERT_CHECK(!omp_in_parallel(), "cpu-bf16 GEMM: called inside a parallel region");
    if (g.M <= 0 || g.N <= 0) return;
    const Tiling t = tiling(g, std::min(omp_get_max_threads(), slots));
    const int tiles = t.m_tiles * t.n_tiles;
    const int threads = std::min({omp_get_max_threads(), slots, tiles});
    prepare(g, t, path);
    bool shared_b = false;
#ifdef BERTPERF_HAVE_DNNL
    if (path == GemmPath::ONEDNN && t.m_tiles > 1 && g.K > 0) {
      pack_all_b(g, t, std::min({omp_get_max_threads(), slots, t.n_tiles * t.k_chunks}));
      shared_b = true;
    }
#endif
    auto one_tile = [&](int i, int s) {
      const int mi = i / t.n_tiles, ni = i % t.n_tiles;
      const int m0 = mi * t.Mt, n0 = ni * t.Nt;
      const int rows = std::min(t.Mt, g.M - m0), nt = std::min(t.Nt, g.N - n0);
      float* tile = buffers[s].tile.data();
#ifdef BERTPERF_HAVE_DNNL
      if (path == GemmPath::ONEDNN) {
        onednn_tile(g, t, m0, rows, ni, tile, s, shared_b);
      } else {
        emulated_tile(g, m0, rows, n0, nt, tile, nt, buffers[s]);
      }
#else
      (void)shared_b;
      emulated_tile(g, m0, rows, n0, nt, tile, nt, buffers[s]);
#endif
      epilogue(m0, rows, n0, nt, tile, nt);
    };
    if (threads <= 1) {
      for (int i = 0; i < tiles; ++i) one_tile(i, 0);
      return;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int i = 0; i < tiles; ++i) one_tile(i, omp_get_thread_num());
  }

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
                          Shape{20, 130, 77, false, true}, Shape{600, 40, 64, false, false}}) {
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
      run(g, to_fast, GemmPath::ONEDNN);
      run(g, to_emulated, GemmPath::EMULATED);
      if (std::memcmp(fast.data(), emulated.data(), fast.size() * sizeof(float)) != 0) return false;
    }
    return true;
  }

  // The path for `o`, and the line that says it.
  void choose(const CpuBf16Options& o) {
#ifndef BERTPERF_HAVE_DNNL
    if (o.gemm == Bf16GemmChoice::ONEDNN) throw_input("cpu-bf16", "\"gemm\": \"onednn\", but this build has no oneDNN");
    describe = "bf16 GEMMs emulated (this build has no oneDNN)";
#else
    fix_isa(o.isa);
    const bool amx = o.isa == Bf16Isa::AMX;
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const std::string version = "oneDNN " + onednn_version();
    const bool has_bf16 = isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
    if (!has_bf16) {
      if (o.gemm == Bf16GemmChoice::ONEDNN)
        throw_input("cpu-bf16", "\"gemm\": \"onednn\", but this CPU has no AVX512-BF16");
      describe = cat("bf16 GEMMs emulated (this CPU has no AVX512-BF16; ", version, ")");
      return;
    }
    engine.emplace(dnnl::engine::kind::cpu, 0);
    for (int s = 0; s < slots; ++s) streams.emplace_back(*engine);
    std::string impl;
    bool brgemm = true;
    try {
      impl = primitive({16, 64, 64, 64, 64, false, false, false}).impl;
    } catch (const std::exception& e) {  // InternalError (not brgemm), or dnnl::error
      impl = e.what();
      brgemm = false;
    }
    if (!brgemm && o.gemm == Bf16GemmChoice::ONEDNN) throw_input("cpu-bf16", cat("\"gemm\": \"onednn\", but ", impl));
    onednn_available = brgemm;
    if (o.gemm == Bf16GemmChoice::EMULATED) {
      describe = cat("bf16 GEMMs emulated (\"gemm\": \"emulated\"; ", version, " ", impl, " not used)");
      return;
    }
    bool agree = false;
    if (brgemm) {
      try {
        agree = paths_agree();
      } catch (const std::exception&) {
        agree = false;  // a tile shape oneDNN runs on another kernel, or refuses
      }
    }
    if (!agree && !amx && o.gemm != Bf16GemmChoice::ONEDNN) {
      onednn_available = false;
      describe = cat("bf16 GEMMs emulated (", version, "'s ", impl,
                     " does not sum in the bf16 GEMM order here, so it is not used)");
      return;
    }
    path = GemmPath::ONEDNN;
    describe = cat("bf16 GEMMs on ", version, " ", impl,
                   agree ? " (bit-identical to the emulation)"
                         : " (NOT bit-identical to the emulation: AMX sums pairs in another order)");
#endif
  }
};

Bf16GemmContext::Bf16GemmContext(const CpuBf16Options& options)
    : state_(std::make_unique<State>(omp_get_max_threads())) {
  state_->choose(options);
  if (state_->path == GemmPath::EMULATED || state_->describe.find("NOT") != std::string::npos)
    std::fprintf(stderr, "cpu-bf16: %s\n", state_->describe.c_str());
}

Bf16GemmContext::~Bf16GemmContext() = default;

GemmPath Bf16GemmContext::path() const { return state_->path; }
const std::string& Bf16GemmContext::describe() const { return state_->describe; }
bool Bf16GemmContext::onednn_available() const { return state_->onednn_available; }
size_t Bf16GemmContext::primitives() const {
#ifdef BERTPERF_HAVE_DNNL
  return state_->primitives.size();
#else
  return 0;
#endif
}

void Bf16GemmContext::run(const Bf16Gemm& g, TileEpilogue epilogue, GemmPath path) {
  BERT_CHECK(path == GemmPath::EMULATED || state_->onednn_available, "the oneDNN bf16 GEMM is not available here");
  GemmProfile& profile = gemm_profile();
  if (!profile.enabled) {
    state_->run(g, epilogue, path);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  state_->run(g, epilogue, path);
  profile.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profile.flops += 2.0 * g.M * g.N * g.K;
}

void Bf16GemmContext::run(const Bf16Gemm& g, TileEpilogue epilogue) { run(g, epilogue, state_->path); }

std::string onednn_version() {
#ifdef BERTPERF_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  return cat(v->major, ".", v->minor, ".", v->patch);
#else
  return "";
#endif
}

// ---- conversions (bf16.h) ----------------------------------------------------------------------------------------

void convert_elements(bf16* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}
void convert_elements(bf16* dst, const double* src, size_t n) {
  // One rounding from the double (through fp32 would round twice), bf16's subnormals kept: kmath::bf16_bits, the
  // CUDA backend's conversion too.
#pragma omp parallel for schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = bf16{kmath::bf16_bits(src[i])};
}
void convert_elements(float* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
void convert_elements(double* dst, const bf16* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
void convert_elements(float* dst, const double* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void convert_elements(double* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace bertperf::cpu
