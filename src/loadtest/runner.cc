#include "loadtest/runner.h"

#include <algorithm>
#include <deque>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "loadtest/client.h"
#include "loadtest/workload.h"

namespace llamaserve::loadtest {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto kProgressInterval = std::chrono::milliseconds(200);
constexpr auto kReconnectPause = std::chrono::milliseconds(100);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct Runner::State {
  asio::io_context io{1};
  ServerUrl url;
  tcp::resolver::results_type endpoints;
  std::string authorization;
  Clock::duration request_timeout{};
  int32_t max_connections = 0;
  std::vector<std::shared_ptr<Connection>> idle;  // most recently used last

  std::shared_ptr<Connection> acquire() {
    if (!idle.empty()) {
      std::shared_ptr<Connection> c = std::move(idle.back());
      idle.pop_back();
      return c;
    }
    return std::make_shared<Connection>(io, endpoints, url, authorization);
  }

  HttpCall streaming_call(const PlannedRequest& request) const {
    HttpCall call;
    call.target = request.target;
    call.body = request.body;
    call.timeout = request_timeout;
    return call;
  }

  // Runs the loop until it has no work left, then readies it for the next run.
  void run() {
    io.run();
    io.restart();
  }
};

// The bookkeeping shared by both loops.
class StepRun {
 public:
  StepRun(Runner::State& state, const StepLimits& limits, const RequestSource& next,
          const ProgressCallback& progress)
      : state_(state),
        limits_(limits),
        next_(next),
        progress_(progress),
        start_(Clock::now()),
        deadline_(start_ + seconds(limits.duration_s)),
        ticker_(state.io) {}

  bool may_issue(Clock::time_point now) const {
    if (limits_.requests > 0 && counters_.started >= limits_.requests) return false;
    return limits_.duration_s <= 0 || now < deadline_;
  }
  Clock::time_point start() const { return start_; }
  Clock::time_point deadline() const { return deadline_; }

  // Starts `request` on `connection` now; `then` runs after the record is kept.
  void issue(const std::shared_ptr<Connection>& connection, Clock::time_point now,
             std::function<void(Outcome)> then) {
    const PlannedRequest request = next_();
    ++counters_.started;
    connection->start(state_.streaming_call(request), now,
                      [this, planned = request.planned_prompt_tokens,
                       then = std::move(then)](RequestRecord record) {
                        record.planned_prompt_tokens = planned;
                        ++counters_.finished;
                        if (record.outcome != Outcome::kOk) ++counters_.failed;
                        if (record.outcome == Outcome::kOk) {
                          counters_.output_tokens += record.output_tokens();
                        }
                        const Outcome outcome = record.outcome;
                        records_.push_back(std::move(record));
                        then(outcome);
                      });
  }

  // Reports progress every kProgressInterval while `busy()` says the step goes on.
  void tick(std::function<bool()> busy) {
    busy_ = std::move(busy);
    arm_ticker();
  }

  StepResult finish(StepLoad load) {
    StepResult out;
    out.load = load;
    if (!records_.empty()) {
      Clock::time_point first = records_.front().sent, last = records_.front().end;
      for (const RequestRecord& r : records_) {
        first = std::min(first, r.sent);
        last = std::max(last, r.end);
      }
      out.elapsed_s = std::chrono::duration<double>(last - first).count();
    }
    counters_.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
    if (progress_) progress_(counters_);
    out.records = std::move(records_);
    return out;
  }

 private:
  void arm_ticker() {
    ticker_.expires_after(kProgressInterval);
    ticker_.async_wait([this](error_code ec) {
      if (ec) return;
      counters_.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
      if (progress_) progress_(counters_);
      if (busy_()) arm_ticker();
    });
  }

