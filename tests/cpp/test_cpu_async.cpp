// cpu-async (backends/cpu/cpu_async.h) keeps device.h's asynchronous rules as a GPU does, so that code which breaks
// them fails on the CPU: an upload from pinned memory reads the host buffer when it runs (a rewrite before then is
// what the device sees), other uploads have read it when they return; a download lands only at an event or
// synchronize(); deallocate waits for the work before it; events are waited for from any thread; a captured graph
// replays with the step values backend memory holds then; an op's working buffer follows scratch_buffer.h's rule
// after a capture; an error on the worker comes back at the next wait, every time (and is said on stderr when no wait
// saw it); the host's waits are counted, as on the synchronous CPU backends.
//
// Where an order matters the backend runs with random delays of up to tens of milliseconds before each queued piece
// of work, from a fixed seed, so that the worker is certainly behind the host when the host rewrites or reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "core/errors.h"
#include "flat_problem.h"
#include "registry/registry.h"

namespace bertperf {
namespace {

std::unique_ptr<Backend> cpu_async(int delay_us = 0) {
  return make_backend(backend_spec("cpu-async", {"threads=1", cat("delay_us=", delay_us), "delay_seed=3"}));
}

// Ten fills of a scratch buffer first: with delays of up to `delay_us` each, the worker is behind the host.
void keep_busy(Backend& b, DeviceBuffer& scratch) {
  for (int i = 0; i < 10; ++i) b.fill_zero(scratch.data(), scratch.bytes());
}

std::string internal_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(CpuAsync, DeclaresAGpusCapabilities) {
  const auto b = cpu_async();
  EXPECT_EQ(b->name(), "cpu-async");
  EXPECT_TRUE(b->capabilities().asynchronous);
  EXPECT_TRUE(b->capabilities().capture);
  EXPECT_TRUE(b->capabilities().host_functions);
  EXPECT_TRUE(b->capabilities().static_shapes);
  EXPECT_TRUE(b->capabilities().host_memory);
  EXPECT_TRUE(b->capabilities().nondeterministic.empty());
  EXPECT_NE(b->describe().find("cpu-async"), std::string::npos);
}

TEST(CpuAsync, PinnedUploadReadsTheHostBufferWhenItRuns) {
  const auto b = cpu_async(20000);
  DeviceBuffer busy(*b, 4096), pinned(*b, sizeof(float), MemoryKind::PINNED), device(*b, sizeof(float));
  keep_busy(*b, busy);
  *pinned.as<float>() = 1.0f;
  b->upload(device.data(), pinned.data(), sizeof(float));
  *pinned.as<float>() = 2.0f;  // too early: the copy has not run
  float seen = 0;
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 2.0f) << "the upload read the pinned buffer when it was issued, not when it ran";

  // Waiting for an event recorded after the upload makes the rewrite safe.
  const auto uploaded = b->make_event();
  keep_busy(*b, busy);
  *pinned.as<float>() = 3.0f;
  b->upload(device.data(), pinned.data(), sizeof(float));
  b->record(*uploaded);
  b->host_wait(*uploaded);
  *pinned.as<float>() = 4.0f;
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 3.0f);
}

TEST(CpuAsync, PageableUploadHasReadTheBufferWhenItReturns) {
  const auto b = cpu_async(20000);
  DeviceBuffer busy(*b, 4096), device(*b, 100 * sizeof(int));
  keep_busy(*b, busy);
  std::vector<int> host(100, 7);
  b->upload(device.data(), host.data(), 100 * sizeof(int));
  std::fill(host.begin(), host.end(), -1);
  std::vector<int> back(100);
  b->download(back.data(), device.data(), 100 * sizeof(int));
  b->synchronize();
  EXPECT_EQ(back, std::vector<int>(100, 7));
}

TEST(CpuAsync, DownloadLandsAtAnEventOrSynchronize) {
  const auto b = cpu_async(20000);
  DeviceBuffer busy(*b, 4096), device(*b, sizeof(double));
  const double value = 5.0;
  b->upload(device.data(), &value, sizeof value);
  keep_busy(*b, busy);
  double seen = -1;
  b->download(&seen, device.data(), sizeof seen);
  EXPECT_EQ(seen, -1.0) << "the download ran before the work queued ahead of it";
  const auto landed = b->make_event();
  b->record(*landed);
  b->host_wait(*landed);
  EXPECT_EQ(seen, 5.0);
}

