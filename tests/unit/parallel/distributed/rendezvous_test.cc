// The tensor-parallel rendezvous over real sockets on localhost, ranks as threads: the whole
// handshake and steps of a 3-rank group; refusals that reach both sides (another world size, a
// rank twice, another model); failures in the middle (a rank's error, a peer that hangs up in
// the middle of a frame, a corrupted frame, a silent rank) that fail rank 0 at once and reach
// the other ranks; and the deadlines of connecting and of waiting for ranks.
#include "parallel/distributed/rendezvous.h"

#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

using namespace std::chrono_literals;

#define EXPECT_ERROR_HAS(status_expr, text)                                  \
  do {                                                                       \
    const Status s_ = (status_expr);                                         \
    EXPECT_FALSE(s_.is_ok()) << "expected an error containing: " << (text);  \
    EXPECT_NE(s_.message().find(text), std::string::npos) << s_.to_string(); \
  } while (0)

constexpr uint64_t kModel = 0x5eed5eed12345678ull;

TpSetup test_setup() {
  TpSetup s;
  s.kv_block_size = 16;
  s.max_batch_tokens = 64;
  s.max_seqs = 16;
  s.max_context_tokens = 512;
  s.kv_capacity_tokens = 1536;
  return s;
}

TpHello hello(int rank, int world, uint64_t model = kModel) {
  return {rank, world, model, "test rank " + std::to_string(rank)};
}

std::unique_ptr<TpCoordinator> listen_any() {
  auto coordinator = TpCoordinator::listen("127.0.0.1", 0);
  EXPECT_TRUE(coordinator.is_ok()) << coordinator.status().to_string();
  return coordinator.is_ok() ? std::move(coordinator).value() : nullptr;
}

HostPort at(const TpCoordinator& c) { return {"127.0.0.1", c.port()}; }

Batch batch_of(int32_t first_token, int32_t rows) {
  Batch b;
  for (int32_t r = 0; r < rows; ++r) {
    b.tokens.push_back(first_token + r);
    b.positions.push_back(r);
    b.seq_index.push_back(0);
  }
  b.blocks_per_seq = 2;
  b.block_tables = {3, -1};
  b.seq_lengths = {rows};
  b.logit_rows = {rows - 1};
  return b;
}

// Rank 0's own pass, played by an eventfd: readable once done(), with `result` its outcome.
struct LocalPass {
  int fd = eventfd(0, EFD_CLOEXEC);
  Status result;
  ~LocalPass() { close(fd); }
  void done() const {
    const uint64_t one = 1;
    EXPECT_EQ(write(fd, &one, sizeof(one)), 8);
  }
  std::function<Status()> outcome() const {
    return [this] { return result; };
  }
};

// Brings a world of `links.size() + 1` ranks (the links' joins already started) through the
// handshake on rank 0's side: every rank reports 100 + rank KV blocks, rank 0 150.
void coordinate_handshake(TpCoordinator& c, int world) {
  TpGroupConfig config{world, kModel, test_setup()};
  ASSERT_TRUE(c.accept_ranks(config, tp_deadline_after(10s)).is_ok()) << c.failure().to_string();
  auto plans = c.gather("planning", tp_deadline_after(10s));
  ASSERT_TRUE(plans.is_ok()) << plans.status().to_string();
  int64_t blocks = 150;
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ((*plans)[static_cast<size_t>(r)], 100 + r);
    blocks = std::min(blocks, (*plans)[static_cast<size_t>(r)]);
  }
  ASSERT_TRUE(c.send_start(static_cast<int32_t>(blocks)).is_ok());
  ASSERT_TRUE(c.gather("uploading", tp_deadline_after(10s)).is_ok());
  TpCommId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(255 - i);
  ASSERT_TRUE(c.send_comm_id(id).is_ok());
  ASSERT_TRUE(c.gather("communicator", tp_deadline_after(10s)).is_ok());
}

// The worker's side of the same handshake; returns its link (null on failure).
std::unique_ptr<TpWorkerLink> worker_handshake(const HostPort& coordinator, int rank, int world) {
  auto link = TpWorkerLink::join(coordinator, hello(rank, world), tp_deadline_after(10s));
  EXPECT_TRUE(link.is_ok()) << link.status().to_string();
  if (!link.is_ok()) return nullptr;
  EXPECT_EQ((*link)->setup(), test_setup());
  EXPECT_TRUE((*link)->send_status(0, Status::ok(), 100 + rank).is_ok());
  auto start = (*link)->receive_start();
  EXPECT_TRUE(start.is_ok()) << start.status().to_string();
  EXPECT_EQ(start.is_ok() ? *start : -1, 101);  // the smallest of 150, 101, 102
  EXPECT_TRUE((*link)->send_status(0, Status::ok()).is_ok());
  auto id = (*link)->receive_comm_id();
  EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  EXPECT_EQ(id.is_ok() ? (*id)[0] : 0, 255);
  EXPECT_TRUE((*link)->send_status(0, Status::ok()).is_ok());
  return std::move(link).value();
}

