// checkpoint_set.cpp: consistent checkpoints across ranks (see
// checkpoint_set.h).
#include "driver/checkpoint_set.h"
#include "common/backend.h"
#include "common/file_util.h"
#include "common/json.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loomrt {
namespace {

const char kManifestFormat[] = "loom checkpoint 1";
const char kPartFormat[] = "loom checkpoint part 1";

} // namespace

std::string CheckpointSet::rankSuffix(int r) const {
  return ".rank" + std::to_string(r) + "-of-" + std::to_string(world) + ".safetensors";
}
std::string CheckpointSet::partName(long step, int r) const {
  return "step-" + std::to_string(step) + rankSuffix(r);
}
std::string CheckpointSet::partPath(long step, int r) const {
  return dir + "/" + partName(step, r);
}

loomrt_status CheckpointSet::open(bool create) {
  struct stat st;
  if (!create && ::stat(dir.c_str(), &st) != 0)
    return LOOMRT_OK;
  if (create && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return fail(LOOMRT_ERR_IO, "cannot create the checkpoint folder '" + dir +
                                   "': " + std::strerror(errno));
  // Can this rank create files there? (Before training, not after it.)
  int e = folderWriteError(dir, "rank" + std::to_string(rank));
  if (e == ENOTDIR)
    return fail(LOOMRT_ERR_IO, "the checkpoint folder '" + dir + "' is not a folder");
  if (e)
    return fail(LOOMRT_ERR_IO, "cannot write in the checkpoint folder '" + dir +
                                   "': " + std::strerror(e));
  return LOOMRT_OK;
}

loomrt_status CheckpointSet::agree(int64_t v, int64_t &lo, int64_t &hi) {
  // Collectives read device memory: 16 bytes for the call (a few calls
  // per checkpoint, so nothing is kept past the device's lifetime).
  void *scratch = nullptr;
  if (loomrt_status s = loomrt_alloc(dev, LOOMRT_MEM_DEVICE, 16, &scratch))
    return s;
  int64_t pair[2] = {v, -v}; // min of both: {min v, -max v}
  loomrt_status s = loomrt_memcpy_async(stream, scratch, pair, sizeof pair);
  if (!s)
    s = loomrt_all_reduce(comm, stream, LOOMRT_I64, scratch, scratch, 2, LOOMRT_REDUCE_MIN);
  if (!s)
    s = loomrt_memcpy_async(stream, pair, scratch, sizeof pair);
  if (!s)
    s = loomrt_stream_synchronize(stream);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, scratch);
  lo = pair[0];
  hi = -pair[1];
  return s;
}

loomrt_status CheckpointSet::allOk(loomrt_status mine, const std::string &otherwise) {
  std::string myError = mine ? loomrt_last_error() : "";
  int64_t lo, hi;
  if (loomrt_status s = agree(mine == LOOMRT_OK ? 1 : 0, lo, hi))
    return s;
  if (mine)
    return fail(mine, myError);
  return lo ? LOOMRT_OK : fail(LOOMRT_ERR_IO, otherwise);
}

