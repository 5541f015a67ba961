// The device classes the scaling model knows, read from a table file
// (benchmarks/bert/mlperf/reference/devices.json): how an MLPerf accelerator_model_name maps to a class,
// the class's peak (for --mfu) and board power, the link between the devices of one node, and the network a multi-node
// system of the class is assumed to have when its description names none. Adding a class (a CPU, a new
// GPU) is adding an entry to the file; the model fits every class from the published results of it.
//
// A CPU class (an entry with a "cpu" block) is the device of a CPU-only system (0 accelerators a node):
// its device is a whole node, matched by host_processor_model_name. Its peak is the node's sockets x
// cores x clock x the bf16 FLOPs a core retires a cycle with the class's ISA (AMX about 1,024,
// AVX512-BF16 about 64), and a node's speed is the class's fitted rate (for its reference node) scaled
// by the node's peak over the reference node's. Where the class has no published results, a measured
// rate of one core ("core_samples_per_s", e.g. the cpu-bf16 backend's) stands in for the fit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "perf/comm_model.h"
#include "perf/network.h"

namespace bertperf::perf {

// The CPUs of one node.
struct CpuNode {
  int sockets = 0;
  int cores_per_socket = 0;
  double clock_ghz = 0;
  int cores() const { return sockets * cores_per_socket; }
};

// A node's bf16 peak: sockets x cores x clock x FLOPs a core retires a cycle.
double cpu_peak_flops(const CpuNode& node, double flops_per_cycle_per_core);

// What a CPU class says of its devices.
struct CpuSpec {
  std::string isa;                        // "amx-bf16", "avx512-bf16"
  double flops_per_cycle_per_core = 0;    // bf16 FLOPs a core retires a cycle with that ISA
  CpuNode reference;                      // the node the class's rate is for, and a description's defaults
  std::optional<double> core_samples_per_s;  // measured training rate of one core, taken as at the
                                             // reference clock; stands in for a fit without results
  std::string core_rate_source;
};

struct DeviceClass {
  std::string name;                              // "a100-sxm-80gb"
  std::vector<std::vector<std::string>> match;   // alternatives; each a list of tokens that must all occur
  double peak_flops = 0;                         // dense 16-bit tensor FLOP/s (a CPU class: its reference
                                                 // node's); 0 when not recorded
  std::string intra_link;                        // link_table() name
  Network network_guess;                         // one port a device, when a system names no network
  std::string network_guess_text;
  std::string source;
  std::optional<CpuSpec> cpu;                    // set for a CPU class, whose device is a node
  double power_w = 0;                            // the board power its figures are for; 0 when not recorded
  double fp8_peak_flops = 0;                     // dense FP8 tensor FLOP/s; 0 when not recorded
  double memory_bytes_per_s = 0;                 // device memory bandwidth; 0 when not recorded

  // A node's speed relative to the class's reference node (peak over peak); 1 for an accelerator.
  double scale_of(const CpuNode& node) const;
  // The speed of a device whose accelerator name states a power (stated_power_w) relative to the class's:
  // (stated / power_w)^(1/3), a clock held to a power limit going as its cube root; 1 where either is unknown.
  double power_scale(const std::string& accelerator) const;
};

// The CPU node a system description names: host_processors_per_node, host_processor_core_count (cores
// of one processor, as MLPerf descriptions count them) and host_processor_frequency (the clock labelled
// "base" where one is, else the first "<n> GHz" or "<n> MHz"; where it is empty, the "@ 2.00GHz" of the
// model name). What the description leaves empty is taken from `fallback` and *assumed is set. A field
// that is neither empty nor a positive number is an InputError naming `where`.
CpuNode parse_cpu_node(const std::string& model, const std::string& sockets, const std::string& cores,
                       const std::string& frequency, const CpuNode& fallback, const std::string& where,
                       bool* assumed = nullptr);

class DeviceTable {
 public:
  // Reads and checks the table; a bad file is an InputError naming it and the entry.
  static DeviceTable load(const std::string& path);

  // The first accelerator class whose tokens all occur in `accelerator` (upper case, letters and digits
  // only: "NVIDIA A100 - PCIe - 80 GB" -> "NVIDIAA100PCIE80GB"), or nullptr.
  const DeviceClass* match(const std::string& accelerator) const;
  // The same over the CPU classes, for the host processor of a CPU-only system.
  const DeviceClass* match_cpu(const std::string& host_processor) const;
  // By name; an unknown name is an InputError listing the known ones.
  const DeviceClass& by_name(const std::string& name) const;
  const std::vector<DeviceClass>& classes() const { return classes_; }
  const std::string& source() const { return path_; }

 private:
  std::vector<DeviceClass> classes_;
  std::string path_;
};

// "NVIDIA A100 - PCIe - 80 GB" -> "NVIDIAA100PCIE80GB".
std::string accelerator_key(const std::string& accelerator);

// The power an accelerator name states ("NVIDIA A100-SXM4-80GB (500W)": 500), or nullopt.
std::optional<double> stated_power_w(const std::string& accelerator);

}  // namespace bertperf::perf
