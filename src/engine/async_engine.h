// The engine behind a thread-safe queue, for front ends with many threads (the HTTP server): one
// engine thread owns the Engine and steps it while it has work; other threads submit requests and
// wait on each request's channel for its outputs, and may abort a request at any time (a client
// that went away). A delivery thread hands each step's outputs to their channels, in the order
// the engine produced them, so the engine thread pays one handoff a step instead of a wake-up of
// every waiting front-end thread (on the GPU, 32 streams' wake-ups were ~0.08 ms a step). Admission
// can be closed (draining at shutdown): submit() then refuses with Unavailable, while the running
// requests finish.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "megaops/engine.h"

namespace megaops {

// submit() while admission is closed.
class Unavailable : public Error {
 public:
  using Error::Error;
};

// One request's outputs, from the engine thread to the thread that waits for them.
class RequestChannel {
 public:
  void push(RequestOutput out);
  // The outputs queued so far, waiting up to `timeout` for the first (empty on timeout).
  std::vector<RequestOutput> wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

class AsyncEngine {
 public:
  // Starts the engine thread.
  explicit AsyncEngine(std::unique_ptr<Engine> engine);
  // Aborts what is left and joins the engine thread.
  ~AsyncEngine();
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  struct Ticket {
    uint64_t id = 0;  // for abort(); not the engine's request id
    std::shared_ptr<RequestChannel> channel;
  };
  // Checks the request now (InputError naming the field, as Engine::check_request) and queues it
  // for the engine thread; its outputs arrive on the ticket's channel (`channel`, or a new one:
  // several requests may share one), the last one finished, each with id = the ticket's id.
  // Throws Unavailable when admission is closed.
  Ticket submit(std::vector<int> prompt, const RequestParams& params,
                std::shared_ptr<RequestChannel> channel = nullptr);
  // Ends a request wherever it is (queued here, waiting or running in the engine): its blocks are
  // freed and its channel gets a finished output with reason "abort". Unknown ids are ignored.
  void abort(uint64_t ticket);

  // Refuses later submit()s; running and queued requests go on.
  void close_admission();
  bool admitting() const;
  // Waits until nothing is queued or running, or `deadline`; true when drained.
  bool drain(std::chrono::steady_clock::time_point deadline);
  // Aborts every request.
  void abort_all();

  // The engine's statistics after its last step (requests queued here count as waiting).
  EngineStats stats() const;
  // What the constructor fixed (safe from any thread).
  const Engine& engine() const { return *engine_; }

 private:
  // A step's outputs for their channels, in order.
  using Delivery = std::vector<std::pair<std::shared_ptr<RequestChannel>, RequestOutput>>;

  void loop();
  void deliver_loop();
  // Queues `batch` for the delivery thread (engine thread).
  void deliver(Delivery batch);
  void publish_stats();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_, idle_cv_;
  struct Pending {
    uint64_t ticket;
    std::vector<int> prompt;
    RequestParams params;
    std::shared_ptr<RequestChannel> channel;
  };
  std::vector<Pending> pending_;
  std::vector<uint64_t> aborts_;
  bool stop_ = false, admitting_ = true, busy_ = false;
  uint64_t next_ticket_ = 1;
  EngineStats stats_;
  // Batches the engine thread produced and the delivery thread has not handed out yet; delivering_
  // while it hands one out (drain waits for both), delivery_stop_ once the engine thread is gone.
  std::deque<Delivery> deliveries_;
  bool delivering_ = false, delivery_stop_ = false;
  std::condition_variable delivery_cv_;
  Histogram iterations_;  // the loop's iterations with work (the loop thread's own)
  // Engine thread only: engine request id -> (ticket, channel), ticket -> engine request id.
  std::map<uint64_t, std::pair<uint64_t, std::shared_ptr<RequestChannel>>> live_;
  std::map<uint64_t, uint64_t> engine_id_;
  std::thread thread_, deliverer_;
};

}  // namespace megaops
