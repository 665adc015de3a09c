//===- triad-convert.cpp - Hugging Face weights in and out ----------------===//
//
// triad-convert --from-hf PATH [--hf-config FILE] -o CHECKPOINT_DIR
// triad-convert --to-hf CHECKPOINT_DIR [--step N] [--hf-config FILE]
//               [--dtype f32|bf16|f16] -o FILE.safetensors
//
// From Hugging Face: PATH is a .safetensors file or a folder of them (a
// sharded checkpoint's model-0000k-of-0000n.safetensors), read one file at a
// time; the config is PATH's config.json unless --hf-config names one. The
// result is a Triad checkpoint (step 0) of the model `triad-gen --hf-config`
// builds from the same config, in f32 whatever the file's type: `triad-run
// PLAN --init-from CHECKPOINT_DIR` starts from it on any mesh.
//
// To Hugging Face: the parameters of a Triad checkpoint (the latest, or
// --step N), in one safetensors file with the names and layouts of the
// config's *ForCausalLM class, which transformers' from_pretrained reads
// beside the config.
//
// Names, [out, in] layouts and fused projections: triad/Models/HFWeights.h.
// Every bad input ends in one line on stderr ("triad-convert: error: ...")
// and exit status 1, before anything is written.
//
//===----------------------------------------------------------------------===//

#include "triad/Models/HFWeights.h"
#include "triad/Models/ModelConfig.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/kernels/cpu/HalfFloat.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace triad;
namespace cl = llvm::cl;
namespace rt = triad::rt;

