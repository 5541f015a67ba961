// A node's network as MLPerf system descriptions write it ("host_networking", or where that names no
// ports, "host_networking_topology"), read into a port count, a line rate and a fabric, and the link
// the communication model uses for one such port.
//
// How a description is read (parse_network):
// - Sections labelled "Compute:", "Storage:" and "Management:" are told apart; the Compute section is
//   read when there is one, otherwise everything outside the Storage and Management sections.
// - The text is cut into port groups at commas, semicolons and plus signs. A group's port count is its
//   first "<n>x" or "<n> x" (1 when none); its line rate the largest "<n> Gb/s", "<n>Gb/Sec", "<n>GbE",
//   "<n>Gb" in it, or else its InfiniBand generation (EDR 100, HDR100 100, HDR 200, NDR200 200, NDR 400,
//   XDR 800; Quantum-2 400), Omni-Path (100) or Intel's E810 Ethernet controllers (100 GbE, as Intel's
//   CPU-only results name their network). A group with a count and no rate takes the rate of the
//   group after it ("2x Mellanox ConnectX-6, 100Gb/s Ethernet").
// - Of the groups with a rate, the one with the most bandwidth (count x rate) is the compute network;
//   on a tie, the one that does RDMA.
// - Fabric: InfiniBand (IB, InfiniBand, EDR/HDR/NDR, Quantum), Omni-Path, or Ethernet; Ethernet does
//   RDMA when the group names RoCE, ConnectX, BlueField (BF3) or Slingshot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "perf/comm_model.h"

namespace bertperf::perf {

enum class Fabric : uint8_t { INFINIBAND, OMNI_PATH, ETHERNET };

struct Network {
  int ports = 1;          // per node
  double gbps = 0;        // line rate of one port, Gb/s
  Fabric fabric = Fabric::ETHERNET;
  bool rdma = false;      // InfiniBand and Omni-Path always; Ethernet with RoCE
};

// The network a description names, or nullopt when it names no port with a rate ("", "N/A",
// "Ethernet, Infiniband").
std::optional<Network> parse_network(const std::string& text);

// The link of one port: line rate / 8 bytes per second; NCCL's network latency (9.6 us) over RDMA,
// an estimate for kernel TCP (15 us) otherwise.
Link network_link(const Network& n);

// "8x 200 Gb/s InfiniBand".
std::string network_name(const Network& n);

}  // namespace bertperf::perf
