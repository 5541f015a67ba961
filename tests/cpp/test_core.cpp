// Tests of the core building blocks: Philox4x32-10 (core/philox.h) against the published Random123
// known-answer vectors, the tensor table and flat tensors (core/tensor_table.h), aligned buffers
// and the measuring arena (core/buffer.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "core/buffer.h"
#include "core/errors.h"
#include "core/philox.h"
#include "core/tensor_table.h"

namespace bertperf {
namespace {

void expect_philox(Philox4 counter, uint32_t key0, uint32_t key1, Philox4 want) {
  const Philox4 got = philox4x32_10(counter, key0, key1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Philox, ZeroCounterZeroKey) {
  expect_philox({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
}

TEST(Philox, AllOnes) {
  expect_philox({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
                {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
}

TEST(Philox, PiDigits) {
  expect_philox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
                {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, ElementsMapOntoBlocksAndKeyFields) {
  const RngKey key{0x0123456789abcdefULL, 5, 9};
  // Element 4b + j is word j of block b, counter (b lo, b hi, site, step), key = seed halves.
  const uint64_t block = 0x100000002ULL;
  const Philox4 out = philox4x32_10({{2u, 1u, 9u, 5u}}, 0x89abcdefu, 0x01234567u);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(philox_bits(key, 4 * block + j), out.v[j]);
  // uniform has 24 bits and lies in [0, 1).
  for (uint64_t e = 0; e < 1000; ++e) {
    const float u = philox_uniform(key, e);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
    EXPECT_EQ(u * 16777216.0f, static_cast<float>(philox_bits(key, e) >> 8));
  }
  EXPECT_TRUE(dropout_keep(key, 3, 0.0f));
}

TEST(TensorTable, OffsetsAreAlignedAndNamesLookUp) {
  TensorTable table;
  EXPECT_EQ(table.add("a", {3}), 0u);
  EXPECT_EQ(table.add("b", {5, 7}), 1u);
  EXPECT_EQ(table.add("c", {64}), 2u);
  EXPECT_EQ(table.add("d", {1}), 3u);
  const size_t floats_per_alignment = kAlignment / sizeof(float);
  size_t previous_end = 0;
  for (const TensorInfo& t : table.tensors()) {
    EXPECT_EQ(t.offset % floats_per_alignment, 0u) << t.name;
    EXPECT_GE(t.offset, previous_end) << t.name;  // no overlap
    EXPECT_LT(t.offset - previous_end, floats_per_alignment) << t.name;  // no more padding than needed
    previous_end = t.offset + t.numel;
  }
  EXPECT_EQ(table.at("b").numel, 35u);
  EXPECT_EQ(table.at("b").shape, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(table.total_elements(), previous_end);
  EXPECT_EQ(table.find("missing"), nullptr);
  EXPECT_THROW(table.at("missing"), InternalError);
  EXPECT_THROW(table.add("a", {2}), InternalError);
  EXPECT_THROW(table.add("zero", {4, 0}), InternalError);

  FlatTensors flat(table);
  EXPECT_EQ(flat.size(), table.total_elements());
  for (const TensorInfo& t : table.tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(flat.get(t)) % kAlignment, 0u) << t.name;
    EXPECT_EQ(flat.get(t.name), flat.data() + t.offset);
  }
  for (size_t i = 0; i < flat.size(); ++i) ASSERT_EQ(flat.data()[i], 0.0f);
}

TEST(AlignedBuffer, IsAlignedAndZeroed) {
  AlignedBuffer<double> buffer(1001);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kAlignment, 0u);
  for (size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], 0.0);
  buffer[1000] = 3.0;
  buffer.zero();
  EXPECT_EQ(buffer[1000], 0.0);
}

TEST(Arena, MeasuringModeSizesTheRealArena) {
  // The same carving code runs twice: once to measure, once on memory of the measured size.
  auto carve = [](Arena& arena) {
    std::vector<void*> slices;
    slices.push_back(arena.take<float>(3));
    slices.push_back(arena.take<double>(100));
    slices.push_back(arena.take<int32_t>(1));
    slices.push_back(arena.take<float>(64));
    return slices;
  };
  Arena measuring;
  for (void* p : carve(measuring)) EXPECT_EQ(p, nullptr);
  // Each slice rounds up to the alignment: 256 + 1024 (800 bytes) + 256 + 256.
  EXPECT_EQ(measuring.used(), 256u + 1024u + 256u + 256u);
  EXPECT_EQ(measuring.capacity(), 0u);

  AlignedBuffer<unsigned char> memory(measuring.used());
  Arena real(memory.data(), memory.size());
  const std::vector<void*> slices = carve(real);
  std::set<void*> distinct(slices.begin(), slices.end());
  EXPECT_EQ(distinct.size(), slices.size());
  for (void* p : slices) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAlignment, 0u);
  }
  EXPECT_EQ(real.used(), measuring.used());
  EXPECT_THROW(real.take<float>(1), InternalError);
}

}  // namespace
}  // namespace bertperf
