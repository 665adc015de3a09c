// Two pipeline ranks: rank 0 sends an activation to rank 1 and receives
// its gradient back, rank 1 mirrors it.
rt.plan mesh ["dp", "pp", "tp"] = [1, 2, 1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %x = rt.buffer 0 : memref<2x4x8xf32>
  %g = rt.buffer 256 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel send(%x) -> () ints [1, 0] : (memref<2x4x8xf32>) -> ()
    rt.kernel recv() -> (%g) ints [1, 1] : () -> memref<2x4x8xf32>
  }
  rt.step [@f] microbatches [0]
}
rt.program @rank1 pipeline_rank 1 arena 4096 {
  %x = rt.buffer 0 : memref<2x4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel recv() -> (%x) ints [0, 0] : () -> memref<2x4x8xf32>
    rt.kernel send(%x) -> () ints [0, 1] : (memref<2x4x8xf32>) -> ()
  }
  rt.step [@f] microbatches [0]
}