namespace {

cl::OptionCategory category("triad-convert options");
cl::opt<std::string> fromHf("from-hf",
                            cl::desc("Read a Hugging Face checkpoint: a "
                                     ".safetensors file or a folder of them"),
                            cl::value_desc("path"), cl::cat(category));
cl::opt<std::string> toHf("to-hf",
                          cl::desc("Write a Triad checkpoint's parameters in "
                                   "Hugging Face's names and layouts"),
                          cl::value_desc("checkpoint dir"), cl::cat(category));
cl::opt<std::string>
    hfConfig("hf-config",
             cl::desc("The model's config.json (default: the one beside "
                      "--from-hf's files)"),
             cl::value_desc("file"), cl::cat(category));
cl::opt<std::string> outputPath("o",
                                cl::desc("Output: a checkpoint folder "
                                         "(--from-hf) or a .safetensors file "
                                         "(--to-hf)"),
                                cl::value_desc("path"), cl::cat(category));
cl::opt<int64_t> stepOption("step",
                            cl::desc("--to-hf: the checkpoint's step "
                                     "(default: its latest)"),
                            cl::init(-1), cl::cat(category));
cl::opt<std::string> dtypeOption("dtype",
                                 cl::desc("--to-hf: the element type written "
                                          "(f32, bf16, f16; default f32)"),
                                 cl::init("f32"), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  std::fprintf(stderr, "triad-convert: error: %s\n", message.str().c_str());
  std::exit(1);
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t volume(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t size : shape)
    n *= size;
  return n;
}

/// The model: its type and the config triad-gen builds from the file.
struct Model {
  std::string type;
  ModelConfig config;
  std::vector<HFWeightRule> rules;
};

Model readModel(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    fail("cannot read config '" + path + "': " + buffer.getError().message());
  std::string text = (*buffer)->getBuffer().str();
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    fail("config '" + path + "' is not JSON: " + toString(json.takeError()));
  const llvm::json::Object *object = json->getAsObject();
  std::optional<llvm::StringRef> type =
      object ? object->getString("model_type") : std::nullopt;
  if (!type)
    fail("config '" + path + "' has no 'model_type' string");
  Model model;
  model.type = type->str();
  llvm::Expected<ModelConfig> config = parseHFConfig(text);
  if (!config)
    fail("config '" + path + "': " + toString(config.takeError()));
  model.config = *config;
  llvm::Expected<std::vector<HFWeightRule>> rules =
      hfWeightRules(model.type, model.config);
  if (!rules)
    fail("config '" + path + "': " + toString(rules.takeError()));
  model.rules = std::move(*rules);
  return model;
}

/// One Hugging Face tensor read as f32.
std::vector<float> readAsF32(const rt::SafetensorsFile &file,
                             const rt::TensorEntry &entry) {
  int64_t n = volume(entry.shape);
  std::vector<float> values(static_cast<size_t>(n));
  const char *bytes = file.bytes(entry);
  for (int64_t i = 0; i < n; ++i) {
    switch (entry.dtype) {
    case rt::DType::F32:
      std::memcpy(&values[i], bytes + 4 * i, 4);
      break;
    case rt::DType::BF16:
    case rt::DType::F16: {
      uint16_t half;
      std::memcpy(&half, bytes + 2 * i, 2);
      values[i] = entry.dtype == rt::DType::BF16 ? rt::cpu::fromBf16(half)
                                                 : rt::cpu::fromF16(half);
      break;
    }
    case rt::DType::I32:
      fail("tensor '" + entry.name + "' of '" + file.path() +
           "' holds integers, not weights");
    }
  }
  return values;
}

/// Triad's tensor of `rule` from its Hugging Face tensor `hf`.
std::vector<float> toTriad(const HFWeightRule &rule,
                           const std::vector<float> &hf) {
  std::vector<float> out(static_cast<size_t>(volume(rule.triadShape)));
  int64_t features = rule.triadShape.back();
  switch (rule.layout) {
  case HFWeightRule::Layout::Same:
    return hf;
  case HFWeightRule::Layout::Vector:
    for (int64_t o = 0; o < features; ++o)
      out[o] = hf[rule.select(o)];
    break;
  case HFWeightRule::Layout::Linear: {
    int64_t in = rule.triadShape[0], hfIn = rule.hfShape[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < features; ++o)
        out[i * features + o] = hf[rule.select(o) * hfIn + i];
    break;
  }
  case HFWeightRule::Layout::Conv1D: {
    int64_t in = rule.triadShape[0], hfOut = rule.hfShape[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < features; ++o)
        out[i * features + o] = hf[i * hfOut + rule.select(o)];
    break;
  }
  }
  return out;
}

/// Writes Triad's tensor of `rule` into its place in Hugging Face's `hf`.
void intoHf(const HFWeightRule &rule, const std::vector<float> &triad,
            std::vector<float> &hf) {
  int64_t features = rule.triadShape.back();
  switch (rule.layout) {
  case HFWeightRule::Layout::Same:
    hf = triad;
    return;
  case HFWeightRule::Layout::Vector:
    for (int64_t o = 0; o < features; ++o)
      hf[rule.select(o)] = triad[o];
    return;
  case HFWeightRule::Layout::Linear: {
    int64_t in = rule.triadShape[0], hfIn = rule.hfShape[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < features; ++o)
        hf[rule.select(o) * hfIn + i] = triad[i * features + o];
    return;
  }
  case HFWeightRule::Layout::Conv1D: {
    int64_t in = rule.triadShape[0], hfOut = rule.hfShape[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < features; ++o)
        hf[i * hfOut + rule.select(o)] = triad[i * features + o];
    return;
  }
  }
}

/// The .safetensors files of `path` (a file, or a folder's, sorted).
std::vector<std::string> safetensorsFiles(const std::string &path) {
  if (!llvm::sys::fs::is_directory(path)) {
    if (!llvm::sys::fs::exists(path))
      fail("'" + path + "' does not exist");
    return {path};
  }
  std::vector<std::string> files;
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(path, error), end;
       it != end && !error; it.increment(error))
    if (llvm::StringRef(it->path()).ends_with(".safetensors"))
      files.push_back(it->path());
  if (error)
    fail("cannot list '" + path + "': " + error.message());
  if (files.empty())
    fail("'" + path + "' holds no .safetensors file");
  std::sort(files.begin(), files.end());
  return files;
}

