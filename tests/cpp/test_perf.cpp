// The scaling model (perf/): the communication model's closed forms against a simulation that runs
// the ring and hierarchical algorithms on real numbers (checking they sum) and adds up each step's
// slowest transfer; hand-worked figures; and the link table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "perf/comm_model.h"

using namespace bertperf;
using namespace bertperf::perf;

namespace {

// Ranks hold `n` numbers each; ring steps move chunks between neighbours. Each step's time is the
// latency plus the chunk over the slowest edge's bandwidth; the edge between ranks of one node is
// `intra` (shared by `rings` concurrent rings), between nodes one port per ring.
struct RingSim {
  std::vector<std::vector<double>> data;  // per member
  double seconds = 0;
};

// One ring (members in ring order) of reduce-scatter then all-gather over `bytes` per member, as
// `rings` concurrent rings each with 1/rings of the data. node_of gives each member's node.
void simulate_ring(RingSim& sim, const std::vector<int>& node_of, double bytes, int rings, const Link& intra,
                   const Link& inter, bool reduce_scatter, bool all_gather) {
  const int p = static_cast<int>(sim.data.size());
  if (p == 1) return;
  const size_t n = sim.data[0].size();
  ASSERT_EQ(n % p, 0u);
  const size_t c = n / p;
  auto step_time = [&]() {
    double worst = 0;
    for (int i = 0; i < p; ++i) {
      const bool across = node_of[i] != node_of[(i + 1) % p];
      const double bw = across ? inter.bandwidth_Bps : intra.bandwidth_Bps / rings;
      const double lat = across ? inter.latency_s : intra.latency_s;
      worst = std::max(worst, lat + bytes / rings / p / bw);
    }
    return worst;
  };
  if (reduce_scatter) {
    for (int s = 0; s < p - 1; ++s) {
      auto next = sim.data;
      for (int i = 0; i < p; ++i) {
        const int chunk = ((i - s) % p + p) % p, to = (i + 1) % p;
        for (size_t e = 0; e < c; ++e) next[to][chunk * c + e] += sim.data[i][chunk * c + e];
      }
      sim.data = next;
      sim.seconds += step_time();
    }
  }
  if (all_gather) {
    for (int s = 0; s < p - 1; ++s) {
      auto next = sim.data;
      for (int i = 0; i < p; ++i) {
        const int chunk = ((i + 1 - s) % p + p) % p, to = (i + 1) % p;
        for (size_t e = 0; e < c; ++e) next[to][chunk * c + e] = sim.data[i][chunk * c + e];
      }
      sim.data = next;
      sim.seconds += step_time();
    }
  }
}

std::vector<std::vector<double>> ramp(int ranks, size_t n) {
  std::vector<std::vector<double>> d(ranks, std::vector<double>(n));
  for (int r = 0; r < ranks; ++r)
    for (size_t e = 0; e < n; ++e) d[r][e] = (r + 1) * 1000.0 + static_cast<double>(e);
  return d;
}

void expect_all_sums(const std::vector<std::vector<double>>& got, int ranks, size_t n) {
  const auto start = ramp(ranks, n);
  for (size_t e = 0; e < n; ++e) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += start[r][e];
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(got[r][e], sum) << "rank " << r << " element " << e;
  }
}

}  // namespace

TEST(CommModel, HandWorkedFigures) {
  const Link l{1e-3, 1e9};
  // 2 ranks, 1 MB: one reduce-scatter step and one all-gather step of 0.5 MB each.
  EXPECT_DOUBLE_EQ(ring_all_reduce_s(1e6, 2, l), 2 * (1e-3 + 0.5e6 / 1e9));
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_s(4e6, 4, l), 3 * (1e-3 + 1e6 / 1e9));
  EXPECT_DOUBLE_EQ(ring_all_gather_s(4e6, 4, l), ring_reduce_scatter_s(4e6, 4, l));
  EXPECT_EQ(ring_all_reduce_s(1e9, 1, l), 0.0);
  // A node's ports are shared by its ranks.
  Topology t{8, 8, 8, Link{3.4e-6, 300e9}, Link{9.6e-6, 25e9}};
  EXPECT_DOUBLE_EQ(inter_bandwidth_per_rank(t), 25e9);
  t.nics_per_node = 1;
  EXPECT_DOUBLE_EQ(inter_bandwidth_per_rank(t), 25e9 / 8);
  // Overlap hides up to f * backward.
  EXPECT_DOUBLE_EQ(exposed_comm_s(10, 20, 0.25), 5);
  EXPECT_DOUBLE_EQ(exposed_comm_s(10, 100, 0.5), 0);
  EXPECT_DOUBLE_EQ(exposed_comm_s(10, 100, 0.0), 10);
}

TEST(CommModel, RingMatchesSimulatedAlgorithm) {
  const Link l{2e-5, 3e9};
  for (int p : {2, 3, 5, 8}) {
    const size_t n = 8 * p;
    RingSim sim{ramp(p, n)};
    const double bytes = 1.5e7;
    simulate_ring(sim, std::vector<int>(p, 0), bytes, 1, l, l, true, true);
    expect_all_sums(sim.data, p, n);
    EXPECT_NEAR(ring_all_reduce_s(bytes, p, l), sim.seconds, 1e-12) << p << " ranks";
  }
}

