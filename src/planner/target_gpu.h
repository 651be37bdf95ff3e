// The GPU a plan is made for: its CUDA device name, HBM read ceiling and SM count. They come from
// the evidence (a `megaops profile --json` file or a megaops-op-bench/1 file records the GPU it
// was measured on and, since they carry them, its ceiling and SMs), from flags, or, with neither,
// from the cost model's defaults (the H200 the project started on). Evidence is keyed by GPU
// (service_table.h): planning for the GPU the evidence came from is what lets it be used at all,
// and evidence from several GPUs is refused rather than used for one and ignored for the rest.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace megaops {

struct TargetGpu {
  std::string name;     // CUDA's device name ("NVIDIA H100 80GB HBM3")
  double hbm_gbps = 0;  // HBM read ceiling, GB/s (1e9 bytes/s); 0: not known
  int sms = 0;          // streaming multiprocessors; 0: not known
  std::string source;   // where the name came from: a file, "--gpu" or the defaults
};

// What an evidence file says about the GPU it was measured on: "gpu" (required), and
// "hbm_read_ceiling_gbps" and "sms" where it records them (files written before they did have
// neither: 0). InputError "<origin>: <field>: expected ..., found ..." otherwise.
TargetGpu evidence_gpu(const std::string& text, const std::string& origin);

// What the user gave on the command line (each optional).
struct TargetGpuFlags {
  std::optional<std::string> gpu;
  std::optional<double> hbm_gbps;
  std::optional<int> sms;
};

// The GPU to plan for. Every evidence file must name the same GPU, and --gpu, when given, that
// one too: otherwise one InputError naming two sources and their GPUs. The ceiling and the SMs
// come from the flags, else from the first evidence file that records them (the SMs of every file
// that records them must agree), else, for the GPU the cost model's defaults describe
// (`defaults`), from those; another GPU without them is an InputError asking for the flag.
// Neither evidence nor --gpu: the defaults (with any --hbm-gbps / --sms applied).
TargetGpu resolve_target_gpu(const std::vector<TargetGpu>& evidence, const TargetGpuFlags& flags,
                             const TargetGpu& defaults);

// The defaults of CostModel (name, memory bandwidth and workers), as a TargetGpu.
TargetGpu default_target_gpu(const CostModel& cost);

// Plans for `gpu`: the service-table key, the memory queue's bandwidth (the HBM read ceiling),
// the CTA slots (one per SM) and the fixed splits offered (half and two thirds of the SMs).
void apply_target_gpu(const TargetGpu& gpu, CostModel& cost, PlanOptions& options);

}  // namespace megaops
