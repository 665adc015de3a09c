// Every diagnostic of the dist dialect: the layout syntax and its checks,
// dist attributes on ops, arguments and results, the mesh, the collectives.
// RUN: triad-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// #dist.layout: syntax
//===----------------------------------------------------------------------===//

// A layout is written with braces per dimension.
// expected-error @+1 {{expected '{'}}
triad.param @w : tensor<4x4xf32> init <zeros> {dist.layout = #dist.layout<[dp]>}

// -----

// Axes are bare names, not strings.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{expected valid keyword}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{"dp"}>}

// -----

// No empty entry in an axis list.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{expected valid keyword}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{dp, }>}

// -----

// The partial axes come last.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{expected '>'}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<partial = {dp}, {}>}

// -----

// `partial` is followed by `=`.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{expected '='}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{}, partial {dp}>}

// -----

// The layout's parameters are in angle brackets.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{expected '<'}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout}

// -----

// The dialect has one attribute.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{unknown attribute `shard` in dialect `dist`}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.shard<>}

// -----

//===----------------------------------------------------------------------===//
// #dist.layout: checks
//===----------------------------------------------------------------------===//

// An axis used twice in one layout, on two dimensions.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{mesh axis 'dp' is used twice in one layout}}
triad.param @w : tensor<4x4xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {dp}>}

// -----

// An axis used twice in one layout, on one dimension.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{mesh axis 'dp' is used twice in one layout}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{dp, dp}>}

// -----

// An axis cannot both split the value and be pending over it.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{mesh axis 'dp' is used twice in one layout}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{dp}, partial = {dp}>}

// -----

// A layout needs the module's mesh.
// expected-error @+1 {{'triad.param' op layout: has a layout but the module declares no dist.mesh}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{}>}

// -----

