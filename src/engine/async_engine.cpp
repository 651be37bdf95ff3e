// See async_engine.h.
#include "engine/async_engine.h"

#include <algorithm>
#include <chrono>

namespace megaops {

namespace {

RequestOutput ended(uint64_t ticket, FinishReason reason, std::string detail) {
  RequestOutput o;
  o.id = ticket;
  o.finished = true;
  o.finish_reason = reason;
  o.stop_reason = std::move(detail);
  return o;
}

}  // namespace

void RequestChannel::push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

std::vector<RequestOutput> RequestChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  std::vector<RequestOutput> out(std::make_move_iterator(queue_.begin()),
                                 std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

AsyncEngine::AsyncEngine(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  stats_ = engine_->stats();
  iterations_ = stats_.engine_iteration_s;  // empty, with the engine's buckets
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

AsyncEngine::Ticket AsyncEngine::submit(std::vector<int> prompt, const RequestParams& params,
                                        std::shared_ptr<RequestChannel> channel) {
  engine_->check_request(prompt, params);  // const: safe beside the engine thread
  Ticket t;
  t.channel = channel ? std::move(channel) : std::make_shared<RequestChannel>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!admitting_ || stop_) throw Unavailable("the server is shutting down");
    t.id = next_ticket_++;
    pending_.push_back({t.id, std::move(prompt), params, t.channel});
  }
  work_cv_.notify_all();
  return t;
}

void AsyncEngine::abort(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& p) { return p.ticket == ticket; });
    if (it != pending_.end()) {
      it->channel->push(ended(ticket, FinishReason::Abort, "abort"));
      pending_.erase(it);
      return;
    }
    aborts_.push_back(ticket);
  }
  work_cv_.notify_all();
}

void AsyncEngine::close_admission() {
  std::lock_guard<std::mutex> lock(mutex_);
  admitting_ = false;
}

bool AsyncEngine::admitting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return admitting_;
}

bool AsyncEngine::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_until(lock, deadline, [&] {
    return pending_.empty() && aborts_.empty() && !busy_ && stats_.running == 0 &&
           stats_.waiting == 0;
  });
}

void AsyncEngine::abort_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Pending& p : pending_) p.channel->push(ended(p.ticket, FinishReason::Abort, "abort"));
    pending_.clear();
    aborts_.push_back(0);  // 0: every live request (tickets start at 1)
  }
  work_cv_.notify_all();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = stats_;
  s.waiting += static_cast<int>(pending_.size());
  return s;
}

void AsyncEngine::publish_stats() {
  EngineStats s = engine_->stats();
  s.engine_iteration_s = iterations_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = std::move(s);
    busy_ = false;
  }
  idle_cv_.notify_all();
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<Pending> pending;
    std::vector<uint64_t> aborts;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] {
        return stop_ || !pending_.empty() || !aborts_.empty() || engine_->has_work();
      });
      pending.swap(pending_);
      aborts.swap(aborts_);
      stop = stop_;
      busy_ = true;
    }
    const auto iteration_start = std::chrono::steady_clock::now();
    bool stepped = false;
    for (Pending& p : pending) {
      if (stop) {
        p.channel->push(ended(p.ticket, FinishReason::Abort, "abort"));
        continue;
      }
      try {
        const uint64_t id = engine_->add_request(std::move(p.prompt), p.params);
        live_[id] = {p.ticket, p.channel};
        engine_id_[p.ticket] = id;
      } catch (const std::exception& e) {
        p.channel->push(ended(p.ticket, FinishReason::Error, e.what()));
      }
    }
    const bool all = stop || std::find(aborts.begin(), aborts.end(), 0) != aborts.end();
    if (all) {
      for (const auto& [id, who] : live_) engine_->abort(id);
    } else {
      for (uint64_t t : aborts) {
        auto it = engine_id_.find(t);
        if (it != engine_id_.end()) engine_->abort(it->second);
      }
    }
    if (engine_->has_work()) {
      stepped = true;
      std::vector<RequestOutput> outs;
      try {
        outs = engine_->step();
      } catch (const std::exception& e) {
        // Engine::step reports a failed runner step per request; anything else ends them all.
        for (const auto& [id, who] : live_) {
          who.second->push(ended(who.first, FinishReason::Error, e.what()));
          engine_->abort(id);
        }
        live_.clear();
        engine_id_.clear();
        try {
          engine_->step();  // collects the aborts' outputs, now addressed to no one
        } catch (const std::exception&) {
        }
      }
      for (RequestOutput& o : outs) {
        auto it = live_.find(o.id);
        if (it == live_.end()) continue;
        const bool finished = o.finished;
        o.id = it->second.first;  // the ticket: what the front end knows the request by
        it->second.second->push(std::move(o));
        if (finished) {
          engine_id_.erase(it->second.first);
          live_.erase(it);
        }
      }
    }
    if (stepped)
      iterations_.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - iteration_start)
              .count());
    publish_stats();
    if (stop && !engine_->has_work()) return;
  }
}

}  // namespace megaops
