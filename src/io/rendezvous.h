// A file rendezvous for the processes of one tensor-parallel job: rank 0 publishes a
// small opaque blob (NCCL's unique id) under a job token, the other ranks wait for it. The file
// may be on a shared filesystem, so one path spans hosts. The job token keeps a rank from taking
// a blob a previous job left behind. Host code only; no CUDA, no NCCL.
#pragma once

#include <string>

namespace megaops {

// Writes "megaops-rendezvous/1 <job>\n" + blob to `path` atomically (a temporary file in the same
// directory, then rename). Throws Error naming the path on failure.
void rendezvous_publish(const std::string& path, const std::string& job, const std::string& blob);

// Waits until `path` holds a blob of `size` bytes for `job` and returns it; a file for another job
// is ignored (it is still the previous job's). Throws Error naming the path, the job and the wait
// after `timeout_s` seconds.
std::string rendezvous_wait(const std::string& path, const std::string& job, size_t size,
                            double timeout_s);

}  // namespace megaops
