// The cost report sums each part's FLOPs and bytes (the ops' cost model),
// lists with `ops` every op with the shape of its products (a weight shared
// by the batch stacks its rows; a batched rhs keeps the batch; attention's
// batch is samples x heads) and every collective with its axes and group,
// counts a reshape (a view) as nothing, and leaves the IR unchanged.
// RUN: triad-opt %s --triad-cost-report -o %t | FileCheck %s --check-prefix=PARTS
// RUN: triad-opt %t | FileCheck %s --check-prefix=IR
// RUN: triad-opt %s --triad-cost-report="ops=true" -o /dev/null | FileCheck %s --check-prefix=OPS
// RUN: triad-opt %s --triad-cost-report="ops=true file=%t.report" -o /dev/null
// RUN: FileCheck %s --check-prefix=OPS < %t.report
// RUN: not triad-opt %s --triad-cost-report="file=%t.missing/report" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOFILE

// The train pipeline writes it after the partition, forward and backward
// layer by layer, in a rank's shapes at tp 2: each of the query, key and
// value products has 32 of the 64 columns, attention 2 of the 4 heads of
// each of the 8 samples, and the layer's two all-reduces are there.
// RUN: triad-gen --preset tiny --layers 1 | triad-opt --triad-train-pipeline="tp=2 cost-report=%t.tiny" -o /dev/null
// RUN: FileCheck %s --check-prefix=PIPELINE < %t.tiny

// PARTS-LABEL: triad cost report: @step
// 2 x 16 x 32 x 16 = 16384 FLOPs for the stacked product, as many for the
// batched one, attention 4 x (2 x 8 x 16) x 8 = 8192; bytes are each
// operand's and result's once (5120 for the first product: 1024 + 2048 +
// 2048), nothing for the reshape.
// PARTS-NEXT:   transformer 0: 4 ops, 40960 flops, 16384 bytes, 1 collective of 1024 bytes
// 2.5 x 8192 for attention's gradient (its five products), 16384 for the
// product.
// PARTS-NEXT:   transformer 0 backward: 2 ops, 36864 flops, 12288 bytes
// PARTS-NEXT:   outside layers: 1 op, 256 flops, 3072 bytes
// PARTS-NOT: triad.
// PARTS-NOT: cost report

// OPS-LABEL: triad cost report: @step
// OPS-NEXT:   transformer 0: 4 ops
// OPS-NEXT:     triad.matmul flops=16384 bytes=5120 product batch=1 m=16 n=32 k=16
// OPS-NEXT:     triad.matmul flops=16384 bytes=7168 product batch=2 m=8 n=32 k=16
// OPS-NEXT:     triad.reshape flops=0 bytes=0
// OPS-NEXT:     triad.attention flops=8192 bytes=4096 attention batch=4 m=8 n=8 k=8
// OPS-NEXT:     dist.all_reduce bytes=1024 over [tp] ranks=2
// OPS-NEXT:   transformer 0 backward: 2 ops
// OPS-NEXT:     triad.attention_grad flops=20480 bytes=7168 attention_grad batch=4 m=8 n=8 k=8
// OPS-NEXT:     triad.matmul flops=16384 bytes=5120 product batch=1 m=16 n=32 k=16
// OPS-NEXT:   outside layers: 1 op,
// OPS-NEXT:     triad.add flops=256 bytes=3072

// IR: func.func @step
// IR: triad.attention_grad

// NOFILE: cannot write the cost report

// PIPELINE: triad cost report: @microbatch_step
// PIPELINE:   transformer 0: {{.*}}, 2 collectives of {{[0-9]+}} bytes
// PIPELINE:     triad.matmul {{.*}} product batch=1 m=512 n=32 k=64
// PIPELINE:     triad.attention {{.*}} attention batch=16 m=64 n=64 k=16
// PIPELINE:     dist.all_reduce bytes=131072 over [tp] ranks=2
// PIPELINE:   transformer 0 backward:
// PIPELINE:     triad.attention_grad {{.*}} attention_grad batch=16 m=64 n=64 k=16
// PIPELINE: triad cost report: @apply_step
// PIPELINE:     triad.adamw_update

