// See runtime_flags.h.
#include "runtime_flags.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "sync/error_record.h"
#endif

namespace megaops::cli {

void add_runtime_flags(CLI::App& app, RuntimeFlags& f) {
  app.add_option("--greedy-in-lm-head", f.greedy_in_lm_head,
                 "1 (default): greedy sampling as the argmax in the LM head's epilogue where it "
                 "streams; 0: the sampler reads the logits");
  app.add_option("--chain-o-early-trigger", f.chain_o_early_trigger,
                 "1 (default): in the PDL chain the O projection starts gate_up at the top of its "
                 "wait where its weights fit its rings; 0: after it");
  app.add_option("--matmul-path", f.matmul_path,
                 "developer knob: small, stream, cublaslt, stream-for-small or auto (default, "
                 "the shape rule)");
  app.add_option("--matmul-stream-shapes", f.matmul_stream_shapes,
                 "developer knob: weight shapes NxK,NxK put on the streaming kernel");
  app.add_option("--stream-stages", f.stream_stages,
                 "developer knob: ring slots of the streaming kernel (default: its own)");
  app.add_option("--stream-kernel", f.stream_kernel,
                 "developer knob: ring or bulk (default: bulk on sm_90)");
  app.add_option("--stream-l2-evict-first", f.stream_l2_evict_first,
                 "1 (default): the bulk kernel's weight copies evict_first in L2; 0: evict_normal "
                 "(a diagnostic)");
  app.add_option("--matmul-tune", f.matmul_tune,
                 "1: time cuBLASLt's candidate kernels and use the fastest (default 0)");
  app.add_option("--watchdog-ms", f.watchdog_ms,
                 "bound of every tile wait in ms, 0 = none (default 2000; 30000 for the peer "
                 "reduce of tensor parallelism)");
  app.add_option("--tile-wait-max-ns", f.tile_wait_max_ns,
                 "back-off cap of a waiting thread's sleep, 0..1000000 ns (default 64, 0 = spin)");
  app.add_option("--prefill-attention", f.prefill_attention,
                 "the layer prefill's attention: flash (default, the own tensor-core kernel) or "
                 "cudnn (cuDNN's fused SDPA, loaded at run time; falls back to flash, saying so)");
  app.add_option("--cudnn-lib", f.cudnn_lib,
                 "the cuDNN library --prefill-attention cudnn loads: a file name or path "
                 "(default libcudnn.so.9 from the loader's search path), e.g. "
                 ".../site-packages/nvidia/cudnn/lib/libcudnn.so.9");
}

#ifdef MEGAOPS_HAVE_CUDA
void apply_runtime_flags(const RuntimeFlags& f, ExecutorOptions& eo) {
  eo.greedy_in_lm_head = f.greedy_in_lm_head;
  eo.overlap_early_trigger_o_proj = f.chain_o_early_trigger;
  if (!f.matmul_path.empty()) parse_matmul_path(f.matmul_path, &eo.matmul, "--matmul-path");
  if (!f.matmul_stream_shapes.empty())
    eo.matmul.stream_shapes =
        parse_matmul_stream_shapes(f.matmul_stream_shapes, "--matmul-stream-shapes");
  if (!f.stream_stages.empty())
    eo.matmul.stream_stages = parse_stream_stages(f.stream_stages, "--stream-stages");
  if (!f.stream_kernel.empty())
    eo.matmul.stream_bulk = parse_stream_kernel(f.stream_kernel, "--stream-kernel");
  eo.matmul.stream_l2_evict_first = f.stream_l2_evict_first;
  eo.matmul.tune = f.matmul_tune;
  if (!f.watchdog_ms.empty()) {
    const uint64_t ms = parse_watchdog_ms(f.watchdog_ms, "--watchdog-ms");
    eo.overlap_watchdog_ms = static_cast<int64_t>(ms);
    eo.tp_peer_watchdog_ms = static_cast<int64_t>(ms);
  }
  if (!f.tile_wait_max_ns.empty())
    eo.wait_sleep_max_ns = parse_wait_sleep_max_ns(f.tile_wait_max_ns, "--tile-wait-max-ns");
  if (!f.prefill_attention.empty())
    eo.prefill_attention = parse_prefill_attention(f.prefill_attention, "--prefill-attention");
  eo.cudnn_lib = f.cudnn_lib;
}
#endif

}  // namespace megaops::cli
