// The scaling model (perf/): the communication model's closed forms against a simulation that runs
// the ring and hierarchical algorithms on real numbers (checking they sum) and adds up each step's
// slowest transfer; hand-worked figures; the link table; the step and run model against its formula
// worked by hand; calibration as the model's inverse; the RCP table against the RCP checker's own
// figure for GBS 3072; published result trees read back; the validation's calibration rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "perf/comm_model.h"
#include "perf/published.h"
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
  const Topology t{64, 8, 8, find_link("nvlink3"), find_link("ib-hdr")};
  for (double bytes : {1e4, 1e6, 6.7e8})
    EXPECT_DOUBLE_EQ(all_reduce_s(bytes, t, parse_all_reduce_algo("best", "x")),
                     std::min(flat_all_reduce_s(bytes, t), hierarchical_all_reduce_s(bytes, t)));
  EXPECT_EQ(parse_all_reduce_algo("hierarchical", "x"), AllReduceAlgo::kHierarchical);
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
  run.eval_fixed_s = 0.25;
  run.startup_s = 2;
  const RunPrediction r = predict_run(s, 100, run);
  EXPECT_DOUBLE_EQ(r.steps, 100);
  EXPECT_DOUBLE_EQ(r.evals, 4);
  EXPECT_DOUBLE_EQ(r.train_s, 100 * 0.513);
  EXPECT_DOUBLE_EQ(r.eval_s, 4 * (600 / (2 * 3 * 100.0) + 0.25));
  EXPECT_DOUBLE_EQ(r.time_to_train_s, 2 + 51.3 + 5);
}

TEST(StepModel, CalibrationInvertsTheModel) {
  for (double overlap : {0.0, 0.5}) {
    StepInputs in;
    in.local_batch = 56;
    in.gradient_bytes = 6.7e8;
    in.topology = Topology{1, 8, 1, find_link("nvlink3"), Link{}};
    in.overlap_fraction = overlap;
    RunInputs run;
    run.global_batch = 448;
    run.samples_to_converge = 2.46e6;
    run.eval_interval_samples = 150000;
    in.device_samples_per_s = 303;
    const double t = predict_run(predict_step(in), 303, run).time_to_train_s;
    EXPECT_NEAR(calibrate_device_rate(in, run, t), 303, 1e-6) << overlap;
    EXPECT_THROW(calibrate_device_rate(in, run, 1.0), InputError);  // shorter than start-up and evals
  }
}

TEST(StepModel, RcpTableGivesTheCheckersMeanAt3072) {
  const auto table = load_rcp_table(std::string(BERTPERF_SOURCE_DIR) + "/benchmarks/bert/mlperf/reference/rcp.json");
  // Baidu's v2.1 package checker log: "RCP Mean 2656421" for BS 3072, interpolated between 448 and 4608.
  EXPECT_NEAR(rcp_mean_samples(table, 3072), 2656421, 1.0);
  bool clamped = true;
  EXPECT_NEAR(rcp_mean_samples(table, 448, &clamped), 2414421.3, 0.1);
  EXPECT_FALSE(clamped);
  EXPECT_EQ(rcp_mean_samples(table, 100000, &clamped), table.back().mean_samples);
  EXPECT_TRUE(clamped);
  EXPECT_EQ(rcp_mean_samples(table, 64, &clamped), table.front().mean_samples);
  EXPECT_TRUE(clamped);
  EXPECT_DOUBLE_EQ(expected_samples_to_converge(2656421, 175000), 2656421 + 87500);
}

namespace {

void write_run(const std::string& path, int64_t start, int64_t stop, const char* status, int64_t samples,
               const std::string& prefix = "") {
  std::ofstream f(path);
  f << "noise line\n";
  f << prefix << ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": "
       "\"global_batch_size\", \"value\": 3072, \"metadata\": {}}\n";
  f << ":::MLLOG {\"time_ms\": " << start << ", \"key\": \"run_start\", \"value\": null, \"metadata\": {}}\n";
  f << ":::MLLOG {\"time_ms\": " << stop << ", \"key\": \"train_samples\", \"value\": " << samples
    << ", \"metadata\": {}}\n";
  if (status)
    f << ":::MLLOG {\"time_ms\": " << stop << ", \"key\": \"run_stop\", \"value\": null, \"metadata\": {\"status\": \""
      << status << "\"}}\n";
}

}  // namespace

