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
  deliverer_ = std::thread([this] { deliver_loop(); });
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    delivery_stop_ = true;
  }
  delivery_cv_.notify_all();
  deliverer_.join();  // after the engine thread's last outputs are handed out
}

void AsyncEngine::deliver(Delivery batch) {
  if (batch.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deliveries_.push_back(std::move(batch));
  }
  delivery_cv_.notify_one();
}

void AsyncEngine::deliver_loop() {
  for (;;) {
    Delivery batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      delivery_cv_.wait(lock, [&] { return delivery_stop_ || !deliveries_.empty(); });
      if (deliveries_.empty()) return;  // stopped, everything handed out
      batch = std::move(deliveries_.front());
      deliveries_.pop_front();
      delivering_ = true;
    }
    for (auto& [channel, out] : batch) channel->push(std::move(out));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      delivering_ = false;
    }
    idle_cv_.notify_all();
  }
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
           stats_.waiting == 0 && deliveries_.empty() && !delivering_;
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
    Delivery out;  // this iteration's outputs, handed to the delivery thread at its end
    for (Pending& p : pending) {
      if (stop) {
        out.emplace_back(p.channel, ended(p.ticket, FinishReason::Abort, "abort"));
        continue;
      }
      try {
        const uint64_t id = engine_->add_request(std::move(p.prompt), p.params);
        live_[id] = {p.ticket, p.channel};
        engine_id_[p.ticket] = id;
      } catch (const std::exception& e) {
        out.emplace_back(p.channel, ended(p.ticket, FinishReason::Error, e.what()));
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
          out.emplace_back(who.second, ended(who.first, FinishReason::Error, e.what()));
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
        out.emplace_back(it->second.second, std::move(o));
        if (finished) {
          engine_id_.erase(it->second.first);
          live_.erase(it);
        }
      }
    }
    deliver(std::move(out));
    if (stepped)
      iterations_.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - iteration_start)
              .count());
    publish_stats();
    if (stop && !engine_->has_work()) return;
  }
}

}  // namespace megaops
