// Model checkpoints: the parameters of a FlatTensors buffer in one HDF5 file.
//
// Layout: one float32 dataset per TF variable name, with the TF shape (kernels [in, out]); the
// name's slashes become HDF5 groups, so "bert/pooler/dense/kernel" is that dataset path and h5py
// users see the same names as TF. The root group carries the attributes
//   format  = "bertperf-checkpoint"
//   version = 1
// Loading reads exactly the tensors of the destination's table: each must be present with the
// table's shape (else one InputError naming the file and the tensor), and anything else in the file
// (optimizer slots such as .../LAMB or .../adam_m, global_step, ...) is ignored, the way the
// reference restores only trainable variables from the phase-1 checkpoint. A file without the
// format attribute is accepted, so a checkpoint written by a plain h5py script loads too; a file
// that names another format or a newer version is refused.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor_table.h"

namespace bertperf {

inline constexpr const char* kCheckpointFormat = "bertperf-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;

// Writes every tensor of `params` to `path`, atomically (a temporary renamed into place).
void save_checkpoint(const FlatTensors& params, const std::string& path);

// Fills every tensor of `params` from `path`. On an error `params` may be partly overwritten.
void load_checkpoint(FlatTensors& params, const std::string& path);

}  // namespace bertperf