  Runner::State& state_;
  const StepLimits limits_;
  const RequestSource& next_;
  const ProgressCallback& progress_;
  const Clock::time_point start_;
  const Clock::time_point deadline_;
  asio::steady_timer ticker_;
  std::function<bool()> busy_;
  StepCounters counters_;
  std::vector<RequestRecord> records_;
};

Runner::Runner(std::unique_ptr<State> state) : state_(std::move(state)) {}
Runner::~Runner() = default;

Result<std::unique_ptr<Runner>> Runner::create(const LoadtestConfig& config) {
  auto state = std::make_unique<State>();
  LS_ASSIGN_OR_RETURN(state->url, parse_server_url(config.url));
  error_code ec;
  tcp::resolver resolver(state->io);
  state->endpoints = resolver.resolve(state->url.host, state->url.port, ec);
  if (ec) {
    return make_error(StatusCode::kNotFound, "cannot resolve {}: {}", state->url.host,
                      ec.message());
  }
  if (!config.api_key.empty()) state->authorization = "Bearer " + config.api_key;
  state->request_timeout = seconds(config.request_timeout_s);
  state->max_connections = config.max_connections;
  return std::unique_ptr<Runner>(new Runner(std::move(state)));
}

RequestRecord Runner::call(const std::string& method, const std::string& target,
                           const std::string& body, double timeout_s) {
  State& s = *state_;
  std::shared_ptr<Connection> connection = s.acquire();
  HttpCall call;
  call.method = method;
  call.target = target;
  call.body = body;
  call.timeout = seconds(timeout_s);
  call.streaming = false;
  call.keep_body_bytes = 1 << 20;
  RequestRecord out;
  connection->start(std::move(call), Clock::now(),
                    [&out](RequestRecord record) { out = std::move(record); });
  s.run();
  s.idle.push_back(std::move(connection));
  return out;
}

StepResult Runner::run_closed(int32_t streams, const StepLimits& limits, const RequestSource& next,
                              const ProgressCallback& progress) {
  State& s = *state_;
  StepRun run(s, limits, next, progress);
  std::vector<std::shared_ptr<Connection>> connections;
  std::vector<std::unique_ptr<asio::steady_timer>> pauses;
  int32_t active = streams;
  for (int32_t i = 0; i < streams; ++i) {
    connections.push_back(s.acquire());
    pauses.push_back(std::make_unique<asio::steady_timer>(s.io));
  }
  std::function<void(size_t)> stream = [&](size_t i) {
    const Clock::time_point now = Clock::now();
    if (!run.may_issue(now)) {
      --active;
      return;
    }
    run.issue(connections[i], now, [&, i](Outcome outcome) {
      if (outcome != Outcome::kConnectError) return stream(i);
      pauses[i]->expires_after(kReconnectPause);
      pauses[i]->async_wait([&, i](error_code) { stream(i); });
    });
  };
  for (int32_t i = 0; i < streams; ++i) stream(static_cast<size_t>(i));
  run.tick([&] { return active > 0; });
  s.run();
  for (std::shared_ptr<Connection>& c : connections) s.idle.push_back(std::move(c));
  return run.finish(StepLoad{true, static_cast<double>(streams)});
}

StepResult Runner::run_open(double rate_per_s, uint64_t seed, const StepLimits& limits,
                            const RequestSource& next, const ProgressCallback& progress) {
  State& s = *state_;
  StepRun run(s, limits, next, progress);
  PoissonSchedule schedule(rate_per_s, seed);
  asio::steady_timer arrival_timer(s.io);
  std::deque<Clock::time_point> waiting;  // arrivals that found every connection busy
  int64_t arrivals = 0, in_flight = 0, connections = 0, waited = 0;
  bool arriving = true;
  double max_lag_ms = 0;

  std::function<void(std::shared_ptr<Connection>, Clock::time_point)> send;
  auto release = [&](std::shared_ptr<Connection> connection) {
    if (!waiting.empty()) {
      const Clock::time_point scheduled = waiting.front();
      waiting.pop_front();
      return send(std::move(connection), scheduled);
    }
    s.idle.push_back(std::move(connection));
  };
  send = [&](std::shared_ptr<Connection> connection, Clock::time_point scheduled) {
    const Clock::time_point now = Clock::now();
    max_lag_ms =
        std::max(max_lag_ms, std::chrono::duration<double, std::milli>(now - scheduled).count());
    ++in_flight;
    run.issue(connection, now, [&, connection](Outcome) {
      --in_flight;
      release(connection);
    });
  };
  auto arrive = [&](Clock::time_point scheduled) {
    ++arrivals;
    if (!s.idle.empty() || connections < s.max_connections) {
      if (s.idle.empty()) ++connections;
      return send(s.acquire(), scheduled);
    }
    ++waited;
    waiting.push_back(scheduled);
  };
  std::function<void()> arm = [&] {
    const Clock::time_point when = run.start() + seconds(schedule.next_s());
    const bool more = (limits.requests <= 0 || arrivals < limits.requests) &&
                      (limits.duration_s <= 0 || when < run.deadline());
    if (!more) {
      arriving = false;
      return;
    }
    arrival_timer.expires_at(when);
    arrival_timer.async_wait([&, when](error_code ec) {
      if (ec) return;
      arrive(when);
      arm();
    });
  };
  // Connections left idle by earlier steps count against the limit as they are taken.
  connections = static_cast<int64_t>(s.idle.size());
  arm();
  run.tick([&] { return arriving || in_flight > 0 || !waiting.empty(); });
  s.run();
  StepResult out = run.finish(StepLoad{false, rate_per_s});
  out.max_send_lag_ms = max_lag_ms;
  out.waited_for_connection = waited;
  return out;
}

}  // namespace llamaserve::loadtest
