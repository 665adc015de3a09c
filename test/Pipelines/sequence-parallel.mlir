// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --batch 4 | triad-opt '--triad-train-pipeline=tp=2 microbatches=2 sp=true' --triad-comm-report -o /dev/null | grep microbatch_step | sort | uniq -c | FileCheck %s --check-prefix=COMM
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --batch 4 | triad-opt '--triad-train-pipeline=tp=2 microbatches=2 sp=true' --triad-comm-report -o /dev/null | grep -c microbatch_step | FileCheck %s --check-prefix=LINES
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --batch 4 | triad-opt --triad-autodiff '--triad-shard-propagate=tp=2 sp=true' '--triad-partition=sp=true' | FileCheck %s --check-prefix=LAYER
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 4 --seq 16 --batch 4 | triad-opt '--triad-train-pipeline=tp=2' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEM
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 4 --seq 16 --batch 4 | triad-opt '--triad-train-pipeline=tp=2 sp=true' --triad-memory-report -o /dev/null | FileCheck %s --check-prefix=MEMSP
// RUN: triad-gen --preset tiny --layers 1 --hidden 32 --heads 4 --seq 15 --batch 4 | not triad-opt '--triad-train-pipeline=tp=2 sp=true' 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: triad-gen --preset tiny --layers 2 --hidden 32 --heads 4 --seq 16 --batch 4 --dropout 0.1 | triad-opt '--triad-train-pipeline=tp=2 sp=true cost-report=%t.cost' -o /dev/null
// RUN: sed -n '/transformer 0 backward:/,/embedding 0 backward/p' %t.cost | grep -c dist.all_gather | FileCheck %s --check-prefix=GATHERS

// Megatron-LM's sequence parallelism from the layouts: per layer and
// microbatch the forward all-gathers the sequence before the
// column-parallel projections (once for query, key and value) and before
// the first MLP weight, and reduce-scatters the row-parallel outputs back
// into sequence pieces instead of all-reducing them (2 all_gathers and 2
// reduce_scatters of b*s*h floats, 2 x 16 x 32 x 4 B = 4,096 B); the
// backward mirrors them and gathers the saved norm outputs again for the
// weight gradients (4 all_gathers, 2 reduce_scatters). The vocab-parallel
// embedding's pending lookup is reduce-scattered into sequence pieces, and
// so is the vocab-parallel output layer's input gradient at the head's
// end. The loss takes whole sequences: the hidden state entering the head
// is gathered once (not the logits, vocab-wide), and the cross entropy
// gathers only one log-sum-exp per token and piece (256 B), for the loss
// and for its gradient. The tied table's gradient stays in its vocabulary
// rows: the embedding's part gathers the sequence pieces of its gradient
// (4,096 B, not the 32,768 B table) and scatters only its rows' ids.
// Here 2 layers (one line per collective and layer; calls = 2
// microbatches), 28 lines in all.
// COMM-DAG: 2 microbatch_step 2 all_gather tp 2 256 vocab-parallel cross entropy: the log-sum-exp of each piece of the vocabulary
// COMM-DAG: 1 microbatch_step 2 all_reduce tp 2 4 vocab-parallel cross entropy: the loss of each piece of the vocabulary
// COMM-DAG: 1 microbatch_step 2 all_gather tp 2 4,096 #dist.layout<{}, {tp}, {}> to #dist.layout<{}, {}, {}> for result 0 of layer transformer 1
// COMM-DAG: 8 microbatch_step 2 all_gather tp 2 4,096 #dist.layout<{}, {tp}, {}> to #dist.layout<{}, {}, {}> for triad.matmul
// COMM-DAG: 4 microbatch_step 2 all_gather tp 2 4,096 #dist.layout<{}, {tp}, {}> to #dist.layout<{}, {}, {}> for triad.reshape
// COMM-DAG: 1 microbatch_step 2 all_gather tp 2 2,048 #dist.layout<{tp}, {}> to #dist.layout<{}, {}> for triad.pad
// COMM-DAG: 1 microbatch_step 2 reduce_scatter tp 2 4,096 #dist.layout<{}, {}, {}, partial = {tp}> to #dist.layout<{}, {tp}, {}> for triad.add
// COMM-DAG: 1 microbatch_step 2 reduce_scatter tp 2 4,096 #dist.layout<{}, {}, {}, partial = {tp}> to #dist.layout<{}, {tp}, {}> for result 0 of layer head 0
// COMM-DAG: 1 microbatch_step 2 all_gather tp 2 4,096 #dist.layout<{}, {tp}, {}> to #dist.layout<{}, {}, {}> for triad.embedding_grad
// COMM-NOT: 32,768
// COMM-DAG: 4 microbatch_step 2 reduce_scatter tp 2 4,096 #dist.layout<{}, {}, {}, partial = {tp}> to #dist.layout<{}, {tp}, {}> for triad.bias_add
// COMM-DAG: 4 microbatch_step 2 reduce_scatter tp 2 4,096 #dist.layout<{}, {}, {}, partial = {tp}> to #dist.layout<{}, {tp}, {}> for triad.layer_norm_grad

