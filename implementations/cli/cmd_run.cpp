// `bertperf run-once` (one timed MLPerf run, its log written atomically) and `bertperf run` (a
// result set: N runs, each a fresh process, laid out as an MLPerf submission tree).
//
// A result file is never left half-written: run-once logs into a temporary file beside the
// result, checks every write, syncs it to disk and renames it into place only when run_stop has
// been logged; SIGINT/SIGTERM/SIGHUP remove the temporary file before the process dies. `run`
// locks its output directory (one `run` per tree), forwards those signals to the run in progress
// and stops; its children die with it (PR_SET_PDEATHSIG).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

#include "cli/args.h"
#include "cli/build_info.h"
#include "cli/commands.h"
#include "core/errors.h"
#include "comm/context.h"
#include "harness/system_description.h"
#include "harness/timed_run.h"
#include "harness/train_config.h"
#include "mllog/mllog.h"

namespace bertperf::cli {

namespace fs = std::filesystem;

namespace {

// Exit status of run-once when the run ended without reaching the target: the log is complete and
// valid (MLPerf counts such runs), so `run` carries on, but scripts can tell it apart.
constexpr int kExitAborted = 3;

const char* const kRunOnceUsage =
    "usage: bertperf run-once --config FILE --log FILE [--system-file FILE] [--seed N] [--stdout]\n"
    "                         [--no-progress] [--dry-run]\n"
    "  One timed MLPerf run. The :::MLLOG log is written to a temporary file beside FILE and renamed\n"
    "  to FILE when the run ends; an interrupted run leaves nothing behind. With --stdout the log\n"
    "  lines are also printed. Launch it under mpirun when the config has more than one rank.\n"
    "  --system-file  the MLPerf system description (default: systems/<system>.json found in the\n"
    "                 config's directory or the nearest parent that has one)\n"
    "  --seed         the run seed (default: fresh from /dev/urandom, as closed runs require)\n"
    "  --dry-run      log only the submission, seed and hyperparameter lines of the init block, without\n"
    "                 data, model or training (--log FILE, or --stdout alone); any rank count\n"
    "  Exit status: 0 target reached, 3 run aborted (log written), 2 bad input, 1 internal error.\n";

const char* const kRunUsage =
    "usage: bertperf run --config FILE [--out DIR] [--runs N] [--system-file FILE] [--resume]\n"
    "                    [--mpirun PROGRAM | --srun] [--mpirun-args ARGS] [--no-progress]\n"
    "  A result set: N timed runs (default: the benchmark's, 10 for BERT), each a fresh process\n"
    "  (`bertperf run-once`, through `mpirun -np <ranks>` when the config has more than one rank),\n"
    "  written as an MLPerf submission tree:\n"
    "    DIR/systems/<system>.json   (other_software_stack: the commit and library versions the runs log)\n"
    "    DIR/results/<system>/<benchmark>/result_<i>.txt\n"
    "  --out          the tree's root (default: results/<config benchmark>_<system>)\n"
    "  --resume       keep existing complete result files (ending with run_stop) and run the\n"
    "                 missing or incomplete indices\n"
    "  --mpirun       the MPI launcher (default: mpirun); --mpirun-args: extra launcher arguments,\n"
    "                 split at spaces (e.g. \"--hostfile hosts --bind-to none\")\n"
    "  --srun         inside a Slurm allocation: every run is a job step, `srun --ntasks <ranks>\n"
    "                 --kill-on-bad-exit=1 [ARGS] bertperf run-once ...`, also for one rank\n"
    "                 (ARGS from --mpirun-args, e.g. \"--mpi=pmix\"); scripts/bertperf.sbatch uses it\n";

// Makes a rename in `file`'s directory durable.
void sync_directory(const fs::path& file) {
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// ---- run-once: temporary log removal on signals ------------------------------------------------

char g_temp_log[4096] = {0};  // the path the handler unlinks; empty when none

extern "C" void remove_temp_and_die(int sig) {
  if (g_temp_log[0]) ::unlink(g_temp_log);  // async-signal-safe
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Owns the temporary log: removed on every exit path except a completed rename.
class TempLog {
 public:
  explicit TempLog(const fs::path& final_path) : final_(final_path) {
    temp_ = final_path.parent_path() / cat(".", final_path.filename().string(), ".tmp.", ::getpid());
    BERT_CHECK(temp_.string().size() < sizeof(g_temp_log), "log path too long: ", temp_.string());
    std::snprintf(g_temp_log, sizeof(g_temp_log), "%s", temp_.c_str());
    struct sigaction sa {};
    sa.sa_handler = remove_temp_and_die;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  }
  ~TempLog() {
    if (!committed_) {
      std::error_code ec;
      fs::remove(temp_, ec);
    }
    g_temp_log[0] = 0;
  }
  const fs::path& path() const { return temp_; }
  // The log must be closed (and so synced) by its writer first.
  void commit() {
    std::error_code ec;
    fs::rename(temp_, final_, ec);
    if (ec) throw_input(final_.string(), "cannot move the finished log into place: " + ec.message());
    committed_ = true;
    sync_directory(final_);
  }

 private:
  fs::path final_, temp_;
  bool committed_ = false;
};

std::string system_file_for(const TrainConfig& config, const Options& opts) {
  if (auto given = opts.get("system-file")) return *given;
  const std::string found = find_system_file(config.system, fs::path(config.source).parent_path().string());
  if (found.empty())
    throw_input(config.source, "no systems/" + config.system +
                                   ".json in the config's directory or any parent; pass --system-file");
  return found;
}

// ---- run: child processes ----------------------------------------------------------------------

volatile sig_atomic_t g_signal = 0;
volatile pid_t g_child = 0;

extern "C" void forward_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) ::kill(g_child, sig);
}

// Runs argv as a child and returns its wait status; SIGINT/SIGTERM reach it and are remembered.
int run_child(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::cout.flush();
  std::fflush(stdout);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  BERT_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // The run dies with `run` (SIGTERM: run-once removes its temporary log), even when `run` is
    // killed outright; the parent may have died before the call took effect.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);
    ::execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "bertperf run: cannot start %s: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  g_child = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    BERT_CHECK(errno == EINTR, "waitpid failed: ", std::strerror(errno));
  }
  g_child = 0;
  return status;
}

std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bertperf") : self.string();
}

