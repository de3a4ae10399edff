// The driver registers the loom dialect and every Loom pass.
// RUN: loom-opt --show-dialects | FileCheck %s --check-prefix=DIALECTS
// RUN: loom-opt --help | FileCheck %s --check-prefix=HELP
// RUN: not loom-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING

// DIALECTS: Available Dialects:
// DIALECTS-SAME: loom
// HELP: --loom-optimizer-subgroups
// HELP-SAME: Group parameters in order into optimizer subgroups
// MISSING: cannot open input file '{{.*}}loom-opt.mlir.missing': No such file or directory