// LINES: 28

// One layer after partitioning: the vocab-parallel embedding's pending
// lookup is reduce-scattered along the sequence; the norms and residual sums run on sequence pieces;
// the weights keep Megatron's splits (a weight's split wins over an
// activation's), so the normalized pieces are gathered once for the three
// projections, and the row-parallel sums are reduce-scattered.
// LAYER-LABEL: func.func @microbatch_step
// LAYER: triad.embedding {{.*}} vocab_split ["tp"]
// LAYER: dist.reduce_scatter %{{.*}} dim 1 over ["tp"] {{.*}} : tensor<4x16x32xf32> -> tensor<4x8x32xf32>
// LAYER: triad.layer transformer 0
// LAYER: %[[NORM:.*]] = triad.layer_norm {{.*}} : tensor<4x8x32xf32>
// LAYER: %[[WHOLE:.*]] = dist.all_gather %[[NORM]] dim 1 over ["tp"] {{.*}} : tensor<4x8x32xf32> -> tensor<4x16x32xf32>
// LAYER: triad.matmul %[[WHOLE]], %{{.*}} : tensor<4x16x32xf32>, tensor<32x16xf32> -> tensor<4x16x16xf32>
// LAYER: triad.matmul %[[WHOLE]], %{{.*}} : tensor<4x16x32xf32>, tensor<32x8xf32> -> tensor<4x16x8xf32>
// LAYER: triad.matmul %[[WHOLE]], %{{.*}} : tensor<4x16x32xf32>, tensor<32x8xf32> -> tensor<4x16x8xf32>
// LAYER: %[[PENDING:.*]] = triad.matmul {{.*}} : tensor<4x16x16xf32>, tensor<16x32xf32> -> tensor<4x16x32xf32>
// LAYER: %[[PIECE:.*]] = dist.reduce_scatter %[[PENDING]] dim 1 over ["tp"] {{.*}} : tensor<4x16x32xf32> -> tensor<4x8x32xf32>
// LAYER: triad.bias_add %[[PIECE]]
// LAYER: triad.layer_norm {{.*}} : tensor<4x8x32xf32>

// Activations at peak per rank shrink (the norms, residuals and their
// gradients are kept in sequence pieces; the head works on whole
// sequences).
// MEM: activations at peak (microbatch_step) 312,080 B
// MEMSP: activations at peak (microbatch_step) 279,312 B

// A value gathered for several uses in a layer is gathered once (the
// pipeline's common-subexpression elimination after the partition): with
// dropout, a layer's backward gathers the saved first norm output once for
// the weight gradients of the query, key and value products (three times
// without it), the second once for the MLP's, and the gradients entering
// the two dropouts' (dropout runs on whole sequences).
// GATHERS: {{^}}4{{$}}

// The sequence must divide among the tp ranks.
// ODD: error: 'triad.layer' op sequence parallelism cannot split the sequence of result 0 ('tensor<4x15x32xf32>') over tp=2: 15 is not divisible