TEST(Published, ResultTreeOlympicMeanAndSamples) {
  bertperf::testing::TempDir dir("bertperf_perf");
  // Minutes 2, 3, 4, 5 and one aborted (infinite): the olympic mean drops 2 and the aborted run.
  write_run(dir / "result_0.txt", 0, 120000, "success", 100);
  write_run(dir / "result_1.txt", 1000, 181000, "success", 200, "glued stdout text ");
  write_run(dir / "result_2.txt", 0, 240000, "success", 300);
  write_run(dir / "result_3.txt", 0, 300000, "success", 400);
  write_run(dir / "result_4.txt", 0, 60000, "aborted", 500);
  const TreeSummary s = read_result_tree(dir.path.string());
  EXPECT_EQ(s.runs, 5);
  EXPECT_EQ(s.successes, 4);
  EXPECT_EQ(s.global_batch, 3072);
  EXPECT_DOUBLE_EQ(s.olympic_minutes, (3 + 4 + 5) / 3.0);
  EXPECT_DOUBLE_EQ(s.mean_samples, 300);

  std::ofstream(dir / "result_5.txt") << ":::MLLOG {\"key\": \"run_start\", \"time_ms\": oops}\n";
  try {
    read_result_tree(dir.path.string());
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("result_5.txt:1"), std::string::npos) << e.what();
  }
}

TEST(Published, CalibrationRules) {
  PublishedResult cal;
  cal.id = "cal", cal.device = "a100", cal.role = "calibration", cal.inter = "ib-hdr", cal.algo = "ring";
  cal.nodes = 1, cal.gpus_per_node = 8, cal.global_batch = 448, cal.olympic_minutes = 17, cal.mean_samples = 2.46e6;
  PublishedResult big = cal;
  big.id = "big", big.role = "predict", big.nodes = 8, big.global_batch = 3072, big.olympic_minutes = 2.5;
  big.mean_samples = 2.7e6;
  const std::vector<RcpPoint> rcp = {{448, 2.4e6}, {4608, 2.8e6}};
  ModelConstants c;
  c.gradient_bytes = 6.7e8;
  auto interval = [](int64_t gbs) -> int64_t { return gbs >= 3072 ? 175000 : 150000; };

  const Validation v = validate({cal, big}, rcp, c, interval);
  ASSERT_EQ(v.calibrations.size(), 1u);
  ASSERT_EQ(v.rows.size(), 1u);
  EXPECT_EQ(v.rows[0].calibrated_from, "cal");
  // The calibration result, predicted at its own rate, gives back its own time.
  const ResultCase own = result_case(cal, c, 150000, v.calibrations[0].device_samples_per_s);
  EXPECT_NEAR(predict_run(predict_step(own.step), own.step.device_samples_per_s, own.run).time_to_train_s, 17 * 60, 1e-6);
  // The row's errors are its predictions against its measured time.
  EXPECT_DOUBLE_EQ(v.rows[0].error_logged, v.rows[0].predicted_logged_minutes / 2.5 - 1);
  EXPECT_DOUBLE_EQ(v.median_abs_error_rcp, std::fabs(v.rows[0].error_rcp));

  PublishedResult second = cal;
  second.id = "cal2";
  EXPECT_THROW(validate({cal, second, big}, rcp, c, interval), InputError);
  PublishedResult multi = cal;
  multi.nodes = 2;
  EXPECT_THROW(validate({multi, big}, rcp, c, interval), InputError);
  PublishedResult h100 = big;
  h100.device = "h100";
  EXPECT_THROW(validate({cal, h100}, rcp, c, interval), InputError);
}
