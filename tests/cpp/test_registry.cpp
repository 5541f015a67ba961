// The backend registry (registry/registry.h): a config's "backend" block is read strictly by the backend it names,
// on any machine (a GPU config is checked where there is no GPU), and what the harness asks of a backend without
// building one (dtypes, where its memory lives) matches the backend once built.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.h"
#include "registry/registry.h"

namespace bertperf {
namespace {

// The InputError message of `f`, or "" when it does not throw one.
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BackendRegistry, ReadsEachBackendsOwnOptions) {
  const BackendSpec cuda = parse_backend_spec(
      Json::parse(R"({"name": "cuda", "attention": "kernel", "gelu": "kernel", "deterministic": true,
                      "attention_workspace_mb": 512, "device": 1, "blocking_uploads": true, "capture": false})"),
      "c.json: backend");
  EXPECT_EQ(cuda.name, "cuda");
  EXPECT_FALSE(cuda.capture);
  EXPECT_EQ(cuda.options.size(), 6u);  // the backend's own fields, "name" and "capture" taken out
  const BackendSpec cpu = backend_spec("cpu", {"threads=3"});
  EXPECT_EQ(cpu.options.at("threads"), 3);
  EXPECT_TRUE(cpu.capture);
  const BackendSpec bf16 = backend_spec("cpu-bf16", {"threads=2", "gemm=emulated", "isa=amx"});
  EXPECT_EQ(bf16.options.size(), 3u);
  EXPECT_EQ(bf16.options.at("gemm"), "emulated");
  const BackendSpec async =
      backend_spec("cpu-async", {"threads=2", "delay_us=150", "delay_seed=9", "blocking_uploads=true"});
  EXPECT_EQ(async.options.size(), 4u);
  EXPECT_EQ(async.options.at("delay_us"), 150);
  EXPECT_EQ(async.options.at("blocking_uploads"), true);
  // The ring of step records is the block's own field (harness/train_step.h), 16 unless said.
  EXPECT_EQ(cpu.record_slots, 16);
  const BackendSpec ring = backend_spec("cpu-async", {"threads=1", "record_slots=4", "capture=false"});
  EXPECT_EQ(ring.record_slots, 4);
  EXPECT_FALSE(ring.capture);
  EXPECT_EQ(ring.options.size(), 1u);
  // The block a spec was read from reads back to the same spec, and options set over it count.
  Json block = backend_block(ring);
  const BackendSpec again = parse_backend_spec(block, "again");
  EXPECT_EQ(again.name, ring.name);
  EXPECT_EQ(again.capture, ring.capture);
  EXPECT_EQ(again.record_slots, ring.record_slots);
  EXPECT_EQ(again.options, ring.options);
  set_backend_options(block, {"record_slots=2", "delay_us=5"}, "command line");
  const BackendSpec changed = parse_backend_spec(block, "changed");
  EXPECT_EQ(changed.record_slots, 2);
  EXPECT_EQ(changed.options.at("delay_us"), 5);
  EXPECT_EQ(changed.options.at("threads"), 1);
}

