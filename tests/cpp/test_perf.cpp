// The scaling model (perf/): the communication model's closed forms against a simulation that runs
// the ring and hierarchical algorithms on real numbers (checking they sum) and adds up each step's
// slowest transfer; the tree all-reduce by hand; the link table; the network descriptions of real
// MLPerf system descriptions read into ports and rates; the device table; the step and run model
// against its formula worked by hand; the RCP tables against the RCP checker's own figures; the fit
// recovering the parameters that generated synthetic results (a planted samples ratio by batch and class,
// a CPU class's rate across nodes of other peaks, a planted network efficiency, a class at one batch taking
// the others' fixed cost in samples); the validation never using the result it predicts (its own time or
// samples), a copy of its runs, its family's results (leave-family-out) or a result of its round or later
// (forward-in-time); submitters' names joined into families; a stated power read and scaled; the 90%
// intervals and their calibration against the order statistics written out; CPU system descriptions read
// into sockets, cores and clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "core/json_fields.h"
#include "perf/comm_model.h"
#include "perf/devices.h"
#include "perf/network.h"
#include "perf/published.h"
#include "perf/roofline.h"
#include "perf/step_model.h"
#include "temp_dir.h"

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
  const Link hdr{9.6e-6, 25e9};
  const Topology t{64, 8, 8, find_link("nvlink3"), hdr};
  EXPECT_LT(hierarchical_all_reduce_s(1e5, t), flat_all_reduce_s(1e5, t));
}

TEST(CommModel, TreeByHand) {
  const Link intra{1e-6, 100e9}, port{1e-5, 10e9};
  // 4 nodes x 2 ranks, 2 ports: intra reduce-scatter and all-gather of 1 GB over 2 ranks, then each
  // rank's 0.5 GB shard up and down a tree of depth 2 at 10 GB/s a rank.
  const Topology t{4, 2, 2, intra, port};
  const double intra_s = 2 * (1e-6 + 0.5e9 / 100e9);
  EXPECT_NEAR(tree_all_reduce_s(1e9, t), intra_s + 2 * 0.5e9 / 10e9 + 2 * 2 * 1e-5, 1e-12);
  // Depth is ceil(log2(nodes)): 5 nodes take 3 levels.
  const Topology five{5, 2, 2, intra, port};
  EXPECT_NEAR(tree_all_reduce_s(1e9, five) - tree_all_reduce_s(1e9, t), 2 * 1e-5, 1e-12);
  // One node: the intra-node phases alone, as the hierarchical one.
  const Topology one{1, 8, 8, intra, port};
  EXPECT_DOUBLE_EQ(tree_all_reduce_s(1e9, one), hierarchical_all_reduce_s(1e9, one));
  // Few nodes and a large buffer: the ring's bandwidth wins; many nodes and a small one: the tree.
  const Topology two{2, 8, 8, find_link("nvlink3"), Link{9.6e-6, 25e9}};
  EXPECT_LT(hierarchical_all_reduce_s(6.7e8, two), tree_all_reduce_s(6.7e8, two));
  const Topology many{512, 8, 8, find_link("nvlink3"), Link{9.6e-6, 25e9}};
  EXPECT_LT(tree_all_reduce_s(6.7e8, many), hierarchical_all_reduce_s(6.7e8, many));
  EXPECT_DOUBLE_EQ(all_reduce_s(6.7e8, many, AllReduceSchedule::BEST),
                   std::min({flat_all_reduce_s(6.7e8, many), hierarchical_all_reduce_s(6.7e8, many),
                             tree_all_reduce_s(6.7e8, many)}));
}

TEST(CommModel, LinkTableAndErrors) {
  ASSERT_GE(link_table().size(), 5u);
  for (const auto& l : link_table()) {
    EXPECT_GT(l.link.bandwidth_Bps, 0) << l.name;
    EXPECT_GT(l.link.latency_s, 0) << l.name;
    EXPECT_GT(std::string(l.source).size(), 10u) << l.name;
  }
  EXPECT_DOUBLE_EQ(find_link("nvlink3").bandwidth_Bps, 300e9);
  try {
    find_link("token-ring");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token-ring"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("nvlink3"), std::string::npos);
  }
  EXPECT_THROW(parse_all_reduce_schedule("sharp", "--algo"), InputError);
  EXPECT_EQ(parse_all_reduce_schedule("tree", "x"), AllReduceSchedule::TREE);
  EXPECT_EQ(parse_all_reduce_schedule("hierarchical", "x"), AllReduceSchedule::HIERARCHICAL);
}

// The host_networking (and host_networking_topology) texts of published MLPerf system descriptions,
// and what each says: ports a node, line rate, fabric.
TEST(Network, RealDescriptions) {
  struct Case {
    const char* text;
    int ports;
    double gbps;
    Fabric fabric;
    bool rdma;
  };
  const Case cases[] = {
      // NVIDIA DGX A100: storage and management ports beside the compute ones.
      {"Storage: 2x ConnectX-6 IB HDR 200Gb/sec, Management: 1x ConnectX-6 Ethernet 100Gb/Sec, Compute: 8x "
       "ConnectX-6 IB HDR 200Gb/Sec", 8, 200, Fabric::INFINIBAND, true},
      // No "Compute" label: the ports are still counted.
      {"8x ConnectX-7 IB NDR 400Gb/Sec", 8, 400, Fabric::INFINIBAND, true},
      {"2x ConnectX-6 IB HDR 200Gb/Sec", 2, 200, Fabric::INFINIBAND, true},
      // Azure: the management Ethernet first, unlabelled.
      {"1x Ethernet 40Gb/Sec, 8x ConnectX-6 IB HDR 200Gb/Sec", 8, 200, Fabric::INFINIBAND, true},
      // HDR100 is 100 Gb/s, spaced as Clemson wrote it.
      {"Management: 1 x 25 Gb / Sec Ethernet, Compute: 1 x ConnectX - 6 IB HDR100 100 Gb / Sec", 1, 100,
       Fabric::INFINIBAND, true},
      {"Intel X710 2x10GbE SFP+, Mellanox ConnectX-6 HDR100/100GbE QSFP56", 1, 100, Fabric::INFINIBAND, true},
      {"1x ConnectX-5 IB EDR 100Gb/Sec", 1, 100, Fabric::INFINIBAND, true},
      {"2x Cornelis Networks Omni-Path HFI Adapter 100 Series 100Gb/Sec", 2, 100, Fabric::OMNI_PATH, true},
      // HPE: the count after a label with spaces, a "+" before the management port.
      {"Compute: 4 x Mellanox Technologies MT28908 Family [ConnectX-6] HDR 200 Gb/Sec +  Management: 1 x Mellanox "
       "Technologies MT28908 Family [ConnectX-6] 100 GB/s Ethernet", 4, 200, Fabric::INFINIBAND, true},
      // HPE's topology field, where host_networking only says "Infiniband, Ethernet".
      {"8x 200Gbe Infiniband, 2x 10GbE Ethernet", 8, 200, Fabric::INFINIBAND, true},
      {"8x HPE Slingshot SA210S Ethernet 200Gb 1-port PCIe NIC, 8x HPE InfiniBand NDR/Ethernet 400Gb 1-port OSFP "
       "PCIe5 x16 MCX75310AAS-NEAT Adapter, 1x HPE InfiniBand HDR/Ethernet 200Gb 2-port QSFP56 PCIe4 x16", 8, 400,
       Fabric::INFINIBAND, true},
      {"Compute: 8x NVIDIA Quantum-2 400Gb/s InfiniBand, Management: 2x100Gb/s Ethernet NIC", 8, 400,
       Fabric::INFINIBAND, true},
      // Habana: the count and the rate split by a comma.
      {"2x Mellanox ConnectX-6, 100Gb/s Ethernet", 2, 100, Fabric::ETHERNET, true},
      {"Storage: 2x BF3 ConnectX-7 400Gb/s, Compute: 8x BF3 ConnectX-7 400Gb/s, Management: 100Gb/s Ethernet NIC", 8,
       400, Fabric::ETHERNET, true},
      {"ConnectX-6 25Gb/s Ethernet", 1, 25, Fabric::ETHERNET, true},
      {"Management: iDRAC9, ExpressX5 Compute: Mellanox ConnectX-5 Dual Port 40/ 100GbE QSFP Adapter PCIe", 1, 100,
       Fabric::ETHERNET, true},
      // Intel's CPU-only results name an E810 controller (a 100 GbE family) and no rate.
      {"Intel(R) Ethernet Network Adapter E810-2CQDA2", 1, 100, Fabric::ETHERNET, false},
      {"Intel(R) Corporation Ethernet Controller E810-C for QSFP", 1, 100, Fabric::ETHERNET, false},
  };
  for (const auto& c : cases) {
    const auto n = parse_network(c.text);
    ASSERT_TRUE(n.has_value()) << c.text;
    EXPECT_EQ(n->ports, c.ports) << c.text;
    EXPECT_DOUBLE_EQ(n->gbps, c.gbps) << c.text;
    EXPECT_EQ(n->fabric, c.fabric) << c.text;
    EXPECT_EQ(n->rdma, c.rdma) << c.text;
  }
  for (const char* none : {"", "N/A", "TODO", "Infiniband, Ethernet", "Ethernet, Infiniband", "MT2910 Family [ConnectX-7]",
                           "Management: 1x Ethernet 10GB/Sec"})
    EXPECT_FALSE(parse_network(none).has_value()) << none;
  // The link of a port: the line rate in bytes, NCCL's network latency over RDMA.
  const Link l = network_link(*parse_network("8x InfiniBand NDR 400Gb/s"));
  EXPECT_DOUBLE_EQ(l.bandwidth_Bps, 50e9);
  EXPECT_DOUBLE_EQ(l.latency_s, 9.6e-6);
  EXPECT_GT(network_link(*parse_network("10GbE")).latency_s, l.latency_s);
  EXPECT_EQ(network_name(*parse_network("8x ConnectX-6 IB HDR 200Gb/Sec")), "8x 200 Gb/s InfiniBand");
}

