// graph.h: the training binary's graph data (LOOMRT_TASK_GRAPH): a graph
// folder read once (docs/graphs.md) and the neighbour sampler that turns
// each step's seeds into the inputs of a sampled mini-batch.
//
// The mini-batch is a tree with static shapes (train.h, loomrt_input_role):
// depth 0 holds this rank's B seeds, depth d holds fanouts[d-1] slots for
// each node of depth d-1. A node with more neighbours than its fan-out gets
// that many drawn without replacement (PyG's NeighborLoader default); one
// with fewer gets all of them and padded slots, which repeat the node's own
// id (a valid row) with weight 0.
#ifndef LOOMRT_DRIVER_GRAPH_H
#define LOOMRT_DRIVER_GRAPH_H

#include "loomrt/train.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loomrt {

/// A graph folder: indptr.npy ([N+1] integers, CSR row offsets),
/// indices.npy ([E] neighbour ids), labels.npy ([N] integers: a class, or
/// -1 for a node without one), optional train.npy (the seed nodes; default:
/// every labelled node). The features (features.npy, [N, F] floats) are
/// read separately into the memory the compiler chose (loadFeatures).
struct Graph {
  int64_t nodes = 0;
  std::vector<int64_t> indptr, indices, labels, train;
};

/// The program's first input with `role` (null: none).
const loomrt_input_desc *inputWithRole(const loomrt_program &p, loomrt_input_role role);

/// Reads and checks the folder against the program (its node count and
/// classes). False with a one-line message naming the file and what was
/// expected.
bool loadGraph(const std::string &dir, const loomrt_program &p, Graph &g, std::string &error);

/// Reads DIR/features.npy, which must be [nodes, F] for the program's
/// feature table input `table`, into the buffer alloc(bytes) returns.
bool loadFeatures(const std::string &dir, const loomrt_input_desc &table,
                  const std::function<void *(size_t)> &alloc, std::string &error);

/// A feature table in POSIX shared memory, one copy for the ranks of a job
/// on one host (the GCN paper's several GPUs reading one pinned table):
/// local rank 0 creates it under a fresh random name (O_EXCL, 0600) and
/// hands the name to the host's other ranks through the job's rendezvous;
/// they open it only when fstat says it is this user's private object of
/// the expected size; once every rank has mapped it the name goes, before
/// local rank 0 reads DIR/features.npy into it (so no exit path, a kill
/// during the load included, leaves anything in /dev/shm).
struct SharedTable {
  void *data = nullptr; // the table, page-aligned
  size_t bytes = 0;
  void *map = nullptr;
  size_t mapBytes = 0;
  std::string name;
  bool creator = false; // the name is still this rank's to remove
  ~SharedTable();
};

/// An all-gather of `n` host bytes a rank over the job's ranks (`size` of
/// them): all[r * n ...] is rank r's. False when the collective fails.
struct AllGather {
  int size = 1;
  std::function<bool(const void *mine, size_t n, void *all)> fn;
};

/// This host's ranks of the job (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE;
/// 1 without either).
int localRanks();

/// Maps (rank 0 of the host: creates and reads) the shared table; the
/// host's ranks are those whose host name matches in the all-gather. False
/// with a one-line message; waits at most `timeoutSeconds` for rank 0.
bool loadSharedFeatures(const std::string &dir, const loomrt_input_desc &table, int localRank,
                        const AllGather &allGather, SharedTable &out,
                        std::string &error, double timeoutSeconds = 600);

/// Writes `v` as a NumPy .npy file of int64 (--dump-samples).
bool writeNpyI64(const std::string &path, const std::vector<int64_t> &v, std::string &error);

/// Fills a step's graph inputs. Every draw is a counter-based hash of the
/// seed, the step and the slot's place in the world's tree, so ranks and a
/// resumed run agree without state: step s's seeds are positions
/// [s*B*world, (s+1)*B*world) of an endless sequence of the train nodes,
/// shuffled anew each epoch; rank r takes the r-th B of them.
class Sampler {
public:
  Sampler(const loomrt_program &p, const Graph &g, uint64_t seed);
  /// Writes the inputs of `step` for rank `rank` of `world` into `host`
  /// (one buffer per program input, sized as the input; the feature table's
  /// entry, null, is left alone). With `padded` non-null, also the node ids of
  /// each depth with -1 in padded slots (for --dump-samples).
  void fill(long step, int rank, int world, const std::vector<uint8_t *> &host,
            std::vector<std::vector<int64_t>> *padded) const;

private:
  int64_t seedAt(int64_t position) const;
  const loomrt_program &p;
  const Graph &g;
  uint64_t seed;
  std::vector<int64_t> fanouts, count; // count[d]: this rank's nodes at depth d
  mutable int64_t epoch = -1;
  mutable std::vector<int64_t> order; // the train nodes in epoch's order
};

} // namespace loomrt

#endif
