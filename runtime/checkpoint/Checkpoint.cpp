//===- Checkpoint.cpp - sharded, atomic, reslicing checkpoints ------------===//

#include "runtime/checkpoint/Checkpoint.h"

#include "runtime/support/Files.h"
#include "runtime/support/JsonDepth.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace triad::rt {

namespace {

constexpr const char *kSlicesKey = "triad.slices";
constexpr const char *kStepKey = "triad.step";
constexpr const char *kSeedKey = "triad.seed";
constexpr const char *kDataPositionKey = "triad.data_position";
constexpr const char *kWorldSizeKey = "triad.world_size";
constexpr const char *kMeshKey = "triad.mesh";

/// A mesh as the stamps spell it: "dp=2,pp=1,tp=4".
std::string meshText(const std::vector<std::pair<std::string, int64_t>> &mesh) {
  std::string text;
  for (const auto &[axis, size] : mesh)
    absl::StrAppend(&text, text.empty() ? "" : ",", axis, "=", size);
  return text;
}

std::string rankFileName(int64_t rank) {
  return absl::StrFormat("rank-%05d.safetensors", rank);
}

std::string shapeText(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t volume(const std::vector<int64_t> &sizes) {
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  return count;
}

absl::Status makeFolder(const std::string &path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create checkpoint folder '", path, "': ", strerror(errno)));
  return absl::OkStatus();
}

/// Whether two boxes (offsets, sizes) share an element.
bool overlaps(const std::vector<int64_t> &aOffsets,
              const std::vector<int64_t> &aSizes,
              const std::vector<int64_t> &bOffsets,
              const std::vector<int64_t> &bSizes) {
  for (size_t d = 0; d < aOffsets.size(); ++d)
    if (aOffsets[d] + aSizes[d] <= bOffsets[d] ||
        bOffsets[d] + bSizes[d] <= aOffsets[d])
      return false;
  return true;
}

/// A slice's metadata as stored in a shard: global shape and offsets (its
/// sizes are the stored tensor's shape).
struct SliceMetadata {
  std::vector<int64_t> globalShape, offsets;
};

absl::StatusOr<std::map<std::string, SliceMetadata>>
readSliceMetadata(const SafetensorsFile &file) try {
  auto invalid = [&](const std::string &what) {
    return absl::DataLossError(
        absl::StrCat("invalid checkpoint shard '", file.path(), "': ", what));
  };
  auto it = file.metadata().find(kSlicesKey);
  if (it == file.metadata().end())
    return invalid("no slice metadata");
  nlohmann::json json =
      nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return invalid("slice metadata is not a JSON object");
  std::map<std::string, SliceMetadata> result;
  for (auto &[name, value] : json.items()) {
    const TensorEntry *entry = file.find(name);
    if (!entry)
      return invalid(absl::StrCat("slice metadata names '", name,
                                  "', which the file does not hold"));
    SliceMetadata slice;
    if (!value.is_object() || !value["global_shape"].is_array() ||
        !value["offsets"].is_array())
      return invalid(
          absl::StrCat("slice metadata of '", name, "' is malformed"));
    for (const auto &v : value["global_shape"])
      slice.globalShape.push_back(v.is_number_integer() ? v.get<int64_t>()
                                                        : -1);
    for (const auto &v : value["offsets"])
      slice.offsets.push_back(v.is_number_integer() ? v.get<int64_t>() : -1);
    size_t rank = entry->shape.size();
    if (slice.globalShape.size() != rank || slice.offsets.size() != rank)
      return invalid(absl::StrCat("slice of '", name, "' has rank ", rank,
                                  " but its metadata does not"));
    for (size_t d = 0; d < rank; ++d)
      if (slice.offsets[d] < 0 || slice.globalShape[d] < 0 ||
          slice.offsets[d] + entry->shape[d] > slice.globalShape[d])
        return invalid(absl::StrCat(
            "slice of '", name, "' at ", shapeText(slice.offsets),
            " with sizes ", shapeText(entry->shape),
            " lies outside its global shape ", shapeText(slice.globalShape)));
    result[name] = std::move(slice);
  }
  return result;
} catch (const nlohmann::json::exception &error) {
  return absl::DataLossError(absl::StrCat("invalid checkpoint shard '",
                                          file.path(), "': ", error.what()));
}

} // namespace

std::string checkpointStepDir(const std::string &dir, uint64_t step) {
  return absl::StrFormat("%s/step-%08d", dir, step);
}

ShardStamp stampOf(const CheckpointInfo &info) {
  return {info.seed, info.dataPosition, info.worldSize, info.mesh};
}

absl::Status writeCheckpointShard(const std::string &dir, uint64_t step,
                                  int64_t rank,
                                  const std::vector<TensorSlice> &slices,
                                  const ShardStamp &run) {
  if (absl::Status status = makeFolder(dir); !status.ok())
    return status;
  std::string stepDir = checkpointStepDir(dir, step);
  if (absl::Status status = makeFolder(stepDir); !status.ok())
    return status;
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<TensorToWrite> tensors;
  for (const TensorSlice &slice : slices) {
    if (slice.offsets.size() != slice.globalShape.size() ||
        slice.sizes.size() != slice.globalShape.size())
      return absl::InvalidArgumentError(
          absl::StrCat("slice of '", slice.name,
                       "' needs one offset and size per dimension"));
    metadata[slice.name] = {{"global_shape", slice.globalShape},
                            {"offsets", slice.offsets}};
    tensors.push_back({slice.name, slice.dtype, slice.sizes, slice.data});
  }
  std::map<std::string, std::string> stamp = {{kSlicesKey, metadata.dump()},
                                              {kStepKey, std::to_string(step)}};
  if (run.seed)
    stamp[kSeedKey] = std::to_string(*run.seed);
  if (run.dataPosition)
    stamp[kDataPositionKey] = std::to_string(*run.dataPosition);
  if (run.worldSize)
    stamp[kWorldSizeKey] = std::to_string(*run.worldSize);
  if (!run.mesh.empty())
    stamp[kMeshKey] = meshText(run.mesh);
  return writeSafetensors(stepDir + "/" + rankFileName(rank), tensors, stamp);
}

namespace {
/// OK when `file`'s stamp (what it has of it) agrees with the index
/// `info`: its step, seed, data position, world size and mesh; else an
/// error naming both values, as two jobs saving into one folder would
/// leave.
absl::Status checkStamp(const SafetensorsFile &file,
                        const CheckpointInfo &info) {
  const std::map<std::string, std::string> &meta = file.metadata();
  auto stamped = [&](const char *key) -> std::optional<std::string> {
    auto it = meta.find(key);
    return it == meta.end() ? std::nullopt
                            : std::optional<std::string>(it->second);
  };
  std::optional<std::string> shardStep = stamped(kStepKey),
                             shardSeed = stamped(kSeedKey);
  if ((shardStep && *shardStep != std::to_string(info.step)) ||
      (shardSeed && *shardSeed != std::to_string(info.seed)))
    return absl::DataLossError(absl::StrCat(
        "shard '", file.path(), "' was saved at step ", shardStep.value_or("?"),
        " with seed ", shardSeed.value_or("?"),
        ", but the checkpoint's index says step ", info.step, " with seed ",
        info.seed, " (did two jobs save into this folder?)"));
  struct Field {
    const char *key, *what;
    std::string indexed;
  };
  for (const Field &field :
       {Field{kDataPositionKey, "data position",
              std::to_string(info.dataPosition)},
        Field{kWorldSizeKey, "world size", std::to_string(info.worldSize)},
        Field{kMeshKey, "mesh", meshText(info.mesh)}}) {
    std::optional<std::string> value = stamped(field.key);
    if (value && !field.indexed.empty() && *value != field.indexed)
      return absl::DataLossError(absl::StrCat(
          "shard '", file.path(), "' was saved with ", field.what, " ", *value,
          ", but the checkpoint's index says ", field.indexed,
          " (did two jobs save into this folder?)"));
  }
  return absl::OkStatus();
}
} // namespace

absl::Status commitCheckpoint(const std::string &dir,
                              const CheckpointInfo &info) {
  std::string stepDir = checkpointStepDir(dir, info.step);
  nlohmann::json tensors = nlohmann::json::object();
  // Per tensor: dtype, global shape and the slices seen so far.
  struct Seen {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
  };
  std::map<std::string, Seen> seen;
  for (int64_t rank = 0; rank < info.worldSize; ++rank) {
    std::string fileName = rankFileName(rank);
    absl::StatusOr<SafetensorsFile> file =
        SafetensorsFile::open(stepDir + "/" + fileName);
    if (!file.ok())
      return absl::FailedPreconditionError(
          absl::StrCat("cannot commit checkpoint step ", info.step, ": rank ",
                       rank, "'s shard: ", file.status().message()));
    if (absl::Status status = checkStamp(*file, info); !status.ok())
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot commit checkpoint step ", info.step, ": ", status.message()));
    auto slices = readSliceMetadata(*file);
    if (!slices.ok())
      return slices.status();
    for (const TensorEntry &entry : file->entries()) {
      auto meta = slices->find(entry.name);
      if (meta == slices->end())
        return absl::DataLossError(
            absl::StrCat("checkpoint shard '", file->path(), "': tensor '",
                         entry.name, "' has no slice metadata"));
      auto [it, inserted] = seen.try_emplace(
          entry.name, Seen{entry.dtype, meta->second.globalShape, {}});
      Seen &tensor = it->second;
      if (tensor.dtype != entry.dtype ||
          tensor.shape != meta->second.globalShape)
        return absl::DataLossError(absl::StrCat(
            "checkpoint tensor '", entry.name, "' is ", dtypeName(entry.dtype),
            " ", shapeText(meta->second.globalShape), " on rank ", rank,
            " but ", dtypeName(tensor.dtype), " ", shapeText(tensor.shape),
            " on an earlier rank"));
      for (const auto &[offsets, sizes] : tensor.boxes)
        if (overlaps(offsets, sizes, meta->second.offsets, entry.shape))
          return absl::DataLossError(absl::StrCat(
              "checkpoint tensor '", entry.name, "' is stored twice: rank ",
              rank, "'s slice at ", shapeText(meta->second.offsets),
              " overlaps an earlier one (save replicated tensors once)"));
      tensor.boxes.push_back({meta->second.offsets, entry.shape});
      tensors[entry.name]["dtype"] = dtypeName(entry.dtype);
      tensors[entry.name]["shape"] = meta->second.globalShape;
      tensors[entry.name]["slices"].push_back(
          {{"file", fileName},
           {"offsets", meta->second.offsets},
           {"sizes", entry.shape}});
    }
  }
  for (const auto &[name, tensor] : seen) {
    int64_t stored = 0;
    for (const auto &box : tensor.boxes)
      stored += volume(box.second);
    if (stored != volume(tensor.shape))
      return absl::DataLossError(absl::StrCat(
          "checkpoint tensor '", name, "' ", shapeText(tensor.shape),
          " is not fully stored: the slices hold ", stored, " of ",
          volume(tensor.shape), " elements"));
  }
  nlohmann::json index = {{"format", "triad-checkpoint"},
                          {"version", 1},
                          {"step", info.step},
                          {"seed", info.seed},
                          {"data_position", info.dataPosition},
                          {"world_size", info.worldSize},
                          {"tensors", tensors}};
  if (!info.mesh.empty())
    index["mesh"] = info.mesh;
  if (info.peakLearningRate)
    index["peak_lr"] = *info.peakLearningRate;
  if (!info.hyperparameters.empty())
    index["hyperparameters"] = info.hyperparameters;
  if (absl::Status status =
          writeFileAtomically(stepDir + "/index.json", index.dump(1));
      !status.ok())
    return status;
  return writeFileAtomically(dir + "/latest",
                             absl::StrFormat("step-%08d\n", info.step));
}

absl::StatusOr<CheckpointReader>
CheckpointReader::open(const std::string &dir,
                       std::optional<uint64_t> step) try {
  std::string stepName;
  if (step) {
    stepName = checkpointStepDir("", *step).substr(1);
  } else {
    absl::StatusOr<std::string> latest = readFile(dir + "/latest");
    if (!latest.ok())
      return absl::NotFoundError(absl::StrCat("no checkpoint in '", dir, "' (",
                                              latest.status().message(), ")"));
    stepName = *latest;
  }
  while (!stepName.empty() &&
         (stepName.back() == '\n' || stepName.back() == ' '))
    stepName.pop_back();
  if (stepName.empty() || stepName.find('/') != std::string::npos)
    return absl::DataLossError(
        absl::StrCat("checkpoint '", dir, "': 'latest' is malformed"));
  CheckpointReader reader;
  reader.stepDir = dir + "/" + stepName;
  absl::StatusOr<std::string> text = readFile(reader.stepDir + "/index.json");
  if (!text.ok())
    return text.status();
  auto invalid = [&](const std::string &what) {
    return absl::DataLossError(absl::StrCat(
        "invalid checkpoint index '", reader.stepDir, "/index.json': ", what));
  };
  if (size_t depth = jsonDepth(*text); depth > kMaxJsonDepth)
    return invalid(absl::StrCat("it nests ", depth, " levels deep, more than ",
                                kMaxJsonDepth));
  nlohmann::json index =
      nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() ||
      index.value("format", "") != "triad-checkpoint")
    return invalid("not a Triad checkpoint index");
  if (index.value("version", 0) != 1)
    return invalid("unsupported version");
  for (const char *key : {"step", "seed", "data_position", "world_size"})
    if (!index[key].is_number_unsigned())
      return invalid(absl::StrCat("'", key, "' is missing or not a count"));
  reader.checkpointInfo.step = index["step"].get<uint64_t>();
  reader.checkpointInfo.seed = index["seed"].get<uint64_t>();
  reader.checkpointInfo.dataPosition = index["data_position"].get<uint64_t>();
  reader.checkpointInfo.worldSize = index["world_size"].get<int64_t>();
  if (index.contains("mesh")) {
    const nlohmann::json &mesh = index["mesh"];
    if (!mesh.is_array())
      return invalid("'mesh' is not a list of [axis, size]");
    for (const nlohmann::json &axis : mesh) {
      if (!axis.is_array() || axis.size() != 2 || !axis[0].is_string() ||
          !axis[1].is_number_unsigned())
        return invalid("'mesh' is not a list of [axis, size]");
      reader.checkpointInfo.mesh.emplace_back(axis[0].get<std::string>(),
                                              axis[1].get<int64_t>());
    }
  }
  if (index.contains("peak_lr")) {
    if (!index["peak_lr"].is_number() || !(index["peak_lr"].get<double>() > 0))
      return invalid("'peak_lr' is not a positive number");
    reader.checkpointInfo.peakLearningRate = index["peak_lr"].get<double>();
  }
  if (index.contains("hyperparameters")) {
    const nlohmann::json &given = index["hyperparameters"];
    if (!given.is_object())
      return invalid("'hyperparameters' is not an object");
    for (const auto &[name, value] : given.items()) {
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        return invalid(
            absl::StrCat("hyper-parameter '", name, "' is not a number"));
      reader.checkpointInfo.hyperparameters[name] = value.get<double>();
    }
  }
  if (reader.checkpointInfo.worldSize < 1)
    return invalid("'world_size' is not a count of ranks");
  if (!reader.checkpointInfo.mesh.empty()) {
    int64_t ranks = 1;
    for (const auto &[axis, size] : reader.checkpointInfo.mesh)
      ranks = size > 0 && ranks <= (int64_t{1} << 40) / size ? ranks * size : 0;
    if (ranks != reader.checkpointInfo.worldSize)
      return invalid(absl::StrCat(
          "its mesh (", meshText(reader.checkpointInfo.mesh), ") has ", ranks,
          " ranks but 'world_size' says ", reader.checkpointInfo.worldSize));
  }
  if (!index["tensors"].is_object())
    return invalid("'tensors' is not an object");

