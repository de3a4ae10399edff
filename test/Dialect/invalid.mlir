// One case per verifier branch of the loom dialect.
// RUN: loom-opt %s -split-input-file -verify-diagnostics

// expected-error@+1 {{unknown initialiser 'gaussian'}}
loom.param @w : tensor<4xf32> init #loom.init<gaussian>

// -----

// expected-error@+1 {{normal initialiser needs a positive standard deviation}}
loom.param @w : tensor<4xf32> init #loom.init<normal(0.0, 0.0)>

// -----

// expected-error@+1 {{uniform initialiser needs low < high}}
loom.param @w : tensor<4xf32> init #loom.init<uniform(1.0, -1.0)>

// -----

// expected-error@+1 {{has both an initialiser and a value}}
loom.param @w : tensor<4xf32> init #loom.init<zeros> value dense<1.0> : tensor<4xf32>

// -----

// expected-error@+1 {{does not match the declared shape [4]}}
loom.param @w : tensor<4xf32> value dense<1.0> : tensor<5xf32>

// -----

// expected-error@+1 {{mapped is a view made by loom.zero_copy}}
loom.param @w : tensor<4xf32, #loom.mem<mapped>>

// -----

// expected-error@+1 {{'loom.param' op attribute 'type' failed to satisfy constraint}}
loom.param @w : tensor<4xi32>

// -----

loom.param @w : tensor<4xf32>
// expected-error@+1 {{has shape [5] but its parameter '@w' has shape [4]}}
loom.state @w.m : tensor<5xf32> role adam_m of @w

// -----

loom.state @x : tensor<4xf32> role other
// expected-error@+1 {{belongs to '@x', which is not a loom.param}}
loom.state @y : tensor<4xf32> role adam_m of @x

// -----

// expected-error@+1 {{'@nope' is not a loom.param}}
loom.subgroup @sg [@nope] numel 4

// -----

loom.param @w : tensor<4xf32>
// expected-error@+1 {{lists '@w' twice}}
loom.subgroup @sg [@w, @w] numel 8

// -----

loom.param @w : tensor<4xf32>
// expected-error@+1 {{numel 5 does not match its parameters' 4 elements}}
loom.subgroup @sg [@w] numel 5

// -----

loom.param @w : tensor<4xf32>
loom.subgroup @sg0 [@w] numel 4
// expected-error@+1 {{'@w' already belongs to subgroup 'sg0'}}
loom.subgroup @sg1 [@w] numel 4

// -----

// expected-error@+1 {{needs at least one level}}
loom.topology @t []

// -----

// expected-error@+1 {{defines level "gpu" twice}}
loom.topology @t ["gpu" = 2, "gpu" = 4]

// -----

// expected-error@+1 {{level "node" must have a positive size, got 0}}
loom.topology @t ["gpu" = 2, "node" = 0]

// -----

// expected-error@+1 {{has 1 levels but 2 sizes}}
"loom.topology"() <{sym_name = "t", levels = ["gpu"], sizes = array<i64: 2, 4>}> : () -> ()

// -----

loom.param @w : tensor<4xf32, #loom.mem<device>>
func.func @load_type() {
  // expected-error@+1 {{result type 'tensor<4xf32, #loom.mem<pinned>>' differs from the declared 'tensor<4xf32, #loom.mem<device>>' (placement included)}}
  %0 = loom.load @w : tensor<4xf32, #loom.mem<pinned>>
  return
}

// -----

func.func @load_unknown() {
  // expected-error@+1 {{'@w' is not a loom.param or loom.state}}
  %0 = loom.load @w : tensor<4xf32>
  return
}

// -----

loom.param @w : tensor<4xf32>
func.func @store_type(%x: tensor<4xbf16>) {
  // expected-error@+1 {{value type 'tensor<4xbf16>' differs from the declared 'tensor<4xf32>'}}
  loom.store %x to @w : tensor<4xbf16>
  return
}

// -----

func.func @gpu_reads_host(%a: tensor<4xf32, #loom.mem<device>>, %b: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{operand #1 lives in host memory (#loom.mem<pinned>) but the op runs on the GPU: move it with loom.copy or map it with loom.zero_copy}}
  %0 = loom.add %a, %b : tensor<4xf32, #loom.mem<device>>, tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  return
}

// -----

func.func @cpu_reads_gpu(%a: tensor<4xf32, #loom.mem<pageable>>, %b: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{operand #1 lives in GPU memory (#loom.mem<device>) but the op runs on the CPU (#loom.mem<pageable>): move it with loom.copy}}
  %0 = loom.add %a, %b : tensor<4xf32, #loom.mem<pageable>>, tensor<4xf32, #loom.mem<device>> -> tensor<4xf32, #loom.mem<pageable>>
  return
}

// -----

func.func @compute_on_nvme(%a: tensor<4xf32, #loom.mem<nvme>>) {
  // expected-error@+1 {{operand #0 lives in nvme storage; nothing computes on it}}
  %0 = loom.exp %a : tensor<4xf32, #loom.mem<nvme>>
  return
}

// -----

