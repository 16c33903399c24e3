// The thread that runs a process group's async CPU ops one at a time, in
// issue order, as ProcessGroupGloo's work threads do: an op run there with
// spc_run reads and writes the caller's tensors where they are, which a
// request started with spc_start cannot (it stages them). The client's
// lock is released while such an op waits for the other ranks
// (spc_client_set_wait_lock), so the queues of different groups, and the
// caller's own thread, never wait behind each other.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace spcoll {

class OpQueue {
 public:
  OpQueue();
  // The jobs queued run first. On the queue's own thread (the last
  // reference to the backend dropped by a job) the thread is left to end
  // by itself.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Runs job after those pushed before; the thread starts on first use.
  void push(std::function<void()> job);
  // Returns once every job pushed so far has run. Not on the queue's own
  // thread (it returns at once there: the running job is the caller).
  void drain();
  bool on_thread() const;
  // Nothing queued and no job running. With a flag the jobs read first
  // set before, a job taken after this says true sees the flag.
  bool idle() const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable work, idle;
    std::deque<std::function<void()>> q;
    bool busy = false, stop = false;
    std::thread::id id;
  };
  static void loop(std::shared_ptr<State> s);
  std::shared_ptr<State> s_;
  std::thread t_;
};

}  // namespace spcoll