  std::map<std::string, int64_t> fileIds;
  for (auto &[name, value] : index["tensors"].items()) {
    if (!value.is_object())
      return invalid(absl::StrCat("tensor '", name, "' is not an object"));
    StoredTensor tensor;
    std::optional<DType> dtype =
        value["dtype"].is_string()
            ? parseDType(value["dtype"].get<std::string>())
            : std::nullopt;
    if (!dtype || !value["shape"].is_array() || !value["slices"].is_array())
      return invalid(absl::StrCat("tensor '", name, "' is malformed"));
    tensor.dtype = *dtype;
    tensor.shape = value["shape"].get<std::vector<int64_t>>();
    int64_t elements = 1;
    for (int64_t size : tensor.shape) {
      if (size < 0 || (size > 0 && elements > (int64_t(1) << 48) / size))
        return invalid(
            absl::StrCat("tensor '", name, "' has an invalid shape"));
      elements *= size;
    }
    for (const auto &slice : value["slices"]) {
      // `slice` is const: look a key up only where it is (a const
      // operator[] on a missing key is undefined behaviour).
      if (!slice.is_object() || !slice.contains("file") ||
          !slice["file"].is_string())
        return invalid(absl::StrCat("a slice of '", name, "' names no file"));
      std::string fileName = slice["file"].get<std::string>();
      if (fileName.find('/') != std::string::npos)
        return invalid(absl::StrCat("a slice of '", name, "' names a path"));
      int shardRank = -1, consumed = 0;
      if (std::sscanf(fileName.c_str(), "rank-%d.safetensors%n", &shardRank,
                      &consumed) == 1 &&
          consumed == static_cast<int>(fileName.size()) &&
          (shardRank < 0 || shardRank >= reader.checkpointInfo.worldSize))
        return invalid(absl::StrCat("a slice of '", name, "' is in '", fileName,
                                    "', rank ", shardRank,
                                    ", but 'world_size' says ",
                                    reader.checkpointInfo.worldSize, " ranks"));
      auto [it, inserted] =
          fileIds.try_emplace(fileName, static_cast<int64_t>(fileIds.size()));
      if (inserted) {
        reader.fileNames.push_back(fileName);
        reader.files.emplace_back();
      }
      StoredSlice stored{it->second,
                         slice.value("offsets", std::vector<int64_t>{}),
                         slice.value("sizes", std::vector<int64_t>{})};
      // The shard itself is checked against the index when a read opens it.
      if (stored.offsets.size() != tensor.shape.size() ||
          stored.sizes.size() != tensor.shape.size())
        return invalid(absl::StrCat("the slice of '", name, "' in '", fileName,
                                    "' does not match the index"));
      for (size_t d = 0; d < tensor.shape.size(); ++d)
        if (stored.offsets[d] < 0 || stored.sizes[d] < 0 ||
            stored.offsets[d] > tensor.shape[d] - stored.sizes[d])
          return invalid(
              absl::StrCat("a slice of '", name, "' lies outside its shape"));
      for (const StoredSlice &earlier : tensor.slices)
        if (overlaps(earlier.offsets, earlier.sizes, stored.offsets,
                     stored.sizes))
          return invalid(absl::StrCat("slices of '", name, "' overlap"));
      tensor.slices.push_back(std::move(stored));
    }
    int64_t storedElements = 0;
    for (const StoredSlice &slice : tensor.slices)
      storedElements += volume(slice.sizes);
    if (storedElements != volume(tensor.shape))
      return invalid(
          absl::StrCat("the slices of '", name, "' do not cover it exactly"));
    reader.tensors[name] = std::move(tensor);
  }
  return reader;
} catch (const nlohmann::json::exception &error) {
  return absl::DataLossError(
      absl::StrCat("invalid checkpoint index in '", dir, "': ", error.what()));
}

