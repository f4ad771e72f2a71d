#include "server/in_flight.h"

#include <gtest/gtest.h>

#include <thread>

namespace llamaserve::server {
namespace {

using std::chrono::milliseconds;

TEST(InFlightCounter, TicketsCountUntilReleasedOrDestroyed) {
  InFlightCounter counter;
  EXPECT_TRUE(counter.wait_until_zero(milliseconds(0)));
  {
    InFlightCounter::Ticket a = counter.acquire();
    InFlightCounter::Ticket b = counter.acquire();
    EXPECT_EQ(counter.count(), 2);
    a.release();
    a.release();  // once only
    EXPECT_FALSE(a.held());
    EXPECT_EQ(counter.count(), 1);
    InFlightCounter::Ticket moved = std::move(b);
    EXPECT_FALSE(b.held());
    EXPECT_EQ(counter.count(), 1);
    EXPECT_FALSE(counter.wait_until_zero(milliseconds(1)));
  }
  EXPECT_EQ(counter.count(), 0);
}

TEST(InFlightCounter, TryAcquireStopsAtTheLimit) {
  InFlightCounter counter;
  std::optional<InFlightCounter::Ticket> first = counter.try_acquire(2);
  std::optional<InFlightCounter::Ticket> second = counter.try_acquire(2);
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(counter.try_acquire(2).has_value());
  EXPECT_EQ(counter.count(), 2);
  first.reset();
  EXPECT_TRUE(counter.try_acquire(2).has_value());  // and given back at once
  EXPECT_EQ(counter.count(), 1);
}

TEST(InFlightCounter, WaitEndsWhenTheLastTicketGoes) {
  InFlightCounter counter;
  InFlightCounter::Ticket ticket = counter.acquire();
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(20));
    ticket.release();
  });
  EXPECT_TRUE(counter.wait_until_zero(milliseconds(10000)));
  releaser.join();
}

}  // namespace
}  // namespace llamaserve::server