dist.mesh @mesh axes ["dp", "pp", "tp"] = [1, 1, 2]

func.func @step(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>,
                %wb: tensor<2x16x32xf32>, %q: tensor<2x8x16xf32>,
                %dout: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %y:2 = triad.layer transformer 0 (%x, %w, %wb, %q) : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<2x16x32xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x16xf32>) {
  ^bb0(%a: tensor<2x8x16xf32>, %b: tensor<16x32xf32>, %bb: tensor<2x16x32xf32>, %qq: tensor<2x8x16xf32>):
    %p = triad.matmul %a, %b : tensor<2x8x16xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>
    %pb = triad.matmul %a, %bb : tensor<2x8x16xf32>, tensor<2x16x32xf32> -> tensor<2x8x32xf32>
    %flat = triad.reshape %pb : tensor<2x8x32xf32> -> tensor<16x32xf32>
    %o = triad.attention %qq, %qq, %qq heads = 2 kv_heads = 2 mask = causal
        : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %r = dist.all_reduce %o over ["tp"] : tensor<2x8x16xf32>
    triad.yield %p, %r : tensor<2x8x32xf32>, tensor<2x8x16xf32>
  }
  %g:2 = triad.layer transformer 0 backward (%q, %dout, %w) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<16x32xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x32xf32>) {
  ^bb0(%qq: tensor<2x8x16xf32>, %d: tensor<2x8x16xf32>, %b: tensor<16x32xf32>):
    %dq, %dk, %dv = triad.attention_grad %qq, %qq, %qq, %d heads = 2 kv_heads = 2 mask = causal
        : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
        -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %p = triad.matmul %dq, %b : tensor<2x8x16xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>
    triad.yield %dq, %p : tensor<2x8x16xf32>, tensor<2x8x32xf32>
  }
  %s = triad.add %g#0, %y#1 : tensor<2x8x16xf32>, tensor<2x8x16xf32>
  return %s : tensor<2x8x16xf32>
}

// A product whose bias add and tanh GELU the lowering fuses into its
// epilogue: the add reads only its bias (256 f32), the GELU writes only the
// biased sum the backward reads (512 tokens x 256); the product's bytes
// count the result the kernel writes. In the backward, the GELU's gradient
// joins the product that is its dy: it reads only the GELU's input, and the
// bias gradient's sum writes only its 256 values. Unfused, each moves its
// operands and result.
// RUN: triad-gen --preset tiny --layers 1 --activation gelu_tanh | triad-opt --triad-train-pipeline="cost-report=%t.fused" -o /dev/null
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused
// RUN: triad-gen --preset tiny --layers 1 --activation gelu_tanh | triad-opt --triad-train-pipeline="fuse-epilogues=false cost-report=%t.unfused" -o /dev/null
// RUN: FileCheck %s --check-prefix=UNFUSED < %t.unfused
// FUSED-LABEL: triad cost report: @microbatch_step
// FUSED:     triad.matmul flops=16777216 bytes=720896 product batch=1 m=512 n=256 k=64
// FUSED-NEXT:     triad.bias_add flops=131072 bytes=1024 fused
// FUSED-NEXT:     triad.gelu flops=131072 bytes=524288 fused
// FUSED:     triad.activation_grad flops=131072 bytes=524288 fused
// FUSED-NEXT:     triad.sum flops=256 bytes=1024 fused
// UNFUSED-LABEL: triad cost report: @microbatch_step
// UNFUSED:     triad.matmul flops=16777216 bytes=720896 product batch=1 m=512 n=256 k=64
// UNFUSED-NEXT:     triad.bias_add flops=131072 bytes=1049600
// UNFUSED-NEXT:     triad.gelu flops=131072 bytes=1048576
// UNFUSED:     triad.activation_grad flops=131072 bytes=1572864
// UNFUSED-NEXT:     triad.sum flops=256 bytes=525312
// UNFUSED-NOT: fused