func.func @compute_writes_mapped(%t: tensor<8x4xf32, #loom.mem<mapped>>, %i: tensor<2xi64, #loom.mem<device>>) {
  // expected-error@+1 {{result #0 cannot be mapped host memory}}
  %0 = loom.embedding %t[%i] : tensor<8x4xf32, #loom.mem<mapped>>, tensor<2xi64, #loom.mem<device>> -> tensor<2x4xf32, #loom.mem<mapped>>
  return
}

// -----

func.func @broadcast_mismatch(%a: tensor<4x3xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{'loom.add' op operands don't have broadcast-compatible shapes}}
  %0 = loom.add %a, %b : tensor<4x3xf32>, tensor<4xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @elt_mismatch(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error@+1 {{requires the same element type for all operands and results}}
  %0 = loom.mul %a, %b : tensor<4xf32>, tensor<4xbf16> -> tensor<4xf32>
  return
}

// -----

func.func @select_branches(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error@+1 {{branches have different element types}}
  %0 = loom.select %c, %a, %b : tensor<4xi1>, tensor<4xf32>, tensor<4xbf16> -> tensor<4xf32>
  return
}

// -----

func.func @select_shapes(%c: tensor<3xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{shapes [3], [4] and [4] do not broadcast}}
  %0 = loom.select %c, %a, %b : tensor<3xi1>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @select_result(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<f32>) {
  // expected-error@+1 {{result must be the broadcast shape [4] of element type 'f32'}}
  %0 = loom.select %c, %a, %b : tensor<4xi1>, tensor<4xf32>, tensor<f32> -> tensor<2x4xf32>
  return
}

// -----

func.func @cast_moves(%a: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{cannot change placement; use loom.copy}}
  %0 = loom.cast %a : tensor<4xf32, #loom.mem<pinned>> to tensor<4xbf16, #loom.mem<pageable>>
  return
}

// -----

func.func @matmul_rank(%a: tensor<4xf32>, %b: tensor<4x4xf32>) {
  // expected-error@+1 {{operands must have rank >= 2, got 1 and 2}}
  %0 = loom.matmul %a, %b : tensor<4xf32>, tensor<4x4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @matmul_elt(%a: tensor<4x4xf32>, %b: tensor<4x4xbf16>) {
  // expected-error@+1 {{operand element types differ: 'f32' and 'bf16'}}
  %0 = loom.matmul %a, %b : tensor<4x4xf32>, tensor<4x4xbf16> -> tensor<4x4xf32>
  return
}

// -----

func.func @matmul_narrow(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) {
  // expected-error@+1 {{result element type 'bf16' is narrower than the operands' 'f32'}}
  %0 = loom.matmul %a, %b : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xbf16>
  return
}

// -----

func.func @matmul_k(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error@+1 {{contraction dimensions differ: lhs has 3, rhs has 4}}
  %0 = loom.matmul %a, %b : tensor<4x3xf32>, tensor<4x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x4x3xf32>, %b: tensor<5x3x4xf32>) {
  // expected-error@+1 {{batch dimensions [2] and [5] do not broadcast}}
  %0 = loom.matmul %a, %b : tensor<2x4x3xf32>, tensor<5x3x4xf32> -> tensor<2x4x4xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<4x3xf32>, %b: tensor<5x3xf32>) {
  // expected-error@+1 {{result shape must be [4, 5], got [4, 3]}}
  %0 = loom.matmul %a, %b transpose_rhs : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @ln_result(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{result must have the input's type}}
  %0 = loom.layer_norm %x, %w eps 1.0e-5 : tensor<2x8xf32>, tensor<8xf32> -> tensor<8x2xf32>
  return
}

// -----

func.func @ln_weight(%x: tensor<2x8xf32>, %w: tensor<2xf32>) {
  // expected-error@+1 {{weight must have shape [8] (the normalised last dimension), got [2]}}
  %0 = loom.layer_norm %x, %w eps 1.0e-5 : tensor<2x8xf32>, tensor<2xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @ln_bias(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{bias must have shape [8]}}
  %0 = loom.layer_norm %x, %w, %b eps 1.0e-5 : tensor<2x8xf32>, tensor<8xf32>, tensor<4xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @ln_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{eps must be positive}}
  %0 = loom.layer_norm %x, %w eps 0.0 : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @ln_scalar(%x: tensor<f32>, %w: tensor<1xf32>) {
  // expected-error@+1 {{input must have at least one dimension}}
  %0 = loom.layer_norm %x, %w eps 1.0e-5 : tensor<f32>, tensor<1xf32> -> tensor<f32>
  return
}

// -----

func.func @rms_result(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{result must have the input's type}}
  %0 = loom.rms_norm %x, %w eps 1.0e-5 : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xbf16>
  return
}

// -----

func.func @rms_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{eps must be positive}}
  %0 = loom.rms_norm %x, %w eps -1.0 : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @rms_weight(%x: tensor<2x8xf32>, %w: tensor<8x1xf32>) {
  // expected-error@+1 {{weight must have shape [8]}}
  %0 = loom.rms_norm %x, %w eps 1.0e-5 : tensor<2x8xf32>, tensor<8x1xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @softmax_dim(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{dimension 2 is out of range for a tensor of rank 2}}
  %0 = loom.softmax %x dim 2 : tensor<2x8xf32>
  return
}

// -----

func.func @embedding_table(%t: tensor<8xf32>, %i: tensor<2xi64>) {
  // expected-error@+1 {{table must be [rows, features], got rank 1}}
  %0 = loom.embedding %t[%i] : tensor<8xf32>, tensor<2xi64> -> tensor<2xf32>
  return
}

// -----

func.func @embedding_result(%t: tensor<8x4xf32>, %i: tensor<2x3xi64>) {
  // expected-error@+1 {{result must have shape [2, 3, 4] (indices shape + features)}}
  %0 = loom.embedding %t[%i] : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<6x4xf32>
  return
}

// -----

func.func @attention_rank(%q: tensor<4x8x16xf32>) {
  // expected-error@+1 {{query, key and value must be [batch, heads, seq, head_dim]}}
  %0 = loom.attention %q, %q, %q scale 1.0 : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<4x8x16xf32>
  return
}

// -----

func.func @attention_qk(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x8xf32>) {
  // expected-error@+1 {{must agree on batch, heads and head_dim}}
  %0 = loom.attention %q, %k, %k scale 1.0 : tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @attention_kv(%q: tensor<2x4x8x16xf32>, %v: tensor<2x4x6x16xf32>) {
  // expected-error@+1 {{must agree on batch, heads and seq}}
  %0 = loom.attention %q, %q, %v scale 1.0 : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x16xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<2x4x8x16xf32>) {
  // expected-error@+1 {{result must have shape [2, 4, 8, 16]}}
  %0 = loom.attention %q, %q, %q scale 1.0 : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

func.func @attention_causal(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x6x16xf32>) {
  // expected-error@+1 {{a causal mask needs equal query and key lengths}}
  %0 = loom.attention %q, %k, %k causal scale 1.0 : tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x16xf32>
  return
}

// -----

func.func @spmm_rank(%rp: tensor<5x1xi64>, %ci: tensor<9xi64>, %v: tensor<9xf32>, %x: tensor<4x3xf32>) {
  // expected-error@+1 {{row_ptr, col_idx and values must be 1-D (CSR)}}
  %0 = loom.spmm %rp, %ci, %v, %x : tensor<5x1xi64>, tensor<9xi64>, tensor<9xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @spmm_nnz(%rp: tensor<5xi64>, %ci: tensor<9xi64>, %v: tensor<8xf32>, %x: tensor<4x3xf32>) {
  // expected-error@+1 {{col_idx has 9 entries but values has 8}}
  %0 = loom.spmm %rp, %ci, %v, %x : tensor<5xi64>, tensor<9xi64>, tensor<8xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @spmm_dense(%rp: tensor<5xi64>, %ci: tensor<9xi64>, %v: tensor<9xf32>, %x: tensor<12xf32>) {
  // expected-error@+1 {{input and result must be [nodes, features]}}
  %0 = loom.spmm %rp, %ci, %v, %x : tensor<5xi64>, tensor<9xi64>, tensor<9xf32>, tensor<12xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @spmm_rows(%rp: tensor<4xi64>, %ci: tensor<9xi64>, %v: tensor<9xf32>, %x: tensor<4x3xf32>) {
  // expected-error@+1 {{row_ptr must have rows + 1 = 5 entries, got 4}}
  %0 = loom.spmm %rp, %ci, %v, %x : tensor<4xi64>, tensor<9xi64>, tensor<9xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @spmm_features(%rp: tensor<5xi64>, %ci: tensor<9xi64>, %v: tensor<9xf32>, %x: tensor<4x3xf32>) {
  // expected-error@+1 {{result must keep the input's 3 features}}
  %0 = loom.spmm %rp, %ci, %v, %x : tensor<5xi64>, tensor<9xi64>, tensor<9xf32>, tensor<4x3xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{cannot reshape 16 elements into [3, 5] (15 elements)}}
  %0 = loom.reshape %x : tensor<2x8xf32> to tensor<3x5xf32>
  return
}

// -----

func.func @reshape_elt(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{element type must not change}}
  %0 = loom.reshape %x : tensor<2x8xf32> to tensor<16xbf16>
  return
}

// -----

func.func @reshape_moves(%x: tensor<2x8xf32, #loom.mem<device>>) {
  // expected-error@+1 {{cannot change placement; use loom.copy}}
  %0 = loom.reshape %x : tensor<2x8xf32, #loom.mem<device>> to tensor<16xf32>
  return
}

// -----

func.func @transpose_len(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{permutation has 3 entries for a tensor of rank 2}}
  %0 = loom.transpose %x [0, 1, 2] : tensor<2x8xf32> to tensor<2x8xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{perm [1, 1] is not a permutation of 0..1}}
  %0 = loom.transpose %x [1, 1] : tensor<2x8xf32> to tensor<8x8xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{result shape must be [8, 2]}}
  %0 = loom.transpose %x [1, 0] : tensor<2x8xf32> to tensor<2x8xf32>
  return
}

// -----

func.func @slice_entries(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{start, limit and step need one entry per dimension (2)}}
  %0 = loom.slice %x [0] [2] [1] : tensor<2x8xf32> to tensor<2x8xf32>
  return
}

// -----

func.func @slice_step(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{step must be positive in dimension 1}}
  %0 = loom.slice %x [0, 0] [2, 8] [1, 0] : tensor<2x8xf32> to tensor<2x8xf32>
  return
}

// -----

func.func @slice_bounds(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{bounds [0, 9) out of range in dimension 1 of size 8}}
  %0 = loom.slice %x [0, 0] [2, 9] [1, 1] : tensor<2x8xf32> to tensor<2x9xf32>
  return
}

// -----

func.func @slice_result(%x: tensor<2x8xf32>) {
  // expected-error@+1 {{result shape must be [2, 4]}}
  %0 = loom.slice %x [0, 0] [2, 8] [1, 2] : tensor<2x8xf32> to tensor<2x8xf32>
  return
}

// -----

func.func @concat_none() {
  // expected-error@+1 {{needs at least one input}}
  %0 = "loom.concat"() {dim = 0 : i64} : () -> tensor<2xf32>
  return
}

// -----

func.func @concat_rank(%a: tensor<2x8xf32>, %b: tensor<8xf32>) {
  // expected-error@+1 {{input #1 differs in rank or element type}}
  %0 = loom.concat %a, %b dim 0 : tensor<2x8xf32>, tensor<8xf32> -> tensor<3x8xf32>
  return
}

// -----

func.func @concat_dim(%a: tensor<2x8xf32>, %b: tensor<2x4xf32>) {
  // expected-error@+1 {{input #1 differs in dimension 1 (only dimension 0 may differ)}}
  %0 = loom.concat %a, %b dim 0 : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @concat_result(%a: tensor<2x8xf32>, %b: tensor<2x4xf32>) {
  // expected-error@+1 {{result shape must be [2, 12]}}
  %0 = loom.concat %a, %b dim -1 : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @concat_range(%a: tensor<2x8xf32>) {
  // expected-error@+1 {{dimension 2 is out of range for a tensor of rank 2}}
  %0 = loom.concat %a dim 2 : tensor<2x8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @broadcast_to(%a: tensor<3xf32>) {
  // expected-error@+1 {{cannot broadcast [3] to [2, 4]}}
  %0 = loom.broadcast_to %a : tensor<3xf32> to tensor<2x4xf32>
  return
}

// -----

func.func @reduce_twice(%a: tensor<2x8xf32>) {
  // expected-error@+1 {{reduces dimension 1 twice}}
  %0 = loom.reduce sum %a [1, -1] : tensor<2x8xf32> to tensor<2xf32>
  return
}

// -----

func.func @reduce_range(%a: tensor<2x8xf32>) {
  // expected-error@+1 {{dimension 3 is out of range for a tensor of rank 2}}
  %0 = loom.reduce max %a [3] : tensor<2x8xf32> to tensor<2xf32>
  return
}

// -----

func.func @reduce_result(%a: tensor<2x8xf32>) {
  // expected-error@+1 {{result shape must be [2, 1]}}
  %0 = loom.reduce min %a [1] keepdim : tensor<2x8xf32> to tensor<2xf32>
  return
}

// -----

func.func @ce_labels(%l: tensor<2x8x50xf32>, %t: tensor<16xi64>) {
  // expected-error@+1 {{labels must have the logits' shape without the class dimension: expected [2, 8], got [16]}}
  %0 = loom.cross_entropy %l, %t : tensor<2x8x50xf32>, tensor<16xi64> -> tensor<f32>
  return
}

// -----

func.func @lng_types(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{grad, input and grad_input must have one type}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<8x4xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @lng_weight(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{weight must have shape [8]}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @lng_wgrad(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{grad_weight and grad_bias must have the weight's type}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @rmsg_types(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{grad, input and grad_input must have one type}}
  %0:2 = loom.rms_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x4xf32>, tensor<8xf32>
  return
}

// -----

func.func @rmsg_weight(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<3xf32>) {
  // expected-error@+1 {{weight must have shape [8]}}
  %0:2 = loom.rms_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xf32> -> tensor<4x8xf32>, tensor<3xf32>
  return
}

// -----

func.func @rmsg_wgrad(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{grad_weight must have the weight's type}}
  %0:2 = loom.rms_norm_grad %dy, %x, %w eps 1.0e-5 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xbf16>
  return
}

// -----

func.func @ceg_labels(%l: tensor<4x8xf32>, %t: tensor<8xi64>, %d: tensor<f32>) {
  // expected-error@+1 {{labels must have the logits' shape without the class dimension}}
  %0 = loom.cross_entropy_grad %l, %t, %d : tensor<4x8xf32>, tensor<8xi64>, tensor<f32> -> tensor<4x8xf32>
  return
}

// -----

func.func @ceg_scalar(%l: tensor<4x8xf32>, %t: tensor<4xi64>, %d: tensor<1xf32>) {
  // expected-error@+1 {{the incoming gradient of a mean loss is a scalar}}
  %0 = loom.cross_entropy_grad %l, %t, %d : tensor<4x8xf32>, tensor<4xi64>, tensor<1xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @ceg_result(%l: tensor<4x8xf32>, %t: tensor<4xi64>, %d: tensor<f32>) {
  // expected-error@+1 {{result must have the logits' type}}
  %0 = loom.cross_entropy_grad %l, %t, %d : tensor<4x8xf32>, tensor<4xi64>, tensor<f32> -> tensor<4xf32>
  return
}

// -----

func.func @embg_rank(%dy: tensor<4x8xf32>, %i: tensor<4xi64>) {
  // expected-error@+1 {{result must be table-shaped [rows, features]}}
  %0 = loom.embedding_grad %dy[%i] : tensor<4x8xf32>, tensor<4xi64> -> tensor<8xf32>
  return
}

// -----

func.func @embg_grad(%dy: tensor<4x8xf32>, %i: tensor<5xi64>) {
  // expected-error@+1 {{grad must have shape [5, 8] (indices shape + features)}}
  %0 = loom.embedding_grad %dy[%i] : tensor<4x8xf32>, tensor<5xi64> -> tensor<50x8xf32>
  return
}

// -----

func.func @attg_shapes(%q: tensor<2x4x8xf32>) {
  // expected-error@+1 {{query, key and value must be [batch, heads, seq, head_dim]}}
  %0:3 = loom.attention_grad %q, %q, %q, %q scale 1.0 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attg_grads(%q: tensor<2x4x8x4xf32>) {
  // expected-error@+1 {{each gradient must have its input's type}}
  %0:3 = loom.attention_grad %q, %q, %q, %q scale 1.0 : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x4x8xf32>
  return
}

// -----

func.func @attg_dout(%q: tensor<2x4x8x4xf32>, %do: tensor<2x4x8x2xf32>) {
  // expected-error@+1 {{grad must have the attention output's shape [2, 4, 8, 4]}}
  %0:3 = loom.attention_grad %do, %q, %q, %q scale 1.0 : tensor<2x4x8x2xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>
  return
}

// -----

func.func @adam_lr(%p: tensor<4xf32>, %t: tensor<i64>) {
  // expected-error@+1 {{learning rate must be positive}}
  %0:3 = loom.adam %p, %p, %p, %p step %t {lr = 0.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>
  return
}

// -----

func.func @adam_betas(%p: tensor<4xf32>, %t: tensor<i64>) {
  // expected-error@+1 {{beta1 and beta2 must be in [0, 1), got 9.000000e-01 and 1.000000e+00}}
  %0:3 = loom.adam %p, %p, %p, %p step %t {lr = 1.0e-3 : f64, beta2 = 1.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>
  return
}

// -----

func.func @adam_eps(%p: tensor<4xf32>, %t: tensor<i64>) {
  // expected-error@+1 {{eps must be positive}}
  %0:3 = loom.adam %p, %p, %p, %p step %t {lr = 1.0e-3 : f64, eps = 0.0 : f64} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>
  return
}

// -----

func.func @adam_state(%p: tensor<4xbf16>, %s: tensor<4xbf16>, %t: tensor<i64>) {
  // expected-error@+1 {{Adam state must be f32 (mixed precision keeps fp32 moments), got 'bf16'}}
  %0:3 = loom.adam %p, %p, %s, %s step %t {lr = 1.0e-3 : f64} : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>, tensor<i64>
  return
}

// -----

func.func @adam_shapes(%p: tensor<4xf32>, %g: tensor<5xf32>, %t: tensor<i64>) {
  // expected-error@+1 {{all of {param, grad, exp_avg, exp_avg_sq, new_param, new_exp_avg, new_exp_avg_sq} have same shape}}
  %0:3 = loom.adam %p, %g, %p, %p step %t {lr = 1.0e-3 : f64} : tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>
  return
}

// -----

func.func @sgd_lr(%p: tensor<4xf32>) {
  // expected-error@+1 {{learning rate must be positive}}
  %0:2 = loom.sgd %p, %p, %p {lr = -1.0 : f64} : tensor<4xf32>
  return
}

// -----

func.func @sgd_momentum(%p: tensor<4xf32>) {
  // expected-error@+1 {{momentum must be non-negative}}
  %0:2 = loom.sgd %p, %p, %p {lr = 0.7 : f64, momentum = -0.5 : f64} : tensor<4xf32>
  return
}

// -----

func.func @sgd_nesterov(%p: tensor<4xf32>) {
  // expected-error@+1 {{Nesterov momentum needs momentum > 0}}
  %0:2 = loom.sgd %p, %p, %p {lr = 0.7 : f64, nesterov} : tensor<4xf32>
  return
}

// -----

// Shapes are static: a `?` reached size arithmetic (a subgroup's element
// count asserted; found by fuzz-mlir, test/Fuzz/regressions/mlir).
// expected-error@+1 {{'loom.param' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of floating-point values}}
loom.param @w : tensor<?xf32>

// -----

func.func @dynamic_operand(%x: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error@+1 {{'loom.relu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<?xf32>'}}
  %y = loom.relu %x : tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// The loom.* attributes passes hand each other are typed where they appear
// (a .mlir file is untrusted; passes and code generation read them as typed).
// expected-error@+1 {{'loom.grad_params' must be an array of symbol references}}
func.func @forward_backward() attributes {loom.grad_params = [1, 2]} {
  return
}

// -----

// expected-error@+1 {{data_parallel world must be in [1, 1048576], got 0}}
func.func @train_step() attributes {loom.data_parallel = #loom.data_parallel<world = 0, zero_stage = 1>} {
  return
}

// -----

// expected-error@+1 {{data_parallel zero_stage must be in [0, 3], got 4}}
func.func @train_step() attributes {loom.data_parallel = #loom.data_parallel<world = 2, zero_stage = 4>} {
  return
}

// -----

// The decisions are typed attributes, not dictionaries looked up by key.
// expected-error@+1 {{'loom.data_parallel' must be a #loom.data_parallel on a function}}
func.func @train_step() attributes {loom.data_parallel = {world = 2 : i64, zero_stage = 3 : i64}} {
  return
}

// -----

// expected-error@+1 {{struct is missing required parameter: stream}}
module attributes {loom.offload_plan = #loom.offload_plan<gpu = 1, cpu = 0>} {
}

// -----

// expected-error@+1 {{offload_plan subgroup counts must be non-negative, got gpu = 1, stream = -2, cpu = 0}}
module attributes {loom.offload_plan = #loom.offload_plan<gpu = 1, stream = -2, cpu = 0>} {
}

// -----

// expected-error@+1 {{'loom.offload_plan' must be a #loom.offload_plan on the module}}
func.func @f() attributes {loom.offload_plan = #loom.offload_plan<gpu = 1, stream = 0, cpu = 0>} {
  return
}

// -----

// expected-error@+1 {{optimizer_offload gpu_fraction is given only with 'static'}}
func.func @train_step() attributes {loom.optimizer_offload = #loom.optimizer_offload<cpu, gpu_fraction = 0.5>} {
  return
}

// -----

// expected-error@+1 {{optimizer_offload gpu_fraction must be in [0, 1], got 1.5}}
func.func @train_step() attributes {loom.optimizer_offload = #loom.optimizer_offload<static, gpu_fraction = 1.5>} {
  return
}

// -----

// expected-error@+1 {{diloco every and offset must be at least 1, got every = 0, offset = 2}}
func.func @diloco_outer_0() attributes {loom.diloco = #loom.diloco<every = 0, offset = 2>} {
  return
}

// -----

loom.param @w : tensor<4xf32> init #loom.init<zeros>
// expected-error@+1 {{expected ::mlir::loom::UpdatePlace to be one of: gpu, stream, cpu}}
loom.subgroup @sg0 [@w] numel 4 update gpus
// expected-error@+2 {{failed to parse Loom_UpdatePlaceAttr parameter 'value'}}

// -----

// expected-error@+1 {{'loom.padded' must be a non-negative integer}}
loom.param @w : tensor<4xf32> {loom.padded = -4 : i64}

// -----

// expected-error@+1 {{'loom.metric_sum' must be a unit attribute on a loom.state}}
loom.param @w : tensor<4xf32> {loom.metric_sum}

// -----

// expected-error@+1 {{'loom.layout_of' must be on a loom.state}}
loom.param @w : tensor<4xf32> {loom.layout_of = [@v]}

// -----

// expected-error@+1 {{'loom.layout_of' must be an array of symbol references}}
loom.state @m : tensor<4xf32> role adam_m init #loom.init<zeros> {loom.layout_of = [3]}

// -----

// expected-error@+1 {{'loom.mirror_of' must be a symbol reference}}
loom.param @w : tensor<4xf32> {loom.mirror_of = "w"}

// -----

// expected-error@+1 {{unknown attribute 'loom.pipeline_rank' (loom.* attributes are the dialect's}}
func.func @f() attributes {loom.pipeline_rank = 1 : i64} {
  return
}

// -----

// A pipeline stage (loom-pipeline-cut) marks ops and parameters, not functions.
// expected-error@+1 {{'loom.stage' must be a non-negative integer on an op or a loom.param}}
func.func @f() attributes {loom.stage = 1 : i64} {
  return
}

// -----

// expected-error@+1 {{'loom.stage' must be a non-negative integer on an op or a loom.param}}
loom.param @w : tensor<4xf32> {loom.stage = -1 : i64}

// -----

func.func @f(%x: tensor<4x2xf32>) -> tensor<2x2xf32> {
  // expected-error@+1 {{'loom.micro_batch' must be a non-negative integer on an op}}
  %s = loom.slice %x [0, 0] [2, 2] [1, 1] {loom.micro_batch = "0"} : tensor<4x2xf32> to tensor<2x2xf32>
  return %s : tensor<2x2xf32>
}

// -----

func.func @dropout_ratio_one(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.dropout' op ratio must be in [0, 1), got 1}}
  %y = loom.dropout %x ratio 1.0 key 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @dropout_negative_key(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{attribute 'key' failed to satisfy constraint}}
  %y = loom.dropout %x ratio 0.1 key -1 : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @cumsum_dim(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error@+1 {{'loom.cumsum' op dim 1 is outside [0, 1)}}
  %y = loom.cumsum %x dim 1 : tensor<4xi64>
  return %y : tensor<4xi64>
}

// -----

func.func @cumsum_i32(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error@+1 {{'loom.cumsum' op sums floats or i64, not 'i32'}}
  %y = loom.cumsum %x dim 0 : tensor<4xi32>
  return %y : tensor<4xi32>
}

// -----

loom.topology @world ["rank" = 2]
func.func @chunk_block(%x: tensor<16xf32>) {
  %p = loom.compress %x : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale>>
  // expected-error@+1 {{'loom.all_to_all' op result must be the packed 'tensor<16xf32>' with one scale per 8 elements (#loom.codec<sign_scale, block = 8>)}}
  %r, %t = loom.all_to_all %p over #loom.group<@world, ["rank"]> on comm : !loom.packed<tensor<16xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 4>>
  loom.wait %t
  return
}

// -----

// Sequence parallelism splits the tokens over a tensor-parallel group.
// expected-error@+1 {{'loom.sequence_parallel' must be a unit attribute on a module with loom.tensor_parallel}}
module attributes {loom.sequence_parallel} {
}

// -----

// expected-error@+1 {{'loom.fp32' must be a unit attribute on an op}}
func.func @f() attributes {loom.fp32} {
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @send_recv_shift(%x: tensor<16xf32>) {
  // expected-error@+1 {{'loom.send_recv' op shift 2 must be nonzero and smaller than the group (2 ranks) in size}}
  %r, %t = loom.send_recv %x over #loom.group<@world, ["stage"]> shift 2 on comm : tensor<16xf32> -> tensor<16xf32>
  loom.wait %t
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @send_recv_type(%x: tensor<16xf32>) {
  // expected-error@+1 {{'loom.send_recv' op}}
  %r, %t = loom.send_recv %x over #loom.group<@world, ["stage"]> shift 1 on comm : tensor<16xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @p2p_peer(%x: tensor<16xf32>) {
  // expected-error@+1 {{'loom.p2p' op peer offset 2 must be nonzero and smaller than the group (2 ranks) in size}}
  %t = loom.p2p send %x to 2 over #loom.group<@world, ["stage"]> on comm : tensor<16xf32>
  loom.wait %t
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @p2p_int(%x: tensor<16xi64>) {
  // expected-error@+1 {{'loom.p2p' op passes floating-point tensors (activations and their gradients), not 'tensor<16xi64>'}}
  %t = loom.p2p send %x to 1 over #loom.group<@world, ["stage"]> on comm : tensor<16xi64>
  loom.wait %t
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @p2p_nothing() {
  // expected-error@+1 {{'loom.p2p' op sends, receives or both}}
  %t = "loom.p2p"() <{group = #loom.group<@world, ["stage"]>, stream = #loom.stream<comm>, operandSegmentSizes = array<i32: 0, 0>}> : () -> !loom.token
  loom.wait %t
  return
}

// -----

loom.topology @world ["stage" = 2]
func.func @p2p_stream(%x: tensor<16xf32>) {
  // expected-error@+1 {{'loom.p2p' op collectives are ordered on a comm stream}}
  %t = loom.p2p send %x to 1 over #loom.group<@world, ["stage"]> on compute : tensor<16xf32>
  loom.wait %t
  return
}

// -----

// expected-error@+1 {{'loom.pipeline' must be [stage, stages, level] or [stage, stages, level, chunks] on the module}}
module attributes {loom.pipeline = array<i64: 2, 2, 0>} {
}

// -----

// An expert-parallel rank's program (loom-expert-parallel): its rank is
// below its ranks.
// expected-error@+1 {{'loom.expert_parallel' must be [rank, ranks, level] on the module, with 0 <= rank < ranks, ranks >= 2 and level >= 0}}
module attributes {loom.expert_parallel = array<i64: 2, 2, 0>} {
}

// -----

// loom.expert marks a parameter, not a function.
// expected-error@+1 {{'loom.expert' must be a unit attribute on a loom.param}}
func.func @f() attributes {loom.expert} {
  return
}

// -----

func.func @topk_k(%p: tensor<16x4xf32>) {
  // expected-error@+1 {{k must be in [1, 4] (the last dimension), got 5}}
  %0, %1 = loom.top_k %p k 5 : tensor<16x4xf32> -> tensor<16x5xf32>, tensor<16x5xi64>
  return
}

// -----

func.func @topk_values(%p: tensor<16x4xf32>) {
  // expected-error@+1 {{values must be [16, 2] of the input's 'f32'}}
  %0, %1 = loom.top_k %p k 2 : tensor<16x4xf32> -> tensor<16x3xf32>, tensor<16x2xi64>
  return
}

// -----

func.func @topk_indices(%p: tensor<16x4xf32>) {
  // expected-error@+1 {{indices must be i64, got 'tensor<16x2xi32>'}}
  %0, %1 = loom.top_k %p k 2 : tensor<16x4xf32> -> tensor<16x2xf32>, tensor<16x2xi32>
  return
}

// -----

func.func @topk_indices_shape(%p: tensor<16x4xf32>) {
  // expected-error@+1 {{indices must have the values' shape [16, 2]}}
  %0, %1 = loom.top_k %p k 2 : tensor<16x4xf32> -> tensor<16x2xf32>, tensor<16x1xi64>
  return
}

// -----

func.func @topk_empty(%p: tensor<f32>) {
  // expected-error@+1 {{input must have a dimension to choose from}}
  %0, %1 = loom.top_k %p k 1 : tensor<f32> -> tensor<f32>, tensor<i64>
  return
}

// -----

func.func @slots_rank(%i: tensor<32xi64>) {
  // expected-error@+1 {{experts must be [tokens, choices] of i64, got 'tensor<32xi64>'}}
  %0, %1 = loom.moe_slots %i experts 4 capacity 8 : tensor<32xi64> -> tensor<32xi64>, tensor<4xf32>
  return
}

// -----

func.func @slots_shape(%i: tensor<16x2xi64>) {
  // expected-error@+1 {{slots must have the experts' shape [16, 2]}}
  %0, %1 = loom.moe_slots %i experts 4 capacity 8 : tensor<16x2xi64> -> tensor<16x1xi64>, tensor<4xf32>
  return
}

// -----

func.func @slots_k(%i: tensor<16x3xi64>) {
  // expected-error@+1 {{each token chooses 3 of only 2 experts}}
  %0, %1 = loom.moe_slots %i experts 2 capacity 8 : tensor<16x3xi64> -> tensor<16x3xi64>, tensor<2xf32>
  return
}

// -----

func.func @slots_rows(%i: tensor<16x2xi64>) {
  // expected-error@+1 {{experts x capacity (1024 x 1099511627776) must be at most 2^40 rows}}
  %0, %1 = loom.moe_slots %i experts 1024 capacity 1099511627776 : tensor<16x2xi64> -> tensor<16x2xi64>, tensor<1024xf32>
  return
}

// -----

func.func @slots_counts(%i: tensor<16x2xi64>) {
  // expected-error@+1 {{counts must be tensor<4xf32>, got 'tensor<4xbf16>'}}
  %0, %1 = loom.moe_slots %i experts 4 capacity 8 : tensor<16x2xi64> -> tensor<16x2xi64>, tensor<4xbf16>
  return
}

// -----

func.func @dispatch_rank(%x: tensor<16x8xf32>, %s: tensor<16x2xi64>) {
  // expected-error@+1 {{tokens and expert rows must be [rows, features]}}
  %0 = loom.moe_dispatch %x[%s] : tensor<16x8xf32>, tensor<16x2xi64> -> tensor<40x8x1xf32>
  return
}

// -----

func.func @dispatch_features(%x: tensor<16x8xf32>, %s: tensor<16x2xi64>) {
  // expected-error@+1 {{must have one feature size and element type}}
  %0 = loom.moe_dispatch %x[%s] : tensor<16x8xf32>, tensor<16x2xi64> -> tensor<40x4xf32>
  return
}

// -----

func.func @dispatch_tokens(%x: tensor<16x8xf32>, %s: tensor<12x2xi64>) {
  // expected-error@+1 {{slots must have a row a token (16), got 12}}
  %0 = loom.moe_dispatch %x[%s] : tensor<16x8xf32>, tensor<12x2xi64> -> tensor<40x8xf32>
  return
}

// -----

func.func @combine_weights(%y: tensor<40x8xf32>, %s: tensor<16x2xi64>, %w: tensor<16x1xf32>) {
  // expected-error@+1 {{weights must be [16, 2] of 'f32'}}
  %0 = loom.moe_combine %y[%s] weights %w : tensor<40x8xf32>, tensor<16x2xi64>, tensor<16x1xf32> -> tensor<16x8xf32>
  return
}

// -----

func.func @combine_slots(%y: tensor<40x8xf32>, %s: tensor<16x2xi32>) {
  // expected-error@+1 {{slots must be [tokens, choices] of i64, got 'tensor<16x2xi32>'}}
  %0 = loom.moe_combine %y[%s] : tensor<40x8xf32>, tensor<16x2xi32> -> tensor<16x8xf32>
  return
}

// -----

func.func @topk_grad_shape(%g: tensor<16x2xf32>, %i: tensor<16x2xi64>) {
  // expected-error@+1 {{result must be top_k's input}}
  %0 = loom.top_k_grad %g[%i] : tensor<16x2xf32>, tensor<16x2xi64> -> tensor<8x4xf32>
  return
}

// -----

func.func @topk_grad_indices(%g: tensor<16x2xf32>, %i: tensor<16x3xi64>) {
  // expected-error@+1 {{indices must be i64 of the gradient's shape [16, 2]}}
  %0 = loom.top_k_grad %g[%i] : tensor<16x2xf32>, tensor<16x3xi64> -> tensor<16x4xf32>
  return
}

// -----

func.func @slot_dot_result(%a: tensor<16x8xf32>, %b: tensor<40x8xf32>, %s: tensor<16x2xi64>) {
  // expected-error@+1 {{result must be [16, 2] of 'f32'}}
  %0 = loom.moe_slot_dot %a, %b[%s] : tensor<16x8xf32>, tensor<40x8xf32>, tensor<16x2xi64> -> tensor<16x1xf32>
  return
}

// -----

func.func @slot_dot_rows(%a: tensor<16x8xf32>, %b: tensor<40x4xf32>, %s: tensor<16x2xi64>) {
  // expected-error@+1 {{tokens and rows must be [rows, features] of one feature size and type}}
  %0 = loom.moe_slot_dot %a, %b[%s] : tensor<16x8xf32>, tensor<40x4xf32>, tensor<16x2xi64> -> tensor<16x2xf32>
  return
}

// -----

func.func @rotary_odd(%x: tensor<2x4x7xf32>, %c: tensor<4x7xf32>) {
  // expected-error@+1 {{input must be [..., T, D] with D even}}
  %0 = loom.rotary %x, %c, %c : tensor<2x4x7xf32>, tensor<4x7xf32>
  return
}

// -----

func.func @rotary_tables(%x: tensor<2x4x8xf32>, %c: tensor<2x4x8xf32>) {
  // expected-error@+1 {{cos and sin must be [T, D] = [4, 8] (leading dimensions of 1 allowed), got 'tensor<2x4x8xf32>'}}
  %0 = loom.rotary %x, %c, %c : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}
