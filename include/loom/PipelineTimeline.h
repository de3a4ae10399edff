//===- PipelineTimeline.h - a pipeline schedule's order and times -*- C++ -*-===//
//
// Which micro-batch's forward or backward each pipeline stage runs when:
// the order a schedule gives every stage (GPipe, 1F1B, ZB-H1, interleaved
// 1F1B) and the times it runs at, from each unit's duration and the
// transfers between stages. loom-pipeline-schedule orders an interleaved
// stage's transfers by these times (every stage then meets its neighbours'
// transfers in one order); loomc prices the pipeline's step and each
// stage's idle time with them. Plain C++: no IR (test/Tools/layering.test).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PIPELINETIMELINE_H
#define LOOM_PIPELINETIMELINE_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace loom::cost {

/// Forward; backward (the whole backward, or ZB-H1's input-gradient part);
/// ZB-H1's weight-gradient part.
enum class PipeWork { Forward, Backward, Weight };

/// One micro-batch's work on one model chunk. Chunk c runs on stage
/// c mod stages (one chunk a stage unless interleaved).
struct PipeUnit {
  int64_t microBatch = 0, chunk = 0;
  PipeWork work = PipeWork::Forward;
  double start = 0, end = 0;
};

struct PipelineShape {
  int64_t stages = 2, chunks = 1, microBatches = 1;
  /// gpipe, 1f1b, zb-h1 or interleaved (chunks > 1)
  std::string schedule = "1f1b";
};

/// What is wrong with a shape (unknown schedule, an interleaved pipeline
/// whose micro-batches are not a multiple of its stages, ...), or nullopt.
std::optional<std::string> checkPipelineShape(const PipelineShape &shape);

/// Each stage's units in the order the schedule runs them (a valid shape).
std::vector<std::vector<PipeUnit>> pipelineOrder(const PipelineShape &shape);

/// Fills every unit's start and end: a unit starts when its stage is free
/// and what it reads is there (a forward the previous chunk's forward, a
/// backward the next chunk's backward and its own forward; `transfer`
/// seconds between two stages). Returns the last end, or nullopt when the
/// orders wait on each other forever.
std::optional<double>
timePipeline(std::vector<std::vector<PipeUnit>> &order, int64_t stages,
             const std::function<double(const PipeUnit &)> &seconds, double transfer);

} // namespace loom::cost

#endif
