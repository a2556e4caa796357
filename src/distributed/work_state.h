// What a Work shares with the communication thread that completes it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/distributed/process_group.h"

namespace kiln::distributed {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty: the collective succeeded
  double seconds = 0;
  uint64_t seq = 0;   // the collective's number in this process's issue order
  int64_t bytes = 0;  // what it reduces or sends, as sent
  void finish(std::string error, double seconds);
};

class WorkAccess {
 public:
  static void set(Work& work, std::shared_ptr<Work::State> state) {
    work.state_ = std::move(state);
  }
};

}  // namespace kiln::distributed