std::vector<std::string> split_spaces(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// Writes `text` to `path` through a temporary file, synced to disk, and a rename; every call checked.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path temp = path.parent_path() / cat(".", path.filename().string(), ".tmp.", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_input(path.string(), cat("cannot write file: ", std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int err = done == text.size() ? 0 : (errno ? errno : ENOSPC);
  const bool synced = err == 0 && ::fsync(fd) == 0;
  const int sync_err = errno;
  const bool closed = ::close(fd) == 0;
  if (err || !synced || !closed) {
    const int why = err ? err : !synced ? sync_err : errno;
    ::unlink(temp.c_str());
    throw_input(path.string(), cat("cannot write file: ", std::strerror(why)));
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    throw_input(path.string(), "cannot write file: " + ec.message());
  }
  sync_directory(path);
}

// A result log is complete when its last line is the run_stop event, ended by a newline (run-once
// writes run_stop last and only renames a fully written, synced log into place).
bool log_is_complete(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty() || text.back() != '\n') return false;
  text.pop_back();
  const std::string last = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  const auto at = last.find(":::MLLOG ");
  if (at == std::string::npos) return false;
  const Json record = Json::parse(last.substr(at + 9), nullptr, /*allow_exceptions=*/false);
  return record.is_object() && record.value("key", Json()) == "run_stop" && record.value("event_type", Json()) == "INTERVAL_END";
}

// Holds an exclusive lock on the output directory for the life of this process and of its
// children (the descriptor is inherited on purpose), so a second `run` on the same tree, or a
// --resume while a run of the first is still alive, is refused instead of racing it.
void lock_output_directory(const fs::path& root) {
  const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw_input(root.string(), cat("cannot open the output directory: ", std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw_input(root.string(), "another `bertperf run` is writing this result tree (the directory is locked); "
                                 "wait for it to end or choose another --out");
    throw_input(root.string(), cat("cannot lock the output directory: ", std::strerror(err)));
  }
  // fd stays open until exit.
}

// run_start/run_stop times and status from a finished log, for the summary table.
struct RunSummary {
  std::string status = "?";
  double minutes = -1;
};

RunSummary summarize_log(const fs::path& path) {
  RunSummary s;
  std::ifstream in(path);
  double start = -1, stop = -1;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(":::MLLOG ");
    if (at == std::string::npos) continue;
    const Json record = Json::parse(line.substr(at + 9), nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("key")) continue;
    if (record["key"] == "run_start") start = record["time_ms"].get<double>();
    if (record["key"] == "run_stop") {
      stop = record["time_ms"].get<double>();
      s.status = record["metadata"].value("status", "?");
    }
  }
  if (start >= 0 && stop >= 0) s.minutes = (stop - start) / 60000.0;
  return s;
}