namespace {

std::string source_file(const std::string& rel) { return std::string(BERTPERF_SOURCE_DIR) + "/" + rel; }

const DeviceTable& devices() {
  static const DeviceTable table = DeviceTable::load(source_file("benchmarks/bert/mlperf/reference/devices.json"));
  return table;
}

}  // namespace

TEST(Devices, PublishedAcceleratorNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA A100-SXM4-80GB (400W)", "a100-sxm-80gb"}, {"NVIDIA A100-SXM-80GB CTS", "a100-sxm-80gb"},
      {"NVIDIA A100-SXM-40GB", "a100-sxm-40gb"},         {"NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"},
      {"NVIDIA A100-PCIe-80GB", "a100-pcie-80gb"},       {"NVIDIA A100 - PCIe - 80 GB", "a100-pcie-80gb"},
      {"NVIDIA A100-PCIE-40GB (250W)", "a100-pcie-40gb"}, {"NVIDIA H100-SXM5-80GB", "h100-sxm"},
      {"NVIDIA H100 80GB HBM3", "h100-sxm"},             {"NVIDIA H100-PCIe-80GB", "h100-pcie"},
      {"NVIDIA H200-SXM5-141GB", "h200"},                {"NVIDIA Blackwell GPU (GB200)", "gb200"},
      {"NVIDIA Blackwell GPU (B200-SXM-180GB)", "b200"}, {"NVIDIA L40S", "l40s"},
      {"NVIDIA L40", "l40"},                             {"NVIDIA L4", "l4"},
      {"NVIDIA A30", "a30"},                             {"Habana Gaudi2", "gaudi2"},
      {"Intel Gaudi2", "gaudi2"},                        {"Habana Gaudi", "gaudi"},
      {"TPU-v4", "tpu-v4"},                              {"Graphcore Bow IPU", "ipu-bow"},
  };
  for (const auto& [name, cls] : cases) {
    const DeviceClass* d = devices().match(name);
    ASSERT_NE(d, nullptr) << name;
    EXPECT_EQ(d->name, cls) << name;
  }
  EXPECT_EQ(devices().match("N/A"), nullptr);
  EXPECT_EQ(devices().match("Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz"), nullptr);  // a CPU is no accelerator
  EXPECT_EQ(devices().by_name("h100-pcie").intra_link, "pcie5");
  // A stated power over the class's board power, its cube root; none stated, or none recorded: 1.
  EXPECT_EQ(stated_power_w("NVIDIA A100-SXM4-80GB (500W)"), 500);
  EXPECT_EQ(stated_power_w("NVIDIA A100-PCIE-40GB (250 W)"), 250);
  EXPECT_FALSE(stated_power_w("NVIDIA A100-SXM-80GB CTS").has_value());
  EXPECT_FALSE(stated_power_w("NVIDIA Blackwell GPU (B200-SXM-180GB)").has_value());
  EXPECT_FALSE(stated_power_w("NVIDIA GeForce RTX 4090W2").has_value());
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  EXPECT_EQ(a100.power_w, 400);
  EXPECT_DOUBLE_EQ(a100.power_scale("NVIDIA A100-SXM4-80GB (500W)"), std::cbrt(500.0 / 400.0));
  EXPECT_DOUBLE_EQ(a100.power_scale("NVIDIA A100-SXM4-80GB (400W)"), 1.0);
  EXPECT_DOUBLE_EQ(a100.power_scale("NVIDIA A100-SXM4-80GB"), 1.0);
  EXPECT_DOUBLE_EQ(devices().by_name("l40s").power_scale("NVIDIA L40S (350W)"), 1.0);  // no board power recorded
  EXPECT_EQ(devices().by_name("a100-sxm-80gb").network_guess.gbps, 200);
  EXPECT_THROW(devices().by_name("a100"), InputError);
}

