// The options of the cpu-bf16 backend's "backend" block (registry.h):
//   { "threads": int, "static_shapes": bool (optional, as cpu_options.h),
//     "gemm": "auto" | "onednn" | "emulated" (optional, default "auto": the GEMMs on oneDNN where the build has it,
//             the CPU has AVX512-BF16 and a check when the backend is built finds oneDNN's sums equal to the
//             emulation's, else emulated; "onednn": on oneDNN, an input error where it cannot run, used even where
//             its sums differ from the emulation's (the backend says so); "emulated": our own loops, same bits,
//             slower),
//     "isa": "avx512_bf16" | "amx" (optional, default "avx512_bf16": oneDNN capped at AVX512-BF16, whose
//            instruction sums in the order gemm_bf16.h defines; "amx": AMX allowed, faster on Intel Sapphire Rapids
//            and later, but its tile instruction sums pairs in another order, so the bits differ from the
//            emulation there; oneDNN is used all the same unless "gemm" is "emulated", and the backend says so),
//     "precision": "bf16" | "fp8", "fp8_history", "fp8_margin" (optional, backends/fp8.h: read_fp8_recipe; "fp8" is
//                  the FP8 twin: the encoder's linear layers quantize as the GPU's FP8 GEMMs do, ops.h's FP8 column,
//                  and run the same bf16 GEMMs on the quantized values) }
// oneDNN fixes its ISA for the whole process when its first primitive is made, so every cpu-bf16 backend of one
// process must ask for the same "isa" (a second one that asks otherwise is an input error).
#pragma once

#include <string>

#include "backends/cpu/cpu_options.h"
#include "backends/fp8.h"
#include "core/json_fields.h"

namespace bertperf {

enum class Bf16GemmChoice { AUTO, ONEDNN, EMULATED };
enum class Bf16Isa { AVX512_BF16, AMX };

struct CpuBf16Options {
  int threads = 0;
  bool static_shapes = false;
  Bf16GemmChoice gemm = Bf16GemmChoice::AUTO;
  Bf16Isa isa = Bf16Isa::AVX512_BF16;
  bool fp8 = false;
  Fp8Recipe fp8_recipe;

  // Reads the fields it knows from `fields`; the caller rejects the rest.
  static CpuBf16Options read(JsonFields& fields) {
    CpuBf16Options o;
    const std::string& where = fields.where();
    const CpuOptions cpu = CpuOptions::read(fields);
    o.threads = cpu.threads;
    o.static_shapes = cpu.static_shapes;
    const std::string gemm = fields.optional<std::string>("gemm", "auto");
    if (gemm == "auto") o.gemm = Bf16GemmChoice::AUTO;
    else if (gemm == "onednn") o.gemm = Bf16GemmChoice::ONEDNN;
    else if (gemm == "emulated") o.gemm = Bf16GemmChoice::EMULATED;
    else throw_input(where, "field 'gemm' must be \"auto\", \"onednn\" or \"emulated\", got \"" + gemm + "\"");
    const std::string isa = fields.optional<std::string>("isa", "avx512_bf16");
    if (isa == "avx512_bf16") o.isa = Bf16Isa::AVX512_BF16;
    else if (isa == "amx") o.isa = Bf16Isa::AMX;
    else throw_input(where, "field 'isa' must be \"avx512_bf16\" or \"amx\", got \"" + isa + "\"");
    o.fp8 = read_fp8_recipe(fields, &o.fp8_recipe);
    return o;
  }
};

}  // namespace bertperf
