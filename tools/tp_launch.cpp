// See tp_launch.h.
#include "tp_launch.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "commands.h"
#include "core/error.h"
#include "io/rendezvous.h"

extern char** environ;

namespace megaops::cli {

namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

}  // namespace

void set_command_line(int argc, char** argv) {
  command_line().assign(argv, argv + argc);
}

void add_tp_options(CLI::App& app, TpOptions& o) {
  app.add_option("--tp", o.tp, "tensor-parallel ranks, one process and GPU each (default 1)");
  app.add_option("--tp-rank", o.rank, "this process's rank (set when joining a job)");
  app.add_option("--tp-job", o.job, "job token shared by the ranks (set when joining a job)");
  app.add_option("--tp-rendezvous", o.rendezvous,
                 "file the ranks meet through (a shared filesystem spans hosts)");
  app.add_option("--tp-device", o.device, "GPU of this rank (default rank % GPUs)");
  app.add_option("--tp-reduce", o.reduce,
                 "how decode steps add the ranks' partial sums: nccl (all-reduce) or peer (one "
                 "kernel reading the other GPUs' memory; ranks of one host)");
  app.add_option("--nccl-lib", o.nccl_lib,
                 "the NCCL library to load for tensor parallelism (default libnccl.so.2)");
}

void validate_tp_options(const TpOptions& o) {
  if (o.tp < 1 || o.tp > 64)
    throw_input_error("--tp", "", "expected 1..64, found " + std::to_string(o.tp));
  check_one_of("--tp-reduce", o.reduce, {"nccl", "peer"});
  if (o.reduce == "peer" && o.tp < 2)
    throw_input_error("--tp-reduce", "",
                      "peer needs --tp 2 or more, found --tp " + std::to_string(o.tp));
}

TpRanks::TpRanks(TpOptions& o) {
  validate_tp_options(o);
  if (o.rank >= o.tp)
    throw_input_error(
        "--tp-rank", "",
        "expected 0.." + std::to_string(o.tp - 1) + ", found " + std::to_string(o.rank));
  if (o.rank > 0 && (o.job.empty() || o.rendezvous.empty()))
    throw_input_error("--tp-rank", "", "a joining rank needs --tp-job and --tp-rendezvous");
  if (o.rank >= 0 || o.tp == 1) {
    if (o.rank < 0) o.rank = 0;
    if (o.rank > 0) set_progress_quiet(true);  // rank 0 reports for the job
    return;                                    // joining (or nothing to start)
  }
  o.rank = 0;
  if (o.job.empty()) {
    std::random_device rd;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
    o.job = buf;
  }
  if (o.rendezvous.empty())
    o.rendezvous = (std::filesystem::temp_directory_path() / ("megaops-tp-" + o.job)).string();
  const std::vector<std::string>& args = command_line();
  if (args.empty()) throw Error("tp: internal: the command line was not recorded");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int r = 1; r < o.tp; ++r) {
    std::vector<std::string> a = args;
    for (const std::string& extra :
         {std::string("--tp-rank"), std::to_string(r), std::string("--tp-job"), o.job,
          std::string("--tp-rendezvous"), o.rendezvous})
      a.push_back(extra);
    std::vector<char*> argv;
    for (std::string& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      for (pid_t p : pids_) kill(p, SIGTERM);
      throw Error("tp: cannot start rank " + std::to_string(r) + " (" + self + ")");
    }
    pids_.push_back(pid);
  }
}

void TpRanks::join() {
  joined_ = true;
  std::string failed;
  for (size_t i = 0; i < pids_.size(); ++i) {
    int st = 0;
    if (waitpid(pids_[i], &st, 0) != pids_[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      if (failed.empty()) failed = "tp: rank " + std::to_string(i + 1) + " failed";
  }
  pids_.clear();
  if (!failed.empty()) throw Error(failed);
}

TpRanks::~TpRanks() {
  if (joined_) return;
  // This rank failed (an exception is unwinding): the others would wait for it forever.
  for (pid_t p : pids_) kill(p, SIGTERM);
  for (pid_t p : pids_) waitpid(p, nullptr, 0);
}

#ifdef MEGAOPS_HAVE_CUDA
// How long a joining rank waits for rank 0's NCCL unique id.
constexpr double RENDEZVOUS_TIMEOUT_S = 120;

std::unique_ptr<TpComm> open_tp_comm(const TpOptions& o) {
  if (o.tp <= 1) return nullptr;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1)
    throw DeviceError("tp: no CUDA device");
  const int device = o.device >= 0 ? o.device : o.rank % devices;
  if (device >= devices)
    throw_input_error(
        "--tp-device", "",
        "expected 0.." + std::to_string(devices - 1) + ", found " + std::to_string(device));
  // Rank 0 creates NCCL's unique id and publishes it through the rendezvous file; the others wait
  // for it (at most RENDEZVOUS_TIMEOUT_S).
  std::string id;
  if (o.rank == 0) {
    id = nccl_unique_id(o.nccl_lib);
    rendezvous_publish(o.rendezvous, o.job, id);
  } else {
    try {
      id = rendezvous_wait(o.rendezvous, o.job, NCCL_UNIQUE_ID_BYTES, RENDEZVOUS_TIMEOUT_S);
    } catch (const Error& e) {
      throw DeviceError(std::string("tensor parallel rank ") + std::to_string(o.rank) + ": " +
                        e.what());
    }
  }
  return std::make_unique<TpComm>(o.tp, o.rank, device, id, o.nccl_lib);
}

void set_tp_options(ExecutorOptions& eo, const TpOptions& o, const TpComm* comm) {
  if (comm == nullptr) return;
  eo.tp = o.tp;
  eo.tp_rank = o.rank;
  eo.tp_comm = comm->comm();
  eo.tp_reduce = o.reduce == "peer" ? TpReduce::Peer : TpReduce::Nccl;
}
#endif

}  // namespace megaops::cli