void convertFromHf(const Model &model) {
  // A new checkpoint goes into a folder of its own: nothing is replaced.
  if (!rt::checkpointSteps(outputPath).empty())
    fail("'" + outputPath +
         "' already holds a checkpoint; convert into a "
         "new folder");
  std::vector<std::string> files = safetensorsFiles(fromHf);
  std::string prefix = hfBasePrefix(model.type).str();
  // Each rule's source, under the class's name or the base model's.
  llvm::StringMap<std::vector<const HFWeightRule *>> bySource;
  for (const HFWeightRule &rule : model.rules)
    bySource[rule.hf].push_back(&rule);
  auto ruleName = [&](llvm::StringRef name) -> std::string {
    if (bySource.count(name))
      return name.str();
    if (!prefix.empty() && bySource.count(prefix + name.str()))
      return prefix + name.str();
    return "";
  };
  // Every tensor is checked before anything is written: one pass over the
  // headers (the files are read whole, one at a time).
  llvm::StringSet<> found;
  for (const std::string &path : files) {
    absl::StatusOr<rt::SafetensorsFile> file = rt::SafetensorsFile::open(path);
    if (!file.ok())
      fail(std::string(file.status().message()));
    for (const rt::TensorEntry &entry : file->entries()) {
      std::string name = ruleName(entry.name);
      if (name.empty()) {
        if (isHFBuffer(entry.name))
          continue;
        fail(llvm::formatv("'{0}' holds tensor '{1}', which no parameter of "
                           "the {2} model in the config reads",
                           path, entry.name, model.type));
      }
      const HFWeightRule &rule = *bySource[name].front();
      if (entry.shape != rule.hfShape)
        fail(llvm::formatv("tensor '{0}' of '{1}' is {2}; the config's "
                           "model needs {3}",
                           entry.name, path, shapeText(entry.shape),
                           shapeText(rule.hfShape)));
      if (!found.insert(name).second)
        fail("tensor '" + entry.name + "' appears twice");
    }
  }
  for (const HFWeightRule &rule : model.rules)
    if (!found.count(rule.hf))
      fail("no file holds tensor '" + rule.hf + "' (for Triad's '" +
           rule.triad + "')");
  // One Triad shard per file: the checkpoint's "ranks" are the files.
  rt::CheckpointInfo info;
  info.worldSize = static_cast<int64_t>(files.size());
  for (size_t index = 0; index < files.size(); ++index) {
    absl::StatusOr<rt::SafetensorsFile> file =
        rt::SafetensorsFile::open(files[index]);
    if (!file.ok())
      fail(std::string(file.status().message()));
    std::vector<std::vector<float>> converted;
    converted.reserve(model.rules.size());
    std::vector<rt::TensorSlice> slices;
    for (const rt::TensorEntry &entry : file->entries()) {
      std::string name = ruleName(entry.name);
      if (name.empty())
        continue;
      std::vector<float> hf = readAsF32(*file, entry);
      for (const HFWeightRule *rule : bySource[name]) {
        converted.push_back(toTriad(*rule, hf));
        rt::TensorSlice &slice = slices.emplace_back();
        slice.name = rule->triad;
        slice.globalShape = rule->triadShape;
        slice.offsets.assign(rule->triadShape.size(), 0);
        slice.sizes = rule->triadShape;
        slice.data = converted.back().data();
      }
    }
    if (absl::Status status =
            rt::writeCheckpointShard(outputPath, 0, static_cast<int64_t>(index),
                                     slices, rt::stampOf(info));
        !status.ok())
      fail(std::string(status.message()));
  }
  if (absl::Status status = rt::commitCheckpoint(outputPath, info);
      !status.ok())
    fail(std::string(status.message()));
  std::printf("triad-convert: %zu tensors of %s (%zu file%s) -> Triad "
              "checkpoint '%s' (step 0, %zu parameters)\n",
              static_cast<size_t>(found.size()), model.type.c_str(),
              files.size(), files.size() == 1 ? "" : "s", outputPath.c_str(),
              model.rules.size());
}