// A world of two ranks through the handshake: rank 0 here, rank 1's link returned.
struct Pair {
  std::unique_ptr<TpCoordinator> coordinator;
  std::unique_ptr<TpWorkerLink> worker;
};

Pair handshaken_pair() {
  Pair p;
  p.coordinator = listen_any();
  if (!p.coordinator) return p;
  auto worker = std::async(std::launch::async, worker_handshake, at(*p.coordinator), 1, 2);
  coordinate_handshake(*p.coordinator, 2);
  p.worker = worker.get();
  return p;
}

TEST(HostPortTest, ParsesNamesAddressesAndBrackets) {
  auto name = parse_host_port("llamaserve-0.llamaserve-tp:29500");
  ASSERT_TRUE(name.is_ok());
  EXPECT_EQ(name->host, "llamaserve-0.llamaserve-tp");
  EXPECT_EQ(name->port, 29500);
  auto v6 = parse_host_port("[fd00::7]:1");
  ASSERT_TRUE(v6.is_ok());
  EXPECT_EQ(v6->host, "fd00::7");
  EXPECT_EQ(v6->port, 1);
  for (const char* bad : {"host", "host:", ":80", "host:0", "host:65536", "host:8x", "fd00::7:80",
                          "[fd00::7]80", "[fd00::7"}) {
    SCOPED_TRACE(bad);
    EXPECT_ERROR_HAS(parse_host_port(bad).status(), "expected");
  }
}

TEST(RendezvousTest, HandshakeStepsAndShutdownOfThreeRanks) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  const std::vector<Batch> batches = {batch_of(10, 5), batch_of(20, 1), batch_of(30, 3)};
  auto worker = [&](int rank) {
    auto link = worker_handshake(at(*c), rank, 3);
    std::vector<Batch> seen;
    std::vector<uint32_t> steps;
    if (!link) return std::make_pair(seen, steps);
    while (true) {
      auto command = link->next();
      EXPECT_TRUE(command.is_ok()) << command.status().to_string();
      if (!command.is_ok() || *command != TpWorkerLink::Command::kBatch) {
        EXPECT_TRUE(command.is_ok() && *command == TpWorkerLink::Command::kShutdown);
        EXPECT_TRUE(link->send_status(0, Status::ok()).is_ok());
        break;
      }
      seen.push_back(link->batch());
      steps.push_back(link->step());
      EXPECT_TRUE(link->send_status(link->step(), Status::ok()).is_ok());
    }
    return std::make_pair(seen, steps);
  };
  auto one = std::async(std::launch::async, worker, 1);
  auto two = std::async(std::launch::async, worker, 2);
  coordinate_handshake(*c, 3);
  EXPECT_EQ(c->describe_ranks().size(), 2u);
  EXPECT_NE(c->describe_ranks()[1].find("rank 2: test rank 2 from 127.0.0.1:"), std::string::npos)
      << c->describe_ranks()[1];
  for (uint32_t s = 0; s < batches.size(); ++s) {
    LocalPass local;
    ASSERT_TRUE(c->send_batch(s + 1, batches[s]).is_ok());
    local.done();
    ASSERT_TRUE(c->await_step(s + 1, local.fd, local.outcome(), tp_deadline_after(10s)).is_ok())
        << c->failure().to_string();
  }
  EXPECT_TRUE(c->shutdown(tp_deadline_after(10s)).is_ok()) << c->failure().to_string();
  for (auto* f : {&one, &two}) {
    const auto [seen, steps] = f->get();
    ASSERT_EQ(seen.size(), batches.size());
    for (size_t s = 0; s < batches.size(); ++s) {
      EXPECT_EQ(steps[s], s + 1);
      EXPECT_EQ(seen[s].tokens, batches[s].tokens);
      EXPECT_EQ(seen[s].positions, batches[s].positions);
      EXPECT_EQ(seen[s].block_tables, batches[s].block_tables);
      EXPECT_EQ(seen[s].seq_lengths, batches[s].seq_lengths);
      EXPECT_EQ(seen[s].logit_rows, batches[s].logit_rows);
    }
  }
}

