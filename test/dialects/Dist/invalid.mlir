// RUN: triad-opt %s -split-input-file -verify-diagnostics

// An axis used twice in one layout.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{mesh axis 'dp' is used twice in one layout}}
triad.param @w : tensor<4x4xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {dp}>}

// -----

// A layout is written with braces per dimension.
// expected-error @+1 {{expected '{'}}
triad.param @w : tensor<4x4xf32> init <zeros> {dist.layout = #dist.layout<[dp]>}

// -----

// A layout needs the module's mesh.
// expected-error @+1 {{'triad.param' op layout: has a layout but the module declares no dist.mesh}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{}>}

// -----

// An axis the mesh does not have.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout: layout names mesh axis 'tp', which mesh @mesh does not have}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{tp}>}

// -----

// A parameter's layout has its rank.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout has 2 dimensions but 'tensor<4xf32>' has 1}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {}>}

// -----

// A split dimension divides by its ranks.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout: dimension 0 of 'tensor<3xf32>' is not divisible by the 2 ranks of its split axes}}
triad.param @w : tensor<3xf32> init <zeros> {dist.layout = #dist.layout<{dp}>}

// -----

// dist.layout holds a layout.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout must be a #dist.layout}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = 3 : i64}

// -----

// dist.layout belongs on declarations of tensors.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f() {
  // expected-error @+1 {{'dist.layout' belongs on ops that declare a tensor type (parameters, state)}}
  %c = arith.constant {dist.layout = #dist.layout<>} dense<1.0> : tensor<f32>
  return
}

// -----

// One layout per result.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dist.layouts' must list one layout per result}}
  %y = triad.relu %x {dist.layouts = []} : tensor<4xf32>
  return
}

// -----

// A result's layout has the result's rank.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op layout of result 0 has 2 dimensions but 'tensor<4xf32>' has 1}}
  %y = triad.relu %x {dist.layouts = [#dist.layout<{}, {}>]} : tensor<4xf32>
  return
}

// -----

// Only tensors have layouts.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f() {
  // expected-error @+1 {{'arith.constant' op layout of result 0 lays out a non-tensor 'i32'}}
  %c = arith.constant {dist.layouts = [#dist.layout<>]} 1 : i32
  return
}

// -----

// dist.zero is a unit attribute of declarations.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'dist.zero' is a unit attribute of ops that declare a tensor type}}
triad.param @w : tensor<4xf32> init <zeros> {dist.zero = 1 : i64}

// -----

// dist.reason is a string.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dist.reason' must be a string}}
  %y = triad.relu %x {dist.reason = 1 : i64} : tensor<4xf32>
  return
}

// -----

// Unknown dist attributes are errors.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{has unknown dist attribute 'dist.shard'}}
  %y = triad.relu %x {dist.shard} : tensor<4xf32>
  return
}

// -----

// On function arguments and results only dist.layout exists.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{has unknown dist argument attribute 'dist.zero'}}
func.func @f(%x: tensor<4xf32> {dist.zero}) {
  return
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{has unknown dist result attribute 'dist.zero'}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {dist.zero}) {
  return %x : tensor<4xf32>
}

// -----

// An argument's layout has the argument's rank.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{layout of argument 0 has 1 dimensions but 'tensor<4x4xf32>' has 2}}
func.func @f(%x: tensor<4x4xf32> {dist.layout = #dist.layout<{dp}>}) {
  return
}

// -----

// As many sizes as axes.
// expected-error @+1 {{'dist.mesh' op has 2 axes but 1 sizes}}
dist.mesh @mesh axes ["dp", "tp"] = [2]

// -----

// expected-error @+1 {{'dist.mesh' op needs at least one axis}}
dist.mesh @mesh axes [] = []

// -----

// expected-error @+1 {{'dist.mesh' op axis 'dp' is empty or repeated}}
dist.mesh @mesh axes ["dp", "dp"] = [2, 2]

// -----

// expected-error @+1 {{'dist.mesh' op axis 'dp' has size 0; sizes are at least 1}}
dist.mesh @mesh axes ["dp"] = [0]

// -----

// expected-error @+1 {{'dist.mesh' op has more than 2^31 ranks}}
dist.mesh @mesh axes ["dp", "tp"] = [65536, 65536]

// -----

dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'dist.mesh' op is the module's second mesh; a module has one}}
dist.mesh @other axes ["tp"] = [2]

// -----

// A collective needs the mesh.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op needs a dist.mesh in its module}}
  %y = dist.all_reduce %x over ["dp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op needs at least one mesh axis}}
  %y = dist.all_reduce %x over [] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op names mesh axis 'tp', which mesh @mesh does not have}}
  %y = dist.all_reduce %x over ["tp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op names mesh axis 'dp' twice}}
  %y = dist.all_reduce %x over ["dp", "dp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f() {
  // expected-error @+1 {{'dist.all_reduce' op reduces at least one tensor}}
  "dist.all_reduce"() {axes = ["dp"]} : () -> ()
  return
}

// -----

// A gathered dimension grows by the group's ranks.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.all_gather' op dimension 0 of the result must be 8 (the input's times the 2 ranks of the group), not 4}}
  %y = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'dist.all_gather' op dim 2 is not a dimension of 'tensor<4x8xf32>'}}
  %y = dist.all_gather %x dim 2 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf16> {
  // expected-error @+1 {{'dist.all_gather' op input 'tensor<4x8xf32>' and result 'tensor<8x8xf16>' differ in element type or rank}}
  %y = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8xf16>
  return %y : tensor<8x8xf16>
}

// -----

// A scattered dimension shrinks by the group's ranks.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.reduce_scatter' op dimension 0 of the input must be 8 (the result's times the 2 ranks of the group), not 4}}
  %y = dist.reduce_scatter %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.all_slice' op dimension 0 of the input must be 8}}
  %y = dist.all_slice %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// An all_to_all's split dimension divides by the group's ranks.
dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x3xf32>) -> tensor<8x1xf32> {
  // expected-error @+1 {{'dist.all_to_all' op split dimension 1 of 'tensor<4x3xf32>' is not divisible by the 2 ranks of the group}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x3xf32> -> tensor<8x1xf32>
  return %y : tensor<8x1xf32>
}

// -----

dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.all_to_all' op dimension 0 of the result must be 8, not 4}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'dist.all_to_all' op input 'tensor<4x8xf32>' and result 'tensor<8x4xf16>' differ in element type or rank}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf16>
  return %y : tensor<8x4xf16>
}

// -----

dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dist.all_to_all' op split dim 2 is not a dimension of 'tensor<4x8xf32>'}}
  %y = dist.all_to_all %x split 2 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}
