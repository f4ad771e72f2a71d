#include "parallel/distributed/rendezvous.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace llamaserve {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kHelloTimeout{10000};  // a connection that says nothing is not a rank
constexpr milliseconds kSetupAfterConnect{30000};

std::string join_ranks(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TpCoordinator

Result<std::unique_ptr<TpCoordinator>> TpCoordinator::listen(const std::string& host, int port) {
  LS_ASSIGN_OR_RETURN(const TpListener listener, listen_tcp(host, port));
  return std::unique_ptr<TpCoordinator>(new TpCoordinator(listener.fd, listener.port));
}

TpCoordinator::~TpCoordinator() { close_listener(); }

void TpCoordinator::close_listener() {
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

std::vector<std::string> TpCoordinator::describe_ranks() const {
  std::vector<std::string> out;
  for (size_t r = 1; r < ranks_.size(); ++r) {
    if (ranks_[r]) out.push_back(fmt::format("rank {}: {}", r, origins_[r]));
  }
  return out;
}

Status TpCoordinator::check_hello(const TpHello& hello, const std::string& address,
                                  const TpGroupConfig& config) const {
  const std::string who = fmt::format("{} from {}", hello.origin, address);
  if (hello.world != config.world) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} ({}) was started for {} ranks, rank 0 for {}: give every rank "
                      "the same --tp",
                      hello.rank, who, hello.world, config.world);
  }
  if (hello.rank == 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "a second rank 0 ({}): rank 0 is the server; start the other ranks with "
                      "--tp-rank 1 to {}",
                      who, config.world - 1);
  }
  if (ranks_[static_cast<size_t>(hello.rank)]) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} joined twice: from {}, and before that from {}", hello.rank, who,
                      origins_[static_cast<size_t>(hello.rank)]);
  }
  if (hello.model_fingerprint != config.model_fingerprint) {
    return make_error(StatusCode::kInvalidArgument,
                      "rank {} ({}) loaded another model (fingerprint {:016x}; rank 0's is "
                      "{:016x}): every rank needs the same GGUF file",
                      hello.rank, who, hello.model_fingerprint, config.model_fingerprint);
  }
  return Status::ok();
}