// So does the layout of a function argument.
// expected-error @+1 {{'func.func' op layout of argument 0: has a layout but the module declares no dist.mesh}}
func.func @f(%x: tensor<4xf32> {dist.layout = #dist.layout<{}>}) {
  return
}

// -----

// A split axis the mesh does not have.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout: layout names mesh axis 'tp', which mesh @mesh does not have}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{tp}>}

// -----

// A partial axis the mesh does not have.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op layout of argument 0: layout names mesh axis 'tp', which mesh @mesh does not have}}
func.func @f(%x: tensor<4xf32> {dist.layout = #dist.layout<{dp}, partial = {tp}>}) {
  return
}

// -----

// An unknown axis in the layout of an op's result.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op layout of result 0: layout names mesh axis 'tp', which mesh @mesh does not have}}
  %y = triad.relu %x {dist.layouts = [#dist.layout<{tp}>]} : tensor<4xf32>
  return
}

// -----

// A parameter's layout has its rank.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout has 2 dimensions but 'tensor<4xf32>' has 1}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = #dist.layout<{dp}, {}>}

// -----

// So does a state's; a scalar's layout is rank 0.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.state' op layout has 1 dimensions but 'tensor<f32>' has 0}}
triad.state @step : tensor<f32> init <zeros> {dist.layout = #dist.layout<{}>}

// -----

// A split dimension of a parameter divides by its ranks.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout: dimension 0 of 'tensor<3xf32>' is not divisible by the 2 ranks of its split axes}}
triad.param @w : tensor<3xf32> init <zeros> {dist.layout = #dist.layout<{dp}>}

// -----

// What ZeRO splits (dist.zero) may pad a dimension, but only at the
// innermost axis of its split: the axes before it divide the dimension (the
// 9 rows do not split into 2 tp pieces).
dist.mesh @mesh axes ["dp", "tp"] = [3, 2]
// expected-error @+1 {{'triad.state' op layout: dimension 0 of 'tensor<9x6xf32>' is not divisible by the 6 ranks of its split axes (only the innermost axis of a split may pad)}}
triad.state @m : tensor<9x6xf32> init <zeros> {dist.layout = #dist.layout<{tp, dp}, {}>, dist.zero}

// -----

// Padded pieces gather to a size they pad: more than 2 pieces of 11.
dist.mesh @mesh axes ["dp"] = [3]
func.func @f(%x: tensor<11xf32>) -> tensor<40xf32> {
  // expected-error @+1 {{'dist.all_gather' op dimension 0 of the result must be 33 (the input's times the 3 ranks of the group), not 40}}
  %y = dist.all_gather %x dim 0 over ["dp"] : tensor<11xf32> -> tensor<40xf32>
  return %y : tensor<40xf32>
}

// -----

// A dimension split over several axes divides by the product of their sizes.
dist.mesh @mesh axes ["dp", "tp"] = [2, 2]
// expected-error @+1 {{'triad.param' op layout: dimension 1 of 'tensor<4x6xf32>' is not divisible by the 4 ranks of its split axes}}
triad.param @w : tensor<4x6xf32> init <zeros> {dist.layout = #dist.layout<{}, {dp, tp}>}

// -----

// dist.layout holds a layout.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op layout must be a #dist.layout}}
triad.param @w : tensor<4xf32> init <zeros> {dist.layout = 3 : i64}

// -----

// dist.layout belongs on declarations of tensors.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f() {
  // expected-error @+1 {{'arith.constant' op 'dist.layout' belongs on ops that declare a tensor type (parameters, state)}}
  %c = arith.constant {dist.layout = #dist.layout<>} dense<1.0> : tensor<f32>
  return
}

// -----

// A function's layouts are on its arguments and results, not on the function.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op 'dist.layout' belongs on ops that declare a tensor type (parameters, state)}}
func.func @f() attributes {dist.layout = #dist.layout<>} {
  return
}

// -----

// One layout per result.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op 'dist.layouts' must list one layout per result}}
  %y = triad.relu %x {dist.layouts = []} : tensor<4xf32>
  return
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<f32>) {
  // expected-error @+1 {{'triad.clip_coefficient' op 'dist.layouts' must list one layout per result}}
  %c:2 = triad.clip_coefficient %x max_norm = 1.0 {dist.layouts = [#dist.layout<>]}
  return
}

// -----

// dist.layouts is a list.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op 'dist.layouts' must list one layout per result}}
  %y = triad.relu %x {dist.layouts = #dist.layout<{}>} : tensor<4xf32>
  return
}

// -----

// dist.layouts lists layouts.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op layout of result 0 must be a #dist.layout}}
  %y = triad.relu %x {dist.layouts = ["dp"]} : tensor<4xf32>
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

// Each result is checked against its own layout.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'triad.layer_norm_grad' op layout of result 1 has 2 dimensions but 'tensor<4xf32>' has 1}}
  %dx, %dg = triad.layer_norm_grad %x, %g, %x {dist.layouts = [#dist.layout<{dp}, {}>, #dist.layout<{}, {}>]} : tensor<4x4xf32>, tensor<4xf32>
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

dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op layout of argument 0 lays out a non-tensor 'i32'}}
func.func @f(%x: i32 {dist.layout = #dist.layout<>}) {
  return
}

// -----

// An argument's layout has the argument's rank.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op layout of argument 0 has 1 dimensions but 'tensor<4x4xf32>' has 2}}
func.func @f(%x: tensor<4x4xf32> {dist.layout = #dist.layout<{dp}>}) {
  return
}

// -----

// A result's layout has the result's rank.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op layout of result 1 has 0 dimensions but 'tensor<4xf32>' has 1}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32> {dist.layout = #dist.layout<>}) {
  return %x, %x : tensor<4xf32>, tensor<4xf32>
}

// -----

// A function argument's layout holds a layout.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op layout of argument 0 must be a #dist.layout}}
func.func @f(%x: tensor<4xf32> {dist.layout = "dp"}) {
  return
}

// -----

// dist.zero is a unit attribute of declarations.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'triad.param' op 'dist.zero' is a unit attribute of ops that declare a tensor type}}
triad.param @w : tensor<4xf32> init <zeros> {dist.zero = 1 : i64}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op 'dist.zero' is a unit attribute of ops that declare a tensor type}}
  %y = triad.relu %x {dist.zero} : tensor<4xf32>
  return
}

// -----

// dist.reason is a string.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op 'dist.reason' must be a string}}
  %y = triad.relu %x {dist.reason = 1 : i64} : tensor<4xf32>
  return
}

// -----

// Unknown dist attributes are errors.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{'triad.relu' op has unknown dist attribute 'dist.shard'}}
  %y = triad.relu %x {dist.shard} : tensor<4xf32>
  return
}

// -----

// On function arguments only dist.layout exists.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op has unknown dist argument attribute 'dist.zero'}}
func.func @f(%x: tensor<4xf32> {dist.zero}) {
  return
}

// -----

// On function results dist.layout and dist.zero exist.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op has unknown dist result attribute 'dist.layouts'}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {dist.layouts = [#dist.layout<{}>]}) {
  return %x : tensor<4xf32>
}

// -----

// dist.zero marks a gradient result (ZeRO-2): a unit attribute.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op 'dist.zero' on result 0 is a unit attribute of a tensor result (a gradient)}}
func.func @f(%x: tensor<4xf32>) -> (tensor<4xf32> {dist.zero = true}) {
  return %x : tensor<4xf32>
}

// -----

// ... of a tensor result.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'func.func' op 'dist.zero' on result 0 is a unit attribute of a tensor result (a gradient)}}
func.func @f(%x: i32) -> (i32 {dist.zero}) {
  return %x : i32
}

// -----

//===----------------------------------------------------------------------===//
// dist.mesh
//===----------------------------------------------------------------------===//

// As many sizes as axes.
// expected-error @+1 {{'dist.mesh' op has 2 axes but 1 sizes}}
dist.mesh @mesh axes ["dp", "tp"] = [2]

// -----

// expected-error @+1 {{'dist.mesh' op has 1 axes but 2 sizes}}
dist.mesh @mesh axes ["dp"] = [2, 2]

// -----

// expected-error @+1 {{'dist.mesh' op needs at least one axis}}
dist.mesh @mesh axes [] = []

// -----

// expected-error @+1 {{'dist.mesh' op axis 'dp' is empty or repeated}}
dist.mesh @mesh axes ["dp", "dp"] = [2, 2]

// -----

// expected-error @+1 {{'dist.mesh' op axis '' is empty or repeated}}
dist.mesh @mesh axes [""] = [2]

// -----

// expected-error @+1 {{'dist.mesh' op axis 'dp' has size 0; sizes are at least 1}}
dist.mesh @mesh axes ["dp"] = [0]

// -----

// expected-error @+1 {{'dist.mesh' op axis 'tp' has size -2; sizes are at least 1}}
dist.mesh @mesh axes ["dp", "tp"] = [2, -2]

// -----

// expected-error @+1 {{'dist.mesh' op has more than 2^31 ranks}}
dist.mesh @mesh axes ["dp", "tp"] = [65536, 65536]

// -----

// A module has one mesh; the second is the one reported.
dist.mesh @mesh axes ["dp"] = [2]
// expected-error @+1 {{'dist.mesh' op is the module's second mesh; a module has one}}
dist.mesh @other axes ["tp"] = [2]

// -----

// The mesh is declared at the top of the module.
func.func @f() {
  // expected-error @+1 {{'dist.mesh' op expects parent op 'builtin.module'}}
  dist.mesh @mesh axes ["dp"] = [2]
  return
}

// -----

//===----------------------------------------------------------------------===//
// Collectives: axes
//===----------------------------------------------------------------------===//

// A collective needs the mesh.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op needs a dist.mesh in its module}}
  %y = dist.all_reduce %x over ["dp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dist.all_to_all' op needs a dist.mesh in its module}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
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
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'dist.all_gather' op names mesh axis 'tp', which mesh @mesh does not have}}
  %y = dist.all_gather %x dim 0 over ["dp", "tp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
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
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'dist.reduce_scatter' op names mesh axis 'dp' twice}}
  %y = dist.reduce_scatter %x dim 0 over ["dp", "dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

//===----------------------------------------------------------------------===//
// Collectives: shapes
//===----------------------------------------------------------------------===//

// An all_reduce reduces at least one tensor (only the generic form can say
// otherwise).
dist.mesh @mesh axes ["dp"] = [2]
func.func @f() {
  // expected-error @+1 {{'dist.all_reduce' op reduces at least one tensor}}
  "dist.all_reduce"() {axes = ["dp"]} : () -> ()
  return
}

// -----

// An all_reduce's results have its inputs' types.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'dist.all_reduce' op failed to verify that all of {inputs, results} have same type}}
  %y = "dist.all_reduce"(%x) {axes = ["dp"]} : (tensor<4xf32>) -> tensor<4xf16>
  return %y : tensor<4xf16>
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

// The other dimensions stay.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dist.all_gather' op dimension 1 of the result must be 8 (the input's), not 4}}
  %y = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// A group over two axes of 2 ranks each has 4 ranks.
dist.mesh @mesh axes ["dp", "tp"] = [2, 2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'dist.all_gather' op dimension 0 of the result must be 16 (the input's times the 4 ranks of the group), not 8}}
  %y = dist.all_gather %x dim 0 over ["dp", "tp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
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

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8x1xf32> {
  // expected-error @+1 {{'dist.all_gather' op input 'tensor<4x8xf32>' and result 'tensor<8x8x1xf32>' differ in element type or rank}}
  %y = dist.all_gather %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<8x8x1xf32>
  return %y : tensor<8x8x1xf32>
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

// An input the group does not divide.
dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<5x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'dist.reduce_scatter' op dimension 0 of the input must be 4 (the result's times the 2 ranks of the group), not 5}}
  %y = dist.reduce_scatter %x dim 0 over ["dp"] : tensor<5x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'dist.reduce_scatter' op dim -1 is not a dimension of 'tensor<4x8xf32>'}}
  %y = dist.reduce_scatter %x dim -1 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x8xbf16> {
  // expected-error @+1 {{'dist.reduce_scatter' op result 'tensor<2x8xbf16>' and input 'tensor<4x8xf32>' differ in element type or rank}}
  %y = dist.reduce_scatter %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<2x8xbf16>
  return %y : tensor<2x8xbf16>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.all_slice' op dimension 0 of the input must be 8 (the result's times the 2 ranks of the group), not 4}}
  %y = dist.all_slice %x dim 0 over ["dp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

dist.mesh @mesh axes ["dp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'dist.all_slice' op dim 2 is not a dimension of 'tensor<4x8xf32>'}}
  %y = dist.all_slice %x dim 2 over ["dp"] : tensor<4x8xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
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

// The concatenated dimension grows by the group's ranks.
dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dist.all_to_all' op dimension 0 of the result must be 8, not 4}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// The split dimension shrinks by them.
dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'dist.all_to_all' op dimension 1 of the result must be 4, not 8}}
  %y = dist.all_to_all %x split 1 concat 0 over ["tp"] : tensor<4x8xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
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

// -----

dist.mesh @mesh axes ["tp"] = [2]
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'dist.all_to_all' op concat dim -1 is not a dimension of 'tensor<4x8xf32>'}}
  %y = dist.all_to_all %x split 1 concat -1 over ["tp"] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}
