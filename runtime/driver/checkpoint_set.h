// checkpoint_set.h: a run's checkpoints as one consistent step for every
// rank. Each rank writes its part (safetensors, checksummed) under a name
// that holds the step; when every rank's part is durable, rank 0 commits
// the step by replacing the manifest DIR/checkpoint.json atomically; only
// then are older parts removed. A kill at any moment leaves the manifest
// naming a step whose parts all exist, and --resume loads exactly that
// step on every rank (and refuses anything else).
#ifndef LOOMRT_DRIVER_CHECKPOINT_SET_H
#define LOOMRT_DRIVER_CHECKPOINT_SET_H

#include "loomrt/loomrt.h"
#include "loomrt/train.h"

#include <string>
#include <vector>

namespace loomrt {

/// Bytes of one element of `d`.
inline size_t dtypeBytes(loomrt_dtype d) { return d == LOOMRT_BF16 ? 2 : d == LOOMRT_I64 ? 8 : 4; }
/// Elements of a tensor of `rank` dimensions `shape`.
inline size_t numel(const int64_t *shape, int rank) {
  size_t n = 1;
  for (int d = 0; d < rank; ++d)
    n *= size_t(shape[d]);
  return n;
}

/// What a checkpoint part of `p`'s binary holds, as JSON, for tools that
/// read checkpoints without the binary (loom-ckpt): see checkpoint_set.cpp.
std::string checkpointLayout(const loomrt_program *p);

class CheckpointSet {
public:
  CheckpointSet(std::string dir, std::string model, int rank, int world, int zeroStage,
                loomrt_device dev, loomrt_stream stream, loomrt_comm comm)
      : dir(std::move(dir)), model(std::move(model)), rank(rank), world(world),
        zeroStage(zeroStage), dev(dev), stream(stream), comm(comm) {}

  /// What the parts hold, as JSON (checkpointLayout), written into each
  /// part's metadata under "layout" for tools that read checkpoints
  /// without the binary (loom-ckpt).
  void setLayout(std::string json) { layout = std::move(json); }
  /// The binary's program: with it, a checkpoint saved by another world or
  /// ZeRO stage is re-sharded on resume (resharding.cpp), not refused.
  void setProgram(const loomrt_program *p) { program = p; }

  /// Creates the folder if `create` and checks that this rank can write
  /// there, so a bad --checkpoint-dir is reported before training (a
  /// missing folder without `create` is left to resume() to report).
  loomrt_status open(bool create);
  /// Saves `tensors` as this rank's part of step `step` and commits the
  /// step once every rank's part is durable. Collective: every rank calls it.
  loomrt_status save(long step, const std::vector<loomrt_tensor_ref> &tensors);
  /// Loads this rank's part of the committed step into `tensors` and sets
  /// `step`; refuses a step outside [0, maxStep], another model, world or
  /// ZeRO stage, a part that does not match the manifest or its checksums,
  /// and ranks that see different committed steps. Collective.
  loomrt_status resume(const std::vector<loomrt_tensor_ref> &tensors, long maxStep, long &step);

  std::string manifestPath() const { return dir + "/checkpoint.json"; }
  std::string partPath(long step, int r) const;
  /// The minimum and maximum of `v` over all ranks (one all-reduce; also
  /// how the ranks agree on a re-planning decision). Collective.
  loomrt_status agree(int64_t v, int64_t &lo, int64_t &hi);

private:
  /// Rank r's part of `step`: "step-S" + rankSuffix(r).
  std::string partName(long step, int r) const;
  std::string rankSuffix(int r) const;
  /// Every rank learns whether all of them succeeded; the failing rank
  /// keeps its own message, the others get `otherwise`.
  loomrt_status allOk(loomrt_status mine, const std::string &otherwise);
  loomrt_status readManifest(long maxStep, long &step);
  /// Fills `tensors` from every part of the committed `step` saved by
  /// another world or stage (resharding.cpp).
  loomrt_status reshardInto(const std::vector<loomrt_tensor_ref> &tensors, long step);
  /// Removes this rank's parts of steps other than `keep` (superseded, or
  /// written by a save that was killed before its commit).
  void removeOtherParts(long keep);

  std::string dir, model, layout;
  int rank, world, zeroStage;
  const loomrt_program *program = nullptr;
  // What the manifest says saved the committed step (readManifest).
  int savedWorld = 0, savedStage = 0;
  std::vector<std::string> savedParts;
  loomrt_device dev;
  loomrt_stream stream;
  loomrt_comm comm;
};

} // namespace loomrt

#endif