TEST(BackendRegistry, BadBlocksAreOneLineNamingTheFieldAndTheFile) {
  const auto parse = [](const char* text) { return parse_backend_spec(Json::parse(text), "c.json: backend"); };
  const std::string unknown_backend = input_error([&] { parse(R"({"name": "tpu"})"); });
  EXPECT_NE(unknown_backend.find("c.json: backend: unknown backend 'tpu' (cpu, cpu-f64, cpu-bf16, cpu-async, cuda"), std::string::npos)
      << unknown_backend;
  const std::string bad_value = input_error([&] { parse(R"({"name": "cuda", "attention": "flash"})"); });
  EXPECT_NE(bad_value.find("c.json: backend: field 'attention' must be"), std::string::npos) << bad_value;
  const std::string bad_gemm = input_error([&] { parse(R"({"name": "cpu-bf16", "gemm": "mkl"})"); });
  EXPECT_NE(bad_gemm.find("c.json: backend: field 'gemm' must be \"auto\", \"onednn\" or \"emulated\""),
            std::string::npos) << bad_gemm;
  const std::string bad_isa = input_error([&] { parse(R"({"name": "cpu-bf16", "isa": "avx2"})"); });
  EXPECT_NE(bad_isa.find("c.json: backend: field 'isa' must be"), std::string::npos) << bad_isa;
  const std::string other_backends_option = input_error([&] { parse(R"({"name": "cpu", "device": 0})"); });
  EXPECT_NE(other_backends_option.find("c.json: backend"), std::string::npos) << other_backends_option;
  EXPECT_NE(other_backends_option.find("device"), std::string::npos) << other_backends_option;
  const std::string bad_type = input_error([&] { parse(R"({"name": "cpu", "threads": "two"})"); });
  EXPECT_NE(bad_type.find("field 'threads' must be an integer"), std::string::npos) << bad_type;
  const std::string negative = input_error([&] { parse(R"({"name": "cpu", "threads": -1})"); });
  EXPECT_NE(negative.find("threads"), std::string::npos) << negative;
  const std::string no_name = input_error([&] { parse(R"({"threads": 2})"); });
  EXPECT_NE(no_name.find("missing field 'name'"), std::string::npos) << no_name;
  const std::string no_ring = input_error([&] { parse(R"({"name": "cpu", "record_slots": 0})"); });
  EXPECT_NE(no_ring.find("c.json: backend: field 'record_slots' must be 1 to 4096, got 0"), std::string::npos)
      << no_ring;
  const std::string not_key_value = input_error([] { backend_spec("cpu", {"threads"}); });
  EXPECT_NE(not_key_value.find("KEY=VALUE"), std::string::npos) << not_key_value;
  for (const std::string& m :
       {unknown_backend, bad_value, bad_gemm, bad_isa, other_backends_option, bad_type, negative, no_name, no_ring})
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(BackendRegistry, WhatIsKnownBeforeBuildingMatchesTheBuiltBackend) {
  bool saw_oracle = false;
  for (const BackendInfo& info : backend_infos()) {
    EXPECT_EQ(&backend_info(info.name, "test"), &backend_info(info.name, "test"));
    saw_oracle = saw_oracle || info.oracle;
    const std::vector<std::string> here = available_backends();
    const bool runs_here = info.oracle || std::find(here.begin(), here.end(), info.name) != here.end();
    if (!runs_here) continue;  // not built, or no device for it
    const std::unique_ptr<Backend> backend = make_backend(backend_spec(info.name));
    EXPECT_EQ(backend->name(), info.name);
    EXPECT_EQ(backend->act_dtype(), info.act) << info.name;
    EXPECT_EQ(backend->weight_dtype(), info.weight) << info.name;
    EXPECT_EQ(backend->master_dtype(), info.master) << info.name;
    EXPECT_EQ(backend->capabilities().host_memory, info.host_memory) << info.name;
    // A backend that can capture replays one shape.
    EXPECT_TRUE(!backend->capabilities().capture || backend->capabilities().static_shapes) << info.name;
  }
  EXPECT_TRUE(saw_oracle);
  const std::vector<std::string> here = available_backends();
  EXPECT_NE(std::find(here.begin(), here.end(), "cpu"), here.end());
  EXPECT_EQ(std::find(here.begin(), here.end(), "cpu-f64"), here.end()) << "the oracle is not among the tested";
}

// oneDNN fixes its ISA once per process, so a cpu-bf16 backend that asks for another ISA than the one an earlier
// cpu-bf16 backend of the process fixed is one input error line (a build without oneDNN has no ISA to fix).
TEST(BackendRegistry, CpuBf16IsaIsOnePerProcess) {
  const std::unique_ptr<Backend> first = make_backend(backend_spec("cpu-bf16"));
  const auto libraries = first->library_versions();
  if (std::none_of(libraries.begin(), libraries.end(), [](const auto& l) { return l.first == "oneDNN"; }))
    GTEST_SKIP() << "this build has no oneDNN";
  EXPECT_NO_THROW(make_backend(backend_spec("cpu-bf16", {"isa=avx512_bf16"})));
  const std::string other = input_error([] { make_backend(backend_spec("cpu-bf16", {"isa=amx"})); });
  EXPECT_NE(other.find("\"isa\": \"amx\" in a process whose oneDNN already runs at \"avx512_bf16\""), std::string::npos)
      << other;
  EXPECT_EQ(other.find('\n'), std::string::npos) << other;
}

}  // namespace
}  // namespace bertperf
