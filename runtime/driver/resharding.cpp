// resharding.cpp: resuming a checkpoint that another number of ranks or
// another ZeRO stage saved (issue 46). Every rank reads every part of the
// committed step (each part's "layout" metadata lists its tensors and how
// ZeRO's flattened buckets hold the parameters: checkpointLayout), puts
// the model's tensors back together whole (a parameter P, its moments
// P.exp_avg and P.exp_avg_sq, the step counter), then fills its own
// globals from them: whole ones as they are, ZeRO shards as its block of
// their bucket, laid out by this binary's program. So a ZeRO-3 checkpoint
// of 2 ranks resumes on 1 rank or on 4, and the steps continue as the
// uninterrupted run would (to rounding: the reductions change order).
//
// Each rank holds the whole model's state in host memory while it
// re-shards (the parts are read whole, once). Built for checkpoints whose
// every bucket is described: ZeRO 0-3 (a ZeRO 1-2 bucket's layout is its
// moment shards', loom.layout_of; parts saved before those were described
// are refused with one line).
#include "driver/checkpoint_set.h"
#include "common/backend.h"
#include "common/json.h"

#include <cstdio>
#include <cstring>
#include <map>

namespace loomrt {

namespace {

/// "zero.bucketK.SUFFIX" into ("zero.bucketK", "SUFFIX"); false otherwise.
bool splitBucket(const std::string &name, std::string &bucket, std::string &suffix) {
  if (name.rfind("zero.bucket", 0) != 0)
    return false;
  size_t dot = name.find('.', 11);
  if (dot == std::string::npos)
    return false;
  bucket = name.substr(0, dot);
  suffix = name.substr(dot + 1);
  return true;
}

/// The name a member's tensor has whole: the parameter for the bucket's
/// parameters, P.exp_avg and P.exp_avg_sq for its moments.
bool wholeName(const std::string &member, const std::string &suffix, std::string &out) {
  if (suffix == "params")
    out = member;
  else if (suffix == "exp_avg" || suffix == "exp_avg_sq")
    out = member + "." + suffix;
  else
    return false;
  return true;
}

struct Bucket {
  int64_t padded = 0, align = 1;
  std::vector<std::pair<std::string, int64_t>> members; // name, elements
  /// Where each member starts in the bucket (members aligned, packed).
  std::vector<int64_t> offsets() const {
    std::vector<int64_t> out;
    int64_t off = 0;
    for (auto &m : members) {
      off = (off + align - 1) / align * align;
      out.push_back(off);
      off += m.second;
    }
    return out;
  }
};

/// A part's layout metadata, parsed.
loomrt_status readLayout(const std::string &path, json::Value &layout) {
  // The metadata is in the header, whose length the file's first 8 bytes
  // give: a buffer of that size holds any value in it.
  std::FILE *f = std::fopen(path.c_str(), "rb");
  unsigned char len8[8] = {};
  bool ok = f && std::fread(len8, 1, 8, f) == 8;
  if (f)
    std::fclose(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = n << 8 | len8[i];
  if (!ok || n == 0 || n > (uint64_t(1) << 30))
    return fail(LOOMRT_ERR_IO, "cannot read the header of checkpoint part '" + path + "'");
  std::vector<char> buf(size_t(n) + 1);
  if (loomrt_checkpoint_metadata(path.c_str(), "layout", buf.data(), buf.size()) != LOOMRT_OK)
    return fail(LOOMRT_ERR_IO, "checkpoint part '" + path + "' has no layout (saved by a binary "
                                   "older than re-sharding): resume it on the world and ZeRO "
                                   "stage that saved it");
  std::string err;
  const json::Value *tensors = nullptr, *shards = nullptr, *stateShards = nullptr;
  if (!json::parse(buf.data(), layout, err) || !(tensors = json::get(layout, "tensors")) ||
      !tensors->is_object() || !(shards = json::get(layout, "shards")) || !shards->is_object() ||
      ((stateShards = json::get(layout, "state_shards")) && !stateShards->is_object()))
    return fail(LOOMRT_ERR_IO, "checkpoint part '" + path + "' has a malformed layout");
  return LOOMRT_OK;
}

/// A layout's shape: a list of at most LOOMRT_MAX_RANK non-negative
/// integers of at most 2^40 elements in all (no tensor of a part is
/// larger, and a hostile layout allocates nothing absurd).
bool readShape(const json::Value &v, std::vector<int64_t> &dims) {
  dims.clear();
  if (!v.is_array() || v.size() > LOOMRT_MAX_RANK)
    return false;
  int64_t n = 1;
  for (const json::Value &d : v) {
    int64_t k;
    if (!json::integer(d, k) || k < 0 || (k > 0 && n > (int64_t(1) << 40) / k))
      return false;
    n *= k;
    dims.push_back(k);
  }
  return true;
}

/// One bucket of a part's layout ({"padded": P, "align": A, "members":
/// [[name, shape], ...]}).
bool readBucket(const json::Value &b, Bucket &bk) {
  const json::Value *padded = json::get(b, "padded"), *align = json::get(b, "align"),
                    *members = json::get(b, "members");
  if (!padded || !align || !members || !members->is_array() ||
      !json::integer(*padded, bk.padded) || bk.padded < 0 || !json::integer(*align, bk.align))
    return false;
  bk.align = std::max<int64_t>(1, bk.align);
  for (const json::Value &m : *members) {
    std::vector<int64_t> dims;
    const std::string *name = m.is_array() && m.size() == 2 ? json::string(&m[0]) : nullptr;
    if (!name || !readShape(m[1], dims))
      return false;
    bk.members.push_back({*name, numel(dims.data(), int(dims.size()))});
  }
  return true;
}

using Whole = std::map<std::string, std::pair<int, std::vector<uint8_t>>>;

/// This rank's block of a shard `t` of this binary's bucket `bucket`
/// (laid out as the program's parameter shard of it says), from `whole`.
loomrt_status fillShard(const loomrt_program *program, const loomrt_tensor_ref &t,
                        const std::string &bucket, const std::string &suffix, const Whole &whole,
                        int rank) {
  size_t n = numel(t.shape, t.rank);
  // The shard's own layout (ZeRO 1-2 moments: loom.layout_of), else its
  // bucket's parameter shard's.
  const loomrt_global_desc *pg = nullptr;
  for (size_t i = 0; i < program->num_globals; ++i)
    if (program->globals[i].name == std::string(t.name) && program->globals[i].num_members)
      pg = &program->globals[i];
  for (size_t i = 0; i < program->num_globals && !pg; ++i)
    if (program->globals[i].name == bucket + ".params")
      pg = &program->globals[i];
  if (!pg || !pg->num_members)
    return fail(LOOMRT_ERR_IO, std::string("this binary's '") + t.name + "' belongs to a "
                                   "bucket the program does not lay out: re-sharding into it is "
                                   "not built; resume on the world and stage that saved it");
  Bucket bk;
  bk.padded = pg->padded_numel;
  bk.align = std::max<int64_t>(1, pg->member_align);
  for (size_t k = 0; k < pg->num_members; ++k)
    bk.members.push_back(
        {pg->members[k].name, int64_t(numel(pg->members[k].shape, pg->members[k].rank))});
  std::vector<int64_t> offs = bk.offsets();
  int64_t lo = int64_t(n) * rank, hi = lo + int64_t(n);
  float *block = static_cast<float *>(t.data);
  std::memset(block, 0, n * 4);
  std::string member;
  for (size_t k = 0; k < bk.members.size(); ++k) {
    if (!wholeName(bk.members[k].first, suffix, member))
      return fail(LOOMRT_ERR_IO, std::string("this binary's '") + t.name +
                                     "' is state re-sharding does not know how to fill");
    auto it = whole.find(member);
    if (it == whole.end() || it->second.second.size() != size_t(bk.members[k].second) * 4)
      return fail(LOOMRT_ERR_IO, "the checkpoint has no '" + member + "' of this binary's shape");
    int64_t from = std::max(lo, offs[k]), to = std::min(hi, offs[k] + bk.members[k].second);
    if (from < to)
      std::memcpy(block + (from - lo), it->second.second.data() + (from - offs[k]) * 4,
                  size_t(to - from) * 4);
  }
  return LOOMRT_OK;
}

} // namespace

loomrt_status CheckpointSet::reshardInto(const std::vector<loomrt_tensor_ref> &tensors,
                                         long step) {
  // The model whole: name -> (dtype, bytes).
  Whole whole;
  // The saved buckets: their layout, and each rank's shard of each tensor.
  std::map<std::string, Bucket> savedBuckets;
  std::map<std::string, std::vector<std::vector<uint8_t>>> shards;
  for (size_t r = 0; r < savedParts.size(); ++r) {
    std::string path = dir + "/" + savedParts[r];
    // The part must say what the manifest says (as a same-world resume
    // checks), then its layout.
    const char *keys[] = {"format", "step", "model", "world", "rank", "zero_stage"};
    std::string want[] = {"loom checkpoint part 1", std::to_string(step), model,
                          std::to_string(savedWorld), std::to_string(r),
                          std::to_string(savedStage)};
    for (int k = 0; k < 6; ++k) {
      std::vector<char> value(model.size() + 64);
      if (loomrt_checkpoint_metadata(path.c_str(), keys[k], value.data(), value.size()) !=
              LOOMRT_OK ||
          want[k] != value.data())
        return fail(LOOMRT_ERR_IO, "checkpoint part '" + path + "' does not have " + keys[k] +
                                       " '" + want[k] + "' as the manifest says");
    }
    json::Value layout;
    if (loomrt_status s = readLayout(path, layout))
      return s;
    for (const char *key : {"shards", "state_shards"}) {
      const json::Value *list = json::get(layout, key);
      if (r != 0 || !list)
        continue;
      for (auto &[bname, b] : list->items()) {
        Bucket bk;
        if (!readBucket(b, bk))
          return fail(LOOMRT_ERR_IO, "'" + path + "': the layout of '" + bname +
                                         "' is malformed");
        std::string bucket, suffix;
        if (splitBucket(bname, bucket, suffix))
          savedBuckets[bucket] = bk;
      }
    }
    // Every tensor the part holds, read (checksums checked) in one load.
    std::vector<loomrt_tensor_ref> refs;
    std::vector<std::vector<uint8_t>> data;
    std::vector<std::string> names;
    for (auto &[name, spec] : json::get(layout, "tensors")->items()) {
      int64_t dtype = -1;
      std::vector<int64_t> dims;
      if (!spec.is_array() || spec.size() != 2 || !json::integer(spec[0], dtype) ||
          (dtype != LOOMRT_F32 && dtype != LOOMRT_BF16 && dtype != LOOMRT_I64) ||
          !readShape(spec[1], dims))
        return fail(LOOMRT_ERR_IO, "'" + path + "': the layout of '" + name + "' is malformed");
      loomrt_tensor_ref t{nullptr, loomrt_dtype(dtype), int(dims.size()), {}, nullptr};
      std::copy(dims.begin(), dims.end(), t.shape);
      names.push_back(name);
      data.emplace_back(numel(t.shape, t.rank) * dtypeBytes(t.dtype));
      refs.push_back(t);
    }
    for (size_t i = 0; i < refs.size(); ++i) {
      refs[i].name = names[i].c_str();
      refs[i].data = data[i].data();
    }
    if (loomrt_status s = loomrt_checkpoint_load(path.c_str(), refs.data(), refs.size()))
      return s;
    for (size_t i = 0; i < refs.size(); ++i) {
      std::string bucket, suffix;
      if (splitBucket(names[i], bucket, suffix)) {
        auto &list = shards[names[i]];
        list.resize(savedParts.size());
        list[r] = std::move(data[i]);
      } else if (r == 0) { // (every rank of ZeRO 0-2 holds the same)
        whole[names[i]] = {int(refs[i].dtype), std::move(data[i])};
      }
    }
  }
  // The saved buckets' tensors, whole.
  for (auto &[name, parts] : shards) {
    std::string bucket, suffix, member;
    splitBucket(name, bucket, suffix);
    auto it = savedBuckets.find(bucket);
    if (it == savedBuckets.end())
      return fail(LOOMRT_ERR_IO, "the checkpoint's '" + name + "' belongs to a bucket its "
                                     "layout does not describe (saved before ZeRO 1-2 buckets "
                                     "were): resume on the world and stage that saved it");
    std::vector<uint8_t> flat;
    for (auto &p : parts)
      flat.insert(flat.end(), p.begin(), p.end());
    const Bucket &bk = it->second;
    if (flat.size() != size_t(bk.padded) * 4)
      return fail(LOOMRT_ERR_IO, "the checkpoint's '" + name + "' holds " +
                                     std::to_string(flat.size() / 4) + " elements, its layout " +
                                     std::to_string(bk.padded));
    std::vector<int64_t> offs = bk.offsets();
    for (size_t k = 0; k < bk.members.size(); ++k) {
      if (!wholeName(bk.members[k].first, suffix, member))
        return fail(LOOMRT_ERR_IO, "the checkpoint's '" + name + "' is state re-sharding does "
                                       "not know how to split (not parameters or Adam moments)");
      auto from = flat.begin() + offs[k] * 4;
      whole[member] = {int(LOOMRT_F32), std::vector<uint8_t>(from, from + bk.members[k].second * 4)};
    }
  }
  // This binary's globals from the whole tensors.
  for (const loomrt_tensor_ref &t : tensors) {
    std::string bucket, suffix;
    if (splitBucket(t.name, bucket, suffix)) {
      if (loomrt_status s = fillShard(program, t, bucket, suffix, whole, rank))
        return s;
      continue;
    }
    auto it = whole.find(t.name);
    if (it == whole.end() || it->second.first != int(t.dtype) ||
        it->second.second.size() != numel(t.shape, t.rank) * dtypeBytes(t.dtype))
      return fail(LOOMRT_ERR_IO, std::string("the checkpoint has no '") + t.name +
                                     "' of this binary's type and shape");
    std::memcpy(t.data, it->second.second.data(), it->second.second.size());
  }
  if (rank == 0)
    std::fprintf(stderr,
                 "loomrt: re-sharded the checkpoint of step %ld saved by %d ranks at ZeRO stage "
                 "%d for %d at stage %d\n",
                 step, savedWorld, savedStage, world, zeroStage);
  return LOOMRT_OK;
}

} // namespace loomrt
