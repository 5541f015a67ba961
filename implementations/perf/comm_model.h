// The communication model of the scaling predictor: alpha-beta costs of ring collectives on links
// described by a latency and a bandwidth, flat and hierarchical all-reduce over a nodes x ranks
// topology, and how much of it the backward hides.
//
// Conventions (every function): bytes is the size of the buffer each rank contributes (the whole
// gradient, not a shard); a Link's bandwidth is bytes per second in one direction on one port; its
// latency is the one-way cost of one message (software, NIC and wire). A ring collective over p
// ranks takes p-1 steps per phase; a step sends bytes/p to the next rank, and all ranks send at once,
// so a step costs the slowest link's latency plus bytes/p over its bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bertperf::perf {

struct Link {
  double latency_s = 0;        // one message, one way
  double bandwidth_Bps = 0;    // bytes per second, one direction, one port
};

// A named link of the documented table (comm_model.cpp gives each figure's source): the links between
// the devices of one node. A node's network port is read from its description instead (network.h).
struct NamedLink {
  const char* name;            // e.g. "nvlink3", "pcie4"
  Link link;
  const char* source;          // where the figures come from
};

// The table of known links, in a fixed order.
const std::vector<NamedLink>& link_table();
// The link called `name`; an unknown name is an InputError listing the known ones.
Link find_link(const std::string& name);

// Ring reduce-scatter or all-gather over p ranks: (p-1)/p * bytes / bw + (p-1) * latency.
double ring_reduce_scatter_s(double bytes, int p, const Link& link);
double ring_all_gather_s(double bytes, int p, const Link& link);
// Ring all-reduce over p ranks: 2(p-1)/p * bytes / bw + 2(p-1) * latency. Zero for p == 1.
double ring_all_reduce_s(double bytes, int p, const Link& link);

// nodes x ranks_per_node ranks; `intra` joins the ranks of a node (NVLink, shared memory), `inter`
// is one network port of a node, of which there are nics_per_node (DGX A100: 8 HDR ports).
struct Topology {
  int nodes = 1;
  int ranks_per_node = 1;
  int nics_per_node = 1;
  Link intra;
  Link inter;
};

// The message schedule of one all-reduce whose time the model computes (NCCL calls these its
// algorithms); BEST: the fastest of the three for the buffer and topology (what a library that tunes per
// call does). Not the reducer's ReduceAlgorithm (comm/reducer.h), which is how training groups and issues its
// reductions (one all-reduce after the backward, buckets as the backward readies them, or the node
// hierarchy); the model prices one all-reduce of the whole gradient.
enum class AllReduceSchedule : uint8_t { RING, HIERARCHICAL, TREE, BEST };

// "ring", "hierarchical", "tree" or "best"; anything else is an InputError naming `where`.
AllReduceSchedule parse_all_reduce_schedule(const std::string& name, const std::string& where);
const char* schedule_name(AllReduceSchedule schedule);

// The bandwidth a rank sees across nodes: the node's ports shared by its ranks.
double inter_bandwidth_per_rank(const Topology& t);

// One ring over all nodes*ranks_per_node ranks, laid out node by node. On one node it runs on `intra`.
// Across nodes every step crosses a network port: with one ring per port (NCCL's channels) each port
// carries 1/nics_per_node of the data, so the step bandwidth is min(intra bw, nics_per_node * inter
// bw) (nics_per_node * inter bw with one rank a node) and its latency the larger of the two.
double flat_all_reduce_s(double bytes, const Topology& t);

// Reduce-scatter inside each node (intra), ring all-reduce of each rank's 1/ranks_per_node shard
// among the same-local-rank peers of all nodes (inter, at inter_bandwidth_per_rank), all-gather
// inside each node. Equals flat_all_reduce_s's intra cost on one node.
double hierarchical_all_reduce_s(double bytes, const Topology& t);

// As hierarchical, with the across-node all-reduce of each shard done over a tree (NCCL's double
// binary tree): the shard goes up the tree and back down, 2 * shard / inter_bandwidth_per_rank, in
// 2 * ceil(log2(nodes)) network latencies. It pays more bandwidth than the ring and fewer latencies,
// so it wins at many nodes and small buffers. Equals the hierarchical one on one node.
double tree_all_reduce_s(double bytes, const Topology& t);

double all_reduce_s(double bytes, const Topology& t, AllReduceSchedule schedule);

// The part of a communication of `comm_s` seconds that the step waits for when it may overlap
// `overlap_fraction` (0..1) of a backward of `backward_s` seconds: comm_s - min(comm_s, f * backward_s).
double exposed_comm_s(double comm_s, double backward_s, double overlap_fraction);

}  // namespace bertperf::perf
