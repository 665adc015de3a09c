// RUN: triad-opt %S/Inputs/two-params.mlir --triad-autodiff --triad-lower-to-rt --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MODEL
// RUN: triad-opt %s --triad-memory-report -o /dev/null | FileCheck %s
// RUN: not triad-opt %S/Inputs/two-params.mlir --triad-memory-report 2>&1 | FileCheck %s --check-prefix=NORT

// The two-parameter model: 16x8 + 8 f32 parameters; AdamW's two moments
// per parameter and the step counter; one accumulator per parameter plus
// the loss sum and token count. The activation peak is at the weight
// gradient of the output projection (hand-checked: 1,836 live bytes),
// which the lowering places in 2,048 bytes (each buffer 64-byte aligned);
// evaluation's forward pass and sampling's (to the logits) peak lower, so
// the arena is the same. The optimizer step's temporaries are placed apart
// (triad-plan predicts the two).
// MODEL: triad memory report: program @rank0 (pipeline rank 0)
// MODEL-NEXT: parameters 544 B {{.*}} 2 tensors
// MODEL-NEXT: optimizer state 1,092 B {{.*}} 5 tensors
// MODEL-NEXT: gradient accumulators 552 B {{.*}} 4 tensors
// MODEL-NEXT: temporaries at peak (begin_step) 0 B
// MODEL-NEXT: activations at peak (microbatch_step) 1,836 B
// MODEL-NEXT: temporaries at peak (apply_step) 28 B
// MODEL-NEXT: temporaries at peak (eval_step) 808 B
// MODEL-NEXT: temporaries at peak (logits_step) 768 B
// MODEL-NEXT: placed for the step's calls 2,048 B {{.*}} (in microbatch_step)
// MODEL-NEXT: placed for the optimizer step 448 B {{.*}} (in apply_step)
// MODEL-NEXT: kernel workspace 0 B
// MODEL-NEXT: arena 4,544 B

// NORT: error: holds no rt.program to report on; run --triad-lower-to-rt or --triad-train-pipeline first

// A hand-written program, liveness followed per byte range: %b's bytes stay
// live from their write until its view %v reads them, even while neither
// buffer is used (counting per buffer would miss them at the fourth
// kernel); %c reuses %a's bytes after %a died. Peak: %b, %c and %d.
// CHECK: triad memory report: program @rank0 (pipeline rank 0)
// CHECK: parameters 256 B {{.*}} 1 tensors
// CHECK: activations at peak (microbatch_step) 12,288 B
// CHECK-NEXT: placed for the step's calls 12,288 B {{.*}} (in microbatch_step)
// CHECK-NEXT: placed for the optimizer step 0 B {{.*}} (in none)
// CHECK: arena 12,544 B
rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 1 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 12544 {
  %w = rt.buffer 0 : memref<64xf32>
  %a = rt.buffer 256 : memref<1024xf32>
  %b = rt.buffer 4352 : memref<1024xf32>
  %v = rt.buffer 4352 : memref<32x32xf32>
  %c = rt.buffer 256 : memref<1024xf32>
  %d = rt.buffer 8448 : memref<1024xf32>
  %e = rt.buffer 256 : memref<1024xf32>
  rt.persistent "w" parameter %w global [64] offsets [0] init <zeros> : memref<64xf32>
  rt.func @microbatch_step args() kinds [] results() names [] {
    rt.kernel fill() -> (%a) floats [1.0] : () -> memref<1024xf32>
    rt.kernel activation(%a) -> (%b) ints [3] : (memref<1024xf32>) -> memref<1024xf32>
    rt.kernel fill() -> (%c) floats [2.0] : () -> memref<1024xf32>
    rt.kernel activation(%c) -> (%d) ints [3] : (memref<1024xf32>) -> memref<1024xf32>
    rt.kernel copy(%v) -> (%e) : (memref<32x32xf32>) -> memref<1024xf32>
  }
  rt.step [@microbatch_step] microbatches [0]
}