absl::Status CheckpointReader::verify() const {
  for (size_t id = 0; id < fileNames.size(); ++id)
    if (absl::StatusOr<const SafetensorsFile *> opened =
            file(static_cast<int64_t>(id));
        !opened.ok())
      return opened.status();
  return absl::OkStatus();
}

std::vector<uint64_t> checkpointSteps(const std::string &dir) {
  std::vector<uint64_t> steps;
  DIR *folder = ::opendir(dir.c_str());
  if (!folder)
    return steps;
  while (const dirent *entry = ::readdir(folder)) {
    unsigned long long step = 0;
    int consumed = 0;
    std::string name = entry->d_name;
    if (std::sscanf(name.c_str(), "step-%llu%n", &step, &consumed) == 1 &&
        consumed == static_cast<int>(name.size()) &&
        name == checkpointStepDir("", step).substr(1) &&
        ::access((dir + "/" + name + "/index.json").c_str(), F_OK) == 0)
      steps.push_back(step);
  }
  ::closedir(folder);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

absl::StatusOr<uint64_t>
newestIntactCheckpoint(const std::string &dir,
                       std::vector<std::string> &skipped) {
  for (uint64_t step : checkpointSteps(dir)) {
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::open(dir, step);
    absl::Status status = reader.ok() ? reader->verify() : reader.status();
    if (status.ok())
      return step;
    skipped.push_back(absl::StrCat("step ", step, ": ", status.message()));
  }
  return absl::NotFoundError(
      absl::StrCat("no intact checkpoint in '", dir, "'"));
}

absl::StatusOr<const SafetensorsFile *>
CheckpointReader::file(int64_t id) const {
  if (!files[id]) {
    absl::StatusOr<SafetensorsFile> opened =
        SafetensorsFile::open(stepDir + "/" + fileNames[id]);
    if (!opened.ok())
      return opened.status();
    if (absl::Status status = checkStamp(*opened, checkpointInfo); !status.ok())
      return status;
    // Triad's shards carry a checksum per tensor, checked by open().
    if (!opened->everyTensorChecked())
      return absl::DataLossError(absl::StrCat(
          "checkpoint shard '", opened->path(),
          "' has tensors without checksums (it was not written by this "
          "version of Triad, or its metadata was edited)"));
    files[id] = std::make_unique<SafetensorsFile>(std::move(*opened));
  }
  return files[id].get();
}

std::vector<std::string> CheckpointReader::tensorNames() const {
  std::vector<std::string> names;
  for (const auto &entry : tensors)
    names.push_back(entry.first);
  return names;
}

absl::Status CheckpointReader::read(const std::string &name, DType dtype,
                                    const std::vector<int64_t> &globalShape,
                                    const std::vector<int64_t> &offsets,
                                    const std::vector<int64_t> &sizes,
                                    void *out) const {
  auto it = tensors.find(name);
  if (it == tensors.end())
    return absl::NotFoundError(
        absl::StrCat("the checkpoint has no tensor '", name, "'"));
  const StoredTensor &tensor = it->second;
  if (tensor.dtype != dtype)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' is ", dtypeName(tensor.dtype),
                     " in the checkpoint but ", dtypeName(dtype), " here"));
  if (tensor.shape != globalShape)
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' has shape ", shapeText(tensor.shape),
        " in the checkpoint but ", shapeText(globalShape), " here"));
  size_t rank = globalShape.size();
  if (offsets.size() != rank || sizes.size() != rank)
    return absl::InvalidArgumentError(absl::StrCat(
        "read of '", name, "' needs one offset and size per dimension"));
  for (size_t d = 0; d < rank; ++d)
    if (offsets[d] < 0 || sizes[d] < 0 ||
        offsets[d] + sizes[d] > globalShape[d])
      return absl::InvalidArgumentError(absl::StrCat(
          "read of '", name, "' at ", shapeText(offsets), " with sizes ",
          shapeText(sizes), " lies outside ", shapeText(globalShape)));

  int64_t element = elementSize(dtype);
  int64_t copied = 0;
  char *target = static_cast<char *>(out);
  for (const StoredSlice &slice : tensor.slices) {
    // The intersection of the stored slice and the requested box.
    std::vector<int64_t> low(rank), high(rank);
    bool empty = false;
    for (size_t d = 0; d < rank; ++d) {
      low[d] = std::max(offsets[d], slice.offsets[d]);
      high[d] =
          std::min(offsets[d] + sizes[d], slice.offsets[d] + slice.sizes[d]);
      empty |= low[d] >= high[d];
    }
    if (empty)
      continue;
    absl::StatusOr<const SafetensorsFile *> shard = file(slice.file);
    if (!shard.ok())
      return shard.status();
    const TensorEntry *entry = (*shard)->find(name);
    if (!entry || entry->dtype != tensor.dtype || entry->shape != slice.sizes)
      return absl::DataLossError(absl::StrCat(
          "invalid checkpoint '", stepDir, "': the slice of '", name, "' in '",
          fileNames[slice.file], "' does not match the index"));
    std::vector<int64_t> extent(rank), fromLow(rank), toLow(rank);
    for (size_t d = 0; d < rank; ++d) {
      extent[d] = high[d] - low[d];
      fromLow[d] = low[d] - slice.offsets[d];
      toLow[d] = low[d] - offsets[d];
    }
    copyBox((*shard)->bytes(*entry), slice.sizes, fromLow, target, sizes, toLow,
            extent, element);
    copied += volume(extent);
  }
  if (copied != volume(sizes))
    return absl::DataLossError(absl::StrCat(
        "the checkpoint does not hold all of the requested slice of '", name,
        "'"));
  return absl::OkStatus();
}

