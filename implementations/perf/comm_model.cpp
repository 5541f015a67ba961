#include "perf/comm_model.h"

#include <algorithm>

#include "core/errors.h"

namespace bertperf::perf {

// Latencies are NCCL's own per-step figures for ring all-reduce with the Simple protocol (the one
// large gradient buffers use): src/graph/tuning.cc, hwLat, 3.4 us NVLink, 5.7 us PCI, 9.6 us network.
// Bandwidths are one direction of one port, from the vendors' data sheets; TCP figures are estimates.
const std::vector<NamedLink>& link_table() {
  static const std::vector<NamedLink> table = {
      {"nvlink3", {3.4e-6, 300e9},
       "A100 SXM: 12 NVLink 3 links, 600 GB/s both directions (NVIDIA A100 data sheet); NCCL hwLat NVLink"},
      {"nvlink4", {3.4e-6, 450e9},
       "H100/H200 SXM: 18 NVLink 4 links, 900 GB/s both directions (NVIDIA H100 data sheet); NCCL hwLat NVLink"},
      {"pcie4", {5.7e-6, 31.5e9}, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b (PCI-SIG); NCCL hwLat PCI"},
      {"pcie5", {5.7e-6, 63e9}, "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b (PCI-SIG); NCCL hwLat PCI"},
      {"ib-hdr", {9.6e-6, 25e9}, "InfiniBand HDR: 200 Gb/s per port (ConnectX-6 data sheet); NCCL hwLat network"},
      {"ib-ndr", {9.6e-6, 50e9}, "InfiniBand NDR: 400 Gb/s per port (ConnectX-7 data sheet); NCCL hwLat network"},
      {"eth-100g", {15e-6, 12.5e9}, "100 GbE, TCP: 100 Gb/s line rate; kernel TCP one-way latency, estimate"},
      {"eth-25g", {15e-6, 3.125e9}, "25 GbE, TCP: 25 Gb/s line rate; kernel TCP one-way latency, estimate"},
      {"eth-10g", {20e-6, 1.25e9}, "10 GbE, TCP: 10 Gb/s line rate; kernel TCP one-way latency, estimate"},
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

AllReduceAlgo parse_all_reduce_algo(const std::string& name, const std::string& where) {
  if (name == "ring") return AllReduceAlgo::kRing;
  if (name == "hierarchical") return AllReduceAlgo::kHierarchical;
  if (name == "best") return AllReduceAlgo::kBest;
  throw_input(where, cat("all-reduce algorithm must be 'ring', 'hierarchical' or 'best', got '", name, "'"));
}

const char* algo_name(AllReduceAlgo algo) {
  return algo == AllReduceAlgo::kRing ? "ring" : algo == AllReduceAlgo::kHierarchical ? "hierarchical" : "best";
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

double all_reduce_s(double bytes, const Topology& t, AllReduceAlgo algo) {
  if (algo == AllReduceAlgo::kRing) return flat_all_reduce_s(bytes, t);
  if (algo == AllReduceAlgo::kHierarchical) return hierarchical_all_reduce_s(bytes, t);
  return std::min(flat_all_reduce_s(bytes, t), hierarchical_all_reduce_s(bytes, t));
}

double exposed_comm_s(double comm_s, double backward_s, double overlap_fraction) {
  BERT_CHECK(overlap_fraction >= 0 && overlap_fraction <= 1, "overlap fraction ", overlap_fraction);
  return comm_s - std::min(comm_s, overlap_fraction * backward_s);
}

}  // namespace bertperf::perf
