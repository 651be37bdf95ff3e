// `--tp N` of bench and generate: one process per GPU. The process the user starts is
// rank 0; it starts ranks 1..N-1 as copies of itself (the same command line plus --tp-rank,
// --tp-job and --tp-rendezvous) and waits for them. To span hosts, start each rank yourself with
// the same --tp, --tp-job and a --tp-rendezvous path on a shared filesystem, and --tp-rank R
// (--tp-device picks the GPU; default rank % GPUs).
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#ifdef MEGAOPS_HAVE_CUDA
#include "runtime/conventional.h"
#include "runtime/tp_comm.h"
#endif

namespace megaops::cli {

struct TpOptions {
  int tp = 1;
  int rank = -1;  // -1: the process the user started (rank 0, starts the others)
  std::string job, rendezvous;
  int device = -1;
  std::string reduce = "nccl";  // --tp-reduce: nccl | peer (ExecutorOptions::tp_reduce)
  std::string nccl_lib;         // --nccl-lib (empty: libnccl.so.2)
};

void add_tp_options(CLI::App& app, TpOptions& o);

// InputError naming the flag: --tp outside 1..64, --tp-reduce other than nccl / peer, peer at
// --tp 1. (TpRanks checks them too; the CPU oracle's path, which starts no ranks, calls this.)
void validate_tp_options(const TpOptions& o);

// The command line of this process (main() records it), for starting the other ranks.
void set_command_line(int argc, char** argv);

// Rank 0 of a job started here: starts the other ranks, and on destruction waits for them (and
// stops them if this rank failed). Validates the options (InputError naming the flag); fills in
// rank, job and rendezvous.
class TpRanks {
 public:
  explicit TpRanks(TpOptions& o);
  ~TpRanks();
  TpRanks(const TpRanks&) = delete;
  TpRanks& operator=(const TpRanks&) = delete;
  // Waits for the other ranks; throws Error naming the first that failed.
  void join();

 private:
  std::vector<pid_t> pids_;
  bool joined_ = false;
};

#ifdef MEGAOPS_HAVE_CUDA
// This rank's communicator on its GPU (--tp-device, or rank % GPUs); null at tp = 1. Throws
// InputError naming --tp-device when it is not a GPU of this host.
std::unique_ptr<TpComm> open_tp_comm(const TpOptions& o);

// Puts rank and communicator (if any) into the executor's options.
void set_tp_options(ExecutorOptions& eo, const TpOptions& o, const TpComm* comm);
#endif

}  // namespace megaops::cli
