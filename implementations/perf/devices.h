// The device classes the scaling model knows, read from a table file
// (benchmarks/bert/mlperf/reference/devices.json): how an MLPerf accelerator_model_name maps to a class,
// the class's peak (for --mfu), the link between the devices of one node, and the network a multi-node
// system of the class is assumed to have when its description names none. Adding a class (a CPU, a new
// GPU) is adding an entry to the file; the model fits every class from the published results of it.
#pragma once

#include <string>
#include <vector>

#include "perf/comm_model.h"
#include "perf/network.h"

namespace bertperf::perf {

struct DeviceClass {
  std::string name;                              // "a100-sxm-80gb"
  std::vector<std::vector<std::string>> match;   // alternatives; each a list of tokens that must all occur
  double peak_flops = 0;                         // dense 16-bit tensor FLOP/s; 0 when not recorded
  std::string intra_link;                        // link_table() name
  Network network_guess;                         // one port a device, when a system names no network
  std::string network_guess_text;
  std::string source;
};

class DeviceTable {
 public:
  // Reads and checks the table; a bad file is an InputError naming it and the entry.
  static DeviceTable load(const std::string& path);

  // The first class whose tokens all occur in `accelerator` (upper case, letters and digits only:
  // "NVIDIA A100 - PCIe - 80 GB" -> "NVIDIAA100PCIE80GB"), or nullptr.
  const DeviceClass* match(const std::string& accelerator) const;
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

}  // namespace bertperf::perf
