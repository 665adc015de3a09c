//===- PeerQuery.h - asking the other ranks where they are -------*- C++
//-*-===//
//
// The watchdog's side channel. A rank that has waited too long in a
// collective cannot learn from the collective which of its peers never
// arrived; it asks them instead, over a communicator of its own: every rank
// runs a thread that answers such questions with a line it is given (where
// the rank is: Progress::answer), whatever its main thread is doing. A peer
// that is stopped, dead or hung so hard that its threads do not run does not
// answer, which names it too.
//
// Needs MPI_THREAD_MULTIPLE (World::threadsMayCallMpi).
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_MPI_PEERQUERY_H
#define TRIAD_RUNTIME_COMM_MPI_PEERQUERY_H

#include "runtime/comm/mpi/Mpi.h"

#include "absl/status/statusor.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace triad::rt::mpi {

class PeerQuery {
public:
  /// Every rank of `world` calls it at the same point (it duplicates the
  /// world's communicator); `answer` gives the line this rank tells a peer
  /// that asks, from the answering thread. FailedPrecondition when the
  /// world cannot take calls from several threads.
  static absl::StatusOr<std::unique_ptr<PeerQuery>>
  start(const World &world, std::function<std::string()> answer);

  /// Stops answering. Call before MPI finalizes.
  ~PeerQuery();
  PeerQuery(const PeerQuery &) = delete;
  PeerQuery &operator=(const PeerQuery &) = delete;

  /// Asks each of `ranks` (world ranks; this rank is skipped) and waits up
  /// to `within` for their answers: nullopt for a rank that did not answer
  /// in time. Safe from any thread, once at a time.
  std::map<int64_t, std::optional<std::string>>
  ask(const std::vector<int64_t> &ranks, std::chrono::milliseconds within);

private:
  PeerQuery() = default;
  void serve();

  /// MPI_Comm, kept opaque so that this header needs no mpi.h.
  struct Channel;
  std::unique_ptr<Channel> channel;
  int rank = 0;
  std::function<std::string()> answer;
  std::atomic<bool> stopping{false};
  /// Answers sent and not known to be delivered (their buffers must live
  /// until then): a few per hang at most.
  std::list<std::string> sent;
  std::mutex asking;
  std::thread server;
};

} // namespace triad::rt::mpi

#endif // TRIAD_RUNTIME_COMM_MPI_PEERQUERY_H
