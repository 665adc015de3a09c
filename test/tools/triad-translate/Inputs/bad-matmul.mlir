// An rt program whose matmul operands do not fit the kernel contract.
rt.plan mesh ["dp", "pp", "tp"] = [1, 1, 1] seq 4 vocab 16 batch 2 microbatches 1
rt.program @rank0 pipeline_rank 0 arena 4096 {
  %a = rt.buffer 0 : memref<4x8xf32>
  %b = rt.buffer 128 : memref<4x8xf32>
  %c = rt.buffer 256 : memref<4x8xf32>
  rt.func @f args() kinds [] results() names [] {
    rt.kernel matmul(%a, %b) -> (%c) ints [0, 0] : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  }
  rt.step [@f] microbatches [0]
}