TEST(RendezvousTest, AStepWaitsForTheLocalPassToo) {
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  LocalPass local;
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_EQ(p.worker->next().value(), TpWorkerLink::Command::kBatch);
  ASSERT_TRUE(p.worker->send_status(1, Status::ok()).is_ok());
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    local.done();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(
      p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s)).is_ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
  later.join();
}

// Rank 0's own pass fails (before a collective, say) while rank 1 waits in one and never
// answers: the step fails at once, and rank 1, watching its connection, hears why.
TEST(RendezvousTest, RankZerosOwnFailureEndsTheStepAtOnce) {
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_EQ(p.worker->next().value(), TpWorkerLink::Command::kBatch);
  LocalPass worker_pass;  // never done: waits in the collective
  auto hangup =
      std::async(std::launch::async, [&] { return p.worker->wait_for_hangup(worker_pass.fd); });
  LocalPass local;
  local.result = Status(StatusCode::kInternal, "cuda:0: an illegal memory access");
  local.done();
  const Status step =
      p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s));
  EXPECT_EQ(step.code(), StatusCode::kInternal);
  EXPECT_ERROR_HAS(step, "step 1: rank 0: cuda:0: an illegal memory access");
  ASSERT_EQ(hangup.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(hangup.get());
  EXPECT_ERROR_HAS(p.worker->next().status(), "rank 0: step 1: rank 0: cuda:0: an illegal memory");
}

TEST(RendezvousTest, AnotherWorldSizeIsRefusedOnBothSides) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  auto worker = std::async(std::launch::async, [&] {
    return TpWorkerLink::join(at(*c), hello(1, 3), tp_deadline_after(10s)).status();
  });
  const Status coordinator = c->accept_ranks({2, kModel, test_setup()}, tp_deadline_after(10s));
  EXPECT_ERROR_HAS(coordinator, "was started for 3 ranks, rank 0 for 2: give every rank the same");
  const Status refused = worker.get();
  EXPECT_ERROR_HAS(refused, "refused rank 1: rank 1 (test rank 1 from 127.0.0.1:");
  EXPECT_ERROR_HAS(refused, "was started for 3 ranks, rank 0 for 2");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  // The group stays failed.
  EXPECT_ERROR_HAS(c->gather("planning", tp_deadline_after(1s)).status(), "started for 3 ranks");
}

TEST(RendezvousTest, ARankTwiceIsRefusedAndTheFirstOneHearsWhy) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  std::promise<void> first_joined;
  auto first = std::async(std::launch::async, [&]() -> Status {
    auto link = TpWorkerLink::join(at(*c), hello(1, 3), tp_deadline_after(10s));
    first_joined.set_value();
    if (!link.is_ok()) return link.status();
    return (*link)->receive_start().status();
  });
  auto accepted = std::async(std::launch::async, [&] {
    return c->accept_ranks({3, kModel, test_setup()}, tp_deadline_after(10s));
  });
  first_joined.get_future().wait();
  const Status second = TpWorkerLink::join(at(*c), hello(1, 3), tp_deadline_after(10s)).status();
  EXPECT_ERROR_HAS(second, "rank 1 joined twice: from test rank 1 from 127.0.0.1:");
  EXPECT_ERROR_HAS(accepted.get(), "rank 1 joined twice");
  const Status told = first.get();
  EXPECT_ERROR_HAS(told, "rank 0: rank 1 joined twice");
}

TEST(RendezvousTest, AnotherModelIsRefusedOnBothSides) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  auto worker = std::async(std::launch::async, [&] {
    return TpWorkerLink::join(at(*c), hello(1, 2, kModel + 1), tp_deadline_after(10s)).status();
  });
  EXPECT_ERROR_HAS(c->accept_ranks({2, kModel, test_setup()}, tp_deadline_after(10s)),
                   "loaded another model (fingerprint 5eed5eed12345679; rank 0's is "
                   "5eed5eed12345678): every rank needs the same GGUF file");
  EXPECT_ERROR_HAS(worker.get(), "loaded another model");
}