Status TpCoordinator::accept_ranks(const TpGroupConfig& config, TpDeadline deadline) {
  if (config.world < 2 || config.world > kTpMaxWorld) {
    return make_error(StatusCode::kInvalidArgument, "tensor-parallel world {} outside [2, {}]",
                      config.world, kTpMaxWorld);
  }
  if (listener_ < 0) {
    return Status(StatusCode::kInternal, "accept_ranks: the listening socket is closed");
  }
  const auto start = TpClock::now();
  world_ = config.world;
  ranks_.clear();
  ranks_.resize(static_cast<size_t>(world_));
  origins_.assign(static_cast<size_t>(world_), std::string());
  std::string dropped;  // the last connection dropped as not a rank, for the timeout's message
  int joined = 0;
  while (joined < world_ - 1) {
    std::vector<pollfd> fds = {{listener_, POLLIN, 0}};
    if (poll_until(fds, deadline) == 0) {
      std::vector<int> missing;
      for (int r = 1; r < world_; ++r) {
        if (!ranks_[static_cast<size_t>(r)]) missing.push_back(r);
      }
      const std::vector<std::string> present = describe_ranks();
      Status timeout = make_error(
          StatusCode::kDeadlineExceeded,
          "waited {} ms on port {} for tensor-parallel rank(s) {} of {}; {}{}{}. Start each with "
          "`llamaserve tp-worker --tp {} --tp-rank R --tp-coordinator HOST:{}`",
          ms_until(deadline, start), port_, join_ranks(missing), world_,
          present.empty() ? std::string("none joined")
                          : fmt::format("{}", fmt::join(present, "; ")),
          dropped.empty() ? "" : "; dropped a connection that was not a rank: ", dropped, world_,
          port_);
      fail(timeout);
      return timeout;
    }
    std::string from;
    const int fd = accept_tcp(listener_, from);
    if (fd < 0) continue;  // the peer gave up already, or a signal
    auto connection = std::make_unique<TpConnection>(fd, "a connection from " + from);
    Status status =
        connection->receive(message_, std::min(deadline, tp_deadline_after(kHelloTimeout)));
    if (status.is_ok() && message_.kind != TpMessageKind::kHello) {
      status = make_error(StatusCode::kInvalidArgument, "{} sent a {} message before its hello",
                          connection->peer(), tp_message_kind_name(message_.kind));
    }
    if (!status.is_ok()) {
      spdlog::warn("tensor parallel: dropped {}: {}", connection->peer(), status.to_string());
      encode_status(0, status, 0, frame_);
      (void)connection->send(frame_);  // it may listen (another build's rank); best effort
      dropped = status.message();
      continue;
    }
    const TpHello& hello = message_.hello;
    const Status refused = check_hello(hello, from, config);
    if (!refused.is_ok()) {
      encode_status(0, refused, 0, frame_);
      (void)connection->send(frame_);
      fail(refused);
      return refused;
    }
    encode_setup(config.setup, frame_);
    if (Status sent = connection->send(frame_); !sent.is_ok()) {
      spdlog::warn("tensor parallel: rank {} from {} left before its setup: {}", hello.rank, from,
                   sent.to_string());
      continue;  // it may come back
    }
    const auto r = static_cast<size_t>(hello.rank);
    origins_[r] = fmt::format("{} from {}", hello.origin, from);
    connection->set_peer(fmt::format("rank {} ({})", hello.rank, origins_[r]));
    ranks_[r] = std::move(connection);
    ++joined;
    spdlog::info("tensor parallel: rank {} of {} joined: {}", hello.rank, world_, origins_[r]);
  }
  close_listener();
  return Status::ok();
}

Status TpCoordinator::broadcast(std::string_view what) {
  if (!failed_.is_ok()) return failed_;
  for (size_t r = 1; r < ranks_.size(); ++r) {
    Status sent = ranks_[r]->send(frame_);
    if (!sent.is_ok()) {
      Status status = sent.with_context(what);
      fail(status);
      return status;
    }
  }
  return Status::ok();
}

Status TpCoordinator::collect(uint32_t step, int local_done_fd,
                              const std::function<Status()>* local_result, TpDeadline deadline,
                              std::string_view phase, std::vector<int64_t>* values) {
  if (!failed_.is_ok()) return failed_;
  const auto start = TpClock::now();
  std::vector<bool> answered(ranks_.size(), false);
  size_t waiting = ranks_.size() - 1;
  bool local_done = local_done_fd < 0;
  std::vector<pollfd> fds;
  std::vector<size_t> rank_of;
  while (waiting > 0 || !local_done) {
    fds.clear();
    rank_of.clear();
    if (!local_done) fds.push_back({local_done_fd, POLLIN, 0});
    for (size_t r = 1; r < ranks_.size(); ++r) {
      if (answered[r]) continue;
      fds.push_back({ranks_[r]->fd(), POLLIN | POLLRDHUP, 0});
      rank_of.push_back(r);
    }
    const int ready = poll_until(fds, deadline);
    if (ready <= 0) {
      std::vector<int> silent;
      for (size_t r : rank_of) silent.push_back(static_cast<int>(r));
      Status status =
          ready < 0 ? make_error(StatusCode::kIo, "{}: poll: {}", phase, std::strerror(errno))
          : silent.empty()
              ? make_error(StatusCode::kDeadlineExceeded, "{}: rank 0's own pass took over {} ms",
                           phase, ms_until(deadline, start))
              : make_error(StatusCode::kDeadlineExceeded,
                           "{}: no answer from rank(s) {} within {} ms", phase, join_ranks(silent),
                           ms_until(deadline, start));
      fail(status);
      return status;
    }
    size_t first_rank = 0;
    if (!local_done) {
      local_done = (fds[0].revents & POLLIN) != 0;
      first_rank = 1;
      if (local_done) {
        Status local = (*local_result)();
        if (!local.is_ok()) {
          local = local.with_context(fmt::format("{}: rank 0", phase));
          fail(local);
          return local;
        }
      }
    }
    for (size_t i = first_rank; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const size_t r = rank_of[i - first_rank];
      Status status = ranks_[r]->receive(message_, deadline);
      if (status.is_ok() && (message_.kind != TpMessageKind::kStatus || message_.step != step)) {
        status =
            make_error(StatusCode::kInternal,
                       "{} answered with a {} message of step {}; expected the status of "
                       "step {}",
                       ranks_[r]->peer(), tp_message_kind_name(message_.kind), message_.step, step);
      } else if (status.is_ok() && !message_.status.is_ok()) {
        status = Status(message_.status.code(),
                        fmt::format("{}: {}", ranks_[r]->peer(), message_.status.message()));
      }
      if (!status.is_ok()) {
        status = status.with_context(phase);
        fail(status);
        return status;
      }
      if (values != nullptr) (*values)[r] = message_.value;
      answered[r] = true;
      --waiting;
    }
  }
  return Status::ok();
}

