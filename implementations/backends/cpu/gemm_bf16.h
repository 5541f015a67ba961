// The GEMM of the cpu-bf16 backend: bf16 operands, fp32 accumulation, in one summation order on every x86 machine.
//
//   acc (M, N) = op(A) (M, K) . op(B) (K, N)        A, B bf16, row-major with leading dimensions; acc fp32
//
// The order (ops.h's rounding table calls it "the bf16 GEMM order"): K is taken in chunks of 512 (kGemmKChunk), the
// last one padded with zeros to a multiple of 64 (kGemmKPad); within a chunk every element of acc starts at 0 and
// takes the chunk's products in pairs, k + 1 then k, each added with one fp32 rounding (an FMA; products of two bf16
// are exact in fp32), subnormal inputs and results flushed to zero; the chunks' sums are added in chunk order (one
// fp32 rounding each, subnormals kept). That is the AVX512-BF16 instruction VDPBF16PS applied along K, and what
// oneDNN's brgemm kernels do for K <= 512. The padding's 0 x 0 pairs change no sum but a chunk's -0, which they make
// +0; they bound the chunk lengths oneDNN sees (a weight gradient's K is the batch's token count, which changes from
// step to step on the CPU), so a few primitives serve every batch.
//
// Two paths compute it, and give the same bits (tests/cpp/test_gemm_bf16.cpp compares them):
//  - ONEDNN: oneDNN's matmul (brgemm, AVX512-BF16), one call per tile and K chunk, run single-threaded on the
//    OpenMP threads that share the tiles out. oneDNN is capped at AVX512-BF16 so that every machine sums in this
//    order; the backend option "isa": "amx" lets it use AMX (faster on Intel Sapphire Rapids and later, whose tile
//    instruction sums pairs in another order: bits then differ from the emulation, and the backend says so).
//  - EMULATED: our own loops in that order (fp32 FMAs with the FTZ and DAZ flags set), for a CPU without
//    AVX512-BF16 or a build without oneDNN; slower (tens of GFLOP/s), same bits.
// The result is handed to an epilogue tile by tile (the tile in fp32, hot in cache), which writes the op's outputs:
// bias, activation and the rounding to bf16, or an fp32 accumulation (ops.h's rounding table).
//
// A Bf16GemmContext belongs to one backend object: the path it chose, oneDNN's engine, streams and primitives, and
// the memory the tiles work in (per-thread tiles and padded operands, B packed once per GEMM, oneDNN's scratchpad,
// which it is handed rather than allocating). A shape's first call makes its primitives (a JIT compilation) and grows
// the buffers; a call at known shapes allocates none of its own memory. oneDNN's execute itself still allocates a
// few bytes of bookkeeping per call (its argument map), which no public oneDNN 2.x call avoids.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "backends/cpu/bf16.h"
#include "backends/cpu/cpu_bf16_options.h"

namespace bertperf::cpu {

inline constexpr int kGemmKChunk = 512;
inline constexpr int kGemmKPad = 64;

struct Bf16Gemm {
  int M = 0, N = 0, K = 0;
  const bf16* A = nullptr;  // (M, K), or (K, M) when trans_a
  int lda = 0;
  bool trans_a = false;
  const bf16* B = nullptr;  // (K, N), or (N, K) when trans_b
  int ldb = 0;
  bool trans_b = false;
};

// epilogue(m0, rows, n0, cols, acc, ld): acc holds the rows [m0, m0 + rows) and columns [n0, n0 + cols) of the
// product, row stride ld. Called once per tile, from several threads at once on disjoint tiles. A reference to a
// callable (it does not own it or allocate).
class TileEpilogue {
 public:
  template <typename F>
  TileEpilogue(const F& f)  // NOLINT: implicit, as a function reference
      : object_(&f), call_([](const void* o, int m0, int rows, int n0, int cols, const float* acc, int ld) {
          (*static_cast<const F*>(o))(m0, rows, n0, cols, acc, ld);
        }) {}
  void operator()(int m0, int rows, int n0, int cols, const float* acc, int ld) const {
    call_(object_, m0, rows, n0, cols, acc, ld);
  }

 private:
  const void* object_;
  void (*call_)(const void*, int, int, int, int, const float*, int);
};

enum class GemmPath { ONEDNN, EMULATED };

class Bf16GemmContext {
 public:
  // Decides the path for `options` ("gemm", "isa": cpu_bf16_options.h), checking on a few products that oneDNN sums
  // as the emulation does; says on stderr when it emulates or oneDNN's bits differ. InputError where the options
  // cannot be had here. Its threads: the OpenMP thread count now (at most that many share the tiles later).
  explicit Bf16GemmContext(const CpuBf16Options& options);
  ~Bf16GemmContext();
  Bf16GemmContext(const Bf16GemmContext&) = delete;
  Bf16GemmContext& operator=(const Bf16GemmContext&) = delete;

  // The product through the context's path, or through a given one (the tests compare them), its tiles shared out
  // over the OpenMP threads. Not from inside a parallel region, and one call at a time.
  void run(const Bf16Gemm& g, TileEpilogue epilogue);
  void run(const Bf16Gemm& g, TileEpilogue epilogue, GemmPath path);

  GemmPath path() const;
  // One line for the backend's describe(): the path, oneDNN's version and ISA, and why a path was not taken.
  const std::string& describe() const;
  // Whether the ONEDNN path can run here at all (the tests skip their comparison where it cannot).
  bool onednn_available() const;
  // How many oneDNN primitives (tile shapes) it has made so far.
  size_t primitives() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The version of the oneDNN library loaded ("2.6.3"); empty in a build without oneDNN.
std::string onednn_version();

}  // namespace bertperf::cpu