TEST(RendezvousTest, ARankFailingAStepFailsRankZeroAndTheGroup) {
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  LocalPass local;  // never done: rank 0's own pass "waits in a collective"
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_EQ(p.worker->next().value(), TpWorkerLink::Command::kBatch);
  ASSERT_TRUE(
      p.worker->send_status(1, Status(StatusCode::kResourceExhausted, "cuda:1 ran out")).is_ok());
  const Status step =
      p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s));
  EXPECT_EQ(step.code(), StatusCode::kResourceExhausted);
  EXPECT_ERROR_HAS(step, "step 1: rank 1 (test rank 1 from 127.0.0.1:");
  EXPECT_ERROR_HAS(step, "): cuda:1 ran out");
  // The rank hears that rank 0 gave up, then the connection ends.
  auto told = p.worker->next();
  EXPECT_ERROR_HAS(told.status(), "rank 0: step 1: rank 1");
  EXPECT_EQ(p.worker->next().value(), TpWorkerLink::Command::kClosed);
  EXPECT_ERROR_HAS(p.coordinator->send_batch(2, batch_of(1, 2)), "cuda:1 ran out");
}

// Rank 1 runs a "pass" (waits for its connection) while rank 0 fails: it is woken.
TEST(RendezvousTest, ARankInAPassSeesRankZeroGiveUp) {
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_EQ(p.worker->next().value(), TpWorkerLink::Command::kBatch);
  LocalPass worker_pass;
  auto hangup =
      std::async(std::launch::async, [&] { return p.worker->wait_for_hangup(worker_pass.fd); });
  EXPECT_EQ(hangup.wait_for(200ms), std::future_status::timeout);
  p.coordinator->fail(Status(StatusCode::kInternal, "rank 0's pass failed"));
  ASSERT_EQ(hangup.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(hangup.get());
  EXPECT_ERROR_HAS(p.worker->next().status(), "rank 0: rank 0's pass failed");
  // A pass that ends normally is not a hangup.
  Pair q = handshaken_pair();
  ASSERT_TRUE(q.coordinator && q.worker);
  LocalPass done;
  done.done();
  EXPECT_FALSE(q.worker->wait_for_hangup(done.fd));
}

TEST(RendezvousTest, ARankThatHangsUpMidFrameFailsTheStep) {
  std::vector<uint8_t> status_frame;
  encode_status(1, Status::ok(), 0, status_frame);
  for (const size_t cut : {size_t{7}, kTpFrameHeaderBytes + 5}) {
    Pair p = handshaken_pair();
    ASSERT_TRUE(p.coordinator && p.worker);
    LocalPass local;
    ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
    ASSERT_EQ(p.worker->next().value(), TpWorkerLink::Command::kBatch);
    ASSERT_EQ(send(p.worker->fd(), status_frame.data(), cut, MSG_NOSIGNAL),
              static_cast<ssize_t>(cut));
    p.worker.reset();  // closes the connection
    const Status step =
        p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s));
    EXPECT_EQ(step.code(), StatusCode::kIo) << step.to_string();
    if (cut < kTpFrameHeaderBytes) {
      EXPECT_ERROR_HAS(step, "closed the connection after 7 of the 20 bytes of a frame header");
    } else {
      EXPECT_ERROR_HAS(step, "closed the connection after 5 of the 16 payload bytes of a status");
    }
  }
  // Between frames, without a word: the step fails too, naming the rank.
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  LocalPass local;
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  p.worker.reset();
  const Status step =
      p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s));
  EXPECT_EQ(step.code(), StatusCode::kUnavailable);
  EXPECT_ERROR_HAS(step, "step 1: rank 1 (test rank 1 from 127.0.0.1:");
  EXPECT_ERROR_HAS(step, ") closed the connection");
}

TEST(RendezvousTest, CorruptOrWrongFramesFailTheStep) {
  std::vector<uint8_t> frame;
  encode_status(1, Status::ok(), 0, frame);
  frame[kTpFrameHeaderBytes + 2] ^= 0x40;
  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  LocalPass local;
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_EQ(send(p.worker->fd(), frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  EXPECT_ERROR_HAS(p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s)),
                   "status frame of step 1: checksum");

  // A status of the wrong step.
  Pair q = handshaken_pair();
  ASSERT_TRUE(q.coordinator && q.worker);
  ASSERT_TRUE(q.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  ASSERT_TRUE(q.worker->send_status(7, Status::ok()).is_ok());
  EXPECT_ERROR_HAS(q.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(10s)),
                   "answered with a status message of step 7; expected the status of step 1");

  // A rank receiving a corrupt batch from rank 0 reports it (rank 0 played by hand here).
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::thread fake_rank0([&] {
    TpConnection rank1(accept(listener, nullptr, nullptr), "rank 1");
    TpMessage said;
    EXPECT_TRUE(rank1.receive(said, tp_deadline_after(10s)).is_ok());
    std::vector<uint8_t> out;
    encode_setup(test_setup(), out);
    EXPECT_TRUE(rank1.send(out).is_ok());
    EXPECT_TRUE(encode_batch(3, batch_of(1, 2), out).is_ok());
    out[out.size() - 1] ^= 1;
    EXPECT_TRUE(rank1.send(out).is_ok());
    EXPECT_EQ(rank1.receive(said, tp_deadline_after(10s)).code(), StatusCode::kUnavailable);
  });
  {
    auto link = TpWorkerLink::join({"127.0.0.1", ntohs(address.sin_port)}, hello(1, 2),
                                   tp_deadline_after(10s));
    EXPECT_TRUE(link.is_ok()) << link.status().to_string();
    if (link.is_ok()) {
      EXPECT_ERROR_HAS((*link)->next().status(), "batch frame of step 3: checksum");
    }
  }
  fake_rank0.join();
  close(listener);
}

