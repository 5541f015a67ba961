// Who started this process and what the launcher says it is: read from the environment once, by
// DistContext::create (context.h), and nowhere else. Everything else asks the context (rank, local rank, node) or
// its launch() (how the job was started); no other code reads a launcher's variables.
//
// Launched means the environment names a launcher's job: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE or
// PMIX_RANK (PMI launchers), SLURM_STEP_NUM_TASKS (srun; not SLURM_PROCID alone, which a batch script's own shell
// has too). The counts are read in the order a nested launch sets them (mpirun inside an srun step: mpirun's wins).
// What the launcher says of this process is read from the launcher that started it: under mpirun
// OMPI_COMM_WORLD_RANK, _LOCAL_RANK and _LOCAL_SIZE; under srun (no mpirun inside it) SLURM_PROCID, SLURM_LOCALID,
// SLURM_STEP_NUM_TASKS and SLURM_NTASKS, SLURM_NODEID, SLURM_STEP_NUM_NODES (or SLURM_NNODES). A value that is not
// a number is bad input (InputError naming the variable).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace bertperf {

enum class Launcher : uint8_t { NONE, MPIRUN, PMI, PMIX, SRUN };
const char* launcher_name(Launcher launcher);  // "none", "mpirun", "PMI", "PMIx", "srun"

struct LaunchIdentity {
  // One value the launcher gave, with the variable it came from (for messages); no value: it says nothing.
  struct Said {
    const char* var = nullptr;
    std::optional<int> value;
  };

  Launcher launcher = Launcher::NONE;
  std::string source;    // the variable that says a launcher started us, "OMPI_COMM_WORLD_SIZE=4"; "" for none
  int tasks = 0;         // the tasks it started (0: it does not say)
  bool several = false;  // more than one task
  Said rank, local_rank, local_size, size, size2, node, nodes;
  // srun without an MPI plugin: several tasks and no PMIx or PMI contact for MPI to join them through.
  bool srun_without_pmi = false;
  bool slurm_allocation = false;  // inside a Slurm allocation (SLURM_JOB_ID), launched or not

  bool launched() const { return launcher != Launcher::NONE; }
};

// The environment as a function of a variable's name (null: not set); std::getenv by default, a table in tests.
using Environment = std::function<const char*(const char*)>;
LaunchIdentity read_launch_identity(const Environment& env);
LaunchIdentity read_launch_identity();  // from this process's environment

}  // namespace bertperf