Result<std::vector<int64_t>> TpCoordinator::gather(std::string_view phase, TpDeadline deadline) {
  std::vector<int64_t> values(ranks_.size(), 0);
  LS_RETURN_IF_ERROR(collect(0, -1, nullptr, deadline, phase, &values));
  return values;
}

Status TpCoordinator::send_start(int32_t kv_blocks) {
  encode_start(kv_blocks, frame_);
  return broadcast("sending the KV block count");
}

Status TpCoordinator::send_comm_id(const TpCommId& id) {
  encode_comm_id(id, frame_);
  return broadcast("sending the NCCL id");
}

Status TpCoordinator::send_batch(uint32_t step, const Batch& batch) {
  if (!failed_.is_ok()) return failed_;
  Status encoded = encode_batch(step, batch, frame_);
  if (!encoded.is_ok()) return encoded;  // the caller's batch, not the group, is at fault
  return broadcast(fmt::format("step {}", step));
}

Status TpCoordinator::await_step(uint32_t step, int local_done_fd,
                                 const std::function<Status()>& local_result, TpDeadline deadline) {
  return collect(step, local_done_fd, &local_result, deadline, fmt::format("step {}", step),
                 nullptr);
}

Status TpCoordinator::shutdown(TpDeadline deadline) {
  if (!failed_.is_ok()) return failed_;
  encode_shutdown(frame_);
  LS_RETURN_IF_ERROR(broadcast("shutting the ranks down"));
  LS_RETURN_IF_ERROR(collect(0, -1, nullptr, deadline, "shutting the ranks down", nullptr));
  for (size_t r = 1; r < ranks_.size(); ++r) ranks_[r].reset();
  return Status::ok();
}

