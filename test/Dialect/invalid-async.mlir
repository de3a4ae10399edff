// Verifier cases of placement, tokens, streams, collectives and codecs.
// RUN: loom-opt %s -split-input-file -verify-diagnostics

func.func @token_never_used(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{token is never waited on or depended upon}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  return
}

// -----

func.func @token_waited_twice(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{token is waited twice}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  // expected-note@+1 {{second wait here}}
  loom.wait %t
  return
}

// -----

func.func @read_before_wait(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{result #0 is read before its token is waited on}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  // expected-note@+1 {{read here}}
  %e = loom.exp %d : tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

func.func @wait_same_token(%h: tensor<4xf32, #loom.mem<pinned>>) {
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  // expected-error@+1 {{lists the same token twice}}
  loom.wait %t, %t
  return
}

// -----

func.func @token_never_produced(%t: !loom.token) {
  // expected-error@+1 {{waits on a token that no asynchronous op produced}}
  loom.wait %t
  return
}

// -----

func.func @wait_nothing() {
  // expected-error@+1 {{needs at least one token}}
  "loom.wait"() : () -> ()
  return
}

// -----

func.func @copy_packs(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{a copy moves bytes; it cannot pack or unpack}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> !loom.packed<tensor<4xf32, #loom.mem<device>>, #loom.codec<sign_scale>>
  loom.wait %t
  return
}

// -----

func.func @copy_codecs(%h: !loom.packed<tensor<4xf32, #loom.mem<pinned>>, #loom.codec<sign_scale>>) {
  // expected-error@+1 {{source and result codecs differ}}
  %d, %t = loom.copy %h on h2d : !loom.packed<tensor<4xf32, #loom.mem<pinned>>, #loom.codec<sign_scale>> -> !loom.packed<tensor<4xf32, #loom.mem<device>>, #loom.codec<fp8_e4m3>>
  loom.wait %t
  return
}

// -----

func.func @copy_shape(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{result must have the source's shape and element type; only the placement changes}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xbf16, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

// An unplaced side is device memory: device to device changes nothing.
func.func @copy_unplaced_is_device(%h: tensor<4xf32>) {
  // expected-error@+1 {{source and result are both in #loom.mem<device>}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32> -> tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

func.func @copy_unplaced(%h: tensor<4xf32>) {
  // expected-error@+1 {{source and result are both unplaced}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32> -> tensor<4xf32>
  loom.wait %t
  return
}

// -----

func.func @copy_same_space(%h: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{source and result are both in #loom.mem<device>: a copy changes placement}}
  %d, %t = loom.copy %h on compute : tensor<4xf32, #loom.mem<device>> -> tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

func.func @copy_to_mapped(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{mapped memory is a view of pinned memory made by loom.zero_copy}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<mapped>>
  loom.wait %t
  return
}

// -----

func.func @copy_on_cpu_stream(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{copies are ordered on h2d, d2h, compute or comm streams}}
  %d, %t = loom.copy %h on cpu : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

func.func @h2d_on_d2h(%h: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{host-to-device copy on a d2h stream: use #loom.stream<h2d>}}
  %d, %t = loom.copy %h on d2h : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  loom.wait %t
  return
}

// -----

func.func @d2h_on_h2d(%h: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{device-to-host copy on an h2d stream: use #loom.stream<d2h>}}
  %d, %t = loom.copy %h on h2d : tensor<4xf32, #loom.mem<device>> -> tensor<4xf32, #loom.mem<pinned>>
  loom.wait %t
  return
}

// -----

func.func @unknown_stream(%h: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{unknown stream 'disk': expected compute, h2d, d2h, comm or cpu}}
  %d, %t = loom.copy %h on disk : tensor<4xf32, #loom.mem<device>> -> tensor<4xf32, #loom.mem<pinned>>
  return
}

// -----

func.func @negative_stream(%h: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{stream index must be non-negative, got -1}}
  %d, %t = loom.copy %h on d2h[-1] : tensor<4xf32, #loom.mem<device>> -> tensor<4xf32, #loom.mem<pinned>>
  return
}

// -----

func.func @use_after_release(%x: tensor<4xf32, #loom.mem<device>>) {
  // expected-error@+1 {{value is used after it is released}}
  loom.release %x : tensor<4xf32, #loom.mem<device>>
  // expected-note@+1 {{used here}}
  %y = loom.exp %x : tensor<4xf32, #loom.mem<device>>
  return
}

// -----

func.func @zero_copy_shape(%x: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{result must have the source's shape and element type}}
  %y = loom.zero_copy %x : tensor<4xf32, #loom.mem<pinned>> -> tensor<8xf32, #loom.mem<mapped>>
  return
}

// -----

func.func @zero_copy_pageable(%x: tensor<4xf32, #loom.mem<pageable>>) {
  // expected-error@+1 {{only pinned host memory can be mapped for zero-copy access, source is #loom.mem<pageable>}}
  %y = loom.zero_copy %x : tensor<4xf32, #loom.mem<pageable>> -> tensor<4xf32, #loom.mem<mapped>>
  return
}

// -----

func.func @zero_copy_result(%x: tensor<4xf32, #loom.mem<pinned>>) {
  // expected-error@+1 {{result must be #loom.mem<mapped>}}
  %y = loom.zero_copy %x : tensor<4xf32, #loom.mem<pinned>> -> tensor<4xf32, #loom.mem<device>>
  return
}

// -----

// expected-error@+1 {{codec block size must be non-negative, got -4}}
func.func private @f() attributes {codec = #loom.codec<int8, block = -4>}

// -----

// expected-error@+1 {{codec int4 quantises in blocks: give a positive block size}}
func.func private @f() attributes {codec = #loom.codec<int4>}

// -----

// expected-error@+1 {{codec sign_scale compresses floating-point tensors, not 'i32'}}
func.func private @f(!loom.packed<tensor<4xi32>, #loom.codec<sign_scale>>)

// -----

// expected-error@+1 {{packed payload's tensor encoding must be a #loom.mem placement}}
func.func private @f(!loom.packed<tensor<4xf32, "x">, #loom.codec<sign_scale>>)

// -----

func.func @compress_int(%x: tensor<4xi32>) {
  // expected-error@+1 {{codec sign_scale compresses floating-point tensors, not 'i32'}}
  %p = "loom.compress"(%x) : (tensor<4xi32>) -> !loom.packed<tensor<4xf32>, #loom.codec<sign_scale>>
  return
}

// -----

func.func @compress_logical(%x: tensor<4xf32>) {
  // expected-error@+1 {{packed payload must describe the input type 'tensor<4xf32>'}}
  %p = loom.compress %x : tensor<4xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>
  return
}

// -----

func.func @compress_feedback_half(%x: tensor<4xf32>, %e: tensor<4xf32>) {
  // expected-error@+1 {{error feedback needs both the incoming error operand and the new error result}}
  %p = "loom.compress"(%x, %e) : (tensor<4xf32>, tensor<4xf32>) -> !loom.packed<tensor<4xf32>, #loom.codec<sign_scale>>
  return
}

// -----

func.func @compress_feedback_shape(%x: tensor<4xf32>, %e: tensor<8xf32>) {
  // expected-error@+1 {{error-feedback buffers must have the input's shape and element type}}
  %p, %e2 = loom.compress %x feedback(%e : tensor<8xf32>) : tensor<4xf32> -> !loom.packed<tensor<4xf32>, #loom.codec<sign_scale>>, tensor<8xf32>
  return
}

// -----

func.func @decompress_type(%p: !loom.packed<tensor<4xf32>, #loom.codec<sign_scale>>) {
  // expected-error@+1 {{result must be the payload's logical type 'tensor<4xf32>'}}
  %x = loom.decompress %p : !loom.packed<tensor<4xf32>, #loom.codec<sign_scale>> -> tensor<4xbf16>
  return
}

// -----

func.func @unknown_topology(%g: tensor<8xf32>) {
  // expected-error@+1 {{group names '@t', which is not a loom.topology}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, ["gpu"]> on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @no_levels(%g: tensor<8xf32>) {
  // expected-error@+1 {{group names no levels}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, []> on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @level_not_string(%g: tensor<8xf32>) {
  // expected-error@+1 {{group levels must be strings}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, [1]> on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @undefined_level(%g: tensor<8xf32>) {
  // expected-error@+1 {{topology 't' defines no level "rack" (it has gpu, node)}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, ["rack"]> on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @level_twice(%g: tensor<8xf32>) {
  // expected-error@+1 {{group names level "gpu" twice}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, ["gpu", "gpu"]> on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @collective_stream(%g: tensor<8xf32>) {
  // expected-error@+1 {{collectives are ordered on a comm stream, not #loom.stream<h2d>}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, ["gpu"]> on h2d : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @reduce_packed(%p: !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>) {
  // expected-error@+1 {{cannot reduce a compressed payload: decompress it first}}
  %r, %t = loom.all_reduce %p over #loom.group<@t, ["gpu"]> on comm : !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @all_reduce_type(%g: tensor<8xf32>) {
  // expected-error@+1 {{result type 'tensor<4xf32>' must equal the input type 'tensor<8xf32>'}}
  %r, %t = loom.all_reduce %g over #loom.group<@t, ["gpu"]> on comm : tensor<8xf32> -> tensor<4xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @reduce_scatter_divides(%g: tensor<6xf32>) {
  // expected-error@+1 {{dimension 0 (6) must divide by the group size 4}}
  %r, %t = loom.reduce_scatter %g over #loom.group<@t, ["gpu"]> on comm : tensor<6xf32> -> tensor<1xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @reduce_scatter_shape(%g: tensor<8x2xf32>) {
  // expected-error@+1 {{result must have shape [1, 2] with the input's element type and placement}}
  %r, %t = loom.reduce_scatter %g over #loom.group<@t, ["gpu", "node"]> on comm : tensor<8x2xf32> -> tensor<2x2xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @reduce_scatter_scalar(%g: tensor<f32>) {
  // expected-error@+1 {{needs a tensor of rank >= 1}}
  %r, %t = loom.reduce_scatter %g over #loom.group<@t, ["gpu"]> on comm : tensor<f32> -> tensor<f32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @all_gather_shape(%g: tensor<2xf32>) {
  // expected-error@+1 {{result must have shape [4] with the input's element type and placement}}
  %r, %t = loom.all_gather %g over #loom.group<@t, ["node"]> on comm : tensor<2xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @all_to_all_type(%g: tensor<8xf32>) {
  // expected-error@+1 {{result type 'tensor<8xbf16>' must equal the input type 'tensor<8xf32>'}}
  %r, %t = loom.all_to_all %g over #loom.group<@t, ["gpu"]> on comm : tensor<8xf32> -> tensor<8xbf16>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @all_to_all_chunks(%g: tensor<6xf32>) {
  // expected-error@+1 {{dimension 0 must divide into 4 chunks, one per rank of the group}}
  %r, %t = loom.all_to_all %g over #loom.group<@t, ["gpu"]> on comm : tensor<6xf32> -> tensor<6xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @broadcast_root(%g: tensor<8xf32>) {
  // expected-error@+1 {{root 2 is not a rank of a group of 2}}
  %r, %t = loom.broadcast %g over #loom.group<@t, ["node"]> root 2 on comm : tensor<8xf32> -> tensor<8xf32>
  loom.wait %t
  return
}

// -----

loom.topology @t ["gpu" = 4, "node" = 2]
func.func @broadcast_type(%g: tensor<8xf32>) {
  // expected-error@+1 {{result type 'tensor<16xf32>' must equal the input type 'tensor<8xf32>'}}
  %r, %t = loom.broadcast %g over #loom.group<@t, ["node"]> root 0 on comm : tensor<8xf32> -> tensor<16xf32>
  loom.wait %t
  return
}
