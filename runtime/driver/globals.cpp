// globals.cpp: parameters and state before the first step (globals.h).
#include "driver/globals.h"

#include "common/adam_math.h"
#include "common/backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <unistd.h>

namespace loomrt::driver {

/// A relative name is taken from the binary's own folder, so that the
/// binary finds the weights loomc wrote beside it from any working folder.
std::string besideExecutable(const std::string &name) {
  if (name.empty() || name[0] == '/')
    return name;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return name;
  std::string dir(exe, size_t(n));
  return dir.substr(0, dir.rfind('/') + 1) + name;
}

/// A pipeline stage's parameter after others' that it does not hold:
/// their draws skipped (the stream advances as one rank's would).
static loomrt_status skipDraws(loomrt_rng rng, const loomrt_global_desc &g) {
  return g.init_skip > 0
             ? loomrt_rng_fill_part(rng, 2, 0.0, 1.0, nullptr, size_t(g.init_skip), 0, 0)
             : LOOMRT_OK;
}

/// A fresh run's parameters and state in their host views: drawn from
/// --seed in declaration order (ZeRO-3 shards: every member, keeping this
/// rank's block), imported values over their stand-ins, working copies from
/// their masters. Returns 0 or die()'s code.
int initialiseGlobals(const loomrt_program *p, const Flags &f, int rank,
                      std::vector<HostView> &host) {
  std::unique_ptr<loomrt_rng_t, void (*)(loomrt_rng)> rng(loomrt_rng_create(f.seed),
                                                         loomrt_rng_destroy);
  // Elements [begin, begin + count) of global g's values into dst: of its
  // whole draw, or of this rank's slice of a tensor-parallel parameter's
  // (the full tensor drawn as one rank would, this rank's part kept).
  const int tp = std::max(p->tensor_parallel, 1);
  // A ZeRO shard's block is this rank's place among the data-parallel
  // ranks, which tensor parallelism (the innermost ranks) leaves out.
  const size_t block = size_t(dataRank(p, rank));
  auto draw = [&](const loomrt_global_desc &g, float *dst, size_t begin, size_t count) {
    if (g.tp_groups <= 0)
      return loomrt_rng_fill_part(rng.get(), g.init_kind, g.a, g.b, dst, numel(g), begin, count);
    int64_t full[LOOMRT_MAX_RANK];
    for (int d = 0; d < g.rank; ++d)
      full[d] = g.shape[d] * (d == g.tp_dim ? tp : 1);
    return loomrt_rng_fill_slice(rng.get(), g.init_kind, g.a, g.b, dst, full, g.rank, g.tp_dim,
                                 g.tp_groups, tp, rank % tp, begin, count);
  };
  // ZeRO-3 shards: every rank draws all members of a shard (the same
  // stream as one rank drawing the unsharded parameters) into the full
  // bucket, then keeps its block.
  std::vector<std::vector<float>> full(p->num_globals);
  std::vector<loomrt_tensor_ref> fromWeights;
  std::vector<std::pair<float *, const loomrt_global_desc *>> splats;
  auto ref = [](const loomrt_global_desc &g, void *data) {
    loomrt_tensor_ref t{g.name, g.dtype, g.rank, {}, data};
    for (int d = 0; d < g.rank; ++d)
      t.shape[d] = g.shape[d];
    return t;
  };
  // Where member k of a shard starts in its bucket.
  auto memberOffsets = [&](const loomrt_global_desc &g, std::vector<size_t> &offs) -> bool {
    size_t off = 0, align = size_t(std::max<int64_t>(g.member_align, 1));
    offs.clear();
    for (size_t k = 0; k < g.num_members; ++k) {
      off = (off + align - 1) / align * align;
      offs.push_back(off);
      off += numel(g.members[k]);
    }
    return off <= size_t(g.padded_numel);
  };
  std::vector<size_t> offs;
  // The part [from, to) of member k (at offs[k]) that lies in this rank's
  // block of shard g's bucket; empty when from == to.
  auto inBlock = [&](const loomrt_global_desc &g, size_t k) {
    size_t lo = numel(g) * block, hi = lo + numel(g);
    size_t from = std::max(lo, offs[k]), to = std::min(hi, offs[k] + numel(g.members[k]));
    return std::pair<size_t, size_t>{from, std::max(from, to)};
  };
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    // A shard of parameters that are globals themselves (ZeRO 1-2 master
    // weights): its block is copied from them once they hold their final
    // values (below), nothing is drawn for it.
    if (g.num_members && g.members[0].mirror_of > 0)
      continue;
    if (g.num_members) {
      if (!memberOffsets(g, offs))
        return die(std::string("shard ") + g.name + ": its members do not fit its " +
                   std::to_string(g.padded_numel) + " elements");
      bool anyImported = false;
      for (size_t k = 0; k < g.num_members; ++k)
        anyImported |= g.members[k].from_weights != 0;
      if (!anyImported) {
        // Only this rank's block is drawn (the counter-based stream gives
        // each element the value one rank drawing everything would).
        float *blockData = reinterpret_cast<float *>(host[i].data());
        std::memset(blockData, 0, host[i].size()); // the padding and the gaps
        for (size_t k = 0; k < g.num_members; ++k) {
          const loomrt_global_desc &m = g.members[k];
          TRY(skipDraws(rng.get(), m), std::string("initialising ") + m.name);
          auto [from, to] = inBlock(g, k);
          size_t count = to - from;
          TRY(draw(m, count ? blockData + (from - numel(g) * block) : nullptr,
                   count ? from - offs[k] : 0, count),
              std::string("initialising ") + m.name);
        }
        continue;
      }
      full[i].assign(size_t(g.padded_numel), 0.0f);
      // Imported values go into the whole bucket (below), then this rank
      // keeps its block.
      for (size_t k = 0; k < g.num_members; ++k) {
        const loomrt_global_desc &m = g.members[k];
        TRY(skipDraws(rng.get(), m), std::string("initialising ") + m.name);
        float *at = full[i].data() + offs[k];
        TRY(loomrt_rng_fill(rng.get(), m.init_kind, m.a, m.b, at, numel(m)),
            std::string("initialising ") + m.name);
        if (m.from_weights == 1)
          fromWeights.push_back(ref(m, at));
        else if (m.from_weights == 2)
          splats.push_back({at, &m});
      }
      continue;
    }
    if (g.dtype != LOOMRT_F32)
      continue; // integer state starts at zero
    TRY(skipDraws(rng.get(), g), std::string("initialising ") + g.name);
    TRY(draw(g, reinterpret_cast<float *>(host[i].data()), 0, numel(g)),
        std::string("initialising ") + g.name);
    if (g.from_weights == 1)
      fromWeights.push_back(ref(g, host[i].data()));
    else if (g.from_weights == 2)
      splats.push_back({reinterpret_cast<float *>(host[i].data()), &g});
  }
  // Imported values overwrite their stand-in draws (drawn anyway, so the
  // other parameters get the same values under either --init).
  if (f.init == "model")
    for (auto [data, g] : splats)
      std::fill(data, data + numel(*g), float(g->splat));
  if (f.init == "model" && (p->weights || !f.weights.empty()) && !fromWeights.empty()) {
    std::string file = f.weights.empty() ? besideExecutable(p->weights) : f.weights;
    TRY(loomrt_checkpoint_load(file.c_str(), fromWeights.data(), fromWeights.size()),
        "loading the initial weights");
  }
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (!g.num_members)
      continue;
    if (g.members[0].mirror_of > 0) {
      // This rank's block, straight from the members' final values.
      if (!memberOffsets(g, offs))
        return die(std::string("shard ") + g.name + ": its members do not fit its " +
                   std::to_string(g.padded_numel) + " elements");
      float *blockData = reinterpret_cast<float *>(host[i].data());
      std::memset(blockData, 0, host[i].size()); // the padding and the gaps
      for (size_t k = 0; k < g.num_members; ++k) {
        const loomrt_global_desc &m = g.members[k];
        size_t src = size_t(m.mirror_of - 1);
        if (m.mirror_of <= 0 || src >= i || p->globals[src].dtype != LOOMRT_F32 ||
            numel(p->globals[src]) != numel(m))
          return die(std::string("shard ") + g.name + ": member " + m.name +
                     " does not match the global it copies");
        auto [from, to] = inBlock(g, k);
        std::memcpy(blockData + (from - numel(g) * block),
                    reinterpret_cast<const float *>(host[src].data()) + (from - offs[k]),
                    (to - from) * sizeof(float));
      }
      continue;
    }
    if (full[i].empty())
      continue; // drawn as this rank's block
    std::memcpy(host[i].data(), full[i].data() + numel(g) * block, host[i].size());
    std::vector<float>().swap(full[i]);
  }
  return copyToWorkingCopies(p, host);
}