void TpCoordinator::fail(const Status& reason) {
  if (!failed_.is_ok()) return;
  failed_ = reason.is_ok() ? Status(StatusCode::kInternal, "fail() without a reason") : reason;
  close_listener();
  encode_status(0, failed_, 0, frame_);
  for (size_t r = 1; r < ranks_.size(); ++r) {
    if (!ranks_[r]) continue;
    // Best effort and never blocking: the rank may be gone or not reading.
    (void)::send(ranks_[r]->fd(), frame_.data(), frame_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ranks_[r]->shutdown();
  }
}

// ---------------------------------------------------------------------------------------------
// TpWorkerLink

Result<std::unique_ptr<TpWorkerLink>> TpWorkerLink::join(const HostPort& coordinator,
                                                         const TpHello& hello,
                                                         TpDeadline deadline) {
  const std::string target = fmt::format("{}:{}", coordinator.host, coordinator.port);
  auto connected = connect_tcp(coordinator, deadline);
  if (!connected.is_ok()) {
    return make_error(connected.status().code(),
                      "rank 0 unreachable: {}; is `llamaserve serve --tp-rank 0 --tp-listen {}` "
                      "running there and reachable from this host?",
                      connected.status().message(), coordinator.port);
  }
  const int fd = *connected;
  auto connection = std::make_unique<TpConnection>(fd, "rank 0 at " + target);
  std::vector<uint8_t> frame;
  encode_hello(hello, frame);
  LS_RETURN_IF_ERROR(connection->send(frame));
  TpMessage reply;
  // Rank 0 answers hellos one at a time: allow for one before ours that stalls.
  const TpDeadline answer = std::max(deadline, tp_deadline_after(kSetupAfterConnect));
  Status status = connection->receive(reply, answer);
  if (!status.is_ok()) return status.with_context("waiting for the setup");
  if (reply.kind == TpMessageKind::kStatus && !reply.status.is_ok()) {
    return Status(reply.status.code(), fmt::format("rank 0 at {} refused rank {}: {}", target,
                                                   hello.rank, reply.status.message()));
  }
  if (reply.kind != TpMessageKind::kSetup) {
    return make_error(StatusCode::kInternal, "rank 0 at {} answered the hello with a {} message",
                      target, tp_message_kind_name(reply.kind));
  }
  return std::unique_ptr<TpWorkerLink>(new TpWorkerLink(std::move(connection), reply.setup));
}

Status TpWorkerLink::send_status(uint32_t step, const Status& status, int64_t value) {
  encode_status(step, status, value, frame_);
  return connection_->send(frame_);
}

Status TpWorkerLink::receive(TpMessageKind expected) {
  Status status = connection_->receive(message_, kTpNoDeadline);
  if (!status.is_ok()) {
    return status.with_context(fmt::format("waiting for the {}", tp_message_kind_name(expected)));
  }
  if (message_.kind == TpMessageKind::kStatus && !message_.status.is_ok()) {
    return Status(message_.status.code(), "rank 0: " + message_.status.message());
  }
  if (message_.kind != expected) {
    return make_error(StatusCode::kInternal, "{} sent a {} message; expected the {}",
                      connection_->peer(), tp_message_kind_name(message_.kind),
                      tp_message_kind_name(expected));
  }
  return Status::ok();
}

Result<int32_t> TpWorkerLink::receive_start() {
  LS_RETURN_IF_ERROR(receive(TpMessageKind::kStart));
  return message_.kv_blocks;
}

Result<TpCommId> TpWorkerLink::receive_comm_id() {
  LS_RETURN_IF_ERROR(receive(TpMessageKind::kCommId));
  return message_.comm_id;
}

Result<TpWorkerLink::Command> TpWorkerLink::next() {
  Status status = connection_->receive(message_, kTpNoDeadline);
  if (status.code() == StatusCode::kUnavailable) return Command::kClosed;
  LS_RETURN_IF_ERROR(status);
  switch (message_.kind) {
    case TpMessageKind::kBatch: return Command::kBatch;
    case TpMessageKind::kShutdown: return Command::kShutdown;
    case TpMessageKind::kStatus:
      if (!message_.status.is_ok()) {
        return Status(message_.status.code(), "rank 0: " + message_.status.message());
      }
      [[fallthrough]];
    default:
      return make_error(StatusCode::kInternal, "{} sent a {} message between steps",
                        connection_->peer(), tp_message_kind_name(message_.kind));
  }
}

bool TpWorkerLink::wait_for_hangup(int done_fd) const {
  std::vector<pollfd> fds = {{done_fd, POLLIN, 0}, {connection_->fd(), POLLIN | POLLRDHUP, 0}};
  // Without a deadline poll returns only with something ready, or failed: a socket that
  // cannot be polled is as good as hung up.
  if (poll_until(fds, kTpNoDeadline) < 0) return true;
  return (fds[0].revents & POLLIN) == 0;
}

}  // namespace llamaserve
