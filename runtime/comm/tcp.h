// tcp.h: the elastic TCP transport (comm/tcp.cpp), internal to comm.cpp.
//
// Ranks started without a launcher that ties them together (torchrun-style
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) join a full mesh of TCP
// connections. A rank whose connections close (it died) leaves the group:
// the collective in flight and every later one complete over the ranks that
// remain, decided by rank 0 (the group's coordinator) so that every
// survivor uses the same members. Streaming DiLoCo's replicas use it so that
// losing a replica does not stop the others (docs/diloco.md).
//
// Every collective sends each rank's whole contribution to each peer (a
// gather), so that the ranks that remain hold everything they need whatever
// rank is lost: an all-reduce sends (W-1) buffers where a ring sends
// 2(W-1)/W; the same for W = 2. Buffers are host memory.
#ifndef LOOMRT_COMM_TCP_H
#define LOOMRT_COMM_TCP_H

#include "loomrt/loomrt.h"

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace loomrt::tcp {

// Pieces of a rendezvous, shared with NCCL's bootstrap (comm.cpp).
using Deadline = std::chrono::steady_clock::time_point;
Deadline deadlineIn(double seconds);
/// MASTER_ADDR:MASTER_PORT; `who` names the ranks in the message when unset.
loomrt_status resolveMaster(const char *who, sockaddr_in *out);
/// LOOMRT_BIND (an IPv4 address) when set, else `fallback` (network order):
/// the address a rendezvous listens on.
loomrt_status bindAddress(const char *who, uint32_t fallback, uint32_t *out);
/// A listening socket on `ip`:`port` (network order; port 0: any), its port
/// in *bound.
int listenOn(uint32_t ip, uint16_t port, int backlog, uint16_t *bound);
/// "a.b.c.d:port" of a connected socket's peer, for messages.
std::string peerName(int fd);
/// -1 when the deadline passes first.
int acceptBefore(int listener, Deadline d);
int connectBefore(const sockaddr_in &to, Deadline d);
bool sendAll(int fd, const void *p, size_t n);
bool recvAll(int fd, void *p, size_t n);

struct Group;

/// Joins `size` ranks through rank 0 listening at MASTER_ADDR:MASTER_PORT,
/// waiting up to `timeoutS` for the others; only ranks that prove the job
/// key (LOOMRT_JOB_KEY or LOOMRT_JOB_KEY_FILE, required) are admitted. LOOMRT_TCP_MBITS (megabits per
/// second) caps what this rank sends, to emulate a slower link.
loomrt_status join(int rank, int size, double timeoutS, Group **out);
/// A second group of the same ranks with connections of its own, so two
/// threads can run collectives at once (one on each).
loomrt_status dup(Group *g, double timeoutS, Group **out);
void destroy(Group *g);
/// Whether the group goes on when a rank is lost (the program allows it:
/// DiLoCo replicas compiled elastic, plain data parallelism). Off by
/// default: a loss then fails the collective that finds it and every one
/// after, with a message. A duplicate takes the original's setting.
void setShrinkable(Group *g, bool on);
/// The ranks still in the group.
int live(const Group *g);

/// The collectives of loomrt.h on host memory. A rank that has left
/// contributes nothing: its block of an all-gather or all-to-all is zeros,
/// reductions run over the remaining ranks in rank order (MEAN divides by
/// their number), and a broadcast from it fails.
loomrt_status allGather(Group *g, const void *send, void *recv, size_t bytes);
loomrt_status allToAll(Group *g, const void *send, void *recv, size_t bytes);
loomrt_status allReduce(Group *g, loomrt_dtype dt, const void *send, void *recv, size_t count,
                        loomrt_reduce_op op);
loomrt_status reduceScatter(Group *g, loomrt_dtype dt, const void *send, void *recv,
                            size_t recvCount, loomrt_reduce_op op);
loomrt_status broadcast(Group *g, void *buf, size_t bytes, int root);
/// Point to point: sends `sendBytes` to rank `dest` and receives
/// `recvBytes` from rank `src` at once (either -1: none), so two ranks that
/// send to each other do not wait on each other. Only the two peers take
/// part; each pair's messages are numbered apart from the collectives', and
/// a message other than the one expected (size, order) fails. A lost peer
/// fails the exchange, elastic or not.
loomrt_status sendRecv(Group *g, const void *send, size_t sendBytes, int dest, void *recv,
                       size_t recvBytes, int src);

} // namespace loomrt::tcp

#endif
