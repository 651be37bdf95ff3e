// `megaops bench-boundary`: what a kernel boundary costs inside a CUDA graph on this GPU, plain and
// with PDL (kernels/boundary_bench.cuh): a chain of dependent reads against one flat read of the
// same bytes. Prints both per boundary and writes them as a megaops-op-bench/1 file whose
// `kernel_boundary` entries `megaops plan --profile FILE` takes as its cost model's launch_us
// (plain) and pdl_wait_us (PDL) on the same GPU.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/boundary_bench.cuh"
#endif

namespace megaops::cli {

Runner add_bench_boundary(CLI::App& app) {
  struct Opts {
    int kernels = 64;
    int64_t kb = 32768;
    int iterations = 20;
    std::string json_out;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--kernels", o->kernels, "kernels in the chain (default 64: 63 boundaries)");
  app.add_option("--kb", o->kb,
                 "KiB each kernel reads (default 32768: a 1B-class layer's weights, so each "
                 "boundary sits between bandwidth-bound kernels, as in a decode step)");
  app.add_option("--iterations", o->iterations, "timed replays of each graph; medians are used");
  app.add_option("--json", o->json_out, "write the megaops-op-bench/1 file here");
  return [o]() -> int {
    if (o->kernels < 2 || o->kernels > 4096)
      throw_input_error("--kernels", "", "expected 2..4096, found " + std::to_string(o->kernels));
    if (o->kb < 1 || o->kb > (int64_t{1} << 22) || o->kb * o->kernels > (int64_t{1} << 26))
      throw_input_error("--kb", "",
                        "expected 1..4194304 with at most 64 GiB over the chain, found " +
                            std::to_string(o->kb) + " x " + std::to_string(o->kernels));
    if (o->iterations < 1 || o->iterations > 1000)
      throw_input_error("--iterations", "",
                        "expected 1..1000, found " + std::to_string(o->iterations));
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench-boundary: no CUDA device");
    // Recorded beside the GPU's name, so `megaops plan` plans for the GPU the boundaries were
    // measured on; in a child process, before this one times anything (cmd_hbm_ceiling.cpp).
    const double ceiling_gbps = o->json_out.empty() ? 0 : measure_hbm_ceiling_isolated(4096, 20, 0);
    const BoundaryBenchResult r =
        measure_kernel_boundaries(static_cast<size_t>(o->kb) << 10, o->kernels, o->iterations);
    for (int k = 0; k < r.kernels; ++k)
      if (r.plain_words[k] != static_cast<unsigned>(k + 1) ||
          r.pdl_words[k] != static_cast<unsigned>(k + 1))
        throw DeviceError("bench-boundary: kernel " + std::to_string(k) +
                          " of the chain read its predecessor's word out of order (plain " +
                          std::to_string(r.plain_words[k]) + ", pdl " +
                          std::to_string(r.pdl_words[k]) + ", expected " + std::to_string(k + 1) +
                          ")");
    cudaDeviceProp prop{};
    MEGAOPS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("flat read %.1f us, %d chained reads %.1f us plain / %.1f us pdl (%.1f MiB each)\n",
                r.flat_us, r.kernels, r.plain_us, r.pdl_us, r.bytes_per_kernel / 1048576.0);
    std::printf("kernel_boundary plain %.3f us\nkernel_boundary pdl %.3f us\n",
                r.plain_boundary_us(), r.pdl_boundary_us());
    if (!o->json_out.empty()) {
      // The service table takes no negative time: a boundary that measured below the flat read
      // (noise) is written as free, and said so.
      auto entry = [&](const char* shape, double us) {
        if (us < 0)
          std::fprintf(stderr, "bench-boundary: %s boundary measured %.3f us, written as 0\n",
                       shape, us);
        return nlohmann::json{{"op", "kernel_boundary"}, {"shape", shape},
                              {"backend", "standalone"}, {"cta_budget", prop.multiProcessorCount},
                              {"us", us < 0 ? 0.0 : us}, {"samples", r.iterations}};
      };
      const nlohmann::json j = {
          {"schema", "megaops-op-bench/1"},
          {"gpu", prop.name},
          {"hbm_read_ceiling_gbps", ceiling_gbps},
          {"sms", prop.multiProcessorCount},
          {"dtype", "bf16"},
          {"kernels", r.kernels},
          {"bytes_per_kernel", r.bytes_per_kernel},
          {"flat_us", r.flat_us},
          {"plain_us", r.plain_us},
          {"pdl_us", r.pdl_us},
          {"entries", {entry("plain", r.plain_boundary_us()), entry("pdl", r.pdl_boundary_us())}}};
      std::ofstream f(o->json_out);
      if (!f || !(f << j.dump(1) << "\n")) throw Error("cannot write " + o->json_out);
    }
    return 0;
#else
    throw DeviceError("bench-boundary: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
