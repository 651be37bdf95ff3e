// `megaops hbm-ceiling`: the HBM read ceiling of one GPU (kernels/hbm_read.cuh), printed as
// "hbm_read_gbps VALUE". `bench` and `bench-matmul` run it as a child process
// (measure_hbm_ceiling_isolated): the ceiling measurement (22 launches of the read kernel between
// timing events) run in the process that then times decode steps left every later kernel boundary
// of that process ~0.45 us longer (llama3.1-8b batch 1 without PDL 4.60 -> 4.74 ms/token,
// qwen3-0.6b batch 8 1.19 -> 1.30; docs/perf-notes.md, "The HBM ceiling kernel slowed every later
// step of the bench process"), which no user's process pays.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/hbm_read.cuh"
#endif

extern char** environ;

namespace megaops::cli {

namespace {

void check_ceiling_options(int64_t mb, int iterations) {
  if (mb < 1 || mb > (int64_t{1} << 20))
    throw_input_error("--mb", "", "expected 1..1048576, found " + std::to_string(mb));
  if (iterations < 1 || iterations > 1000)
    throw_input_error("--iterations", "", "expected 1..1000, found " + std::to_string(iterations));
}

}  // namespace

Runner add_hbm_ceiling(CLI::App& app) {
  struct Opts {
    int64_t mb = 4096;
    int iterations = 20;
    int device = -1;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--mb", o->mb, "MiB read per timed pass (default 4096)");
  app.add_option("--iterations", o->iterations, "timed passes; the median is printed");
  app.add_option("--device", o->device, "CUDA device (default: the current one)");
  return [o]() -> int {
    check_ceiling_options(o->mb, o->iterations);
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("hbm-ceiling: no CUDA device");
    if (o->device >= 0) {
      int n = 0;
      MEGAOPS_CUDA_CHECK(cudaGetDeviceCount(&n));
      if (o->device >= n)
        throw_input_error(
            "--device", "",
            "expected 0.." + std::to_string(n - 1) + ", found " + std::to_string(o->device));
      MEGAOPS_CUDA_CHECK(cudaSetDevice(o->device));
    }
    const double gbps = measure_hbm_read_gbps(static_cast<size_t>(o->mb) << 20, o->iterations);
    std::printf("hbm_read_gbps %.1f\n", gbps);
    return 0;
#else
    throw DeviceError("hbm-ceiling: this build has no CUDA support");
#endif
  };
}

double measure_hbm_ceiling_isolated(int64_t mb, int iterations, int device) {
  // The options are checked once, by the child (its error line goes to this stderr).
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw Error("hbm ceiling: cannot find this executable (/proc/self/exe): " + ec.message());
  std::vector<std::string> args = {self,           "hbm-ceiling",
                                   "--mb",         std::to_string(mb),
                                   "--iterations", std::to_string(iterations),
                                   "--device",     std::to_string(device)};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) throw Error("hbm ceiling: cannot create a pipe for the child process");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    throw Error("hbm ceiling: cannot start " + self + " hbm-ceiling");
  }
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw DeviceError(
        "hbm ceiling: the child process `megaops hbm-ceiling` failed (its error is "
        "above)");
  double gbps = 0;
  if (std::sscanf(text.c_str(), "hbm_read_gbps %lf", &gbps) != 1 || !(gbps > 0))
    throw DeviceError(
        "hbm ceiling: expected 'hbm_read_gbps VALUE' from the child process, found '" + text + "'");
  return gbps;
}

}  // namespace megaops::cli
