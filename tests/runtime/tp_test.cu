// The tensor-parallel path of the executor: one rank through the TP path gives the
// single-GPU bits (runs on one GPU); two ranks, each a fresh process of this test binary joined
// through a rendezvous file, give the single-GPU tokens and logits within 2e-2 (skipped below
// two GPUs); bad options get one-line errors.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "io/rendezvous.h"
#include "kernels/tp_reduce.cuh"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "runtime/conventional.h"
#include "runtime/tp_comm.h"
#include "sync/error_record.h"
#include "test_util.h"

extern char** environ;

namespace megaops {
namespace {

namespace fs = std::filesystem;
using testing::rel_error;

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = globaltimer_ns();
  while (globaltimer_ns() - start < ns) {
  }
}

struct Generation {
  std::vector<int> tokens;
  std::vector<std::vector<float>> logits;
};

std::vector<std::vector<int>> prompts_for(const ModelConfig& cfg, int batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int>> p(batch);
  for (int b = 0; b < batch; ++b) {
    p[b].resize(3 + 2 * b);
    for (int& x : p[b]) x = static_cast<int>(rng() % cfg.vocab_size);
  }
  return p;
}

Generation generate(ConventionalExecutor& ex, const std::vector<std::vector<int>>& prompts,
                    int steps) {
  Generation r;
  r.tokens = ex.prefill(prompts);
  r.logits.push_back(ex.last_logits());
  for (int s = 0; s < steps; ++s) {
    const std::vector<int> t = ex.decode_step();
    r.tokens.insert(r.tokens.end(), t.begin(), t.end());
    r.logits.push_back(ex.last_logits());
  }
  return r;
}

ExecutorOptions options(int batch, bool pdl) {
  ExecutorOptions o;
  o.step_graph = build_step_graph;
  o.max_batch = batch;
  o.max_seq = 64;
  o.pdl = pdl;
  return o;
}

TEST(TensorParallelExecutor, OneRankIsTheSingleGpuPath) {
  MEGAOPS_REQUIRE_GPU();
  const uint64_t seed = testing::test_seed();
  TpComm comm(1, 0, 0, nccl_unique_id());
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"})
    for (bool pdl : {false, true})
      for (TpReduce reduce : {TpReduce::Nccl, TpReduce::Peer}) {
        // Peer at one rank: the reduce kernel adds the one partial to 0 (the same value), and its
        // counters, step and waits run as with more ranks.
        const std::string what =
            preset + " pdl " + std::to_string(pdl) + (reduce == TpReduce::Peer ? " peer" : " nccl");
        const ModelConfig cfg = preset_config(preset);
        const auto prompts = prompts_for(cfg, 3, seed);
        ConventionalExecutor plain(cfg, random_filler(seed), options(3, pdl));
        ExecutorOptions o = options(3, pdl);
        o.tp_comm = comm.comm();
        o.tp_reduce = reduce;
        ConventionalExecutor tp(cfg, random_filler(seed), o);
        const Generation a = generate(plain, prompts, 24), b = generate(tp, prompts, 24);
        EXPECT_EQ(a.tokens, b.tokens) << what;
        ASSERT_EQ(a.logits.size(), b.logits.size());
        for (size_t s = 0; s < a.logits.size(); ++s)
          EXPECT_EQ(a.logits[s], b.logits[s]) << what << " step " << s;
        EXPECT_EQ(tp.weight_bytes(), plain.weight_bytes()) << what;
      }
}

// The peer reduce kernel alone, two "ranks" on one GPU (the kernel does not care whether a
// pointer is local or mapped from a peer): each rank's kernel signals its own counter and waits
// for both; the rank whose partial is written late (a delayed copy on its stream) holds the other
// back; outputs poisoned before; three steps on monotonic counters.
TEST(PeerReduce, SumsInRankOrderOnceEveryRankSignalled) {
  MEGAOPS_REQUIRE_GPU();
  // DESIGN rule 1: nothing may load a module while a kernel spins.
  MEGAOPS_CUDA_CHECK(preload_tp_reduce_kernels());
  cudaFuncAttributes attr;
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, spin_kernel));
  std::mt19937_64 rng(testing::test_seed());
  const int64_t count = 3 * 1000 + 7;
  testing::DeviceBuffer<float> part0(count), part1(count), stage1(count), out0(count), out1(count);
  testing::DeviceBuffer<uint32_t> counters(2), step(1);
  MEGAOPS_CUDA_CHECK(cudaMemset(counters.ptr, 0, 2 * sizeof(uint32_t)));
  WatchdogRecord watchdog(5000);
  cudaStream_t s0, s1;
  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  for (uint32_t st = 1; st <= 3; ++st) {
    const std::vector<float> a = testing::random_floats(count, -1.f, 1.f, rng);
    const std::vector<float> b = testing::random_floats(count, -1.f, 1.f, rng);
    part0.upload(a);
    stage1.upload(b);
    part1.poison();
    out0.poison();
    out1.poison();
    MEGAOPS_CUDA_CHECK(cudaMemcpy(step.ptr, &st, sizeof(st), cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
    PeerReduceParams p;
    p.parts[0] = part0.ptr;
    p.parts[1] = part1.ptr;
    p.counters[0] = counters.ptr;
    p.counters[1] = counters.ptr + 1;
    p.step = step.ptr;
    p.ranks = 2;
    p.count = count;
    p.watchdog = watchdog.params();
    // Rank 0 first: it must wait for rank 1, whose partial lands only after a delay.
    PeerReduceParams r0 = p;
    r0.own_counter = counters.ptr;
    r0.out = out0.ptr;
    r0.launch = LaunchOptions{s0, false};
    ASSERT_EQ(launch_tp_peer_reduce(r0), cudaSuccess);
    spin_kernel<<<1, 1, 0, s1>>>(200000);  // 200 us
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(part1.ptr, stage1.ptr, count * sizeof(float),
                                       cudaMemcpyDeviceToDevice, s1));
    PeerReduceParams r1 = p;
    r1.own_counter = counters.ptr + 1;
    r1.out = out1.ptr;
    r1.launch = LaunchOptions{s1, false};
    ASSERT_EQ(launch_tp_peer_reduce(r1), cudaSuccess);
    watchdog.check(cudaDeviceSynchronize());
    std::vector<float> want(count);
    for (int64_t i = 0; i < count; ++i) want[i] = (0.f + a[i]) + b[i];
    EXPECT_EQ(out0.download(), want) << "step " << st;
    EXPECT_EQ(out1.download(), want) << "step " << st << ": the ranks must agree bit for bit";
    const std::vector<uint32_t> c = counters.download();
    EXPECT_EQ(c[0], st);
    EXPECT_EQ(c[1], st);
  }
  PeerReduceParams bad;
  EXPECT_EQ(launch_tp_peer_reduce(bad), cudaErrorInvalidValue);
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
}