// The host-wait count (device.h) goes up at each synchronize, host_wait and upload that waits for its copy, and at
// nothing else; cpu-async and the synchronous CPU backends count the same calls alike.
TEST(CpuAsync, CountsTheHostsWaits) {
  for (const char* name : {"cpu-async", "cpu", "cpu-bf16"}) {
    SCOPED_TRACE(name);
    const auto b = make_backend(backend_spec(name, {"threads=1"}));
    DeviceBuffer pinned(*b, 64, MemoryKind::PINNED), device(*b, 64);
    const auto event = b->make_event();
    const int64_t before = b->host_waits();
    b->upload(device.data(), pinned.data(), 64);  // pinned: queued, no wait
    b->fill_zero(device.data(), 64);
    b->copy(device.data(), device.data(), 32);
    b->record(*event);
    b->wait(*event);
    b->download(pinned.data(), device.data(), 64);
    EXPECT_EQ(b->host_waits(), before);
    b->host_wait(*event);
    EXPECT_EQ(b->host_waits(), before + 1);
    b->synchronize();
    EXPECT_EQ(b->host_waits(), before + 2);
    // Another thread's wait counts for the backend, not for this thread (a batch pipeline's reader, bench-step).
    const int64_t mine = Device::host_waits_of_this_thread();
    std::thread([&] { b->synchronize(); }).join();
    EXPECT_EQ(b->host_waits(), before + 3);
    EXPECT_EQ(Device::host_waits_of_this_thread(), mine);
    b->synchronize();
    EXPECT_EQ(Device::host_waits_of_this_thread(), mine + 1);
  }
  const auto b = cpu_async();
  DeviceBuffer device(*b, 64);
  const int64_t before = b->host_waits();
  std::vector<char> pageable(64, 1);
  b->upload(device.data(), pageable.data(), 64);  // returns once the copy has run
  EXPECT_EQ(b->host_waits(), before + 1);
}

TEST(CpuAsync, DeallocateWaitsForTheWorkBeforeIt) {
  const auto b = cpu_async(20000);
  DeviceBuffer busy(*b, 4096), device(*b, sizeof(float));
  const float value = 9.0f;
  b->upload(device.data(), &value, sizeof value);
  keep_busy(*b, busy);
  float seen = 0;
  b->download(&seen, device.data(), sizeof seen);
  device.reset();  // returns once the download (which reads this memory) has run
  EXPECT_EQ(seen, 9.0f);
}

TEST(CpuAsync, EventsAreWaitedForFromAnyThread) {
  const auto b = cpu_async(2000);
  DeviceBuffer busy(*b, 4096), device(*b, 1000 * sizeof(float));
  std::vector<float> host(1000, 3.0f), back(1000, 0.0f);
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < 4; ++i) events.push_back(b->make_event());
  for (int i = 0; i < 4; ++i) {
    keep_busy(*b, busy);
    b->upload(device.data(), host.data(), 1000 * sizeof(float));
    b->download(back.data(), device.data(), 1000 * sizeof(float));
    b->record(*events[i]);
  }
  // A communication thread waits for the last, as the MPI reducer's does.
  bool landed = false;
  std::thread waiter([&] {
    b->host_wait(*events[3]);
    landed = back == host;
  });
  waiter.join();
  EXPECT_TRUE(landed);
}

TEST(CpuAsync, ReplayReadsTheStepValuesMemoryHoldsThen) {
  const auto b = cpu_async(1000);
  DeviceBuffer src(*b, 64 * sizeof(float)), dst(*b, 64 * sizeof(float)), scalars(*b, sizeof(ops::StepScalars));
  const FlatProblem f({64}, 16);
  std::vector<float> host(64), back(64);
  // The step: copy src to dst, then the clip of dst (which reads max_grad_norm from backend memory). It runs eagerly
  // once first (a capture never sizes a working buffer), then as a graph.
  const auto issue = [&] {
    b->copy(dst.data(), src.data(), 64 * sizeof(float));
    b->gradient_clip({scalars.as<ops::StepScalars>(), nullptr, dst.data(), f.all()});
  };
  std::unique_ptr<CapturedOps> graph;
  for (int step = 0; step <= 3; ++step) {
    for (int i = 0; i < 64; ++i) host[i] = static_cast<float>((step + 1) * (i + 1));
    ops::StepScalars s;
    s.max_grad_norm = static_cast<float>(step + 1);
    b->upload(src.data(), host.data(), 64 * sizeof(float));
    b->upload(scalars.data(), &s, sizeof s);
    if (step == 0) {
      issue();
      graph = b->capture(issue);
      ASSERT_NE(graph, nullptr);
    } else {
      graph->replay();
    }
    b->download(back.data(), dst.data(), 64 * sizeof(float));
    b->download(&s, scalars.data(), sizeof s);
    b->synchronize();
    EXPECT_EQ(back, host) << "step " << step;
    double sq = 0;
    for (float x : host) sq += double(x) * x;
    EXPECT_EQ(s.grad_norm_sq, sq) << "step " << step;
    EXPECT_FLOAT_EQ(s.clip_scale, static_cast<float>((step + 1) / std::sqrt(sq))) << "step " << step;
  }
}