// The software a finished log names (harness/provenance.h), as fields of a system description's
// other_software_stack: "bertperf_commit" and "<library>_version" (lower case, spaces as underscores), e.g.
// "openblas_version", "cuda_driver_version".
Json logged_software(const fs::path& path) {
  Json fields = Json::object();
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(":::MLLOG ");
    if (at == std::string::npos) continue;
    const Json record = Json::parse(line.substr(at + 9), nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("value")) continue;
    const Json key = record.value("key", Json());
    const Json& value = record["value"];
    if (key == "bertperf_commit" && value.is_string()) {
      const Json metadata = record.value("metadata", Json::object());
      const bool dirty = !metadata.is_object() || metadata.value("dirty", Json(true)) != Json(false);
      fields["bertperf_commit"] = value.get<std::string>() + (dirty ? " (with uncommitted changes)" : "");
    } else if (key == "bertperf_library_versions" && value.is_object()) {
      for (const auto& [name, version] : value.items()) {
        if (!version.is_string()) continue;
        std::string field;
        for (const char c : name) field += c == ' ' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        fields[field + "_version"] = version;
      }
    } else if (key == "init_stop") {
      break;
    }
  }
  return fields;
}

// Fills the software fields of the tree's system description from the runs' logs (the last run's; a set whose runs
// name different software is reported, and bertperf-package refuses one from several commits).
void describe_logged_software(const fs::path& system_file, Json described, const fs::path& result_dir, int64_t runs) {
  Json software;
  bool mixed = false;
  for (int64_t i = 0; i < runs; ++i) {
    const fs::path result = result_dir / cat("result_", i, ".txt");
    if (!fs::exists(result)) continue;
    Json fields = logged_software(result);
    if (fields.empty()) continue;
    mixed = mixed || (!software.is_null() && fields != software);
    software = std::move(fields);
  }
  if (software.is_null()) return;
  if (mixed)
    std::cerr << "bertperf run: the runs of " << result_dir.string() << " name different builds or libraries; "
              << system_file.string() << " names the last run's\n";
  Json& stack = described["other_software_stack"];
  if (stack.is_string()) stack = Json{{"notes", stack}};
  if (!stack.is_object()) stack = Json::object();
  stack.update(software);
  write_atomically(system_file, described.dump(4) + "\n");
}

}  // namespace

namespace {

// run-once --dry-run: the config's hyperparameter lines as a real run logs them, with no data or training.
int dry_run(const Options& opts, DistContext& world) {
  const TrainConfig config = load_train_config(opts.required("config"), /*check_data=*/false);
  const SystemDescription system = load_system_description(system_file_for(config, opts));
  const std::string log_path = opts.get("log").value_or("");
  if (log_path.empty() && !opts.flag("stdout")) throw_input("command line", "--dry-run needs --log FILE or --stdout");
  const int64_t seed = opts.get("seed") ? opts.integer("seed", 0) : int64_t(fresh_seed());
  if (seed < 0) throw_input("command line", "option --seed must not be negative");
  mllog::Logger log(mllog::Logger::Options{
      .to_stdout = opts.flag("stdout"), .file = log_path, .name_space = "", .rank = world.rank(), .file_label = ""});
  log_run_header(log, config, system, uint64_t(seed));
  log_provenance(log, run_provenance(config.source));
  log.close_file();
  if (world.is_root() && !log_path.empty())
    std::cerr << "bertperf run-once: dry run of " << config.source << ": hyperparameters logged to " << log_path
              << " (no training)\n";
  return 0;
}

}  // namespace

