// OpQueue (see queue.hpp).
#include "queue.hpp"

namespace spcoll {

OpQueue::OpQueue() : s_(std::make_shared<State>()) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->stop = true;
  }
  s_->work.notify_all();
  if (!t_.joinable())
    return;
  if (std::this_thread::get_id() == t_.get_id())
    t_.detach();  // loop() holds the state it still reads
  else
    t_.join();
}

void OpQueue::push(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> l(s_->mu);
    s_->q.push_back(std::move(job));
    if (!t_.joinable()) {
      t_ = std::thread(loop, s_);
      s_->id = t_.get_id();
    }
  }
  s_->work.notify_one();
}

void OpQueue::drain() {
  std::unique_lock<std::mutex> l(s_->mu);
  if (std::this_thread::get_id() == s_->id)
    return;
  s_->idle.wait(l, [this] { return s_->q.empty() && !s_->busy; });
}

bool OpQueue::on_thread() const {
  std::lock_guard<std::mutex> l(s_->mu);
  return std::this_thread::get_id() == s_->id;
}

bool OpQueue::idle() const {
  std::lock_guard<std::mutex> l(s_->mu);
  return s_->q.empty() && !s_->busy;
}

void OpQueue::loop(std::shared_ptr<State> s) {
  std::unique_lock<std::mutex> l(s->mu);
  for (;;) {
    s->work.wait(l, [&] { return s->stop || !s->q.empty(); });
    if (s->q.empty()) {
      return;  // stopped, and nothing left to run
    }
    std::function<void()> job = std::move(s->q.front());
    s->q.pop_front();
    s->busy = true;
    l.unlock();
    job();
    job = nullptr;  // what it holds goes before the queue says idle
    l.lock();
    s->busy = false;
    if (s->q.empty())
      s->idle.notify_all();
  }
}

}  // namespace spcoll
