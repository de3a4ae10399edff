// rccl_api.h: the part of NCCL's C API that runtime/comm uses, for the HIP
// build, where RCCL (AMD's NCCL, same API and ABI) is loaded with dlopen at
// run time: Debian does not package it, so the build cannot link it. The
// types and enum values are NCCL's (nccl.h, 2.18 onwards; RCCL keeps them).
// Each function loads librccl.so on first use; without it every call
// returns ncclSystemError and ncclGetErrorString says which library is
// missing and why (rcclLoadError() for a check up front).
#ifndef LOOMRT_HIP_RCCL_API_H
#define LOOMRT_HIP_RCCL_API_H

#include <hip/hip_runtime_api.h>

#include <cstddef>

extern "C" {
typedef struct ncclComm *ncclComm_t;
typedef struct ncclConfig_v21700 ncclConfig_t; // only ever passed as null
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
} ncclResult_t;
typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat = ncclFloat32,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
} // extern "C"

namespace loomrt {
/// Empty when librccl.so loaded; else what went wrong, naming the library.
const char *rcclLoadError();
} // namespace loomrt

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out,
                           ncclConfig_t *config);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, hipStream_t stream);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, hipStream_t stream);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, hipStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           int root, ncclComm_t comm, hipStream_t stream);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer,
                      ncclComm_t comm, hipStream_t stream);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      hipStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

#endif // LOOMRT_HIP_RCCL_API_H
