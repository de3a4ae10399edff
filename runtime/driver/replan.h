// replan.h: the re-planning decision of a binary compiled with loomc
// --replan (private to runtime/driver): which of the plans compiled in is
// predicted fastest at the host rate the binary measured.
#ifndef LOOMRT_DRIVER_REPLAN_H
#define LOOMRT_DRIVER_REPLAN_H

#include "loomrt/train.h"

#include <string>
#include <vector>

namespace loomrt::driver {

/// Every candidate's predicted step (seconds) at host-rate factor `f`:
/// linear in log f between the table's factors, the end values beyond them.
std::vector<double> predictedAt(const loomrt_replan &r, double f);

/// The candidate to continue under at factor `f` from candidate `current`:
/// the fastest predicted, if it beats the current one's prediction by more
/// than `margin` (a fraction: 0.02 keeps a plan within 2% of the best);
/// else `current`.
size_t chooseCandidate(const loomrt_replan &r, double f, size_t current, double margin = 0.02);

/// The decision as one JSON line for --log-json: {"event": "replan", ...}.
std::string replanEvent(const loomrt_replan &r, long step, double rate, double factor,
                        size_t from, size_t to);

} // namespace loomrt::driver

#endif // LOOMRT_DRIVER_REPLAN_H