TEST(TensorParallelExecutor, RejectsBadOptions) {
  MEGAOPS_REQUIRE_GPU();
  const ModelConfig cfg = preset_config("tiny-llama3");
  ExecutorOptions o = options(1, false);
  o.tp = 2;
  testing::expect_input_error([&] { ConventionalExecutor(cfg, random_filler(1), o); },
                              {"tp_comm", "tp = 2"});
  TpComm comm(1, 0, 0, nccl_unique_id());
  o = options(1, false);
  o.tp_comm = comm.comm();
  o.backend = DecodeBackend::Overlap;
  testing::expect_input_error([&] { ConventionalExecutor(cfg, random_filler(1), o); },
                              {"backend", "tensor parallelism"});
  o.backend = DecodeBackend::Conventional;
  o.prefill_path = PrefillPath::DecodeGraph;
  testing::expect_input_error([&] { ConventionalExecutor(cfg, random_filler(1), o); },
                              {"prefill_path", "tensor parallelism"});
  o.prefill_path = PrefillPath::Layers;
  {
    ConventionalExecutor ex(cfg, random_filler(1), o);
    testing::expect_input_error([&] { ex.set_prefill_path(PrefillPath::DecodeGraph); },
                                {"prefill_path", "tensor parallelism"});
  }
  testing::expect_input_error([] { TpComm(2, 2, 0, ""); }, {"rank", "expected 0..1"});
  testing::expect_input_error([] { TpComm(2, 1, 0, "short"); }, {"unique id", "found 5"});
  o = options(1, false);
  o.tp_reduce = TpReduce::Peer;
  testing::expect_input_error([&] { ConventionalExecutor(cfg, random_filler(1), o); },
                              {"tp_reduce", "communicator"});
}