TEST(Devices, BadTablesAreOneLine) {
  bertperf::testing::TempDir dir("bertperf_devices");
  const std::string entry =
      R"({"name": "x", "match": [["X1"]], "peak_flops": 1, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"notes": [], "devices": []})", "non-empty"},
      {R"({"notes": [], "devices": [)" + entry + "," + entry + "]}", "twice"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["x1"]], "peak_flops": 1, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"}]})", "upper-case"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "intra_link": "pigeon", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"}]})", "pigeon"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "intra_link": "pcie4", "network_guess": "fast", "source": "s"}]})", "network_guess"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s", "colour": 1}]})", "colour"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "power_w": 0, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"}]})", "power_w"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "fp8_peak_flops": -2, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"}]})", "fp8_peak_flops"},
      {R"({"notes": [], "devices": [{"name": "x", "match": [["X1"]], "peak_flops": 1, "memory_bytes_per_s": 0, "intra_link": "pcie4", "network_guess": "InfiniBand HDR 200Gb/s", "source": "s"}]})", "memory_bytes_per_s"},
      {R"({"notes": [], "devices": [{"name": "c", "match": [["X1"]], "peak_flops": 1, "cpu": {"isa": "amx-bf16", "flops_per_cycle_per_core": 1024, "sockets": 2, "cores_per_socket": 56, "clock_ghz": 2.0, "core_samples_per_s": null, "core_rate_source": "s"}, "intra_link": "shm", "network_guess": "Ethernet 100Gb/s", "source": "s"}]})", "peak"},
      {R"({"notes": [], "devices": [{"name": "c", "match": [["X1"]], "cpu": {"isa": "amx-bf16", "flops_per_cycle_per_core": 0, "sockets": 2, "cores_per_socket": 56, "clock_ghz": 2.0, "core_samples_per_s": null, "core_rate_source": "s"}, "intra_link": "shm", "network_guess": "Ethernet 100Gb/s", "source": "s"}]})", "flops_per_cycle_per_core"},
      {R"({"notes": [], "devices": [{"name": "c", "match": [["X1"]], "cpu": {"isa": "amx-bf16", "flops_per_cycle_per_core": 64, "sockets": 2, "cores_per_socket": 56, "clock_ghz": 2.0, "core_samples_per_s": "quick", "core_rate_source": "s"}, "intra_link": "shm", "network_guess": "Ethernet 100Gb/s", "source": "s"}]})", "core_samples_per_s"},
  };
  for (const auto& [text, needle] : cases) {
    std::ofstream(dir / "devices.json") << text;
    try {
      DeviceTable::load(dir / "devices.json");
      FAIL() << "no error for " << text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// The host processors of published and planned CPU-only systems, and the classes they fall in.
TEST(Devices, CpuClassesAndTheirNodes) {
  const std::pair<const char*, const char*> cases[] = {
      {"Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz", "xeon-amx"},  // Intel's v3.0 results
      {"Intel(R) Xeon(R) code named Sapphire Rapids", "xeon-amx"},  // Intel's v2.1 preview results
      {"Intel(R) Xeon(R) Platinum 8592+", "xeon-amx"},              // Emerald Rapids
      {"Intel(R) Xeon(R) Gold 6448Y", "xeon-amx"},
      {"AMD EPYC 9654 96-Core Processor", "epyc-zen4"},
      {"AMD EPYC 9R14 96-Core Processor", "epyc-zen4"},
  };
  for (const auto& [name, cls] : cases) {
    const DeviceClass* d = devices().match_cpu(name);
    ASSERT_NE(d, nullptr) << name;
    EXPECT_EQ(d->name, cls) << name;
  }
  // No AMX or AVX512-BF16 class: Zen 2 and Zen 5 EPYC, Ice Lake Xeon, and any accelerator.
  for (const char* none : {"AMD EPYC 7742 64-Core Processor", "AMD EPYC 9655 96-Core Processor",
                           "Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "NVIDIA A100-SXM4-80GB", "AMD EPYC (virtual machine)"})
    EXPECT_EQ(devices().match_cpu(none), nullptr) << none;
  const DeviceClass& amx = devices().by_name("xeon-amx");
  ASSERT_TRUE(amx.cpu.has_value());
  // 2 sockets x 56 cores x 2.0 GHz x 1,024 bf16 FLOP a cycle (AMX).
  EXPECT_DOUBLE_EQ(amx.peak_flops, 2 * 56 * 2.0e9 * 1024);
  EXPECT_DOUBLE_EQ(amx.scale_of(CpuNode{2, 28, 2.0}), 0.5);
  EXPECT_DOUBLE_EQ(amx.scale_of(CpuNode{2, 56, 3.0}), 1.5);
  EXPECT_DOUBLE_EQ(devices().by_name("epyc-zen4").cpu->flops_per_cycle_per_core, 64);
  EXPECT_DOUBLE_EQ(devices().by_name("a100-sxm-80gb").scale_of(CpuNode{1, 1, 1.0}), 1.0);

  // What descriptions write: counts, a clock with its unit (the base one where labelled), or nothing.
  const CpuNode ref = amx.cpu->reference;
  struct Case {
    const char *model, *sockets, *cores, *frequency;
    int want_sockets, want_cores;
    double want_ghz;
    bool assumed;
  };
  const Case nodes[] = {
      {"Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz", "2", "56", "2.00GHz", 2, 56, 2.0, false},
      {"Intel(R) Xeon(R) code named Sapphire Rapids", "2", "", "", 2, 56, 2.0, true},
      {"Intel(R) Xeon(R) Platinum 8468 @ 2.10GHz", "2", "48", "", 2, 48, 2.1, false},  // the clock of the name
      {"AMD EPYC 9654", " 2 ", "96", "2400.000 MHz (base); 1000.0000 MHz (min); 3700.0000 MHz (boost)", 2, 96, 2.4, false},
      {"AMD EPYC 9654", "2", "96", "1000.0000 MHz (min); 3700.0000 MHz (boost)", 2, 96, 1.0, false},
      {"AMD EPYC 9654", "1", "2", "2.45 GHz", 1, 2, 2.45, false},
      {"", "", "", "", 2, 56, 2.0, true},
  };
  for (const auto& c : nodes) {
    bool assumed = !c.assumed;
    const CpuNode n = parse_cpu_node(c.model, c.sockets, c.cores, c.frequency, ref, "desc.json", &assumed);
    EXPECT_EQ(n.sockets, c.want_sockets) << c.model;
    EXPECT_EQ(n.cores_per_socket, c.want_cores) << c.model;
    EXPECT_DOUBLE_EQ(n.clock_ghz, c.want_ghz) << c.model << " " << c.frequency;
    EXPECT_EQ(assumed, c.assumed) << c.model;
  }
  for (auto [sockets, cores, freq, needle] : std::vector<std::tuple<const char*, const char*, const char*, const char*>>{
           {"two", "56", "", "host_processors_per_node"}, {"2", "0", "", "host_processor_core_count"},
           {"2", "56", "fast", "host_processor_frequency"}}) {
    try {
      parse_cpu_node("Xeon", sockets, cores, freq, ref, "desc.json");
      FAIL() << "no error for " << sockets << " " << cores << " " << freq;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("desc.json"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(StepModel, BertFlopsPerSampleMatchTheWorkedCount) {
  // BERT-large at 512 tokens, 76 masked: 0.928 (encoder matrices) + 0.077 (attention) + 0.0147 (head) TFLOP.
  const BertShape large;
  EXPECT_NEAR(bert_train_flops_per_sample(large, 512, 76) / 1e12, 0.928 + 0.0773 + 0.0147, 0.002);
  EXPECT_NEAR(bert_train_flops_per_sample(large, 512, 0) - bert_train_flops_per_sample(large, 256, 0),
              6 * 24 * 12.0 * 1024 * 1024 * 256 + 12 * 24 * 1024.0 * (512.0 * 512 - 256.0 * 256), 1e3);
}

TEST(StepModel, StepAndRunByHand) {
  StepInputs in;
  in.device_samples_per_s = 100;
  in.local_batch = 50;
  in.fixed_step_s = 0.01;
  in.gradient_bytes = 1e6;
  in.topology = Topology{2, 1, 1, Link{}, Link{1e-3, 1e9}};
  const StepPrediction s = predict_step(in);
  EXPECT_EQ(s.devices, 2);
  EXPECT_DOUBLE_EQ(s.compute_s, 0.51);
  EXPECT_DOUBLE_EQ(s.comm_s, 2 * (1e-3 + 0.5e6 / 1e9));
  EXPECT_DOUBLE_EQ(s.step_s, 0.51 + 0.003);
  EXPECT_DOUBLE_EQ(s.samples_per_s, 100 / 0.513);
  in.overlap_fraction = 1;  // the backward (2/3 of 0.51 s) hides all 3 ms
  EXPECT_DOUBLE_EQ(predict_step(in).step_s, 0.51);

  RunInputs run;
  run.global_batch = 100;
  run.samples_to_converge = 10000;
  run.eval_interval_samples = 2500;
  run.eval_samples = 600;
  run.eval_device_samples_per_s = 150;
  run.startup_s = 2;
  const RunPrediction r = predict_run(s, run);
  EXPECT_DOUBLE_EQ(r.steps, 100);
  EXPECT_DOUBLE_EQ(r.evals, 4);
  EXPECT_DOUBLE_EQ(r.train_s, 100 * 0.513);
  EXPECT_DOUBLE_EQ(r.eval_s, 4 * 600 / (2 * 150.0));
  EXPECT_DOUBLE_EQ(r.time_to_train_s, 2 + 51.3 + 8);
}

TEST(StepModel, RcpTablesGiveTheCheckersMeans) {
  const auto tables = load_rcp_tables(source_file("benchmarks/bert/mlperf/reference/rcp.json"));
  const auto& v21 = rcp_table_for(tables, "2.1.0").points;
  // Baidu's v2.1 package checker log: "RCP Mean 2656421" for BS 3072, interpolated between 448 and 4608.
  EXPECT_NEAR(rcp_mean_samples(v21, 3072), 2656421, 1.0);
  EXPECT_EQ(&rcp_table_for(tables, "5.0.0"), &rcp_table_for(tables, "2.1.0"));
  bool clamped = true;
  EXPECT_NEAR(rcp_mean_samples(v21, 448, &clamped), 2414421.3, 0.1);
  EXPECT_FALSE(clamped);
  EXPECT_EQ(rcp_mean_samples(v21, 100000, &clamped), v21.back().mean_samples);
  EXPECT_TRUE(clamped);
  // Rulesets 1.1.0 and 2.0.0 prune the older batch-448 reference away: 448 interpolates from 256 and 3072.
  const auto& v20 = rcp_table_for(tables, "2.0.0").points;
  EXPECT_EQ(v20.front().global_batch, 256);
  EXPECT_GT(rcp_mean_samples(v20, 448), rcp_mean_samples(v21, 448));
  EXPECT_EQ(ruleset_of_round("v2.1"), "2.1.0");
  EXPECT_THROW(rcp_table_for(tables, "0.7.0"), InputError);
  EXPECT_THROW(ruleset_of_round("2.1"), InputError);
  EXPECT_DOUBLE_EQ(expected_samples_to_converge(2656421, 175000), 2656421 + 87500);
}

namespace {

int64_t cadence(int64_t gbs) { return gbs >= 3000 ? 175000 : 150000; }

// The parameters a class's synthetic results are made from.
DeviceFit fit_of(double rate, double fixed_step_s, double startup_steps, double eval_rate) {
  DeviceFit f;
  f.rate = rate, f.fixed_step_s = fixed_step_s, f.startup_steps = startup_steps, f.eval_rate = eval_rate;
  return f;
}

// A published system generated by the model itself from known parameters, its start-up and eval time
// "measured" as the model has them; its own family (submitter = id).
// `samples` 0: 2.5 M + 1,000 a node. A CPU class's system has `cpu` as its node; `network` default: one
// 200 Gb/s InfiniBand port a device.
PublishedSystem synthetic(const std::string& id, const std::string& round, const DeviceClass& device, int nodes,
                          int per_node, int64_t gbs, const DeviceFit& truth, double factor, const ModelConstants& c,
                          double samples = 0, std::optional<CpuNode> cpu = std::nullopt,
                          std::optional<Network> network = std::nullopt) {
  PublishedSystem s;
  s.id = id, s.round = round, s.device = &device, s.accelerator = device.name;
  s.submitter = id, s.family = id + " " + device.name;  // each its own family unless a test says otherwise
  s.nodes = nodes, s.per_node = per_node, s.global_batch = gbs, s.runs = 10, s.converged = 10;
  s.network = network.value_or(Network{per_node, 200, Fabric::INFINIBAND, true});
  if (cpu) s.cpu = cpu, s.device_scale = device.scale_of(*cpu);
  if (samples == 0) samples = 2.5e6 + 1e3 * nodes;
  const SystemShape shape = shape_of(s, double(c.eval_interval(gbs)));
  const Prediction p = predict(truth, factor, shape, samples, c);
  s.mean_samples = samples;
  s.olympic_minutes = p.minutes();
  s.evals = p.run.evals;
  s.eval_s = p.run.eval_s / p.run.evals;
  s.startup_s = p.run.startup_s;
  s.interval_samples_per_s = double(gbs) / p.step.step_s;  // so that start-up / (G / rate) is the steps
  return s;
}

ModelConstants constants() {
  ModelConstants c;
  c.gradient_bytes = 6.7e8;
  c.eval_interval = cadence;
  return c;
}

const std::vector<RcpTable>& rcp() {
  static const auto tables = load_rcp_tables(source_file("benchmarks/bert/mlperf/reference/rcp.json"));
  return tables;
}

// The RCP samples of a synthetic v2.1 system at `gbs`.
double rcp_at(int64_t gbs) { return rcp_samples(rcp(), "v2.1", gbs, double(cadence(gbs))); }

}  // namespace

TEST(Fit, RecoversTheParametersThatMadeTheResults) {
  // One class at several batches and node counts, in two rounds, the older 20% slower in compute.
  const ModelConstants c = constants();
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  const DeviceFit truth = fit_of(300, 0.015, 12, 900);
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (const char* round : {"v2.0", "v2.1"})
    for (auto [n, gbs] : std::vector<std::pair<int, int64_t>>{{1, 448}, {1, 256}, {2, 448}, {8, 3072}, {128, 4096}})
      systems.push_back(synthetic(cat("a", i++), round, a100, n, 8, gbs, truth, std::string(round) == "v2.0" ? 1.2 : 1.0, c));
  const ScalingModel m = fit_model(fit_set(systems), c, rcp());
  const DeviceFit& fit = m.devices.at("a100-sxm-80gb");
  EXPECT_EQ(m.newest_round, "v2.1");
  EXPECT_DOUBLE_EQ(m.factor_of("v2.1"), 1.0);
  EXPECT_NEAR(m.factor_of("v2.0"), 1.2, 1e-3);
  EXPECT_DOUBLE_EQ(m.factor_of("v9.9"), 1.0);  // a round not seen: the newest's
  EXPECT_NEAR(fit.rate, 300, 300 * 1e-3);
  EXPECT_NEAR(fit.fixed_step_s, 0.015, 0.015 * 1e-2);  // 4 alternating passes: not fully converged
  EXPECT_NEAR(fit.startup_steps, 12, 1e-9);
  EXPECT_NEAR(fit.eval_rate, 900, 1e-6);
  EXPECT_TRUE(fit.eval_from_logs);
  EXPECT_EQ(fit.systems, 10);
  EXPECT_EQ(fit.newest_round, "v2.1");
  EXPECT_EQ(m.network_efficiency, 1.0);  // made at line rate: the walk down the grid stops at its top
  EXPECT_EQ(fit.network_efficiency, 1.0);
  // Every system predicted back.
  for (const auto& s : systems) {
    const Prediction p = predict(fit, m.factor_of(s.round), shape_of(s, double(cadence(s.global_batch))),
                                 *s.mean_samples, c);
    EXPECT_NEAR(p.minutes() / *s.olympic_minutes, 1, 1e-3) << s.id;
  }
}

TEST(Fit, AClassAtOneBatchTakesTheOthersFixedStepCost) {
  // A class published at one batch only cannot tell its fixed cost from its rate: it is pulled to the
  // fixed cost in samples (a x rate) of the classes that ran at several (here one: 0.015 s x 300/s = 4.5
  // samples), so a class 3.3x faster gets a 3.3x smaller fixed cost.
  const ModelConstants c = constants();
  const DeviceFit ta = fit_of(300, 0.015, 12, 900), th = fit_of(1000, 0.0045, 18, 1000);
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [n, gbs] : std::vector<std::pair<int, int64_t>>{{1, 448}, {1, 256}, {8, 3072}, {128, 4096}})
    systems.push_back(synthetic(cat("a", i++), "v2.1", devices().by_name("a100-sxm-80gb"), n, 8, gbs, ta, 1.0, c));
  for (int n : {1, 2})
    systems.push_back(synthetic(cat("h", i++), "v2.1", devices().by_name("h100-sxm"), n, 8, 768 * n, th, 1.0, c));
  const ScalingModel m = fit_model(fit_set(systems), c, rcp());
  EXPECT_NEAR(m.fixed_step_prior, 4.5, 1e-6);
  EXPECT_NEAR(m.devices.at("h100-sxm").fixed_step_s, 0.0045, 1e-8);
  EXPECT_NEAR(m.devices.at("h100-sxm").rate, 1000, 1e-4);
}

TEST(Fit, RecoversAPlantedNetworkEfficiency) {
  // Results made with every network port at 59% of its line rate, two classes over 1 to 64 nodes on
  // 8 x 100 Gb/s: the fit's walk down the grid (1, 0.84, 0.71, 0.59, 0.5, ...) stops at 0.59, and the
  // classes come back as they were made.
  ModelConstants c = constants();
  DeviceFit ta = fit_of(300, 0.015, 12, 900), th = fit_of(1000, 0.0045, 18, 1000);
  ta.network_efficiency = th.network_efficiency = 0.59;
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [n, gbs] : std::vector<std::pair<int, int64_t>>{{1, 448}, {2, 256}, {4, 1024}, {16, 3072}, {64, 4096}})
    for (const auto& [cls, truth] : {std::pair{"a100-sxm-80gb", ta}, std::pair{"h100-sxm", th}})
      systems.push_back(synthetic(cat("s", i++), "v2.1", devices().by_name(cls), n, 8, gbs, truth, 1.0, c, 0,
                                  std::nullopt, Network{8, 100, Fabric::INFINIBAND, true}));
  const ScalingModel m = fit_model(fit_set(systems), c, rcp());
  EXPECT_DOUBLE_EQ(m.network_efficiency, 0.59);
  EXPECT_NEAR(m.devices.at("a100-sxm-80gb").rate, 300, 300 * 1e-3);
  EXPECT_NEAR(m.devices.at("h100-sxm").rate, 1000, 1000 * 1e-3);
  EXPECT_DOUBLE_EQ(m.devices.at("h100-sxm").network_efficiency, 0.59);
  // Switched off, the network runs at line rate and the classes absorb the slower all-reduce.
  switch_off(c, "network-efficiency");
  EXPECT_DOUBLE_EQ(fit_model(fit_set(systems), c, rcp()).network_efficiency, 1.0);
}

TEST(Validation, NeverUsesTheResultItPredictsNorACopyOfItsRuns) {
  const ModelConstants c = constants();
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  const DeviceFit truth = fit_of(300, 0.015, 12, 900);
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [n, gbs] : std::vector<std::pair<int, int64_t>>{{1, 448}, {1, 256}, {2, 448}, {4, 1536}, {8, 3072}, {16, 3072}})
    systems.push_back(synthetic(cat("a", i++), "v2.1", a100, n, 8, gbs, truth, 1.0, c));
  systems[1].olympic_minutes = *systems[1].olympic_minutes * 1.3;  // a slower result among them
  const Validation before = validate(systems, rcp(), c);
  ASSERT_EQ(before.rows.size(), systems.size());
  // The prediction of a result is the model fitted to the others, and does not move with its own time.
  for (const auto& row : before.rows) {
    const ScalingModel m = fit_model(fit_set(systems, {row.system->id}), c, rcp());
    EXPECT_DOUBLE_EQ(row.sample_ratio, m.sample_ratio("a100-sxm-80gb", row.system->global_batch));
    EXPECT_DOUBLE_EQ(row.expected_samples, row.rcp_samples * row.sample_ratio);
    const Prediction p = predict(m.devices.at("a100-sxm-80gb"), 1.0, row.shape, row.expected_samples, c);
    EXPECT_DOUBLE_EQ(p.minutes(), row.at_rcp.minutes()) << row.system->id;
  }
  std::vector<PublishedSystem> changed = systems;
  changed[3].olympic_minutes = *changed[3].olympic_minutes * 2;
  // A later round's copy of result 3, with other times: never fitted to, never predicted.
  PublishedSystem copy = changed[3];
  copy.id = "copy of a3", copy.round = "v3.0", copy.same_runs_as = changed[3].id;
  copy.olympic_minutes = *copy.olympic_minutes * 5;
  changed.push_back(copy);
  const Validation after = validate(changed, rcp(), c);
  ASSERT_EQ(after.rows.size(), systems.size());
  EXPECT_DOUBLE_EQ(after.rows[3].at_rcp.minutes(), before.rows[3].at_rcp.minutes());
  EXPECT_NE(after.rows[0].at_rcp.minutes(), before.rows[0].at_rcp.minutes());  // the others see result 3
  ASSERT_EQ(after.skipped.size(), 1u);
  EXPECT_EQ(after.skipped[0].first->id, "copy of a3");
  // Bands: medians and maxima of the rows' absolute errors.
  std::vector<double> one;
  for (const auto& row : after.rows)
    if (row.system->nodes == 1) one.push_back(std::fabs(row.error_rcp));
  ASSERT_EQ(after.bands.front().name, "1");
  EXPECT_EQ(after.bands.front().results, 2);
  EXPECT_DOUBLE_EQ(after.bands.front().median_abs_error, 0.5 * (one[0] + one[1]));
  EXPECT_DOUBLE_EQ(after.bands.front().max_abs_error, std::max(one[0], one[1]));
  // The 90th percentile, linear between the two: 0.9 of the way from the smaller to the larger.
  EXPECT_DOUBLE_EQ(after.bands.front().p90_abs_error, std::min(one[0], one[1]) + 0.9 * std::fabs(one[0] - one[1]));
  EXPECT_EQ(node_band(16), "2-16");
  EXPECT_EQ(node_band(17), "32+");
}

TEST(Fit, RecoversPlantedSampleRatiosByBatchAndClass) {
  // Results that needed 1.2x the RCP samples at GBS 448 and 0.9x at 3072, the H100 ones 1.1x more than
  // the A100 ones at every batch, and two A100 results at 1536 (too few for a batch effect of their own).
  const ModelConstants c = constants();
  const DeviceFit ta = fit_of(300, 0.015, 12, 900), th = fit_of(1000, 0.015, 18, 1000);
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (const auto& [cls, truth, extra] : {std::tuple{"a100-sxm-80gb", ta, 1.0}, std::tuple{"h100-sxm", th, 1.1}})
    for (auto [n, gbs, ratio] : std::vector<std::tuple<int, int64_t, double>>{
             {1, 448, 1.2}, {2, 448, 1.2}, {4, 448, 1.2}, {8, 3072, 0.9}, {16, 3072, 0.9}, {32, 3072, 0.9}})
      systems.push_back(synthetic(cat("s", i++), "v2.1", devices().by_name(cls), n, 8, gbs, truth, 1.0, c,
                                  rcp_at(gbs) * ratio * extra));
  for (int n : {2, 4})
    systems.push_back(synthetic(cat("s", i++), "v2.1", devices().by_name("a100-sxm-80gb"), n, 8, 1536, ta, 1.0, c,
                                rcp_at(1536)));
  const ScalingModel m = fit_model(fit_set(systems), c, rcp());
  // The batch effect is the batch's median, shared by both classes (here half-way between them); the class
  // effects carry the 1.1 between them, at every batch.
  EXPECT_NEAR(m.sample_ratio("a100-sxm-80gb", 448), 1.2, 1e-9);
  EXPECT_NEAR(m.sample_ratio("h100-sxm", 448), 1.2 * 1.1, 1e-9);
  EXPECT_NEAR(m.sample_ratio("a100-sxm-80gb", 3072), 0.9, 1e-9);
  EXPECT_NEAR(m.sample_ratio("h100-sxm", 3072), 0.9 * 1.1, 1e-9);
  EXPECT_EQ(m.batch_log_ratio.count(1536), 0u);  // 2 systems: no effect
  EXPECT_NEAR(m.sample_ratio("h100-sxm", 1536) / m.sample_ratio("a100-sxm-80gb", 1536), 1.1, 1e-9);
  EXPECT_NEAR(m.sample_ratio("l40s", 12345), 1.0, 0);  // neither a batch nor a class of the fit
  // Switched off: no ratio at all, and the speed terms unchanged (they are fitted at the logged samples).
  ModelConstants off = c;
  switch_off(off, "samples");
  const ScalingModel plain = fit_model(fit_set(systems), off, rcp());
  EXPECT_DOUBLE_EQ(plain.sample_ratio("h100-sxm", 448), 1.0);
  EXPECT_DOUBLE_EQ(plain.devices.at("h100-sxm").rate, m.devices.at("h100-sxm").rate);
}

TEST(Validation, AResultsOwnSamplesNeverMoveItsPrediction) {
  // Four results at each of two batches, each needing its own multiple of the RCP samples: a result's ratio
  // is the median of the other three at its batch (one class: its effect is the median of what the batch
  // effects leave over the others), and its own samples move only its prediction at the logged samples.
  const ModelConstants c = constants();
  const DeviceFit truth = fit_of(300, 0.015, 12, 900);
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [n, gbs, ratio] : std::vector<std::tuple<int, int64_t, double>>{
           {1, 448, 1.05}, {2, 448, 1.2}, {4, 448, 1.1}, {8, 448, 1.15},
           {8, 3072, 0.9}, {16, 3072, 1.0}, {32, 3072, 0.95}, {64, 3072, 1.05}})
    systems.push_back(synthetic(cat("s", i++), "v2.1", a100, n, 8, gbs, truth, 1.0, c, rcp_at(gbs) * ratio));
  const Validation before = validate(systems, rcp(), c);
  ASSERT_EQ(before.rows.size(), systems.size());
  auto log_ratio = [](const PublishedSystem& s) { return std::log(*s.mean_samples / rcp_at(s.global_batch)); };
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  for (const auto& row : before.rows) {
    std::map<int64_t, std::vector<double>> by_batch;
    for (const auto& o : systems)
      if (o.id != row.system->id) by_batch[o.global_batch].push_back(log_ratio(o));
    std::vector<double> left;
    for (const auto& o : systems)
      if (o.id != row.system->id) left.push_back(log_ratio(o) - median_of(by_batch[o.global_batch]));
    EXPECT_NEAR(row.sample_ratio, std::exp(median_of(by_batch[row.system->global_batch]) + median_of(left)), 1e-12)
        << row.system->id;
  }
  EXPECT_NEAR(before.rows[0].sample_ratio, 1.15, 0.01);  // the others at 448: 1.1, 1.15, 1.2
  std::vector<PublishedSystem> changed = systems;
  changed[0].mean_samples = *changed[0].mean_samples * 1.5;
  const Validation after = validate(changed, rcp(), c);
  EXPECT_DOUBLE_EQ(after.rows[0].sample_ratio, before.rows[0].sample_ratio);
  EXPECT_DOUBLE_EQ(after.rows[0].at_rcp.minutes(), before.rows[0].at_rcp.minutes());
  EXPECT_NE(after.rows[0].at_logged.minutes(), before.rows[0].at_logged.minutes());  // its own logged samples
  EXPECT_GT(after.rows[1].sample_ratio, before.rows[1].sample_ratio);  // the others at its batch see it
  // Without the term, every result is predicted at its RCP samples.
  ModelConstants off = c;
  switch_off(off, "samples");
  for (const auto& row : validate(systems, rcp(), off).rows) EXPECT_EQ(row.expected_samples, row.rcp_samples);
  EXPECT_THROW(switch_off(off, "luck"), InputError);
}

namespace {

// Four families of A100 results and one of H100, in rounds v3.1 to v4.1, each family a node count or two:
// f0 (3 results), f1 (3), f2 (2), f3 (2) of one class, h (3) of the other.
std::vector<PublishedSystem> families_of_results(const ModelConstants& c) {
  const DeviceFit ta = fit_of(300, 0.015, 12, 900), th = fit_of(1000, 0.0045, 18, 1000);
  const char* rounds[] = {"v3.1", "v4.0", "v4.1"};
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [family, count] : std::vector<std::pair<int, int>>{{0, 3}, {1, 3}, {2, 2}, {3, 2}})
    for (int k = 0; k < count; ++k) {
      const int n = 1 << (family + k);
      systems.push_back(synthetic(cat("a", i++), rounds[k % 3], devices().by_name("a100-sxm-80gb"), n, 8, 448 * n, ta,
                                  1.0 + 0.03 * family, c));  // each family a little slower than the one before
      systems.back().family = cat("f", family, " a100-sxm-80gb");
    }
  for (int k = 0; k < 3; ++k) {
    systems.push_back(synthetic(cat("h", k), rounds[k], devices().by_name("h100-sxm"), 1 << k, 8, 768 << k, th, 1.0, c));
    systems.back().family = "h h100-sxm";
  }
  return systems;
}

std::vector<const PublishedSystem*> without_family(const std::vector<PublishedSystem>& systems, const std::string& f) {
  std::vector<const PublishedSystem*> out;
  for (const auto* s : fit_set(systems))
    if (s->family != f) out.push_back(s);
  return out;
}

}  // namespace

TEST(Families, OneOrganisationsNamesAreOneSubmitter) {
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  const DeviceClass& h100 = devices().by_name("h100-sxm");
  std::vector<PublishedSystem> systems;
  for (auto [submitter, device] : std::vector<std::pair<const char*, const DeviceClass*>>{
           {"Azure", &a100}, {"Azure-HazyResearch", &a100}, {"HazyResearch", &a100}, {"NVIDIA", &h100},
           {"NVIDIA_CoreWeave", &h100}, {"NVIDIA", &a100}, {"smc-ac-power", &h100}, {"Supermicro", &h100},
           {"SUPERMICRO", &a100}, {"QCT", &h100}, {"Quanta_Cloud_Technology", &h100}, {"Dell", &h100},
           {"GigaComputing", &h100}, {"GIGABYTE", &h100}, {"Lenovo", nullptr}}) {
    PublishedSystem s;
    s.submitter = submitter, s.device = device;
    systems.push_back(s);
  }
  assign_families(systems);
  const char* want[] = {"azure a100-sxm-80gb",      "azure a100-sxm-80gb",      "azure a100-sxm-80gb",
                        "nvidia h100-sxm",          "nvidia h100-sxm",          "nvidia a100-sxm-80gb",
                        "supermicro h100-sxm",      "supermicro h100-sxm",      "supermicro a100-sxm-80gb",
                        "quanta h100-sxm",          "quanta h100-sxm",          "dell h100-sxm",
                        "gigabyte h100-sxm",        "gigabyte h100-sxm",        ""};
  for (size_t i = 0; i < systems.size(); ++i) EXPECT_EQ(systems[i].family, want[i]) << systems[i].submitter;
}

TEST(Validation, LeaveFamilyOutNeverUsesTheFamily) {
  const ModelConstants c = constants();
  std::vector<PublishedSystem> systems = families_of_results(c);
  const Validation before = validate(systems, rcp(), c, Holdout::FAMILY);
  ASSERT_EQ(before.rows.size(), 10u);  // the H100 results have no other family: not predicted
  ASSERT_EQ(before.skipped.size(), 3u);
  EXPECT_EQ(before.skipped[0].second, "no result of device class h100-sxm outside its family (h h100-sxm)");
  for (const auto& row : before.rows) {
    const ScalingModel m = fit_model(without_family(systems, row.system->family), c, rcp());
    const Prediction p = predict(m.devices.at("a100-sxm-80gb"), m.factor_of(row.system->round), row.shape,
                                 row.expected_samples, c);
    EXPECT_DOUBLE_EQ(p.minutes(), row.at_rcp.minutes()) << row.system->id;
  }
  // A family member's time moves nothing of its family's predictions, and every other family's.
  std::vector<PublishedSystem> changed = systems;
  changed[1].olympic_minutes = *changed[1].olympic_minutes * 1.5;  // f0's second
  const Validation after = validate(changed, rcp(), c, Holdout::FAMILY);
  const Validation one = validate(changed, rcp(), c, Holdout::ONE);
  const Validation one_before = validate(systems, rcp(), c, Holdout::ONE);
  for (size_t i = 0; i < after.rows.size(); ++i) {
    const bool same_family = after.rows[i].system->family == "f0 a100-sxm-80gb";
    if (same_family) EXPECT_DOUBLE_EQ(after.rows[i].at_rcp.minutes(), before.rows[i].at_rcp.minutes()) << i;
    else EXPECT_NE(after.rows[i].at_rcp.minutes(), before.rows[i].at_rcp.minutes()) << i;
  }
  EXPECT_NE(one.rows[0].at_rcp.minutes(), one_before.rows[0].at_rcp.minutes());  // leave-one-out sees its twin
  EXPECT_STREQ(holdout_name(Holdout::FAMILY), "leave-family-out");
}

TEST(Validation, ForwardInTimeFitsEarlierRoundsOnly) {
  const ModelConstants c = constants();
  std::vector<PublishedSystem> systems = families_of_results(c);
  const Validation v = validate(systems, rcp(), c, Holdout::EARLIER);
  std::vector<const PublishedSystem*> earlier;
  for (const auto& row : v.rows) {
    EXPECT_NE(row.system->round, "v3.1");
    earlier.clear();
    for (const auto* s : fit_set(systems))
      if (s->round < row.system->round) earlier.push_back(s);
    const ScalingModel m = fit_model(earlier, c, rcp());
    const Prediction p = predict(m.devices.at(row.system->device->name), m.factor_of(row.system->round), row.shape,
                                 row.expected_samples, c);
    EXPECT_DOUBLE_EQ(p.minutes(), row.at_rcp.minutes()) << row.system->id;
  }
  EXPECT_EQ(v.rows.size() + v.skipped.size(), systems.size());
  for (const auto& [s, why] : v.skipped) {
    EXPECT_EQ(s->round, "v3.1");
    EXPECT_EQ(why, cat("no result of device class ", s->device->name, " before v3.1"));
  }
  // A later round's time moves no earlier prediction.
  std::vector<PublishedSystem> changed = systems;
  for (auto& s : changed)
    if (s.round == "v4.1") s.olympic_minutes = *s.olympic_minutes * 2;
  const Validation after = validate(changed, rcp(), c, Holdout::EARLIER);
  for (size_t i = 0; i < v.rows.size(); ++i)
    if (v.rows[i].system->round == "v4.0") {
      EXPECT_DOUBLE_EQ(after.rows[i].at_rcp.minutes(), v.rows[i].at_rcp.minutes());
    }
  // Rounds whose logs time no evals give no model to fit.
  for (auto& s : changed)
    if (s.round == "v3.1") s.eval_s.reset();
  const Validation no_evals = validate(changed, rcp(), c, Holdout::EARLIER);
  const auto it = std::find_if(no_evals.skipped.begin(), no_evals.skipped.end(),
                               [](const auto& e) { return e.first->round == "v4.0"; });
  ASSERT_NE(it, no_evals.skipped.end());
  EXPECT_EQ(it->second, "the rounds before v4.0 log no eval time (eval_start/eval_stop): no model to fit");
}

TEST(Interval, SplitConformalFromTheOtherFamiliesOfTheBandAndClass) {
  // Ten results of one class at one node, two of another, three at 2-16 nodes: residuals log(measured /
  // predicted) of 0.00, 0.01, ..., 0.09 (results 0-9, each its own family but 0 and 1 one family).
  const DeviceClass& a100 = devices().by_name("a100-sxm-80gb");
  const DeviceClass& l40 = devices().by_name("l40");
  std::vector<PublishedSystem> systems(15);
  Validation v;
  for (int i = 0; i < 15; ++i) {
    PublishedSystem& s = systems[i];
    s.id = cat("r", i), s.device = i < 10 || i >= 12 ? &a100 : &l40, s.nodes = i < 12 ? 1 : 4;
    s.family = i == 1 ? "r0" : s.id;
    ValidationRow row;
    row.system = &s;
    row.error_rcp = std::exp(-0.01 * (i < 10 ? i : 20 + i)) - 1;  // predicted / measured - 1
    v.rows.push_back(row);
  }
  // The class at the band: 10 residuals, median 0.045, |r - m| = 0.005 (two), 0.015 (two), ..., 0.045 (two);
  // ceil(0.9 x 11) = 10th smallest: 0.045.
  Interval all10 = prediction_interval(v, "1", "a100-sxm-80gb");
  EXPECT_TRUE(all10.of_class);
  EXPECT_EQ(all10.results, 10);
  EXPECT_NEAR(all10.low, std::exp(0.0), 1e-12);
  EXPECT_NEAR(all10.high, std::exp(0.09), 1e-12);
  // Without family r0 (results 0 and 1): 8 of the class, fewer than 9: the band's 10 (results 2-11).
  const Interval band = prediction_interval(v, "1", "a100-sxm-80gb", "r0");
  EXPECT_FALSE(band.of_class);
  EXPECT_EQ(band.results, 10);
  EXPECT_NE(band.from.find("fewer than 9"), std::string::npos) << band.from;
  // Results 2-9 (0.02-0.09) and the l40's (0.30, 0.31): median 0.065, widest |r - m| 0.245, 10th of 10.
  EXPECT_NEAR(band.low, std::exp(0.065 - 0.245), 1e-12);
  EXPECT_NEAR(band.high, std::exp(0.065 + 0.245), 1e-12);
  // A band with no results: every result.
  EXPECT_EQ(prediction_interval(v, "32+", "a100-sxm-80gb").results, 15);
}

TEST(Interval, CalibrationCountsTheResultsInsideTheirIntervals) {
  const ModelConstants c = constants();
  std::vector<PublishedSystem> systems = families_of_results(c);
  for (size_t i = 0; i < systems.size(); ++i)  // measured times off the model by -6% .. +7%
    systems[i].olympic_minutes = *systems[i].olympic_minutes * (1 + 0.01 * ((int(i) * 7) % 13 - 6));
  for (Holdout h : holdouts()) {
    const Validation v = validate(systems, rcp(), c, h);
    ASSERT_EQ(v.calibration.size(), v.bands.size());
    int counted = 0;
    for (const auto& cal : v.calibration) {
      int results = 0, inside = 0;
      for (const auto& row : v.rows) {
        if (node_band(row.system->nodes) != cal.band) continue;
        const Interval want = prediction_interval(v, cal.band, row.system->device->name, row.system->family);
        EXPECT_DOUBLE_EQ(row.interval.low, want.low);
        EXPECT_DOUBLE_EQ(row.interval.high, want.high);
        const double measured = *row.system->olympic_minutes, predicted = row.at_rcp.minutes();
        EXPECT_EQ(row.inside, measured >= predicted * want.low && measured <= predicted * want.high);
        ++results, inside += row.inside;
      }
      EXPECT_EQ(cal.results, results);
      EXPECT_EQ(cal.inside, inside);
      counted += results;
    }
    EXPECT_EQ(counted, static_cast<int>(v.rows.size())) << holdout_name(h);
  }
}

TEST(Fit, ACpuClassRunsAtItsNodesPeak) {
  // A CPU class's results from nodes of 112 and 56 cores at 2.0 GHz and 112 at 2.5 GHz: one rate for the
  // reference node (2 x 56 cores at 2.0 GHz), each node at its peak's share of it.
  const ModelConstants c = constants();
  const DeviceClass& amx = devices().by_name("xeon-amx");
  const DeviceFit truth = fit_of(70, 0.3, 1.5, 160);
  std::vector<PublishedSystem> systems;
  int i = 0;
  for (auto [n, gbs, node] : std::vector<std::tuple<int, int64_t, CpuNode>>{
           {8, 2048, CpuNode{2, 56, 2.0}}, {16, 3072, CpuNode{2, 56, 2.0}}, {4, 448, CpuNode{2, 28, 2.0}},
           {8, 1536, CpuNode{2, 56, 2.5}}, {16, 4096, CpuNode{1, 56, 2.0}}})
    systems.push_back(synthetic(cat("x", i++), "v3.0", amx, n, 1, gbs, truth, 1.0, c, 0, node));
  // The accelerator class the start-up and eval medians need beside it.
  for (int n : {1, 2, 4})
    systems.push_back(synthetic(cat("a", i++), "v3.0", devices().by_name("a100-sxm-80gb"), n, 8, 448 * n,
                                fit_of(300, 0.015, 12, 900), 1.0, c));
  const ScalingModel m = fit_model(fit_set(systems), c, rcp());
  const DeviceFit& fit = m.devices.at("xeon-amx");
  EXPECT_NEAR(fit.rate, 70, 70 * 1e-3);
  EXPECT_NEAR(fit.fixed_step_s, 0.3, 0.3 * 1e-2);  // free: the class ran at several batches a node
  for (const auto& s : systems) {
    const Prediction p = predict(m.devices.at(s.device->name), m.factor_of(s.round),
                                 shape_of(s, double(cadence(s.global_batch))), *s.mean_samples, c);
    EXPECT_NEAR(p.minutes() / *s.olympic_minutes, 1, 1e-3) << s.id;
    if (s.cpu) {
      EXPECT_DOUBLE_EQ(p.inputs.device_samples_per_s, fit.rate * s.device_scale);
    }
  }
  EXPECT_DOUBLE_EQ(systems[2].device_scale, 0.5);
  EXPECT_DOUBLE_EQ(systems[3].device_scale, 1.25);
}

TEST(Published, TheCommittedDataSetLoads) {
  const auto systems =
      load_published_systems(source_file("benchmarks/bert/mlperf/reference/published_systems.json"), devices());
  EXPECT_GE(systems.size(), 280u);
  int multi_node_described = 0;
  for (const auto& s : systems) {
    if (s.nodes > 1 && s.device && s.network) ++multi_node_described;
    if (s.id == "v2.1 Baidu 8_node_64_A100_PaddlePaddle") {
      ASSERT_NE(s.device, nullptr);
      EXPECT_EQ(s.device->name, "a100-sxm-80gb");
      ASSERT_TRUE(s.network.has_value());
      EXPECT_EQ(s.network->ports, 8);
      EXPECT_EQ(s.network->gbps, 200);
    }
    if (s.per_node == 0) ADD_FAILURE() << s.id << ": a CPU-only row without a CPU class";
    if (s.device) {
      EXPECT_FALSE(s.family.empty()) << s.id;
    }
    const std::map<std::string, std::string> families = {
        {"v2.1 Baidu 8_node_64_A100_PaddlePaddle", "baidu a100-sxm-80gb"},
        {"v3.0 NVIDIA_CoreWeave coreweave_hgxh100_n384_ngc23.04_pytorch", "nvidia h100-sxm"},
        {"v2.1 Azure-HazyResearch ND96amsr_A100_v4_n8_pytorch", "azure a100-sxm-80gb"}};
    if (const auto f = families.find(s.id); f != families.end()) {
      EXPECT_EQ(s.family, f->second);
    }
    // A stated 500 W against the class's 400 W; a stated 400 W.
    if (s.id == "v1.1 Lenovo SR670v2_4xA100-SXM4-80GB-500W") {
      EXPECT_DOUBLE_EQ(s.device_scale, std::cbrt(1.25));
    }
    if (s.id == "v1.1 NVIDIA dgxa100_n8_ngc21.09_pytorch") {
      EXPECT_DOUBLE_EQ(s.device_scale, 1.0);
    }
  }
  EXPECT_GE(multi_node_described, 60);
  // Intel's CPU-only results: one device a node, a node of 2 x 56 cores at 2.0 GHz (v2.1 names neither
  // the cores nor the clock: the class's reference node, assumed), on 100 GbE.
  int cpu_rows = 0;
  for (const auto& s : systems) {
    if (s.accelerator != "N/A") continue;
    ++cpu_rows;
    ASSERT_NE(s.device, nullptr) << s.id;
    EXPECT_EQ(s.device->name, "xeon-amx");
    EXPECT_EQ(s.per_node, 1);
    ASSERT_TRUE(s.cpu.has_value());
    EXPECT_EQ(s.cpu->cores(), 112);
    EXPECT_DOUBLE_EQ(s.cpu->clock_ghz, 2.0);
    EXPECT_DOUBLE_EQ(s.device_scale, 1.0);
    EXPECT_EQ(s.cpu_assumed, s.round == "v2.1") << s.id;
    ASSERT_TRUE(s.network.has_value());
    EXPECT_EQ(s.network->gbps, 100);
    EXPECT_EQ(s.network->fabric, Fabric::ETHERNET);
  }
  EXPECT_EQ(cpu_rows, 6);
}

TEST(Published, BadDataSetsAreOneLine) {
  bertperf::testing::TempDir dir("bertperf_published");
  const auto systems = read_json_file(source_file("benchmarks/bert/mlperf/reference/published_systems.json"));
  auto write = [&](const Json& doc) { std::ofstream(dir / "p.json") << doc.dump(); };
  auto expect = [&](const std::string& needle) {
    try {
      load_published_systems(dir / "p.json", devices());
      FAIL() << "no error, expected " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  };
  Json doc = systems;
  doc["systems"][0]["nodes"] = 0;
  write(doc), expect("nodes");
  doc = systems;
  doc["systems"][1]["olympic_minutes"] = "fast";
  write(doc), expect("olympic_minutes");
  doc = systems;
  doc["systems"][2]["same_runs_as"] = "v9.9 nobody";
  write(doc), expect("v9.9 nobody");
  doc = systems;
  doc["systems"][3]["round"] = "2.1";
  write(doc), expect("vX.Y");
  doc = systems;
  doc["systems"][4]["colour"] = "red";
  write(doc), expect("colour");
}

// The roofline's prices: the data sheets' figures as the table holds them, an op at the larger of its compute and
// memory times plus the launch, and a class without the figures refused in one line.
TEST(Roofline, OpTimeIsTheLongerOfComputeAndMemory) {
  const RooflineDevice h200 = roofline_device(devices().by_name("h200"), "devices.json");
  EXPECT_DOUBLE_EQ(h200.bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(h200.fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(h200.memory_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(roofline_device(devices().by_name("h100-sxm"), "devices.json").memory_bytes_per_s, 3.35e12);
  // A GEMM of 4096 x 1024 x 4096 in bf16: 34.4 GFLOP, 24 MiB; compute-bound.
  const double flops = 2.0 * 4096 * 1024 * 4096, bytes = 2.0 * (4096 * 1024 * 2 + 4096.0 * 4096);
  const OpTime gemm = op_time(flops, bytes, h200.bf16_flops, h200);
  EXPECT_DOUBLE_EQ(gemm.compute_s, flops / 989e12);
  EXPECT_DOUBLE_EQ(gemm.memory_s, bytes / 4.8e12);
  EXPECT_FALSE(gemm.memory_bound());
  EXPECT_DOUBLE_EQ(gemm.time_s, flops / 989e12 + kLaunchSeconds);
  EXPECT_DOUBLE_EQ(op_time(flops, bytes, h200.fp8_flops, h200).time_s, flops / 1979e12 + kLaunchSeconds);
  // A LayerNorm over the same rows: no FLOPs counted, memory-bound.
  const OpTime norm = op_time(0, 4 * 2.0 * 4096 * 1024, h200.bf16_flops, h200);
  EXPECT_TRUE(norm.memory_bound());
  EXPECT_DOUBLE_EQ(norm.time_s, 4 * 2.0 * 4096 * 1024 / 4.8e12 + kLaunchSeconds);
  try {
    roofline_device(devices().by_name("a30"), "devices.json");
    FAIL() << "a30 has no bandwidth in the table";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a30"), std::string::npos) << e.what();
  }
}
