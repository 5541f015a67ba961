// The MLPerf system description (systems/<system>.json): loading with the package checker's field
// list (all 33 fields present, values strings, other_software_stack a string or an object) and
// clear one-line errors, plus what the harness derives from it for the submission_* log keys.
#pragma once

#include <string>
#include <vector>

#include "core/json_fields.h"

namespace bertperf {

struct SystemDescription {
  std::string path;  // the file it came from
  Json raw;          // every field as written, for copying into result trees
  std::string submitter;
  std::string division;     // "closed" or "open"
  std::string status;       // as written, e.g. "Available on-premise" or "onprem"
  std::string system_name;
  int number_of_nodes = 0;
  int accelerators_per_node = 0;  // 0 for CPU-only systems
  int host_processors_per_node = 0;

  // The submission_status value for MLLOG lines: "onprem", "cloud", "research" or "preview" (the
  // one spelling both checker rulesets 2.1.0 and 5.0.0 accept).
  std::string log_status() const;
};

// The fields the MLPerf package checker requires, in the order submitters write them.
const std::vector<std::string>& system_description_fields();

SystemDescription load_system_description(const std::string& path);

// Finds systems/<system>.json in `start_dir` or the nearest parent that has one; empty if none.
std::string find_system_file(const std::string& system, const std::string& start_dir);

}  // namespace bertperf