TEST(RendezvousTest, ConnectionsThatAreNotRanksAreDroppedAndTold) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  // A corrupt hello: dropped (with the reason sent back), and the rendezvous goes on.
  std::vector<uint8_t> frame;
  encode_hello(hello(1, 2), frame);
  frame[kTpFrameHeaderBytes + 1] ^= 0x08;
  auto accepted = std::async(std::launch::async, [&] {
    return c->accept_ranks({2, kModel, test_setup()}, tp_deadline_after(10s));
  });
  const int raw = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(c->port()));
  ASSERT_EQ(connect(raw, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(send(raw, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  TpConnection reply(raw, "rank 0");
  TpMessage told;
  ASSERT_TRUE(reply.receive(told, tp_deadline_after(10s)).is_ok());
  EXPECT_EQ(told.kind, TpMessageKind::kStatus);
  EXPECT_ERROR_HAS(told.status, "hello frame of step 0: checksum");
  EXPECT_EQ(accepted.wait_for(100ms), std::future_status::timeout);  // still waiting
  auto link = TpWorkerLink::join(at(*c), hello(1, 2), tp_deadline_after(10s));
  EXPECT_TRUE(link.is_ok()) << link.status().to_string();
  EXPECT_TRUE(accepted.get().is_ok());
}

TEST(RendezvousTest, ConnectingGivesUpAtTheDeadlineNamingTheAddress) {
  // A bound port that does not listen: every attempt is refused.
  const int reserved = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(reserved, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  getsockname(reserved, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  const auto start = std::chrono::steady_clock::now();
  const Status status =
      TpWorkerLink::join({"127.0.0.1", port}, hello(1, 2), tp_deadline_after(700ms)).status();
  const auto took = std::chrono::steady_clock::now() - start;
  close(reserved);
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_ERROR_HAS(status,
                   "rank 0 unreachable: could not connect to 127.0.0.1:" + std::to_string(port));
  EXPECT_ERROR_HAS(status, "Connection refused");
  EXPECT_GE(took, 500ms);  // it retried until close to the deadline
  EXPECT_LT(took, 5s);
  // A name that does not resolve is retried the same way (a Kubernetes Service name may appear
  // late) and reported as such.
  const Status unresolved =
      TpWorkerLink::join({"no-such-host.invalid", 29500}, hello(1, 2), tp_deadline_after(300ms))
          .status();
  EXPECT_EQ(unresolved.code(), StatusCode::kDeadlineExceeded);
  EXPECT_ERROR_HAS(unresolved, "cannot resolve 'no-such-host.invalid'");
}

TEST(RendezvousTest, RankZeroGivesUpWaitingForRanksAndForSteps) {
  auto c = listen_any();
  ASSERT_NE(c, nullptr);
  const Status none = c->accept_ranks({3, kModel, test_setup()}, tp_deadline_after(300ms));
  EXPECT_EQ(none.code(), StatusCode::kDeadlineExceeded);
  EXPECT_ERROR_HAS(none, "for tensor-parallel rank(s) 1, 2 of 3; none joined");

  Pair p = handshaken_pair();
  ASSERT_TRUE(p.coordinator && p.worker);
  LocalPass local;
  local.done();
  ASSERT_TRUE(p.coordinator->send_batch(1, batch_of(1, 2)).is_ok());
  const Status silent =
      p.coordinator->await_step(1, local.fd, local.outcome(), tp_deadline_after(300ms));
  EXPECT_EQ(silent.code(), StatusCode::kDeadlineExceeded);
  EXPECT_ERROR_HAS(silent, "step 1: no answer from rank(s) 1 within");
}

}  // namespace
}  // namespace llamaserve
