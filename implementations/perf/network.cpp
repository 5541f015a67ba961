#include "perf/network.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <vector>

#include "core/errors.h"

namespace bertperf::perf {

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

std::string without_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

struct Group {
  int count = 0;  // 0: not given
  double gbps = 0;
  std::optional<Fabric> fabric;
  bool rdma_hint = false;
};

Group read_group(const std::string& piece) {
  static const std::regex count_re(R"((^|[^A-Za-z0-9_.])(\d+)\s*[xX](\s|\d|$))");
  static const std::regex rate_re(R"((\d+(\.\d+)?)\s*G[bB]?([eE]|\s*/\s*[sS]|ps|\b))");
  static const std::regex ib_re(R"((^|[^A-Z])IB([^A-Z]|$)|INFINIBAND|EDR|HDR|NDR|XDR|QUANTUM)");
  static const std::regex opa_re(R"(OMNI-?PATH|(^|[^A-Z])OPA([^A-Z]|$))");
  static const std::regex eth_re(R"(ETHERNET|GBE|SLINGSHOT|ROCE)");
  static const std::regex rdma_re(R"(ROCE|CONNECTX|BLUEFIELD|BF3|SLINGSHOT)");
  Group g;
  std::smatch m;
  if (std::regex_search(piece, m, count_re)) g.count = std::stoi(m[2]);
  for (auto it = std::sregex_iterator(piece.begin(), piece.end(), rate_re); it != std::sregex_iterator(); ++it)
    g.gbps = std::max(g.gbps, std::stod((*it)[1]));
  const std::string up = upper(piece);
  if (g.gbps == 0) {
    static const std::pair<const char*, double> kGenerations[] = {
        {"HDR100", 100}, {"NDR200", 200}, {"EDR", 100}, {"HDR", 200}, {"NDR", 400},
        {"XDR", 800},    {"QUANTUM-2", 400}, {"OMNI-PATH", 100}, {"OMNIPATH", 100}, {"E810", 100}};
    const std::string compact = without_spaces(up);
    for (const auto& [name, rate] : kGenerations)
      if (compact.find(name) != std::string::npos) {
        g.gbps = rate;
        break;
      }
  }
  if (std::regex_search(up, ib_re)) g.fabric = Fabric::INFINIBAND;
  else if (std::regex_search(up, opa_re)) g.fabric = Fabric::OMNI_PATH;
  else if (std::regex_search(up, eth_re)) g.fabric = Fabric::ETHERNET;
  g.rdma_hint = std::regex_search(up, rdma_re);
  return g;
}

// The text of the Compute section, or of everything outside Storage and Management.
std::string compute_part(const std::string& text) {
  static const std::regex label_re(R"((compute|storage|management)\s*:)", std::regex::icase);
  std::string unlabelled, compute;
  std::string current;  // "" before any label
  size_t at = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), label_re); it != std::sregex_iterator(); ++it) {
    const std::string body = text.substr(at, it->position() - at);
    if (current.empty()) unlabelled += body + ",";
    else if (current == "COMPUTE") compute += body + ",";
    current = upper((*it)[1]);
    at = it->position() + it->length();
  }
  const std::string rest = text.substr(at);
  if (current.empty()) unlabelled += rest;
  else if (current == "COMPUTE") compute += rest;
  return compute.find_first_not_of(" ,\t") != std::string::npos ? compute : unlabelled;
}

}  // namespace

std::optional<Network> parse_network(const std::string& text) {
  const std::string part = compute_part(text);
  std::vector<Group> groups;
  size_t start = 0;
  for (size_t i = 0; i <= part.size(); ++i) {
    if (i == part.size() || part[i] == ',' || part[i] == ';' || part[i] == '+') {
      const std::string piece = part.substr(start, i - start);
      if (piece.find_first_not_of(" \t") != std::string::npos) {
        Group g = read_group(piece);
        if (!groups.empty() && groups.back().count > 0 && groups.back().gbps == 0 && g.count == 0 && g.gbps > 0) {
          groups.back().gbps = g.gbps;  // "2x Mellanox ConnectX-6, 100Gb/s Ethernet"
          if (!groups.back().fabric) groups.back().fabric = g.fabric;
          groups.back().rdma_hint = groups.back().rdma_hint || g.rdma_hint;
        } else {
          groups.push_back(g);
        }
      }
      start = i + 1;
    }
  }
  std::optional<Network> best;
  for (const Group& g : groups) {
    if (g.gbps <= 0) continue;
    Network n;
    n.ports = std::max(1, g.count);
    n.gbps = g.gbps;
    n.fabric = g.fabric.value_or(Fabric::ETHERNET);
    n.rdma = n.fabric != Fabric::ETHERNET || g.rdma_hint;
    const double bw = n.ports * n.gbps, best_bw = best ? best->ports * best->gbps : -1;
    if (!best || bw > best_bw || (bw == best_bw && n.rdma && !best->rdma)) best = n;
  }
  return best;
}

Link network_link(const Network& n) {
  BERT_CHECK(n.gbps > 0 && n.ports >= 1, "network of ", n.ports, " ports at ", n.gbps, " Gb/s");
  return Link{n.rdma ? 9.6e-6 : 15e-6, n.gbps * 1e9 / 8};
}

std::string network_name(const Network& n) {
  const char* fabric = n.fabric == Fabric::INFINIBAND ? "InfiniBand"
                       : n.fabric == Fabric::OMNI_PATH ? "Omni-Path"
                       : n.rdma                        ? "Ethernet (RDMA)"
                                                       : "Ethernet";
  const double rounded = std::round(n.gbps);
  return cat(n.ports, "x ", rounded == n.gbps ? cat(static_cast<long long>(rounded)) : cat(n.gbps), " Gb/s ", fabric);
}

}  // namespace bertperf::perf