TEST(CpuAsync, CaptureRecordsWithoutRunningAndRefusesHostTraffic) {
  const auto b = cpu_async();
  DeviceBuffer device(*b, sizeof(float));
  const float one = 1.0f;
  b->upload(device.data(), &one, sizeof one);
  const auto graph = b->capture([&] { b->fill_zero(device.data(), sizeof(float)); });
  float seen = 0;
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 1.0f) << "capture ran the work it recorded";
  graph->replay();
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 0.0f);
  for (const char* what : {"upload", "download", "synchronize", "allocate"}) {
    const std::string error = internal_error([&] {
      b->capture([&] {
        if (what == std::string("upload")) b->upload(device.data(), &one, sizeof one);
        if (what == std::string("download")) b->download(&seen, device.data(), sizeof seen);
        if (what == std::string("synchronize")) b->synchronize();
        if (what == std::string("allocate")) DeviceBuffer more(*b, 16);
      });
    });
    EXPECT_NE(error.find(cat(what, " inside a capture")), std::string::npos) << what << ": " << error;
  }
  b->synchronize();  // the backend is still fine
}

// A host function runs on the worker in its turn, as a CUDA host node does (the MPI transport queues its collectives
// so): after the work issued before it and before the work issued after, with the worker far behind the host; a
// capture records it and every replay runs it again. With "host_functions": false the backend declares none and
// refuses one.
TEST(CpuAsync, HostFunctionsRunInTheQueuesOrderAndAreCaptured) {
  const auto b = cpu_async(2000);
  DeviceBuffer busy(*b, 4096), src(*b, sizeof(float)), device(*b, sizeof(float));
  struct Seen {
    const float* device;
    std::vector<float> values;  // what device held each time the function ran
  } seen{device.as<float>(), {}};
  seen.values.reserve(8);
  const Device::HostFunction note = [](void* arg) {
    auto& s = *static_cast<Seen*>(arg);
    s.values.push_back(*s.device);
  };
  const float one = 1.0f;
  const auto issue = [&] {
    b->fill_zero(device.data(), sizeof(float));
    b->enqueue_host_function(note, &seen);  // sees the fill
    b->copy(device.data(), src.data(), sizeof(float));
  };
  b->upload(src.data(), &one, sizeof one);  // pageable: src holds 1 once it returns
  keep_busy(*b, busy);
  issue();
  EXPECT_TRUE(seen.values.empty()) << "the host function ran when it was issued, not in its turn";
  b->enqueue_host_function(note, &seen);  // sees the copy
  const auto graph = b->capture(issue);
  b->synchronize();
  ASSERT_EQ(seen.values, (std::vector<float>{0.0f, 1.0f})) << "a capture ran its host function";
  graph->replay();
  graph->replay();
  b->enqueue_host_function(note, &seen);
  b->synchronize();
  EXPECT_EQ(seen.values, (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f, 1.0f}));

  const auto none = make_backend(backend_spec("cpu-async", {"threads=1", "host_functions=false"}));
  EXPECT_FALSE(none->capabilities().host_functions);
  EXPECT_NE(internal_error([&] { none->enqueue_host_function(note, &seen); }).find("no host functions"),
            std::string::npos);
}

