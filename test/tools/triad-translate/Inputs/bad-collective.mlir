// A structurally valid rt program whose all-reduce names a communicator
// group the plan does not have (only the loader sees the groups whole).
rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel all_reduce(%a) -> (%a) ints [3] : (memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.step [@f] microbatches [0]
}