void copyBox(const void *from, const std::vector<int64_t> &fromShape,
             const std::vector<int64_t> &fromLow, void *to,
             const std::vector<int64_t> &toShape,
             const std::vector<int64_t> &toLow,
             const std::vector<int64_t> &extent, int64_t elementBytes) {
  const char *source = static_cast<const char *>(from);
  char *target = static_cast<char *>(to);
  size_t rank = extent.size();
  if (rank == 0) {
    std::memcpy(target, source, elementBytes);
    return;
  }
  if (volume(extent) == 0)
    return;
  // Copy runs along the last dimension, walking the others like an
  // odometer.
  std::vector<int64_t> position(rank, 0);
  int64_t run = extent[rank - 1] * elementBytes;
  while (true) {
    int64_t src = 0, dst = 0;
    for (size_t d = 0; d < rank; ++d) {
      src = src * fromShape[d] + fromLow[d] + position[d];
      dst = dst * toShape[d] + toLow[d] + position[d];
    }
    std::memcpy(target + dst * elementBytes, source + src * elementBytes, run);
    int64_t d = static_cast<int64_t>(rank) - 2;
    for (; d >= 0; --d) {
      if (++position[d] < extent[d])
        break;
      position[d] = 0;
    }
    if (d < 0)
      return;
  }
}