int cmd_run_once(const Args& args, DistContext& world) {
  const Options opts(args, {"config", "log", "system-file", "seed"}, {"stdout", "no-progress", "help", "dry-run"});
  if (opts.flag("help")) {
    std::cout << kRunOnceUsage;
    return 0;
  }
  if (!opts.positional().empty()) throw_input("command line", "unexpected argument '" + opts.positional()[0] + "'");
  if (opts.flag("dry-run")) return dry_run(opts, world);
  const TrainConfig config = load_train_config(opts.required("config"));
  const SystemDescription system = load_system_description(system_file_for(config, opts));
  const fs::path log_path = opts.required("log");
  if (!log_path.parent_path().empty() && !fs::is_directory(log_path.parent_path()))
    throw_input(log_path.string(), "the directory for the log does not exist");

  if (world.size() != config.ranks)
    throw_input(config.source, cat("the config wants ", config.ranks, " ranks but this process is one of ",
                                   world.size(), "; launch with `mpirun -np ", config.ranks,
                                   " bertperf run-once ...` or use `bertperf run`"));
  TimedRunOptions options;
  if (opts.get("seed")) {
    const int64_t seed = opts.integer("seed", 0);
    if (seed < 0) throw_input("command line", "option --seed must not be negative");
    options.seed = static_cast<uint64_t>(seed);
  }
  options.progress = !opts.flag("no-progress");
  options.provenance = run_provenance(config.source);

  // Only rank 0 writes the log, so only rank 0 owns a temporary file.
  std::optional<TempLog> temp;
  if (world.is_root()) temp.emplace(log_path);
  mllog::Logger log(mllog::Logger::Options{.to_stdout = opts.flag("stdout"),
                                           .file = temp ? temp->path().string() : "",
                                           .name_space = "",
                                           .rank = world.rank(),
                                           .file_label = log_path.string()});
  // Another rank's failure ends the job from rank 0's watcher thread (comm/context.h): the run is logged as aborted
  // and its log committed first, unless this rank has finished it already (its own log then stands).
  std::mutex ending;
  bool ended = false;
  TimedRunState state;
  options.state = &state;
  if (temp)
    world.on_peer_failure([&](const std::string& line) {
      std::lock_guard<std::mutex> lock(ending);
      if (ended) return;
      ended = true;
      try {  // on the watcher thread: nothing may escape
        log_run_aborted(log, config, state);
        log.close_file();
        temp->commit();
        std::cerr << "bertperf run-once: run aborted (" << line << ") -> " << log_path.string() << "\n";
      } catch (const std::exception& e) {
        std::cerr << "bertperf run-once: error: " << e.what() << " (run aborted: " << line << ")\n";
      }
    });
  struct ClearHook {  // before `ending`, `log` and `temp` go, on every path
    DistContext& world;
    ~ClearHook() { world.on_peer_failure(nullptr); }
  } clear_hook{world};
  const TimedRunResult result = timed_run(config, system, log, options, world, train_session_factory(world));
  {
    // A failure reported from here on waits until the finished log is in place.
    std::lock_guard<std::mutex> lock(ending);
    ended = true;
    log.close_file();
    if (temp) temp->commit();
  }
  if (temp) {
    std::cerr << "bertperf run-once: " << result.status << " after "
              << (result.run_stop_ms - result.run_start_ms) / 60000.0 << " min, " << result.samples_trained
              << " samples, best mlm accuracy " << result.best_accuracy << ", seed " << result.seed
              << (result.abort_reason.empty() ? "" : " (" + result.abort_reason + ")") << " -> "
              << log_path.string() << "\n";
  }
  return result.success ? 0 : kExitAborted;
}

