// RUN: loom-opt %s --loom-reinit-params | FileCheck %s
// RUN: loom-opt %s --loom-reinit-params=std=0.5 | FileCheck %s --check-prefix=STD
// RUN: not loom-opt %s --loom-reinit-params=std=0 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: loom.param @fc.weight : tensor<4x3xf32> init #loom.init<normal(0.000000e+00, 2.000000e-02)>
// CHECK: loom.param @fc.bias : tensor<4xf32> init #loom.init<zeros>
// CHECK: loom.param @ln.weight : tensor<4xf32> init #loom.init<ones>
// Parameters that already have an initialiser keep it.
// CHECK: loom.param @kept : tensor<2x2xf32> init #loom.init<uniform(-1.000000e+00, 1.000000e+00)>
// STD: loom.param @fc.weight : tensor<4x3xf32> init #loom.init<normal(0.000000e+00, 5.000000e-01)>
// BAD: loom-reinit-params: std must be positive
loom.param @fc.weight : tensor<4x3xf32> value dense<1.0> : tensor<4x3xf32>
loom.param @fc.bias : tensor<4xf32> value dense<1.0> : tensor<4xf32>
loom.param @ln.weight : tensor<4xf32> value dense<2.0> : tensor<4xf32>
loom.param @kept : tensor<2x2xf32> init #loom.init<uniform(-1.0, 1.0)>