absl::StatusOr<FolderLock> FolderLock::acquire(const std::string &dir) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string path = dir + "/.lock";
  std::string mine = absl::StrCat("host ", host, " pid ",
                                  static_cast<int64_t>(::getpid()), "\n");
  FolderLock lock;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      bool written = ::write(fd, mine.data(), mine.size()) ==
                     static_cast<ssize_t>(mine.size());
      ::close(fd);
      if (!written) {
        ::unlink(path.c_str());
        return absl::DataLossError(
            absl::StrCat("cannot write the lock '", path, "'"));
      }
      lock.path = path;
      return lock;
    }
    if (errno != EEXIST)
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot lock '", dir, "' (", path, "): ", std::strerror(errno)));
    // Who holds it?
    absl::StatusOr<std::string> text = readFile(path);
    std::string holderHost;
    int64_t holderPid = -1;
    if (text.ok()) {
      char name[256] = {};
      long long pid = -1;
      if (std::sscanf(text->c_str(), "host %255s pid %lld", name, &pid) == 2) {
        holderHost = name;
        holderPid = pid;
      }
    }
    std::string holder = holderPid < 0 ? std::string("an unreadable lock")
                                       : absl::StrCat("process ", holderPid,
                                                      " on host ", holderHost);
    bool sameHost = holderHost == host;
    bool alive = holderPid > 0 && !processGone(holderPid);
    if (holderPid >= 0 && sameHost && !alive && attempt == 0) {
      lock.stale = absl::StrCat("took over the stale lock of ", holder, " on '",
                                dir, "' (that process is gone)");
      ::unlink(path.c_str());
      continue;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("'", dir, "' is in use by ", holder, " (its lock ", path,
                     "): save into another folder",
                     sameHost ? std::string(", or wait for that job to end")
                              : absl::StrCat(", or remove ", path,
                                             " if that job no longer runs")));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot lock '", dir, "' (", path, ")"));
}

FolderLock::FolderLock(FolderLock &&other) noexcept {
  *this = std::move(other);
}

FolderLock &FolderLock::operator=(FolderLock &&other) noexcept {
  if (this != &other) {
    release();
    path = std::move(other.path);
    stale = std::move(other.stale);
    other.path.clear();
  }
  return *this;
}

FolderLock::~FolderLock() { release(); }

void FolderLock::release() {
  if (!path.empty())
    ::unlink(path.c_str());
  path.clear();
}

} // namespace triad::rt
