//===- KernelContract.cpp - what each runtime kernel reads and writes ----===//
//
// See KernelContract.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelContract.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace triad::plan {

namespace {

using Shape = std::vector<int64_t>;

std::string text(const Shape &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool isFloat(DType dtype) { return dtype != DType::I32; }

int64_t elementCount(const Shape &shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

} // namespace

absl::Status checkKernel(const KernelView &view, const KernelContext &context) {
  auto fail = [](const std::string &what) {
    return absl::InvalidArgumentError(what);
  };
  OpCode op = view.op;
  const std::vector<uint32_t> &in = view.inputs, &out = view.outputs;
  const std::vector<int64_t> &ints = view.ints;
  const std::vector<double> &floats = view.floats;
  for (uint32_t index : in)
    if (index >= view.operands.size())
      return fail(absl::StrCat("input ", index, " is not an operand"));
  for (uint32_t index : out)
    if (index >= view.operands.size())
      return fail(absl::StrCat("output ", index, " is not an operand"));
  for (double f : floats)
    if (!std::isfinite(f))
      return fail("a float attribute is not finite");

  auto arity = [&](size_t inputs, size_t outputs, size_t intCount,
                   size_t floatCount) -> absl::Status {
    if (in.size() != inputs || out.size() != outputs ||
        ints.size() != intCount || floats.size() != floatCount)
      return fail(absl::StrCat("expects ", inputs, " inputs, ", outputs,
                               " outputs, ", intCount, " ints and ", floatCount,
                               " floats; has ", in.size(), ", ", out.size(),
                               ", ", ints.size(), " and ", floats.size()));
    return absl::OkStatus();
  };
  auto shape = [&](uint32_t index) -> const Shape & {
    return view.operands[index].shape;
  };
  auto dtype = [&](uint32_t index) { return view.operands[index].dtype; };
  auto sameShapes = [&](std::initializer_list<uint32_t> indices) {
    Shape first = shape(*indices.begin());
    for (uint32_t index : indices)
      if (shape(index) != first)
        return fail(absl::StrCat("operand shapes differ: ", text(first),
                                 " and ", text(shape(index))));
    return absl::OkStatus();
  };
  auto floatValues = [&](std::initializer_list<uint32_t> indices) {
    for (uint32_t index : indices)
      if (!isFloat(dtype(index)))
        return fail(
            absl::StrCat(view.operands[index].name, " must be a float tensor"));
    return absl::OkStatus();
  };
  auto scalarF32 = [&](std::initializer_list<uint32_t> indices) {
    for (uint32_t index : indices)
      if (dtype(index) != DType::F32 || !shape(index).empty())
        return fail(
            absl::StrCat(view.operands[index].name, " must be an f32 scalar"));
    return absl::OkStatus();
  };
  auto elementwise = [&](size_t inputs, size_t intCount,
                         size_t floatCount) -> absl::Status {
    if (absl::Status s = arity(inputs, 1, intCount, floatCount); !s.ok())
      return s;
    std::vector<uint32_t> all = in;
    all.push_back(out[0]);
    for (uint32_t index : all)
      if (shape(index) != shape(out[0]) || !isFloat(dtype(index)))
        return fail(absl::StrCat("operands must be float tensors of shape ",
                                 text(shape(out[0]))));
    return absl::OkStatus();
  };
#define CHECK_OK(expr)                                                         \
  if (absl::Status _s = (expr); !_s.ok())                                      \
    return _s;

  // The size of the group a vocab-parallel local form (or a dropout on a
  // piece of the batch) names.
  auto vocabPieces = [&](int64_t group, int64_t *pieces) {
    *pieces = 1;
    if (!context.known)
      return absl::OkStatus();
    int64_t groups = static_cast<int64_t>(context.groupSizes.size());
    if (group < 0 || group >= groups)
      return fail(absl::StrCat("group ", group, " is not one of the ", groups,
                               " communicator groups"));
    *pieces = context.groupSizes[group];
    return absl::OkStatus();
  };
  // The vocabulary, padded where the compiler padded it (tables and logits
  // may hold that many rows or columns): to the plan's padded vocabulary,
  // or else to a multiple of tp. Without the plan's header every
  // vocabulary check passes.
  int64_t vocab = context.known ? context.vocab : INT64_MAX / 4;
  int64_t tp = std::max<int64_t>(context.tp, 1);
  int64_t paddedVocab = !context.known ? INT64_MAX / 4
                        : context.paddedVocab > 0
                            ? context.paddedVocab
                            : (context.vocab + tp - 1) / tp * tp;
  // A cross entropy's or log-sum-exp's [group[, classes]] from ints[at]
  // on: a group (-1 for none) where the op holds a piece (`piece`), the
  // classes of a padded vocabulary, no more than the plan's vocabulary
  // nor the `columns` x pieces it holds.
  auto vocabInts = [&](size_t at, bool piece, int64_t columns,
                       int64_t *pieces) -> absl::Status {
    *pieces = 1;
    if (ints.size() > at && (piece || ints[at] != -1))
      CHECK_OK(vocabPieces(ints[at], pieces));
    if (ints.size() > at + 1) {
      int64_t classes = ints[at + 1];
      if (classes < 1 || classes > vocab || classes > columns * *pieces)
        return fail(absl::StrCat("classes ", classes, " must lie in [1, ",
                                 std::min(vocab, columns * *pieces), "]"));
    }
    return absl::OkStatus();
  };

  // Integer attributes that are flags hold 0 or 1, nothing else: `names`
  // from ints[first] on.
  auto flags = [&](std::initializer_list<const char *> names,
                   size_t first) -> absl::Status {
    size_t at = first;
    for (const char *name : names) {
      if (at < ints.size() && ints[at] != 0 && ints[at] != 1)
        return fail(absl::StrCat("flag ", name, " is ", ints[at],
                                 "; flags are 0 or 1"));
      ++at;
    }
    return absl::OkStatus();
  };

  switch (op) {
  case OpCode::Embedding: {
    CHECK_OK(arity(2, 1, ints.size() == 1 ? 1 : 0, 0));
    Shape ids = shape(in[0]), table = shape(in[1]), result = ids;
    if (dtype(in[0]) != DType::I32 || table.size() != 2)
      return fail("expects i32 ids and a [vocab, hidden] table");
    int64_t pieces = 1;
    if (ints.size() == 1)
      CHECK_OK(vocabPieces(ints[0], &pieces));
    if (table[0] * pieces > paddedVocab)
      return fail("the table has more rows than the vocabulary");
    result.push_back(table[1]);
    if (shape(out[0]) != result || dtype(out[0]) != dtype(in[1]))
      return fail(absl::StrCat("result must have shape ", text(result)));
    return absl::OkStatus();
  }
  case OpCode::EmbeddingGrad: {
    CHECK_OK(arity(2, 1, ints.size() == 1 ? 1 : 0, 0));
    Shape ids = shape(in[0]), dy = shape(in[1]), table = shape(out[0]);
    Shape expected = ids;
    if (table.size() != 2 || dtype(in[0]) != DType::I32)
      return fail("expects i32 ids and a [vocab, hidden] result");
    int64_t pieces = 1;
    if (ints.size() == 1)
      CHECK_OK(vocabPieces(ints[0], &pieces));
    expected.push_back(table[1]);
    if (dy != expected)
      return fail("dy must have the ids' shape plus the hidden size");
    if (table[0] * pieces > paddedVocab)
      return fail("the result has more rows than the vocabulary");
    return floatValues({in[1], out[0]});
  }
  case OpCode::Matmul: {
    // ints transpose_a, transpose_b[, epilogue]: the epilogue decides how
    // many operands there are, so it is checked first.
    bool fused = ints.size() == 3;
    if (fused && (ints[2] < 0 || ints[2] > kLastEpilogueCode))
      return fail(absl::StrCat("unknown epilogue ", ints[2], " (0 to ",
                               kLastEpilogueCode, ")"));
    MatmulAttrs attrs{false, false,
                      fused ? static_cast<EpilogueCode>(ints[2])
                            : EpilogueCode::None};
    bool gradient = attrs.gradient().has_value();
    if (!attrs.activation() && !gradient && out.size() == 2)
      return fail("only an epilogue with an activation writes a "
                  "pre-activation, and only a gradient epilogue a bias "
                  "gradient (a second output)");
    bool second = out.size() == 2 && (attrs.activation() || gradient);
    bool accumulates = attrs.accumulates(), adds = attrs.hasAddend();
    size_t inputs = accumulates     ? 4
                    : adds          ? (attrs.hasBias() ? 4 : 3)
                    : attrs.fused() ? 3
                                    : 2;
    CHECK_OK(arity(inputs, second ? 2 : 1, fused ? 3 : 2, 0));
    CHECK_OK(flags({"transpose_a", "transpose_b"}, 0));
    attrs = matmulAttrs(ints);
    Shape a = shape(in[0]), b = shape(in[1]), c = shape(out[0]);
    bool ta = attrs.transposeA, tb = attrs.transposeB;
    if (a.size() < 2 || (b.size() != 2 && b.size() != a.size()))
      return fail("operands must be matrices (rhs of rank 2 or of lhs)");
    size_t r = a.size(), rb = b.size();
    int64_t m = ta ? a[r - 1] : a[r - 2], k = ta ? a[r - 2] : a[r - 1];
    int64_t kb = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
    if (k != kb)
      return fail(absl::StrCat("contracting sizes differ: ", k, " and ", kb));
    Shape expected(a.begin(), a.end() - 2);
    if (rb == r && !std::equal(expected.begin(), expected.end(), b.begin()))
      return fail("batch dimensions differ");
    expected.push_back(m);
    expected.push_back(n);
    if (c != expected)
      return fail(absl::StrCat("result must have shape ", text(expected)));
    // An [n] vector of f32 or of c's type: a bias or a bias gradient.
    auto vectorOfN = [&](uint32_t operand) {
      return shape(operand) == Shape{n} &&
             (dtype(operand) == DType::F32 || dtype(operand) == dtype(out[0]));
    };
    if (attrs.hasBias() && !vectorOfN(in[2]))
      return fail(absl::StrCat("the bias must be [", n,
                               "] (the result's last dimension), f32 or of "
                               "the result's type"));
    if (second && out[1] == out[0])
      return fail(absl::StrCat("the ",
                               gradient ? "bias gradient" : "pre-activation",
                               " must be a buffer of its own"));
    if (second && !gradient &&
        (shape(out[1]) != c || dtype(out[1]) != dtype(out[0])))
      return fail(absl::StrCat("the pre-activation must have the result's "
                               "shape ",
                               text(c), " and element type"));
    if (adds) {
      uint32_t addend = in.back();
      if (shape(addend) != c || dtype(addend) != dtype(out[0]))
        return fail(absl::StrCat("the addend must have the result's shape ",
                                 text(c), " and element type"));
      if (addend == out[0] || addend == in[0] || addend == in[1])
        return fail("the addend must be a buffer of its own (the product is "
                    "written while it is read)");
    }
    if (accumulates) {
      if (in[2] != out[0])
        return fail("the result must be the accumulator (input 2) itself");
      if (in[0] == in[2] || in[1] == in[2] || in[3] == in[2])
        return fail("the accumulator must not be an operand of the product "
                    "or its weight (it is written while they are read)");
      if (dtype(out[0]) != DType::F32 && dtype(out[0]) != dtype(in[0]))
        return fail("the accumulator must be f32 or of the operands' type");
      if (!shape(in[3]).empty() || dtype(in[3]) != DType::F32)
        return fail("the weight (input 3) must be an f32 scalar");
      if (dtype(in[0]) != dtype(in[1]))
        return fail("the operands of an accumulating product must have one "
                    "type");
    }
    if (gradient) {
      if (shape(in[2]) != c || dtype(in[2]) != dtype(out[0]))
        return fail(absl::StrCat("the activation's input must have the "
                                 "result's shape ",
                                 text(c), " and element type"));
      if (in[2] == out[0])
        return fail("the result must not overwrite the activation's input "
                    "(the product is written before the input is read)");
      if (second && !vectorOfN(out[1]))
        return fail(absl::StrCat("the bias gradient must be [", n,
                                 "] (the result's last dimension), f32 or "
                                 "of the result's type"));
    }
    return floatValues({in[0], in[1], out[0]});
  }
  case OpCode::Add: {
    CHECK_OK(arity(2, 1, 0, 0));
    Shape lhs = shape(in[0]), rhs = shape(in[1]);
    if (rhs.size() > lhs.size() ||
        !std::equal(rhs.begin(), rhs.end(), lhs.end() - rhs.size()))
      return fail("rhs must have the trailing shape of lhs");
    if (shape(out[0]) != lhs)
      return fail("the result must have the shape of lhs");
    return floatValues({in[0], in[1], out[0]});
  }
  case OpCode::Mul:
    return elementwise(2, 0, 0);
  case OpCode::Scale:
    return elementwise(1, 0, 1);
  case OpCode::Activation:
  case OpCode::ActivationGrad:
  case OpCode::Gated: {
    size_t inputs = op == OpCode::Activation ? 1 : 2;
    CHECK_OK(elementwise(inputs, 1, 0));
    if (ints[0] < 0 || ints[0] > kLastActivationCode)
      return fail(absl::StrCat("unknown activation ", ints[0], " (0 to ",
                               kLastActivationCode, ")"));
    return absl::OkStatus();
  }
  case OpCode::LayerNorm:
  case OpCode::RmsNorm:
  case OpCode::LayerNormGrad:
  case OpCode::RmsNormGrad: {
    bool grad = op == OpCode::LayerNormGrad || op == OpCode::RmsNormGrad;
    size_t inputs =
        grad ? 3 : (op == OpCode::LayerNorm && in.size() == 3 ? 3 : 2);
    CHECK_OK(arity(inputs, grad ? 2 : 1, 0, 1));
    Shape x = shape(in[0]);
    if (x.empty() || shape(in[1]) != Shape{x.back()})
      return fail("gamma must match the last dimension of x");
    if (!grad && inputs == 3 && shape(in[2]) != Shape{x.back()})
      return fail("beta must match the last dimension of x");
    if (shape(out[0]) != x ||
        (grad && (shape(in[2]) != x || shape(out[1]) != shape(in[1]))))
      return fail("results and dy must have the shapes of x and gamma");
    if (!(floats[0] > 0.0))
      return fail("epsilon must be positive");
    return floatValues({in[0], in[1], out[0]});
  }
  case OpCode::Attention:
  case OpCode::AttentionGrad: {
    bool grad = op == OpCode::AttentionGrad;
    if (ints.size() != 5)
      return fail("expects heads, kv_heads, mask, has_prefix, has_slopes");
    CHECK_OK(flags({"has_prefix", "has_slopes"}, 3));
    if (ints[2] < 0 || ints[2] > kLastMaskCode)
      return fail(absl::StrCat("unknown mask ", ints[2], " (0 to ",
                               kLastMaskCode, ")"));
    CHECK_OK(
        arity(3 + (ints[3] != 0) + (ints[4] != 0) + grad, grad ? 3 : 1, 5, 1));
    AttentionAttrs attrs = attentionAttrs(ints, floats);
    int64_t heads = attrs.heads, kvHeads = attrs.kvHeads;
    bool prefix = attrs.hasPrefix, slopes = attrs.hasSlopes;
    if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0 ||
        prefix != (attrs.mask == MaskCode::Prefix))
      return fail("invalid heads, kv_heads or mask");
    Shape q = shape(in[0]), k = shape(in[1]), v = shape(in[2]);
    if (q.size() != 3 || k.size() != 3 || k != v || q[0] != k[0] ||
        q[2] % heads != 0 || k[2] != kvHeads * (q[2] / heads) ||
        (attrs.mask != MaskCode::None && q[1] != k[1]))
      return fail(absl::StrCat("q ", text(q), ", k ", text(k), " and v ",
                               text(v), " do not fit the heads"));
    size_t next = 3;
    if (prefix &&
        (shape(in[next]) != Shape{q[0]} || dtype(in[next++]) != DType::I32))
      return fail("prefix lengths must be i32 [batch]");
    if (slopes &&
        (shape(in[next]) != Shape{heads} || dtype(in[next++]) != DType::F32))
      return fail("ALiBi slopes must be f32 [heads]");
    if (grad && shape(in[next]) != q)
      return fail("dout must have the shape of q");
    if (shape(out[0]) != q ||
        (grad && (shape(out[1]) != k || shape(out[2]) != k)))
      return fail("results must have the shapes of q, k and v");
    if (!(attrs.scale > 0.0))
      return fail("scale must be positive");
    return floatValues({in[0], in[1], in[2], out[0]});
  }
  case OpCode::Rope: {
    CHECK_OK(elementwise(1, 2, 2));
    Shape x = shape(in[0]);
    RopeAttrs attrs = ropeAttrs(ints, floats);
    int64_t heads = attrs.heads, rotary = attrs.rotaryDim;
    if (x.size() != 3 || heads <= 0 || x[2] % heads != 0 || rotary <= 0 ||
        rotary % 2 != 0 || rotary > x[2] / heads || !(attrs.base > 1.0) ||
        std::abs(attrs.direction) != 1.0)
      return fail("invalid heads, rotary dims, base or direction");
    return absl::OkStatus();
  }
  case OpCode::Copy:
  case OpCode::Cast: {
    CHECK_OK(arity(1, 1, 0, 0));
    if (elementCount(shape(in[0])) != elementCount(shape(out[0])))
      return fail("operand and result must have as many elements");
    if (op == OpCode::Copy && dtype(in[0]) != dtype(out[0]))
      return fail("a copy keeps the element type");
    return absl::OkStatus();
  }
  case OpCode::Transpose: {
    if (in.size() != 1 || out.size() != 1)
      return fail("expects one input and one output");
    Shape x = shape(in[0]);
    CHECK_OK(arity(1, 1, x.size(), 0));
    Shape expected;
    std::vector<bool> seen(x.size(), false);
    for (int64_t p : ints) {
      if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[p])
        return fail("invalid permutation");
      seen[p] = true;
      expected.push_back(x[p]);
    }
    if (shape(out[0]) != expected || dtype(out[0]) != dtype(in[0]))
      return fail(absl::StrCat("result must have shape ", text(expected)));
    return absl::OkStatus();
  }
  case OpCode::Slice:
  case OpCode::Pad: {
    if (in.size() != 1 || out.size() != 1)
      return fail("expects one input and one output");
    Shape x = shape(in[0]);
    CHECK_OK(arity(1, 1, 2 * x.size(), 0));
    Shape result = shape(out[0]);
    bool slice = op == OpCode::Slice;
    Shape &small = slice ? result : x, &large = slice ? x : result;
    if (small.size() != large.size() || dtype(out[0]) != dtype(in[0]))
      return fail("operand and result must have one rank and element type");
    for (size_t d = 0; d < x.size(); ++d) {
      int64_t a = ints[d], b = ints[x.size() + d];
      bool ok = slice ? (a >= 0 && b == small[d] && a <= large[d] - b)
                      : (a >= 0 && b >= 0 && a + small[d] + b == large[d]);
      if (!ok)
        return fail(absl::StrCat("invalid bounds in dimension ", d));
    }
    return absl::OkStatus();
  }
  case OpCode::Concat: {
    if (in.empty() || out.size() != 1 || ints.size() != 1 || !floats.empty())
      return fail("expects inputs, one output and the dimension");
    Shape result = shape(out[0]);
    int64_t dim = ints[0], total = 0;
    if (dim < 0 || dim >= static_cast<int64_t>(result.size()))
      return fail("invalid dimension");
    for (uint32_t index : in) {
      Shape part = shape(index);
      if (part.size() != result.size() || dtype(index) != dtype(out[0]))
        return fail("inputs must have the result's rank and element type");
      for (size_t d = 0; d < part.size(); ++d)
        if (static_cast<int64_t>(d) != dim && part[d] != result[d])
          return fail("inputs disagree off the joined dimension");
      total += part[dim];
    }
    if (total != result[dim])
      return fail("the joined sizes do not add up");
    return absl::OkStatus();
  }
  case OpCode::Broadcast:
  case OpCode::Sum: {
    bool sum = op == OpCode::Sum;
    CHECK_OK(arity(1, 1, 0, sum ? 1 : 0));
    // Broadcast: out from in; Sum: in reduced to out (the reverse rule).
    Shape small = shape(sum ? out[0] : in[0]),
          large = shape(sum ? in[0] : out[0]);
    if (small.size() > large.size())
      return fail("the smaller shape has the larger rank");
    size_t offset = large.size() - small.size();
    for (size_t d = 0; d < small.size(); ++d)
      if (small[d] != 1 && small[d] != large[offset + d])
        return fail(
            absl::StrCat(text(small), " does not broadcast to ", text(large)));
    return floatValues({in[0], out[0]});
  }
  case OpCode::Dropout: {
    CHECK_OK(elementwise(
        1, ints.size() == 4 || ints.size() == 5 ? ints.size() : 2, 1));
    if (ints[0] < 0 || ints[1] < 0)
      return fail("invalid probability, stream or offset");
    DropoutAttrs attrs = dropoutAttrs(ints, floats);
    if (!(attrs.probability >= 0.0 && attrs.probability < 1.0))
      return fail("invalid probability, stream or offset");
    // A piece of the batch: its group (-1: none) and the step's
    // microbatches it is one of; of the sequence: the group it is one of.
    if (ints.size() >= 4) {
      int64_t pieces = 1;
      if (attrs.group != -1)
        CHECK_OK(vocabPieces(attrs.group, &pieces));
      if (attrs.microbatches < 1)
        return fail(absl::StrCat("a piece of one of ", attrs.microbatches,
                                 " microbatches"));
      if (context.known && attrs.microbatches != 1 &&
          attrs.microbatches != context.microbatches)
        return fail(absl::StrCat("a piece of one of ", attrs.microbatches,
                                 " microbatches, but the step has ",
                                 context.microbatches));
      if (shape(out[0]).empty())
        return fail("a piece of the batch needs a batch dimension");
    }
    if (ints.size() == 5) {
      int64_t pieces = 1;
      CHECK_OK(vocabPieces(attrs.seqGroup, &pieces));
      if (shape(out[0]).size() < 3)
        return fail(absl::StrCat(
            "a piece of the sequence needs a [batch, sequence, ...] value "
            "of rank 3 or more, got rank ",
            shape(out[0]).size()));
    }
    return absl::OkStatus();
  }
  case OpCode::CrossEntropy:
  case OpCode::CrossEntropyGrad: {
    bool grad = op == OpCode::CrossEntropyGrad;
    // A vocab-parallel local form also reads the log-sum-exp over the
    // whole vocabulary and names its group.
    // A padded vocabulary adds the group (-1: none) and its classes.
    size_t fixed = grad ? 3 : 2;
    bool piece = in.size() == fixed + 1;
    CHECK_OK(arity(fixed + piece, 1, ints.size() == 3 ? 3 : 1 + piece, 0));
    Shape logits = shape(in[0]), labels = shape(in[1]);
    if (logits.empty() || dtype(in[1]) != DType::I32 ||
        labels != Shape(logits.begin(), logits.end() - 1))
      return fail("labels must be i32 with the logits' shape less the vocab");
    int64_t pieces = 1;
    if (ints.size() == 3 && piece != (ints[1] != -1))
      return fail("a group (the local form of a vocab-parallel loss) comes "
                  "with lse, and lse with a group");
    CHECK_OK(vocabInts(1, piece, logits.back(), &pieces));
    if (piece) {
      Shape lse = labels;
      lse.push_back(1);
      if (shape(in[fixed]) != lse || dtype(in[fixed]) != dtype(in[0]))
        return fail(absl::StrCat("lse must have shape ", text(lse),
                                 " and the logits' element type"));
    }
    if (logits.back() * pieces > paddedVocab)
      return fail("the logits have more columns than the vocabulary");
    if (grad) {
      CHECK_OK(scalarF32({in[2]}));
      if (shape(out[0]) != logits)
        return fail("the gradient has the logits' shape");
    } else {
      CHECK_OK(scalarF32({out[0]}));
    }
    return floatValues({in[0]});
  }
  case OpCode::LogSumExp: {
    // A padded vocabulary's [group (-1: none), classes].
    CHECK_OK(arity(1, 1, ints.empty() ? 0 : 2, 0));
    Shape x = shape(in[0]);
    if (x.empty())
      return fail("x must have rank >= 1");
    int64_t pieces = 1;
    CHECK_OK(vocabInts(0, /*piece=*/false, x.back(), &pieces));
    Shape result = x;
    result.back() = 1;
    if (shape(out[0]) != result || dtype(out[0]) != dtype(in[0]))
      return fail(absl::StrCat("result must have shape ", text(result),
                               " and x's element type"));
    return floatValues({in[0]});
  }
  case OpCode::Fill: {
    CHECK_OK(arity(0, 1, 0, 1));
    return absl::OkStatus();
  }
  case OpCode::Values: {
    Shape result = shape(out.empty() ? 0 : out[0]);
    int64_t count = 1;
    for (int64_t size : result)
      count *= size;
    CHECK_OK(arity(0, 1, 0, static_cast<size_t>(count)));
    if (dtype(out[0]) != DType::F32)
      return fail("writes an f32 tensor");
    return absl::OkStatus();
  }
  case OpCode::SumSquares: {
    // One tensor, or several summed into one result (the gradient norm's
    // tensors in one launch).
    if (in.empty() || out.size() != 1 || !ints.empty() || floats.size() > 1)
      return fail(absl::StrCat(
          "expects N inputs (N >= 1), 1 output, no ints and at most 1 float "
          "(the limit); has ",
          in.size(), ", ", out.size(), ", ", ints.size(), " and ",
          floats.size()));
    if (floats.size() == 1 && !(floats[0] > 0.0))
      return fail(absl::StrCat("limit must be positive, got ", floats[0]));
    for (uint32_t index : in)
      CHECK_OK(floatValues({index}));
    return scalarF32({out[0]});
  }
  case OpCode::ClipCoefficient: {
    CHECK_OK(arity(1, 2, 0, 1));
    if (floats[0] < 0.0)
      return fail("max_norm must not be negative");
    return scalarF32({in[0], out[0], out[1]});
  }
  case OpCode::LrSchedule: {
    CHECK_OK(arity(1, 1, 2, 2));
    // decay 0: no decay; -1: over the run; a decay step at or before the
    // warmup's end goes straight to the floor after warmup.
    LrScheduleAttrs attrs = lrScheduleAttrs(ints, floats);
    if (!(attrs.peak > 0.0) || attrs.floor < 0.0 || attrs.floor > attrs.peak ||
        attrs.warmupSteps < 0 || attrs.decaySteps < kDecayOverRun)
      return fail("invalid schedule: needs 0 <= floor <= peak, peak > 0, a "
                  "non-negative warmup and a decay of -1 (the run's length), "
                  "0 (none) or a step");
    return scalarF32({in[0], out[0]});
  }
  case OpCode::AdamW: {
    // N tensors in one launch: each one's param, grad, m, v, then the
    // shared lr, step and coefficient and, optionally, a skip flag; each
    // one's param', m', v' and, for every tensor or none, its updated param
    // rounded to 16 bits.
    std::optional<AdamWShape> tensors =
        adamWShape(in.size(), out.size(), floats.size());
    if (!tensors)
      return fail(absl::StrCat(
          "expects 4 N + 3 or 4 N + 4 inputs (param, grad, m, v per tensor, "
          "then lr, step, coefficient[, skip]), 3 N or 4 N outputs (param', "
          "m', v'[, the 16-bit param] per tensor), no ints and 3 + N floats "
          "(beta1, beta2, epsilon, a weight decay per tensor), N >= 1; has ",
          in.size(), ", ", out.size(), ", ", ints.size(), " and ",
          floats.size()));
    if (!ints.empty())
      return fail(absl::StrCat("expects no ints; has ", ints.size()));
    size_t shared = 4 * tensors->count;
    CHECK_OK(scalarF32({in[shared], in[shared + 1], in[shared + 2]}));
    if (tensors->skips)
      CHECK_OK(scalarF32({in[shared + 3]}));
    for (size_t t = 0; t < tensors->count; ++t) {
      const uint32_t *ins = &in[4 * t];
      const uint32_t *outs = &out[tensors->outputsPerTensor * t];
      CHECK_OK(sameShapes(
          {ins[0], ins[1], ins[2], ins[3], outs[0], outs[1], outs[2]}));
      for (uint32_t index : {ins[0], ins[2], ins[3], outs[0], outs[1], outs[2]})
        if (dtype(index) != DType::F32)
          return fail("AdamW runs on f32 weights and moments");
      // A 16-bit gradient (summed in the parameter's type) is widened as it
      // is read.
      CHECK_OK(floatValues({ins[1]}));
      // A skipped step writes nothing: the results are the inputs.
      if (tensors->skips &&
          (outs[0] != ins[0] || outs[1] != ins[2] || outs[2] != ins[3]))
        return fail("with a skip flag, param, m and v are updated in place");
      if (tensors->rounded) {
        if (shape(outs[3]) != shape(ins[0]) ||
            (dtype(outs[3]) != DType::BF16 && dtype(outs[3]) != DType::F16))
          return fail("the rounded parameter must be bf16 or f16 with the "
                      "parameter's shape");
      }
      if (!(floats[3 + t] >= 0.0))
        return fail("invalid betas, epsilon or weight decay");
    }
    AdamWAttrs attrs = adamWAttrs(floats);
    if (!(attrs.beta1 >= 0.0 && attrs.beta1 < 1.0) ||
        !(attrs.beta2 >= 0.0 && attrs.beta2 < 1.0) || !(attrs.epsilon > 0.0) ||
        attrs.weightDecay < 0.0)
      return fail("invalid betas, epsilon or weight decay");
    return absl::OkStatus();
  }
  case OpCode::Select: {
    CHECK_OK(arity(3, 1, 0, 0));
    CHECK_OK(scalarF32({in[0]}));
    if (shape(in[1]) != shape(out[0]) || shape(in[2]) != shape(out[0]) ||
        dtype(in[1]) != dtype(out[0]) || dtype(in[2]) != dtype(out[0]))
      return fail("both choices must have the result's type");
    return absl::OkStatus();
  }
  case OpCode::LossScaleUpdate: {
    CHECK_OK(arity(3, 4, 1, 2));
    LossScaleAttrs attrs = lossScaleAttrs(ints, floats);
    if (attrs.growthInterval <= 0 || attrs.growth < 1.0 ||
        !(attrs.backoff > 0.0) || attrs.backoff > 1.0)
      return fail("invalid growth interval, growth or backoff");
    return scalarF32({in[0], in[1], in[2], out[0], out[1], out[2], out[3]});
  }
  case OpCode::CountValid: {
    CHECK_OK(arity(1, 1, 1, 0));
    if (dtype(in[0]) != DType::I32)
      return fail("labels must be i32");
    if (ints[0] < INT32_MIN || ints[0] > INT32_MAX)
      return fail("the ignore index does not fit in i32");
    return scalarF32({out[0]});
  }
  case OpCode::Accumulate: {
    CHECK_OK(arity(3, 1, 0, 0));
    if (out[0] != in[0])
      return fail("the result must be the accumulator (input 0) itself");
    CHECK_OK(sameShapes({in[0], in[1]}));
    // An accumulator sums in f32, or in the type of what it adds (16-bit
    // gradients with grad-accumulation=param).
    if (dtype(in[0]) != DType::F32 && dtype(in[0]) != dtype(in[1]))
      return fail("the accumulator must be f32 or of the added value's type");
    CHECK_OK(floatValues({in[0], in[1]}));
    return scalarF32({in[2]});
  }
  case OpCode::Reciprocal: {
    CHECK_OK(arity(1, 1, 0, 0));
    return scalarF32({in[0], out[0]});
  }
  case OpCode::ScaleBy: {
    CHECK_OK(arity(2, 1, 0, 0));
    CHECK_OK(scalarF32({in[1]}));
    if (shape(out[0]) != shape(in[0]) || dtype(out[0]) != dtype(in[0]))
      return fail("the result must have the type of x");
    return floatValues({in[0]});
  }
  case OpCode::AllGather:
  case OpCode::ReduceScatter: {
    // One tensor, or a bucket of them moving in one collective: input i
    // becomes output i along dimension ints[1 + i].
    if (in.empty() || in.size() != out.size() || ints.size() != in.size() + 1)
      return fail(absl::StrCat(
          "expects N inputs, N outputs (N >= 1) and N + 1 ints (group, then "
          "one dimension per input); has ",
          in.size(), ", ", out.size(), " and ", ints.size()));
    return absl::OkStatus();
  }
  case OpCode::AllReduce:
  case OpCode::AllToAll:
  case OpCode::AllSlice: {
    // The group and dimensions are checked against the mesh by the
    // loader (checkCollective in Plan.cpp).
    size_t intCount = op == OpCode::AllReduce  ? 1
                      : op == OpCode::AllToAll ? 3
                                               : 2;
    if (in.size() != 1 || out.size() != 1 || ints.size() != intCount)
      return fail(absl::StrCat(
          "expects 1 input, 1 output and ", intCount,
          op == OpCode::AllReduce  ? " int (group)"
          : op == OpCode::AllToAll ? " ints (group, split_dim, concat_dim)"
                                   : " ints (group, dim)",
          "; has ", in.size(), ", ", out.size(), " and ", ints.size()));
    return absl::OkStatus();
  }
  case OpCode::Send:
  case OpCode::Recv:
    // The peer and tag are checked against the mesh by the loader.
    return arity(op == OpCode::Send ? 1 : 0, op == OpCode::Send ? 0 : 1, 2, 0);
  }
#undef CHECK_OK
  return fail(absl::StrCat("unknown op code ", static_cast<int>(op)));
}

double kernelFlops(const KernelView &view) {
  auto shape = [&](uint32_t operand) -> const Shape & {
    return view.operands[view.inputs[operand]].shape;
  };
  switch (view.op) {
  case OpCode::Matmul: {
    const Shape &a = shape(0), &b = shape(1);
    size_t r = a.size(), rb = b.size();
    bool ta = view.ints[0] != 0, tb = view.ints[1] != 0;
    double m = ta ? a[r - 1] : a[r - 2], k = ta ? a[r - 2] : a[r - 1];
    double n = tb ? b[rb - 2] : b[rb - 1], batch = 1;
    for (size_t d = 0; d + 2 < r; ++d)
      batch *= static_cast<double>(a[d]);
    return 2.0 * batch * m * n * k;
  }
  case OpCode::Attention:
  case OpCode::AttentionGrad: {
    const Shape &q = shape(0), &k = shape(1);
    double heads = static_cast<double>(view.ints[0]);
    double width = static_cast<double>(q[2]) / heads;
    double forward = 4.0 * q[0] * heads * q[1] * k[1] * width;
    return view.op == OpCode::Attention ? forward : 2.0 * forward;
  }
  default:
    return 0.0;
  }
}

} // namespace triad::plan