// One rank of the two-rank test below, in a fresh process (MEGAOPS_TP_WORKER_* set by it):
// generates with its shard and writes tokens and logits to MEGAOPS_TP_WORKER_OUT.
TEST(TensorParallelExecutor, RankWorker) {
  const char* rank_env = std::getenv("MEGAOPS_TP_WORKER_RANK");
  if (rank_env == nullptr) GTEST_SKIP() << "started by TwoRanksMatchOneGpu only";
  const int rank = std::atoi(rank_env);
  const std::string preset = std::getenv("MEGAOPS_TP_WORKER_PRESET");
  const uint64_t seed = std::strtoull(std::getenv("MEGAOPS_TP_WORKER_SEED"), nullptr, 10);
  const ModelConfig cfg = preset_config(preset);
  // Rank 0's NCCL unique id through the rendezvous file, as tools/tp_launch hands it over.
  const std::string rendezvous = std::getenv("MEGAOPS_TP_WORKER_RENDEZVOUS");
  const std::string job = std::getenv("MEGAOPS_TP_WORKER_JOB");
  std::string id;
  if (rank == 0) {
    id = nccl_unique_id();
    rendezvous_publish(rendezvous, job, id);
  } else {
    id = rendezvous_wait(rendezvous, job, NCCL_UNIQUE_ID_BYTES, 60);
  }
  TpComm comm(2, rank, rank, id);
  ExecutorOptions o = options(3, true);
  o.tp = 2;
  o.tp_rank = rank;
  o.tp_comm = comm.comm();
  const char* reduce = std::getenv("MEGAOPS_TP_WORKER_REDUCE");
  o.tp_reduce =
      reduce != nullptr && std::string(reduce) == "peer" ? TpReduce::Peer : TpReduce::Nccl;
  ConventionalExecutor ex(cfg, random_filler(seed), o);
  const Generation r = generate(ex, prompts_for(cfg, 3, seed), 24);
  std::ofstream f(std::getenv("MEGAOPS_TP_WORKER_OUT"), std::ios::binary);
  const uint64_t nt = r.tokens.size(), ns = r.logits.size(), nv = r.logits[0].size();
  f.write(reinterpret_cast<const char*>(&nt), 8);
  f.write(reinterpret_cast<const char*>(r.tokens.data()), nt * sizeof(int));
  f.write(reinterpret_cast<const char*>(&ns), 8);
  f.write(reinterpret_cast<const char*>(&nv), 8);
  for (const auto& l : r.logits) f.write(reinterpret_cast<const char*>(l.data()), nv * 4);
  ASSERT_TRUE(f.good());
}

Generation read_run(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  Generation r;
  uint64_t nt = 0, ns = 0, nv = 0;
  f.read(reinterpret_cast<char*>(&nt), 8);
  r.tokens.resize(nt);
  f.read(reinterpret_cast<char*>(r.tokens.data()), nt * sizeof(int));
  f.read(reinterpret_cast<char*>(&ns), 8);
  f.read(reinterpret_cast<char*>(&nv), 8);
  r.logits.assign(ns, std::vector<float>(nv));
  for (auto& l : r.logits) f.read(reinterpret_cast<char*>(l.data()), nv * 4);
  if (!f) throw Error("cannot read " + path);
  return r;
}