int cmd_run(const Args& args, DistContext& world) {
  const Options opts(args, {"config", "out", "runs", "system-file", "mpirun", "mpirun-args"},
                     {"resume", "no-progress", "help", "srun"});
  if (opts.flag("help")) {
    std::cout << kRunUsage;
    return 0;
  }
  if (!opts.positional().empty()) throw_input("command line", "unexpected argument '" + opts.positional()[0] + "'");
  const std::string config_path = opts.required("config");
  const TrainConfig config = load_train_config(config_path);  // fail fast, before any run starts
  const std::string system_file = system_file_for(config, opts);
  const SystemDescription system = load_system_description(system_file);
  const int64_t runs = opts.integer("runs", config.runs);
  if (runs < 1) throw_input("command line", "option --runs must be at least 1");

  const fs::path root = opts.get("out") ? fs::path(*opts.get("out"))
                                        : fs::path("results") / (config.benchmark + "_" + config.system);
  const fs::path result_dir = root / "results" / config.system / config.submission_benchmark;
  std::error_code mkdir_error;
  fs::create_directories(root, mkdir_error);
  if (mkdir_error) throw_input(root.string(), "cannot create the output directory: " + mkdir_error.message());
  lock_output_directory(root);
  fs::create_directories(result_dir);
  fs::create_directories(root / "systems");
  // The tree's system description says what the logs say: a benchmark that is not the closed one
  // (mini) is reported in the open division, and (after the runs) the software they name.
  Json described = system.raw;
  if (!config.division.empty()) described["division"] = config.division;
  write_atomically(root / "systems" / (config.system + ".json"), described.dump(4) + "\n");

  // Temporary logs of runs killed outright (SIGKILL, power loss) would fail the repository checker
  // (names starting with '.'); this process holds the tree's lock, which every live run of an
  // earlier `run` on it would still hold, so they are stale.
  for (const auto& entry : fs::directory_iterator(result_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".result_", 0) == 0 && name.find(".tmp.") != std::string::npos) {
      std::cerr << "bertperf run: removing stale temporary log " << entry.path().string() << "\n";
      fs::remove(entry.path());
    }
  }

  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  std::vector<std::string> launcher;
  if (opts.flag("srun")) {
    if (opts.get("mpirun")) throw_input("command line", "--srun and --mpirun exclude each other");
    if (!world.launch().slurm_allocation)
      throw_input("command line", "--srun needs a Slurm allocation (SLURM_JOB_ID is not set): use sbatch or salloc");
    launcher = {"srun", cat("--ntasks=", config.ranks), "--kill-on-bad-exit=1"};
    for (auto& a : split_spaces(opts.get("mpirun-args").value_or(""))) launcher.push_back(a);
  } else if (config.ranks > 1) {
    launcher = {opts.get("mpirun").value_or("mpirun"), "-np", std::to_string(config.ranks)};
    for (auto& a : split_spaces(opts.get("mpirun-args").value_or(""))) launcher.push_back(a);
  }
  int failures = 0;
  for (int64_t i = 0; i < runs; ++i) {
    const fs::path result = result_dir / cat("result_", i, ".txt");
    if (fs::exists(result)) {
      if (!opts.flag("resume"))
        throw_input(result.string(), "exists already; use --resume to keep it or choose another --out");
      if (log_is_complete(result)) continue;
      std::cerr << "bertperf run: " << result.string() << " is incomplete (it does not end with run_stop); "
                << "running it again\n";
      fs::remove(result);
    }
    std::vector<std::string> argv = launcher;
    for (const std::string& a : {self_executable(), std::string("run-once"), std::string("--config"), config_path,
                                 std::string("--log"), result.string(), std::string("--system-file"), system_file})
      argv.push_back(a);
    if (opts.flag("no-progress")) argv.push_back("--no-progress");
    std::cerr << "bertperf run: run " << i + 1 << " of " << runs << " -> " << result.string() << "\n";
    const int status = run_child(argv);
    if (g_signal) {
      std::cerr << "bertperf run: interrupted; run " << i << " left no result file\n";
      return 128 + g_signal;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == kExitAborted) ++failures;
    if (code != 0 && code != kExitAborted) {
      std::cerr << "bertperf run: run " << i << " failed (exit status " << code << "); stopping\n";
      return 1;
    }
  }

  describe_logged_software(root / "systems" / (config.system + ".json"), described, result_dir, runs);

  std::cout << "result set " << result_dir.string() << ":\n";
  for (int64_t i = 0; i < runs; ++i) {
    const fs::path result = result_dir / cat("result_", i, ".txt");
    const RunSummary s = summarize_log(result);
    std::printf("  result_%lld.txt  %-8s  %s min\n", (long long)i, s.status.c_str(),
                s.minutes < 0 ? "?" : cat(s.minutes).c_str());
  }
  if (failures > 1)
    std::cout << failures << " runs did not reach the target: more than one invalidates the result set\n";
  return 0;
}

}  // namespace bertperf::cli