void convertToHf(const Model &model) {
  std::optional<rt::DType> dtype =
      dtypeOption == "f32"    ? std::optional(rt::DType::F32)
      : dtypeOption == "bf16" ? std::optional(rt::DType::BF16)
      : dtypeOption == "f16"  ? std::optional(rt::DType::F16)
                              : std::nullopt;
  if (!dtype)
    fail("--dtype must be f32, bf16 or f16, not '" + dtypeOption + "'");
  absl::StatusOr<rt::CheckpointReader> reader = rt::CheckpointReader::open(
      toHf, stepOption < 0 ? std::nullopt
                           : std::optional<uint64_t>(stepOption.getValue()));
  if (!reader.ok())
    fail(std::string(reader.status().message()));
  // Hugging Face's tensors in order of first use, each assembled from the
  // rules that write into it.
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const HFWeightRule &rule : model.rules) {
    std::vector<float> triad(static_cast<size_t>(volume(rule.triadShape)));
    std::vector<int64_t> origin(rule.triadShape.size(), 0);
    if (absl::Status status =
            reader->read(rule.triad, rt::DType::F32, rule.triadShape, origin,
                         rule.triadShape, triad.data());
        !status.ok())
      fail("checkpoint '" + toHf + "': " + std::string(status.message()));
    auto [it, inserted] = tensors.try_emplace(rule.hf);
    if (inserted) {
      order.push_back(rule.hf);
      shapes[rule.hf] = rule.hfShape;
      it->second.assign(static_cast<size_t>(volume(rule.hfShape)), 0.0f);
    }
    intoHf(rule, triad, it->second);
  }
  std::vector<std::vector<uint16_t>> halves;
  std::vector<rt::TensorToWrite> writes;
  for (const std::string &name : order) {
    const std::vector<float> &values = tensors[name];
    const void *data = values.data();
    if (*dtype != rt::DType::F32) {
      std::vector<uint16_t> &half = halves.emplace_back(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        half[i] = *dtype == rt::DType::BF16 ? rt::cpu::toBf16(values[i])
                                            : rt::cpu::toF16(values[i]);
      data = half.data();
    }
    writes.push_back({name, *dtype, shapes[name], data});
  }
  if (absl::Status status =
          rt::writeSafetensors(outputPath, writes, {{"format", "pt"}});
      !status.ok())
    fail(std::string(status.message()));
  std::printf("triad-convert: Triad checkpoint '%s' (step %llu) -> %zu "
              "tensors of %s in '%s' (%s)\n",
              toHf.c_str(),
              static_cast<unsigned long long>(reader->info().step),
              writes.size(), model.type.c_str(), outputPath.c_str(),
              dtypeOption.c_str());
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Converts weights between Hugging Face checkpoints and Triad's\n\n"
      "  triad-convert --from-hf PATH [--hf-config FILE] -o CHECKPOINT_DIR\n"
      "  triad-convert --to-hf CHECKPOINT_DIR [--step N] [--hf-config FILE] "
      "[--dtype f32|bf16|f16] -o FILE.safetensors\n");
  if (fromHf.empty() == toHf.empty())
    fail("give one of --from-hf PATH and --to-hf CHECKPOINT_DIR");
  if (outputPath.empty())
    fail("-o is required (a checkpoint folder for --from-hf, a .safetensors "
         "file for --to-hf)");
  std::string config = hfConfig;
  if (config.empty()) {
    if (toHf.empty() && llvm::sys::fs::is_directory(fromHf))
      config = fromHf.getValue() + "/config.json";
    else
      fail("--hf-config is required (the model's config.json)");
  }
  Model model = readModel(config);
  if (!fromHf.empty())
    convertFromHf(model);
  else
    convertToHf(model);
  return 0;
}
