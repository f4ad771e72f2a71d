#include "server/in_flight.h"

namespace llamaserve::server {

void InFlightCounter::Ticket::release() {
  if (counter_ == nullptr) return;
  std::exchange(counter_, nullptr)->release_one();
}

InFlightCounter::Ticket InFlightCounter::acquire() {
  std::lock_guard lock(mutex_);
  ++count_;
  return Ticket(this);
}

std::optional<InFlightCounter::Ticket> InFlightCounter::try_acquire(int limit) {
  std::lock_guard lock(mutex_);
  if (count_ >= limit) return std::nullopt;
  ++count_;
  return Ticket(this);
}

bool InFlightCounter::wait_until_zero(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return released_.wait_for(lock, timeout, [&] { return count_ == 0; });
}

int InFlightCounter::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void InFlightCounter::release_one() {
  {
    std::lock_guard lock(mutex_);
    --count_;
  }
  released_.notify_all();
}

}  // namespace llamaserve::server
