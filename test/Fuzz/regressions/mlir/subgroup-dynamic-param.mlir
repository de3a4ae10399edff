

loom.param @w : tensor<?xf32>
// exp\cted- 4 elemens}}t
loom.subgroup @sg [@w] numel 5

