#include "perf/comm_model.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace bertperf::perf {

// Latencies are NCCL's own per-step figures for ring all-reduce with the Simple protocol (the one
// large gradient buffers use): src/graph/tuning.cc, hwLat, 3.4 us NVLink, 5.7 us PCI, 9.6 us network.
// Bandwidths are one direction of one device's links, from the vendors' data sheets; the non-NVIDIA
// figures are estimates (the model fits each device class's speed, so they only shape its scaling).
const std::vector<NamedLink>& link_table() {
  static const std::vector<NamedLink> table = {
      {"nvlink3", {3.4e-6, 300e9},
       "A100 SXM: 12 NVLink 3 links, 600 GB/s both directions (NVIDIA A100 data sheet); NCCL hwLat NVLink"},
      {"nvlink4", {3.4e-6, 450e9},
       "H100/H200 SXM: 18 NVLink 4 links, 900 GB/s both directions (NVIDIA H100 data sheet); NCCL hwLat NVLink"},
      {"nvlink5", {3.4e-6, 900e9},
       "B200/GB200: 18 NVLink 5 links, 1.8 TB/s both directions (NVIDIA DGX B200 data sheet); NCCL hwLat NVLink"},
      {"pcie4", {5.7e-6, 31.5e9}, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b (PCI-SIG); NCCL hwLat PCI"},
      {"pcie5", {5.7e-6, 63e9}, "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b (PCI-SIG); NCCL hwLat PCI"},
      {"gaudi-roce", {9.6e-6, 87.5e9}, "Habana Gaudi: 7 on-chip 100 GbE RoCE ports to the other devices; network latency as RDMA"},
      {"gaudi2-roce", {9.6e-6, 262.5e9}, "Habana Gaudi2: 21 on-chip 100 GbE RoCE ports to the other devices; network latency as RDMA"},
      {"tpu-ici", {5e-6, 270e9}, "Google TPU v4 ICI: 6 links, about 45 GB/s each one way, estimate"},
      {"ipu-link", {5e-6, 160e9}, "Graphcore IPU-Links: 10 links, 320 GB/s both directions, estimate"},
      {"xgmi", {5e-6, 448e9}, "AMD MI300X Infinity Fabric: 7 links of 64 GB/s one way (AMD data sheet), estimate latency"},
      {"shm", {1e-6, 10e9}, "ranks of one host through shared memory (Open MPI's sm transport): memcpy-bound, estimate"},
  };
  return table;
}

Link find_link(const std::string& name) {
  std::string known;
  for (const auto& l : link_table()) {
    if (name == l.name) return l.link;
    known += known.empty() ? l.name : std::string(", ") + l.name;
  }
  throw_input("link", cat("unknown link '", name, "' (known: ", known, ")"));
}

namespace {

double ring_phase_s(double bytes, int p, const Link& link, int phases) {
  BERT_CHECK(p >= 1, "ring over ", p, " ranks");
  if (p == 1) return 0;
  BERT_CHECK(link.bandwidth_Bps > 0, "link bandwidth ", link.bandwidth_Bps);
  const double steps = phases * (p - 1.0);
  return steps / p * bytes / link.bandwidth_Bps + steps * link.latency_s;
}

}  // namespace

double ring_reduce_scatter_s(double bytes, int p, const Link& link) { return ring_phase_s(bytes, p, link, 1); }
double ring_all_gather_s(double bytes, int p, const Link& link) { return ring_phase_s(bytes, p, link, 1); }
double ring_all_reduce_s(double bytes, int p, const Link& link) { return ring_phase_s(bytes, p, link, 2); }

AllReduceSchedule parse_all_reduce_schedule(const std::string& name, const std::string& where) {
  if (name == "ring") return AllReduceSchedule::RING;
  if (name == "hierarchical") return AllReduceSchedule::HIERARCHICAL;
  if (name == "tree") return AllReduceSchedule::TREE;
  if (name == "best") return AllReduceSchedule::BEST;
  throw_input(where, cat("all-reduce algorithm must be 'ring', 'hierarchical', 'tree' or 'best', got '", name, "'"));
}

const char* schedule_name(AllReduceSchedule schedule) {
  switch (schedule) {
    case AllReduceSchedule::RING: return "ring";
    case AllReduceSchedule::HIERARCHICAL: return "hierarchical";
    case AllReduceSchedule::TREE: return "tree";
    case AllReduceSchedule::BEST: break;
  }
  return "best";
}

double inter_bandwidth_per_rank(const Topology& t) {
  return t.inter.bandwidth_Bps * t.nics_per_node / t.ranks_per_node;
}

double flat_all_reduce_s(double bytes, const Topology& t) {
  BERT_CHECK(t.nodes >= 1 && t.ranks_per_node >= 1 && t.nics_per_node >= 1, "topology ", t.nodes, "x",
             t.ranks_per_node, " with ", t.nics_per_node, " ports");
  const int p = t.nodes * t.ranks_per_node;
  if (t.nodes == 1) return ring_all_reduce_s(bytes, p, t.intra);
  const double ports = t.nics_per_node * t.inter.bandwidth_Bps;
  const Link step{std::max(t.intra.latency_s, t.inter.latency_s),
                  t.ranks_per_node > 1 ? std::min(t.intra.bandwidth_Bps, ports) : ports};
  return ring_all_reduce_s(bytes, p, step);
}

double hierarchical_all_reduce_s(double bytes, const Topology& t) {
  BERT_CHECK(t.nodes >= 1 && t.ranks_per_node >= 1 && t.nics_per_node >= 1, "topology ", t.nodes, "x",
             t.ranks_per_node, " with ", t.nics_per_node, " ports");
  const int r = t.ranks_per_node;
  const double shard = bytes / r;
  const Link across{t.inter.latency_s, inter_bandwidth_per_rank(t)};
  return ring_reduce_scatter_s(bytes, r, t.intra) + ring_all_reduce_s(shard, t.nodes, across) +
         ring_all_gather_s(bytes, r, t.intra);
}

double tree_all_reduce_s(double bytes, const Topology& t) {
  BERT_CHECK(t.nodes >= 1 && t.ranks_per_node >= 1 && t.nics_per_node >= 1, "topology ", t.nodes, "x",
             t.ranks_per_node, " with ", t.nics_per_node, " ports");
  const int r = t.ranks_per_node;
  double across = 0;
  if (t.nodes > 1) {
    const double depth = std::ceil(std::log2(static_cast<double>(t.nodes)));
    across = 2 * (bytes / r) / inter_bandwidth_per_rank(t) + 2 * depth * t.inter.latency_s;
  }
  return ring_reduce_scatter_s(bytes, r, t.intra) + across + ring_all_gather_s(bytes, r, t.intra);
}

double all_reduce_s(double bytes, const Topology& t, AllReduceSchedule schedule) {
  switch (schedule) {
    case AllReduceSchedule::RING: return flat_all_reduce_s(bytes, t);
    case AllReduceSchedule::HIERARCHICAL: return hierarchical_all_reduce_s(bytes, t);
    case AllReduceSchedule::TREE: return tree_all_reduce_s(bytes, t);
    case AllReduceSchedule::BEST: break;
  }
  return std::min({flat_all_reduce_s(bytes, t), hierarchical_all_reduce_s(bytes, t), tree_all_reduce_s(bytes, t)});
}

double exposed_comm_s(double comm_s, double backward_s, double overlap_fraction) {
  BERT_CHECK(overlap_fraction >= 0 && overlap_fraction <= 1, "overlap fraction ", overlap_fraction);
  return comm_s - std::min(comm_s, overlap_fraction * backward_s);
}

}  // namespace bertperf::perf
