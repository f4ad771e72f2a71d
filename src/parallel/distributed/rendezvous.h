// How the ranks of a tensor-parallel group that live in separate processes (one per GPU, on
// one host or several) find each other, and how rank 0 hands them each step's work: plain TCP,
// no CUDA (the NCCL unique id is 128 opaque bytes here). The messages and their bytes are in
// tp_protocol.h, the sockets in tp_connection.h.
//
// Rank 0 (the server) listens on a port; every other rank connects to it, retrying until a
// deadline because rank 0 may not be listening yet:
//
//   rank r                                   rank 0
//   hello {rank, world, model fingerprint} ->  checks: rank in [1, world) and not taken, the
//                                              same world and model; else the reason goes
//                                              back, and the rendezvous fails with it
//                                         <-   setup (what every rank's part must share)
//   status {KV blocks its budget allows}  ->
//                                         <-   start {the smallest count any rank allows}
//   status {part allocated and uploaded}  ->
//                                         <-   comm id (every rank: ncclCommInitRank)
//   status {communicator up}              ->
//   then per engine step s:               <-   batch (step s)
//   status (step s)                       ->
//   and at the end:                       <-   shutdown
//   status                                ->   (the rank frees its GPU and exits)
//
// The NCCL id goes out only once every rank holds its weights, so that no rank waits inside
// ncclCommInitRank for one that failed to allocate. Any failure ends the group: a tensor-
// parallel group cannot go on without a rank. Rank 0 then sends its reason to every rank
// still connected and shuts the connections down; a rank whose pass waits in a collective
// watches its connection (TpWorkerLink::wait_for_hangup) and aborts its communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/batch.h"
#include "core/status.h"
#include "parallel/distributed/tp_connection.h"
#include "parallel/distributed/tp_protocol.h"

namespace llamaserve {

// What rank 0 checks every joining rank against and tells it.
struct TpGroupConfig {
  int world = 2;
  uint64_t model_fingerprint = 0;
  TpSetup setup;
};

// Rank 0's side. Any failure of a rank (an error status, a closed connection, a malformed
// frame, a deadline) fails the whole group: fail() runs, and every later call returns the
// same error.
class TpCoordinator {
 public:
  // Listens on host:port ("" = every interface; port 0 = any free port, see port()).
  static Result<std::unique_ptr<TpCoordinator>> listen(const std::string& host, int port);
  ~TpCoordinator();
  TpCoordinator(const TpCoordinator&) = delete;
  TpCoordinator& operator=(const TpCoordinator&) = delete;

  int port() const { return port_; }
  int world() const { return world_; }
  const Status& failure() const { return failed_; }
  // "rank 1: host pid 42 cuda:1 from 10.0.0.7:41234", one per joined rank.
  std::vector<std::string> describe_ranks() const;

  // Accepts ranks 1..world-1 until every one has said hello or `deadline` passes, and sends
  // each config.setup as soon as its hello passes the checks. A hello that fails them (a rank
  // outside [1, world), a rank already taken, another world size or model) fails the group with
  // the reason, which that rank gets too. A connection that delivers no valid hello within
  // 10 s (a port scan, a health probe, a peer of another protocol version) gets the reason back
  // if it listens and is dropped with a warning. Closes the listening socket when done.
  Status accept_ranks(const TpGroupConfig& config, TpDeadline deadline);

  // Waits for every rank's status of the current handshake phase (`phase` names it in errors:
  // "planning the KV cache") and returns their values, values[r] for rank r (values[0] = 0).
  Result<std::vector<int64_t>> gather(std::string_view phase, TpDeadline deadline);
  Status send_start(int32_t kv_blocks);
  Status send_comm_id(const TpCommId& id);

  // One step: sends `batch` to every rank.
  Status send_batch(uint32_t step, const Batch& batch);
  // Waits for step `step`'s status from every rank and for the caller's own pass, in whatever
  // order: once `local_done_fd` turns readable, local_result() gives that pass's outcome.
  // Returns at once on the first failure, a rank's or the local one, so that the caller can
  // abort its communicator while its own pass may still wait in a collective; ok once every
  // rank and the local pass succeeded.
  Status await_step(uint32_t step, int local_done_fd, const std::function<Status()>& local_result,
                    TpDeadline deadline);

  // Ends the group cleanly: shutdown to every rank, then waits for each one's goodbye (its
  // last status). Ok when all said it.
  Status shutdown(TpDeadline deadline);
  // Gives up on the group: every rank still connected gets `reason` (as an error status) and
  // its connection is shut down. The first reason sticks.
  void fail(const Status& reason);

 private:
  TpCoordinator(int listener, int port) : listener_(listener), port_(port) {}
  // A hello's checks; ok, or the reason to refuse it.
  Status check_hello(const TpHello& hello, const std::string& address,
                     const TpGroupConfig& config) const;
  Status broadcast(std::string_view what);
  // Statuses of `step` from every rank (values filled unless null), and with local_done_fd >= 0
  // the local pass, as described at await_step.
  Status collect(uint32_t step, int local_done_fd, const std::function<Status()>* local_result,
                 TpDeadline deadline, std::string_view phase, std::vector<int64_t>* values);
  void close_listener();

  int listener_;
  int port_;
  int world_ = 0;
  std::vector<std::unique_ptr<TpConnection>> ranks_;  // [r] for rank r; [0] stays null
  std::vector<std::string> origins_;
  Status failed_;
  std::vector<uint8_t> frame_;
  TpMessage message_;
};

// Rank r's side (r >= 1).
class TpWorkerLink {
 public:
  // Connects to rank 0 at `coordinator`, retrying (rank 0 may still be loading the model, or
  // its name may not resolve yet) until `deadline`; says hello and waits for the setup.
  // Errors: kDeadlineExceeded naming host:port and the last reason a connection failed; rank
  // 0's refusal, as it gave it.
  static Result<std::unique_ptr<TpWorkerLink>> join(const HostPort& coordinator,
                                                    const TpHello& hello, TpDeadline deadline);

  const TpSetup& setup() const { return setup_; }
  int fd() const { return connection_->fd(); }

  // The outcome of a phase (value: what the phase reports) or of step `step`.
  Status send_status(uint32_t step, const Status& status, int64_t value = 0);
  // The handshake's next messages from rank 0 (no deadline: rank 0 may take minutes to upload
  // its weights). An error status from rank 0 comes back as that error, with "rank 0: " before
  // its message.
  Result<int32_t> receive_start();
  Result<TpCommId> receive_comm_id();

  enum class Command { kBatch, kShutdown, kClosed };
  // Between steps: waits for rank 0's next message, with no deadline (the server may idle for
  // hours). kBatch: batch() and step() hold it; kClosed: rank 0 closed the connection between
  // messages (it exited).
  Result<Command> next();
  const Batch& batch() const { return message_.batch; }
  uint32_t step() const { return message_.step; }

  // While a pass runs: blocks until rank 0 hangs up or sends anything (it sends nothing during
  // a pass unless it gave up): true; or until `done_fd` turns readable: false.
  bool wait_for_hangup(int done_fd) const;

 private:
  TpWorkerLink(std::unique_ptr<TpConnection> connection, TpSetup setup)
      : connection_(std::move(connection)), setup_(setup) {}
  Status receive(TpMessageKind expected);

  std::unique_ptr<TpConnection> connection_;
  TpSetup setup_;
  std::vector<uint8_t> frame_;
  TpMessage message_;
};

}  // namespace llamaserve
