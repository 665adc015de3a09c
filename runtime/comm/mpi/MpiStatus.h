//===- MpiStatus.h - MPI error codes as absl::Status ------------*- C++ -*-===//
//
// Internal to the MPI backend (it includes mpi.h): the runtime's
// communicators return errors instead of aborting, and this turns an MPI
// return code into a Status naming the call that failed.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_COMM_MPI_MPISTATUS_H
#define TRIAD_RUNTIME_COMM_MPI_MPISTATUS_H

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include <mpi.h>

#include <string>

namespace triad::rt::mpi {

inline absl::Status mpiStatus(int code, const char *what) {
  if (code == MPI_SUCCESS)
    return absl::OkStatus();
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, message, &length) != MPI_SUCCESS)
    length = 0;
  return absl::InternalError(
      absl::StrCat(what, " failed: ",
                   length > 0 ? std::string(message, length)
                              : absl::StrCat("MPI error ", code)));
}

} // namespace triad::rt::mpi

#endif // TRIAD_RUNTIME_COMM_MPI_MPISTATUS_H
