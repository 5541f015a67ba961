// cpu-async: the CPU fp32 backend ("cpu", cpu_backend.h) with a GPU's asynchrony, so that the bugs a GPU exposes
// (host memory rewritten before an asynchronous copy read it, a replayed graph pointing at freed memory, results read
// before they are ready) are found on the CPU. It runs the same ops, so its numbers are the fp32 backend's bit for
// bit at the same shapes (every batch at full capacity: "cpu" with "static_shapes": true). With "bf16": true it queues
// cpu-bf16's work instead: an asynchronous backend with bf16 memory, as the CUDA backend is.
//
// Every op, fill, conversion and copy is queued and runs in issue order on the backend's own worker thread, as on a
// CUDA stream (device.h's rules):
//  - an upload from PINNED memory this backend allocated is queued and reads the host buffer when it runs; any other
//    upload (every upload, with "blocking_uploads") returns once it has run (the host buffer may go at once);
//  - a download is queued: its host memory holds the result only after an event recorded after it has passed, or
//    synchronize();
//  - an event is a position in the queue: record() marks the work issued so far, host_wait() blocks until it has run
//    (from any thread: a reducer's communication thread too), wait() is already true of one queue;
//  - deallocate waits for all the work issued before it;
//  - capture() records the work `issue` makes without running it, and replay() queues it again: the ops read the
//    step's values from backend memory when they run, as a GPU graph does;
//  - a host function (enqueue_host_function) is a task like an op, run on the worker in its turn and captured like
//    one (the MPI transport queues its collectives so, comm/transport.h);
//  - the memory the ops that reduce in order take for their partial sums is resolved when an op is issued (captured
//    ops keep it, as a graph keeps its addresses) and follows backends/scratch_buffer.h's rule: it never grows
//    inside a capture and one outgrown after a capture is kept; an op whose buffer was freed before it ran is an
//    InternalError;
//  - an error thrown by queued work is rethrown by the next synchronize(), host_wait() or waiting upload, and by every
//    one after (the work queued after it is skipped, as a GPU context is lost after a fault); one that no wait saw is
//    said on stderr when the backend goes;
//  - with "delay_us", the worker waits a random time before each piece of work (cpu_async_options.h).
// Capabilities: asynchronous, capture, host functions and static shapes (every batch at its full capacity), as the
// CUDA backend; device memory is host memory (so MPI reduces it, in the queue's order or after its events).
//
// Queuing allocates nothing: the work is closures over the ops' parameter structs, held in place in a ring made at
// construction (the host waits while it is full, as a full GPU launch queue makes it wait).
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/cpu/cpu_async_options.h"

namespace bertperf {

std::unique_ptr<Backend> make_cpu_async_backend(const CpuAsyncOptions& options);

}  // namespace bertperf
