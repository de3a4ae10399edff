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

/// Reads and checks the folder against the program (its node count and
/// classes). False with a one-line message naming the file and what was
/// expected.
bool loadGraph(const std::string &dir, const loomrt_program &p, Graph &g, std::string &error);

/// Reads DIR/features.npy, which must be [nodes, F] for the program's
/// feature table input `table`, into the buffer alloc(bytes) returns.
bool loadFeatures(const std::string &dir, const loomrt_input_desc &table,
                  const std::function<void *(size_t)> &alloc, std::string &error);

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