loomrt_status CheckpointSet::save(long step, const std::vector<loomrt_tensor_ref> &tensors) {
  std::string stepStr = std::to_string(step), worldStr = std::to_string(world),
              rankStr = std::to_string(rank), zeroStr = std::to_string(zeroStage);
  const char *k[] = {"format", "step", "model", "world", "rank", "zero_stage", "layout"};
  const char *v[] = {kPartFormat,     stepStr.c_str(), model.c_str(), worldStr.c_str(),
                     rankStr.c_str(), zeroStr.c_str(), layout.c_str()};
  loomrt_status mine = loomrt_checkpoint_save(partPath(step, rank).c_str(), tensors.data(),
                                              tensors.size(), k, v, layout.empty() ? 6 : 7);
  // Commit only when every part is durable; a failed part leaves the
  // previous checkpoint committed.
  if (loomrt_status s = allOk(mine, "another rank could not write its part of the checkpoint "
                                    "of step " + stepStr + "; the checkpoint of the previous "
                                    "save stays the one --resume continues from"))
    return s;
  // A rank lost on the elastic transport wrote no part (the all-reduce
  // above ran over the ranks that remain): a manifest naming its part would
  // commit a checkpoint that cannot be resumed, and deleting the previous
  // parts would leave none. The previous checkpoint stays committed.
  if (int live = loomrt_comm_live(comm); live < world) {
    if (rank == 0)
      std::fprintf(stderr,
                   "loomrt: the checkpoint of step %s is not committed: %d of %d ranks remain, "
                   "and a checkpoint needs every rank's part; the last committed one stays\n",
                   stepStr.c_str(), live, world);
    return LOOMRT_OK;
  }
  mine = LOOMRT_OK;
  if (rank == 0) {
    std::string m = "{\"format\": " + json::quote(kManifestFormat) + ", \"step\": " + stepStr +
                    ", \"world\": " + worldStr + ", \"zero_stage\": " + zeroStr +
                    ", \"model\": " + json::quote(model) + ", \"parts\": [";
    for (int r = 0; r < world; ++r)
      m += (r ? ", " : "") + json::quote(partName(step, r));
    m += "]}\n";
    mine = writeFileAtomic(manifestPath(), {{m.data(), m.size()}});
  }
  if (loomrt_status s = allOk(mine, "rank 0 could not commit the checkpoint of step " + stepStr))
    return s;
  removeOtherParts(step);
  return LOOMRT_OK;
}

loomrt_status CheckpointSet::readManifest(long maxStep, long &step) {
  std::string path = manifestPath();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fail(LOOMRT_ERR_IO, "no committed checkpoint in '" + dir + "' (cannot open '" + path +
                                   "': " + std::strerror(errno) + ")" +
                                   (world > 1 ? "; data-parallel checkpoints need a folder "
                                                "every rank shares"
                                              : ""));
  // A regular file of at most 1 MiB, checked before a byte is read (a FIFO
  // would hang, a 1.5 GB file was read whole before).
  std::string text, why;
  if (!readRegularFile(path, kMaxManifestBytes, "checkpoint manifest", text, why))
    return fail(LOOMRT_ERR_IO, why + " (it is not a checkpoint manifest)");
  json::Value m;
  std::string err;
  if (!json::parse(text, m, err) || !m.is_object())
    return fail(LOOMRT_ERR_IO, "'" + path + "' is not a checkpoint manifest: " +
                                   (err.empty() ? "not an object" : err));
  auto integer = [&](const char *key, long lo, long hi, long &out) -> loomrt_status {
    const json::Value *v = json::get(m, key);
    int64_t n = 0;
    if (!v || !json::integer(*v, n) || n < lo || n > hi)
      return fail(LOOMRT_ERR_IO, "'" + path + "' has no valid \"" + key + "\" (an integer in [" +
                                     std::to_string(lo) + ", " + std::to_string(hi) + "])");
    out = long(n);
    return LOOMRT_OK;
  };
  const std::string *format = json::string(json::get(m, "format")),
                    *mod = json::string(json::get(m, "model"));
  const json::Value *parts = json::get(m, "parts");
  if (!format || *format != kManifestFormat)
    return fail(LOOMRT_ERR_IO, "'" + path + "' is not a manifest of this version's checkpoints");
  long w, z;
  if (loomrt_status s = integer("step", 0, maxStep, step))
    return s;
  if (loomrt_status s = integer("world", 1, INT_MAX, w))
    return s;
  if (loomrt_status s = integer("zero_stage", -1, 3, z))
    return s;
  savedWorld = int(w);
  savedStage = int(z);
  if (!mod || *mod != model)
    return fail(LOOMRT_ERR_IO, "the checkpoint in '" + dir + "' is of model '" +
                                   (mod ? *mod : std::string("?")) + "', not '" + model + "'");
  if (!parts || !parts->is_array() || parts->size() != size_t(w))
    return fail(LOOMRT_ERR_IO, "'" + path + "' does not list one part for each of its " +
                                   std::to_string(w) + " ranks");
  // Each part the manifest names must be the name a rank of that world
  // writes (never a path: the folder is the checkpoint's).
  savedParts.clear();
  for (long r = 0; r < w; ++r) {
    std::string want = "step-" + std::to_string(step) + ".rank" + std::to_string(r) + "-of-" +
                       std::to_string(w) + ".safetensors";
    const std::string *got = json::string(&(*parts)[size_t(r)]);
    if (!got || *got != want)
      return fail(LOOMRT_ERR_IO, "'" + path + "' does not list '" + want + "' as rank " +
                                     std::to_string(r) + "'s part");
    savedParts.push_back(want);
  }
  return LOOMRT_OK;
}

