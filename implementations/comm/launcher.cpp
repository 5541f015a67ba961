// The launcher's account of this process (launcher.h), from the environment.
#include "comm/launcher.h"

#include <climits>
#include <cstdlib>

#include "core/errors.h"

namespace bertperf {

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::NONE: return "none";
    case Launcher::MPIRUN: return "mpirun";
    case Launcher::PMI: return "PMI";
    case Launcher::PMIX: return "PMIx";
    case Launcher::SRUN: return "srun";
  }
  return "unknown";
}

LaunchIdentity read_launch_identity(const Environment& env) {
  // An integer >= `least`, or nullopt when the variable is not set.
  auto number = [&](const char* var, long least, const char* what) -> std::optional<int> {
    const char* value = env(var);
    if (!value) return std::nullopt;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < least || n > INT_MAX) throw_input(var, cat("'", value, "' is not ", what));
    return static_cast<int>(n);
  };
  auto said = [&](const char* var) { return LaunchIdentity::Said{var, number(var, 0, "a count")}; };

  LaunchIdentity id;
  id.slurm_allocation = env("SLURM_JOB_ID") != nullptr;
  // The count, in the order a nested launch sets them (mpirun inside an srun step: mpirun's count wins).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (!env(var)) continue;
    id.tasks = *number(var, 1, "a number of tasks");
    id.several = id.tasks > 1;
    id.source = cat(var, "=", env(var));
    break;
  }
  if (id.source.empty() && env("PMIX_RANK")) {
    // PMIx alone gives no count here, but any rank past 0 means several tasks.
    id.several = std::string(env("PMIX_RANK")) != "0";
    id.source = cat("PMIX_RANK=", env("PMIX_RANK"));
  }
  if (env("OMPI_COMM_WORLD_SIZE")) {  // mpirun, also when it runs inside a Slurm step
    id.launcher = Launcher::MPIRUN;
    id.rank = said("OMPI_COMM_WORLD_RANK");
    id.local_rank = said("OMPI_COMM_WORLD_LOCAL_RANK");
    id.local_size = said("OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (env("SLURM_STEP_NUM_TASKS")) {  // srun, whatever its PMI
    id.launcher = Launcher::SRUN;
    id.rank = said("SLURM_PROCID");
    id.local_rank = said("SLURM_LOCALID");
    id.size = said("SLURM_STEP_NUM_TASKS");
    id.size2 = said("SLURM_NTASKS");
    id.node = said("SLURM_NODEID");
    id.nodes = said(env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES");
  } else if (env("PMI_SIZE")) {
    id.launcher = Launcher::PMI;
  } else if (env("PMIX_RANK")) {
    id.launcher = Launcher::PMIX;
  }
  id.srun_without_pmi = id.several && id.source.rfind("SLURM_STEP_NUM_TASKS=", 0) == 0 && !env("PMIX_RANK") &&
                        !env("PMI_RANK") && !env("PMI_FD");
  return id;
}

LaunchIdentity read_launch_identity() {
  return read_launch_identity([](const char* var) -> const char* { return std::getenv(var); });
}

}  // namespace bertperf