// Two ranks (two processes, one GPU each) against one GPU: logits within 2e-2 per step, and
// greedy tokens equal wherever the single-GPU top-2 margin exceeds that tolerance (the margin rule
// of the HF comparison); both ranks produce the same tokens.
TEST(TensorParallelExecutor, TwoRanksMatchOneGpu) {
  MEGAOPS_REQUIRE_GPU();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs two GPUs, found " << devices;
  const uint64_t seed = testing::test_seed();
  const std::string dir = ::testing::TempDir(), tag = std::to_string(getpid());
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  for (const std::string reduce : {"nccl", "peer"})
    for (const std::string preset : {"tiny-llama3", "tiny-qwen3"}) {
      const ModelConfig cfg = preset_config(preset);
      ConventionalExecutor one(cfg, random_filler(seed), options(3, true));
      const Generation ref = generate(one, prompts_for(cfg, 3, seed), 24);
      const std::string rdv = dir + "/megaops-tp-rdv-" + tag,
                        job = preset + "-" + reduce + "-" + tag;
      fs::remove(rdv);
      std::vector<pid_t> pids;
      std::vector<std::string> outs;
      for (int rank = 0; rank < 2; ++rank) {
        outs.push_back(dir + "/megaops-tp-out-" + tag + "-" + std::to_string(rank));
        std::vector<std::string> env_s = {"MEGAOPS_TP_WORKER_RANK=" + std::to_string(rank),
                                          "MEGAOPS_TP_WORKER_PRESET=" + preset,
                                          "MEGAOPS_TP_WORKER_SEED=" + std::to_string(seed),
                                          "MEGAOPS_TP_WORKER_RENDEZVOUS=" + rdv,
                                          "MEGAOPS_TP_WORKER_JOB=" + job,
                                          "MEGAOPS_TP_WORKER_OUT=" + outs.back(),
                                          "MEGAOPS_TP_WORKER_REDUCE=" + reduce};
        for (char** e = environ; *e != nullptr; ++e) env_s.push_back(*e);
        std::vector<char*> envp;
        for (std::string& e : env_s) envp.push_back(e.data());
        envp.push_back(nullptr);
        std::string filter = "--gtest_filter=TensorParallelExecutor.RankWorker";
        char* argv[] = {const_cast<char*>(self.c_str()), filter.data(), nullptr};
        pid_t pid = 0;
        ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
        pids.push_back(pid);
      }
      for (pid_t pid : pids) {
        int st = 0;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
            << preset << ": a rank failed (" << st << ")";
      }
      const Generation r0 = read_run(outs[0]), r1 = read_run(outs[1]);
      EXPECT_EQ(r0.tokens, r1.tokens) << preset << ": the ranks disagree";
      ASSERT_EQ(r0.logits.size(), ref.logits.size());
      const size_t v = cfg.vocab_size;
      for (size_t s = 0; s < ref.logits.size(); ++s) {
        EXPECT_LE(rel_error(r0.logits[s].data(), ref.logits[s].data(), ref.logits[s].size()), 2e-2)
            << preset << " step " << s;
        for (size_t b = 0; b < 3; ++b) {
          const float* l = ref.logits[s].data() + b * v;
          std::vector<float> row(l, l + v);
          std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
          const double scale = std::max(1e-6f, std::fabs(row[0]));
          if ((row[0] - row[1]) / scale > 2e-2)
            EXPECT_EQ(r0.tokens[s * 3 + b], ref.tokens[s * 3 + b]) << preset << " step " << s;
        }
      }
      for (const std::string& o : outs) fs::remove(o);
      fs::remove(rdv);
    }
}

}  // namespace
}  // namespace megaops