loomrt_status CheckpointSet::resume(const std::vector<loomrt_tensor_ref> &tensors, long maxStep,
                                    long &step) {
  step = -1;
  loomrt_status mine = readManifest(maxStep, step);
  if (loomrt_status s = allOk(mine, "another rank could not read the committed checkpoint"))
    return s;
  // One shared manifest gives every rank the same step; per-node copies
  // that drifted apart do not.
  int64_t lo, hi;
  if (loomrt_status s = agree(step, lo, hi))
    return s;
  if (lo != hi)
    return fail(LOOMRT_ERR_IO, "the ranks see different committed checkpoints (steps " +
                                   std::to_string(lo) + " to " + std::to_string(hi) +
                                   "): data-parallel checkpoints need a folder every rank "
                                   "shares");
  // Saved by another world or ZeRO stage: every rank reads every part and
  // takes its own share (resharding.cpp).
  if (savedWorld != world || savedStage != zeroStage) {
    if (!program)
      return fail(LOOMRT_ERR_IO, "the checkpoint in '" + dir + "' was saved by " +
                                     std::to_string(savedWorld) + " ranks at ZeRO stage " +
                                     std::to_string(savedStage) + "; this binary runs " +
                                     std::to_string(world) + " at stage " +
                                     std::to_string(zeroStage));
    if (program->pipeline_parallel > 1 || program->expert_parallel > 1)
      return fail(LOOMRT_ERR_IO, "the checkpoint in '" + dir + "' was saved by " +
                                     std::to_string(savedWorld) + " ranks; " +
                                     (program->pipeline_parallel > 1 ? "a pipeline's stages"
                                                                     : "expert-parallel ranks") +
                                     " re-shard only onto the same world (not built yet): "
                                     "resume on " + std::to_string(savedWorld) +
                                     " ranks at ZeRO stage " + std::to_string(savedStage));
    if (program->tensor_parallel > 1)
      return fail(LOOMRT_ERR_IO, "the checkpoint in '" + dir + "' was saved by " +
                                     std::to_string(savedWorld) + " ranks; this binary's "
                                     "tensor-parallel slices re-shard only onto the same world "
                                     "(not built yet): resume on " +
                                     std::to_string(savedWorld) + " ranks at ZeRO stage " +
                                     std::to_string(savedStage));
    mine = reshardInto(tensors, step);
    if (loomrt_status s = allOk(mine, "another rank could not re-shard the checkpoint of step " +
                                          std::to_string(step)))
      return s;
    return LOOMRT_OK;
  }
  std::string part = partPath(step, rank);
  mine = loomrt_checkpoint_load(part.c_str(), tensors.data(), tensors.size());
  // The part must say what the manifest says (a part copied from another
  // run, or renamed, does not).
  const char *keys[] = {"format", "step", "model", "world", "rank", "zero_stage"};
  std::string want[] = {kPartFormat, std::to_string(step), model, std::to_string(world),
                        std::to_string(rank), std::to_string(zeroStage)};
  for (int i = 0; i < 6 && mine == LOOMRT_OK; ++i) {
    std::vector<char> value(model.size() + 64);
    mine = loomrt_checkpoint_metadata(part.c_str(), keys[i], value.data(), value.size());
    if (mine == LOOMRT_OK && want[i] != value.data())
      mine = fail(LOOMRT_ERR_IO, "checkpoint part '" + part + "' has " + keys[i] + " '" +
                                     value.data() + "', the manifest says '" + want[i] + "'");
  }
  if (loomrt_status s = allOk(mine, "another rank could not load its part of the checkpoint "
                                    "of step " + std::to_string(step)))
    return s;
  removeOtherParts(step);
  return LOOMRT_OK;
}