// A capture is its thread's alone, as a CUDA capture in thread-local mode: while one thread captures a step,
// another (the batch pipeline's read-ahead) waits for an earlier upload before refilling its pinned block. Under
// load the read-ahead's wait fell inside the step's capture and was refused as host traffic of the capture.
TEST(CpuAsync, AnotherThreadWaitsOnEventsWhileOneCaptures) {
  const auto b = cpu_async(1000);
  DeviceBuffer device(*b, 1000 * sizeof(float));
  std::vector<float> host(1000, 2.0f);
  const auto uploaded = b->make_event();
  b->upload(device.data(), host.data(), 1000 * sizeof(float));
  b->record(*uploaded);
  std::string error;
  const auto graph = b->capture([&] {
    b->fill_zero(device.data(), sizeof(float));
    std::thread reader([&] {
      try {
        b->host_wait(*uploaded);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    reader.join();
  });
  EXPECT_EQ(error, "");
  ASSERT_NE(graph, nullptr);
  float seen = 0;
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 2.0f) << "the capture ran the work it recorded";
  graph->replay();
  b->download(&seen, device.data(), sizeof seen);
  b->synchronize();
  EXPECT_EQ(seen, 0.0f);
}

// The partial sums of a clip over `chunks` chunks, and the norm it finds, on a flat buffer of ones.
struct ClipCase {
  FlatProblem flat;
  std::vector<float> grads;
  explicit ClipCase(int chunks) : flat({static_cast<size_t>(chunks) * 8}, 8), grads(flat.total, 1.0f) {}
  ops::GradientClip op(ops::StepScalars* s) const { return {s, nullptr, grads.data(), flat.all()}; }
  double norm_sq() const { return 8.0 * flat.chunks(); }
};

// The working buffer of the ops that reduce in order is resolved when an op is issued, so a captured op keeps its
// address. After a capture, an eager op that needs more grows it and keeps the old buffer for the graph; growing
// inside a capture is refused, naming the buffer.
TEST(CpuAsync, WorkingBufferGrowthAfterACaptureKeepsWhatTheGraphHolds) {
  const auto b = cpu_async(500);
  DeviceBuffer scalars(*b, sizeof(ops::StepScalars));
  const ClipCase small(4), large(64), larger(256);
  auto run = [&](const std::function<void()>& issue) {
    ops::StepScalars s;
    b->upload(scalars.data(), &s, sizeof s);
    issue();
    b->download(&s, scalars.data(), sizeof s);
    b->synchronize();
    return s.grad_norm_sq;
  };
  auto* s = scalars.as<ops::StepScalars>();
  EXPECT_EQ(run([&] { b->gradient_clip(small.op(s)); }), small.norm_sq());  // sizes the buffer
  const auto graph = b->capture([&] { b->gradient_clip(small.op(s)); });
  // Grows the buffer: the graph's must stay valid (a replay writes there).
  EXPECT_EQ(run([&] { b->gradient_clip(large.op(s)); }), large.norm_sq());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run([&] { graph->replay(); }), small.norm_sq()) << "replay " << i;
  EXPECT_EQ(run([&] { graph->replay(); b->gradient_clip(larger.op(s)); graph->replay(); }), small.norm_sq());
  // A capture of a clip larger than any before it would grow the buffer while recording.
  const std::string error = internal_error([&] {
    b->capture([&] { b->gradient_clip(ClipCase(1024).op(s)); });
  });
  EXPECT_NE(error.find("cpu-async backend's partial-sum buffer would grow"), std::string::npos) << error;
  EXPECT_NE(error.find("inside a graph capture"), std::string::npos) << error;
}

TEST(CpuAsync, AnErrorOnTheWorkerComesBackAtEveryWait) {
  const auto b = cpu_async(1000);
  DeviceBuffer stats(*b, 2 * sizeof(double)), lse(*b, 2 * sizeof(float)), busy(*b, 4096);
  const std::vector<float> logits(12, 0.0f), weight = {1.0f, 1.0f};
  const std::vector<int32_t> labels = {6, 1};  // 6 is outside a vocabulary of 6
  b->cross_entropy_forward({lse.data(), stats.as<double>(), logits.data(), labels.data(), weight.data(),
                            weight.data(), 2, 6, 6});
  keep_busy(*b, busy);
  const std::string first = internal_error([&] { b->synchronize(); });
  EXPECT_NE(first.find("cross-entropy label 6"), std::string::npos) << first;
  const auto event = b->make_event();
  b->record(*event);
  EXPECT_NE(internal_error([&] { b->host_wait(*event); }).find("cross-entropy label 6"), std::string::npos);
  EXPECT_NE(internal_error([&] { b->synchronize(); }).find("cross-entropy label 6"), std::string::npos);
  const float value = 1.0f;
  EXPECT_NE(internal_error([&] { b->upload(busy.data(), &value, sizeof value); }).find("cross-entropy label 6"),
            std::string::npos);
  // One that no wait sees is said when the backend goes.
  ::testing::internal::CaptureStderr();
  {
    const auto c = cpu_async();
    DeviceBuffer c_stats(*c, 2 * sizeof(double)), c_lse(*c, 2 * sizeof(float));
    c->cross_entropy_forward({c_lse.data(), c_stats.as<double>(), logits.data(), labels.data(), weight.data(),
                              weight.data(), 2, 6, 6});
  }
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("cpu-async: queued work failed and no wait saw it: "), std::string::npos) << said;
  EXPECT_NE(said.find("cross-entropy label 6"), std::string::npos) << said;
}

TEST(CpuAsync, EventsOfAnotherBackendAreRefused) {
  const auto a = cpu_async(), b = cpu_async();
  const auto event = a->make_event();
  EXPECT_NE(internal_error([&] { b->record(*event); }).find("another backend"), std::string::npos);
}

TEST(CpuAsync, OptionsAreCheckedWhenTheBlockIsRead) {
  for (const char* bad :
       {"delay_us=-1", "delay_us=2000000", "delay_seed=-5", "threads=-2", "delay=3", "host_functions=3"}) {
    try {
      backend_spec("cpu-async", {bad}, "c.json: backend");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("c.json: backend"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace bertperf