/// Working copies (offloaded parameters' device copies) as their master
/// weights: the same bytes, or an fp32 master rounded to a bf16 working
/// copy (what the update's mixed-precision refresh writes each step,
/// rounded the same way). At the start of a run and after a resume:
/// checkpoints do not hold them, so a run resumes under another offload
/// plan than the one that saved it.
int copyToWorkingCopies(const loomrt_program *p, std::vector<HostView> &host) {
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (g.mirror_of <= 0)
      continue;
    size_t m = size_t(g.mirror_of - 1);
    const loomrt_global_desc &master = p->globals[m];
    bool narrow = master.dtype == LOOMRT_F32 && g.dtype == LOOMRT_BF16 &&
                  numel(master) == numel(g);
    if (m >= i || (host[m].size() != host[i].size() && !narrow))
      return die(std::string("the working copy ") + g.name + " does not match its master");
    if (!narrow || master.dtype == g.dtype) {
      std::memcpy(host[i].data(), host[m].data(), host[i].size());
      continue;
    }
    const float *src = reinterpret_cast<const float *>(host[m].data());
    uint16_t *dst = reinterpret_cast<uint16_t *>(host[i].data());
    long n = long(numel(g));
#pragma omp parallel for schedule(static)
    for (long k = 0; k < n; ++k)
      dst[k] = loomrt::floatToBf16(src[k]);
  }
  return 0;
}

/// Zeroes each buffer, 16 MiB at a time on every core (the first touch of
/// each page is what costs).
void zeroInParallel(const std::vector<std::pair<uint8_t *, size_t>> &buffers) {
  constexpr size_t kPiece = size_t(16) << 20;
  std::vector<std::pair<uint8_t *, size_t>> pieces;
  for (auto [data, bytes] : buffers)
    for (size_t off = 0; off < bytes; off += kPiece)
      pieces.push_back({data + off, std::min(kPiece, bytes - off)});
#pragma omp parallel for schedule(dynamic)
  for (size_t k = 0; k < pieces.size(); ++k)
    std::memset(pieces[k].first, 0, pieces[k].second);
}

} // namespace loomrt::driver