void CheckpointSet::removeOtherParts(long keep) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::string suffix = rankSuffix(rank), kept = partName(keep, rank);
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("step-", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 && name != kept)
      ::unlinkat(::dirfd(d), name.c_str(), 0);
  }
  ::closedir(d);
}

/// What a checkpoint part holds, for tools without the binary (loom-ckpt
/// export): the model's parameters saved whole ("params", by name) and the
/// ZeRO shards of flattened buckets ("shards": each bucket's padded length,
/// its members' alignment and its members' names and shapes, in order;
/// rank r holds elements [r, r + 1) x padded / world of the bucket), the
/// same for ZeRO 1-2's moment shards ("state_shards") and every tensor with
/// its dtype and shape ("tensors"). JSON.
std::string checkpointLayout(const loomrt_program *p) {
  std::string params, shards, stateShards, tensors, tp;
  // A tensor-parallel parameter's [dim, groups] (train.h): each rank of
  // a group holds one part of each group along dim (loom-ckpt export
  // puts the parts back together).
  auto tpEntry = [&](const loomrt_global_desc &g) {
    if (g.tp_groups > 0)
      tp += (tp.empty() ? "" : ", ") + json::quote(g.name) + ": [" + std::to_string(g.tp_dim) +
            ", " + std::to_string(g.tp_groups) + "]";
  };
  auto shape = [](const loomrt_global_desc &g) {
    std::string s = "[";
    for (int d = 0; d < g.rank; ++d)
      s += (d ? ", " : "") + std::to_string(g.shape[d]);
    return s + "]";
  };
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (g.mirror_of > 0)
      continue;
    // Every tensor the part holds, with its dtype (loomrt_dtype) and shape
    // (a re-sharding resume reads them all: resharding.cpp).
    tensors += (tensors.empty() ? "" : ", ") + json::quote(g.name) + ": [" +
               std::to_string(int(g.dtype)) + ", " + shape(g) + "]";
    if (!g.is_param && !g.num_members)
      continue;
    if (!g.num_members) {
      params += (params.empty() ? "" : ", ") + json::quote(g.name);
      tpEntry(g);
      continue;
    }
    std::string members;
    for (size_t m = 0; m < g.num_members; ++m) {
      members += std::string(m ? ", " : "") + "[" + json::quote(g.members[m].name) + ", " +
                 shape(g.members[m]) + "]";
      tpEntry(g.members[m]);
    }
    // (ZeRO 1-2 moment shards, whose parameters stay whole, apart: the
    // shards of parameters are what loom-ckpt export reads.)
    std::string &list = g.is_param ? shards : stateShards;
    list += (list.empty() ? "" : ", ") + json::quote(g.name) + ": {\"padded\": " +
            std::to_string(g.padded_numel) + ", \"align\": " +
            std::to_string(std::max<int64_t>(g.member_align, 1)) + ", \"members\": [" +
            members + "]}";
  }
  return "{\"params\": [" + params + "], \"shards\": {" + shards + "}, \"state_shards\": {" +
         stateShards + "}, \"tensors\": {" +
         tensors + "}, \"tensor_parallel\": " + std::to_string(std::max(p->tensor_parallel, 1)) +
         ", \"tp\": {" + tp + "}, \"pipeline_parallel\": " +
         std::to_string(std::max(p->pipeline_parallel, 1)) + ", \"expert_parallel\": " +
         std::to_string(std::max(p->expert_parallel, 1)) + "}";
}

} // namespace loomrt
