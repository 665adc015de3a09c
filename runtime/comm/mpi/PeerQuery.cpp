//===- PeerQuery.cpp - asking the other ranks where they are --------------===//

#include "runtime/comm/mpi/PeerQuery.h"
#include "runtime/comm/mpi/MpiStatus.h"

#include <mpi.h>

#include <set>

namespace triad::rt::mpi {

namespace {

constexpr int kAskTag = 1, kAnswerTag = 2;
/// How often the answering thread looks for questions, and the asking one
/// for answers.
constexpr std::chrono::milliseconds kServePoll(50), kAskPoll(5);

} // namespace

struct PeerQuery::Channel {
  MPI_Comm comm = MPI_COMM_NULL;
};

absl::StatusOr<std::unique_ptr<PeerQuery>>
PeerQuery::start(const World &world, std::function<std::string()> answer) {
  if (!world.threadsMayCallMpi())
    return absl::FailedPreconditionError(
        "this MPI does not let several threads call it "
        "(MPI_THREAD_MULTIPLE), so a waiting rank cannot ask its peers");
  std::unique_ptr<PeerQuery> query(new PeerQuery());
  query->channel = std::make_unique<Channel>();
  query->rank = world.rank();
  query->answer = std::move(answer);
  MPI_Comm &comm = query->channel->comm;
  if (absl::Status status =
          mpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
      !status.ok())
    return status;
  if (absl::Status status =
          mpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN),
                    "MPI_Comm_set_errhandler");
      !status.ok())
    return status;
  PeerQuery *self = query.get();
  query->server = std::thread([self] { self->serve(); });
  return query;
}

PeerQuery::~PeerQuery() {
  stopping = true;
  if (server.joinable())
    server.join();
  if (channel && channel->comm != MPI_COMM_NULL)
    MPI_Comm_free(&channel->comm);
}

void PeerQuery::serve() {
  MPI_Comm comm = channel->comm;
  while (!stopping) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, comm, &flag, &status) !=
        MPI_SUCCESS)
      return;
    if (!flag) {
      std::this_thread::sleep_for(kServePoll);
      continue;
    }
    char question = 0;
    if (MPI_Recv(&question, 1, MPI_CHAR, status.MPI_SOURCE, kAskTag, comm,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    // Not waited for: the asker may have ended its job by then. The line
    // lives as long as this object.
    const std::string &line = sent.emplace_back(answer());
    MPI_Request request;
    if (MPI_Isend(line.data(), static_cast<int>(line.size()), MPI_CHAR,
                  status.MPI_SOURCE, kAnswerTag, comm, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
}

std::map<int64_t, std::optional<std::string>>
PeerQuery::ask(const std::vector<int64_t> &ranks,
               std::chrono::milliseconds within) {
  std::lock_guard<std::mutex> lock(asking);
  MPI_Comm comm = channel->comm;
  std::map<int64_t, std::optional<std::string>> answers;
  std::set<int64_t> pending;
  static const char question = '?';
  for (int64_t peer : ranks) {
    if (peer == rank || !pending.insert(peer).second)
      continue;
    answers[peer] = std::nullopt;
    MPI_Request request;
    // A stopped peer never receives it; nobody waits for that.
    if (MPI_Isend(&question, 1, MPI_CHAR, static_cast<int>(peer), kAskTag, comm,
                  &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }
  auto deadline = std::chrono::steady_clock::now() + within;
  while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
    int flag = 0, count = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, comm, &flag, &status) !=
        MPI_SUCCESS)
      break;
    if (!flag) {
      std::this_thread::sleep_for(kAskPoll);
      continue;
    }
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string line(static_cast<size_t>(std::max(count, 0)), '\0');
    if (MPI_Recv(line.data(), count, MPI_CHAR, status.MPI_SOURCE, kAnswerTag,
                 comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    // A late answer to an earlier question counts: where the peer is now
    // differs from it by at most `within`.
    if (pending.erase(status.MPI_SOURCE))
      answers[status.MPI_SOURCE] = std::move(line);
  }
  return answers;
}

} // namespace triad::rt::mpi
