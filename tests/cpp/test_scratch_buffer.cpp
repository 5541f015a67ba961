// The growth rule of a backend's working buffers (backends/scratch_buffer.h), over an allocator that
// keeps a ledger instead of device memory: before any capture a buffer that grows frees the old one; once a graph has
// been captured, the old one is kept (a replay still writes to it) until the buffer itself goes; inside a capture it
// refuses to grow, naming itself. The ledger checks that no address a "graph" holds is ever released while the
// buffer lives, and that everything is released exactly once in the end.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/scratch_buffer.h"
#include "core/errors.h"

namespace bertperf {
namespace {

// Hands out distinct fake addresses and records what is live.
struct Ledger {
  uintptr_t next = 0x1000;
  std::map<void*, size_t> live;
  std::vector<void*> released;
  int allocations = 0;
};

struct LedgerAllocator {
  Ledger* ledger;
  void* allocate(size_t bytes) const {
    void* p = reinterpret_cast<void*>(ledger->next);
    ledger->next += (bytes + 255) / 256 * 256 + 256;
    ledger->live[p] = bytes;
    ++ledger->allocations;
    return p;
  }
  void release(void* p) const noexcept {
    EXPECT_EQ(ledger->live.erase(p), 1u) << "released an address that is not live";
    ledger->released.push_back(p);
  }
};

using Buffer = ScratchBuffer<LedgerAllocator>;

TEST(ScratchBuffer, GrowsByFreeingBeforeAnyCapture) {
  Ledger ledger;
  CaptureState capture;
  {
    Buffer b({&ledger}, capture, "reduce");
    EXPECT_EQ(b.get(0), nullptr);
    void* p = b.get(100);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(b.get(100), p);
    EXPECT_EQ(b.get(40), p);  // smaller calls reuse it
    EXPECT_EQ(b.bytes(), 100u);
    void* q = b.get(1000);
    EXPECT_NE(q, p);
    EXPECT_EQ(ledger.live.count(p), 0u) << "the outgrown buffer was not freed";
    EXPECT_EQ(ledger.live.size(), 1u);
    EXPECT_EQ(b.kept(), 0u);
    EXPECT_EQ(b.as<float>(250), static_cast<float*>(q));
  }
  EXPECT_TRUE(ledger.live.empty());
  EXPECT_EQ(ledger.released.size(), 2u);
}

TEST(ScratchBuffer, KeepsWhatACapturedGraphPointsAtUntilItGoes) {
  Ledger ledger;
  CaptureState capture;
  {
    Buffer b({&ledger}, capture, "sort");
    void* first = b.get(512);
    // A graph is recorded with `first` in it.
    capture.capturing = capture.captured = true;
    EXPECT_EQ(b.get(512), first);
    capture.capturing = false;
    // An eager call after the capture needs more: the graph's address must stay valid for its replays.
    void* second = b.get(4096);
    EXPECT_NE(second, first);
    EXPECT_EQ(ledger.live.count(first), 1u) << "freed a buffer a captured graph still writes to";
    EXPECT_EQ(b.kept(), 1u);
    void* third = b.get(8192);
    EXPECT_EQ(ledger.live.count(second), 1u);
    EXPECT_EQ(b.kept(), 2u);
    EXPECT_EQ(b.get(100), third);
    EXPECT_TRUE(ledger.released.empty());
  }
  EXPECT_TRUE(ledger.live.empty()) << "kept buffers leak";
  EXPECT_EQ(ledger.released.size(), 3u);
}

TEST(ScratchBuffer, RefusesToGrowInsideACaptureAndSaysWhich) {
  Ledger ledger;
  CaptureState capture;
  Buffer b({&ledger}, capture, "optimizer");
  void* p = b.get(256);
  capture.capturing = capture.captured = true;
  EXPECT_EQ(b.get(256), p);  // a shape it has run at: fine
  try {
    b.get(257);
    FAIL() << "grew inside a capture";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("optimizer"), std::string::npos) << what;
    EXPECT_NE(what.find("capture"), std::string::npos) << what;
  }
  EXPECT_EQ(ledger.allocations, 1);
  EXPECT_EQ(b.get(0), p);
  capture.capturing = false;
  EXPECT_NE(b.get(257), p);  // after the capture it may grow again, keeping p
  EXPECT_EQ(ledger.live.count(p), 1u);
}

}  // namespace
}  // namespace bertperf
