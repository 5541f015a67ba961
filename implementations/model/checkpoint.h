// Model checkpoints: the parameters of a FlatTensors buffer in one HDF5 file, and beside them, from an FP8 run, the
// model's FP8 scaling state.
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
//
// FP8 state: a checkpoint of an FP8 run also holds the delayed-scaling state of the encoder's FP8 GEMMs, under the
// group kFp8StateGroup ("fp8/scale" and "fp8/amax_history", laid out by BertModel::fp8_state_table()), so a resumed
// run quantizes with the scales the interrupted one would have used. No TF name starts with "fp8/", so the file
// stays readable wherever parameters are read by name; load_checkpoint() skips the group.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor_table.h"

namespace bertperf {

inline constexpr const char* kCheckpointFormat = "bertperf-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;
inline constexpr const char* kFp8StateGroup = "fp8";

// Writes every tensor of `params`, and of `fp8_state` where given (its names start with kFp8StateGroup), to
// `path`, atomically (a temporary renamed into place).
void save_checkpoint(const FlatTensors& params, const std::string& path, const FlatTensors* fp8_state = nullptr);

// Fills every tensor of `params` from `path`. On an error `params` may be partly overwritten.
void load_checkpoint(FlatTensors& params, const std::string& path);

// Whether `path` holds FP8 scaling state.
bool has_fp8_state(const std::string& path);

// Fills every tensor of `fp8_state` from `path`; a tensor missing or of another shape (another layer count, another
// amax history length) is refused with one InputError naming the file and the tensor.
void load_fp8_state(FlatTensors& fp8_state, const std::string& path);

}  // namespace bertperf