TEST(CommModel, FlatRingAcrossNodesMatchesSimulation) {
  const Link intra{3e-6, 200e9}, inter{1e-5, 10e9};
  for (int nodes : {2, 3}) {
    for (int rpn : {1, 2, 4}) {
      for (int nics : {1, 2, 4}) {
        const int p = nodes * rpn;
        std::vector<int> node_of(p);
        for (int i = 0; i < p; ++i) node_of[i] = i / rpn;
        const size_t n = 4 * p;
        RingSim sim{ramp(p, n)};
        const double bytes = 6.7e8;
        simulate_ring(sim, node_of, bytes, nics, intra, inter, true, true);
        expect_all_sums(sim.data, p, n);
        const Topology t{nodes, rpn, nics, intra, inter};
        EXPECT_NEAR(flat_all_reduce_s(bytes, t), sim.seconds, 1e-9 * sim.seconds)
            << nodes << "x" << rpn << " with " << nics << " ports";
      }
    }
  }
}

TEST(CommModel, HierarchicalMatchesSimulation) {
  const Link intra{3e-6, 200e9}, inter{1e-5, 10e9};
  for (int nodes : {1, 2, 4}) {
    for (int rpn : {1, 2, 4}) {
      for (int nics : {1, 2}) {
        const int p = nodes * rpn;
        const size_t n = 4 * p;
        const double bytes = 6.7e8;
        auto data = ramp(p, n);
        double seconds = 0;
        // 1. reduce-scatter inside each node: member j of node k ends up owning chunk (j+1) % rpn, summed.
        double phase = 0;
        for (int k = 0; k < nodes; ++k) {
          RingSim sim;
          for (int j = 0; j < rpn; ++j) sim.data.push_back(data[k * rpn + j]);
          simulate_ring(sim, std::vector<int>(rpn, 0), bytes, 1, intra, intra, true, false);
          for (int j = 0; j < rpn; ++j) data[k * rpn + j] = sim.data[j];
          phase = std::max(phase, sim.seconds);
        }
        seconds += phase;
        // 2. all-reduce of each owned shard among same-local-rank peers, the node's ports shared.
        const Link port{inter.latency_s, inter.bandwidth_Bps * nics / rpn};
        phase = 0;
        for (int j = 0; j < rpn; ++j) {
          const size_t c = n / rpn, owned = (j + 1) % rpn;
          RingSim sim;
          for (int k = 0; k < nodes; ++k)
            sim.data.emplace_back(data[k * rpn + j].begin() + owned * c, data[k * rpn + j].begin() + (owned + 1) * c);
          ASSERT_EQ(c % nodes, 0u);
          std::vector<int> node_of(nodes);
          std::iota(node_of.begin(), node_of.end(), 0);
          simulate_ring(sim, node_of, bytes / rpn, 1, port, port, true, true);
          for (int k = 0; k < nodes; ++k)
            std::copy(sim.data[k].begin(), sim.data[k].end(), data[k * rpn + j].begin() + owned * c);
          phase = std::max(phase, sim.seconds);
        }
        seconds += phase;
        // 3. all-gather inside each node.
        phase = 0;
        for (int k = 0; k < nodes; ++k) {
          RingSim sim;
          for (int j = 0; j < rpn; ++j) sim.data.push_back(data[k * rpn + j]);
          simulate_ring(sim, std::vector<int>(rpn, 0), bytes, 1, intra, intra, false, true);
          for (int j = 0; j < rpn; ++j) data[k * rpn + j] = sim.data[j];
          phase = std::max(phase, sim.seconds);
        }
        seconds += phase;
        expect_all_sums(data, p, n);
        const Topology t{nodes, rpn, nics, intra, inter};
        EXPECT_NEAR(hierarchical_all_reduce_s(bytes, t), seconds, 1e-9 * seconds)
            << nodes << "x" << rpn << " with " << nics << " ports";
      }
    }
  }
}

TEST(CommModel, HierarchicalBeatsFlatOnLatencyAcrossManyNodes) {
  // Many nodes, small buffer: the flat ring pays 2(p-1) network latencies, the hierarchical 2(n-1).
  const Topology t{64, 8, 8, find_link("nvlink3"), find_link("ib-hdr")};
  EXPECT_LT(hierarchical_all_reduce_s(1e5, t), flat_all_reduce_s(1e5, t));
}

TEST(CommModel, LinkTableAndErrors) {
  ASSERT_GE(link_table().size(), 5u);
  for (const auto& l : link_table()) {
    EXPECT_GT(l.link.bandwidth_Bps, 0) << l.name;
    EXPECT_GT(l.link.latency_s, 0) << l.name;
    EXPECT_GT(std::string(l.source).size(), 10u) << l.name;
  }
  EXPECT_DOUBLE_EQ(find_link("ib-hdr").bandwidth_Bps, 200e9 / 8);
  try {
    find_link("token-ring");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token-ring"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("ib-hdr"), std::string::npos);
  }
  EXPECT_THROW(parse_all_reduce_algo("tree", "--algo"), InputError);
  EXPECT_EQ(parse_all_reduce_algo("hierarchical", "x"), AllReduceAlgo::kHierarchical);
}
