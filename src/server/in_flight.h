// A count of things in flight, held through RAII tickets: the HTTP server counts its
// admitted generation requests (bounded) and the generation responses it is still producing
// (which draining waits for) with one each.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

namespace llamaserve::server {

class InFlightCounter {
 public:
  // One unit of the count, given back by release() or the destructor, whichever comes first.
  // Move-only. PRECONDITION: the counter outlives its tickets.
  class Ticket {
   public:
    Ticket() = default;  // holds nothing
    Ticket(Ticket&& other) noexcept : counter_(std::exchange(other.counter_, nullptr)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        release();
        counter_ = std::exchange(other.counter_, nullptr);
      }
      return *this;
    }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { release(); }

    // Gives the unit back now; later calls (and the destructor) do nothing.
    void release();
    bool held() const { return counter_ != nullptr; }

   private:
    friend class InFlightCounter;
    explicit Ticket(InFlightCounter* counter) : counter_(counter) {}
    InFlightCounter* counter_ = nullptr;
  };

  InFlightCounter() = default;
  InFlightCounter(const InFlightCounter&) = delete;
  InFlightCounter& operator=(const InFlightCounter&) = delete;

  Ticket acquire();
  // A ticket if fewer than `limit` are held, otherwise none.
  std::optional<Ticket> try_acquire(int limit);
  // Waits until no ticket is held, at most `timeout`. True if none is.
  bool wait_until_zero(std::chrono::milliseconds timeout);
  int count() const;

 private:
  void release_one();

  mutable std::mutex mutex_;
  std::condition_variable released_;
  int count_ = 0;  // guarded by mutex_
};

}  // namespace llamaserve::server
