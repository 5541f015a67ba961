// The training-data reader (reader.h): the epoch's plan is walked from the shards' length indexes, a step's worth
// of rows at a time (a batch, or a global batch when balancing); the rows this rank trains on are then read from
// their shards straight into the caller's batch.
#include "data/reader.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

#include "core/errors.h"
#include "data/layouts.h"
#include "data/python_random.h"
#include "data/shard_index.h"

namespace bertperf {

BatchShape batch_shape(const ReaderOptions& o, const std::vector<ShardLayout>& layouts) {
  const auto packed_files = std::count(layouts.begin(), layouts.end(), ShardLayout::PACKED);
  if (packed_files > 0 && packed_files < static_cast<std::ptrdiff_t>(layouts.size()))
    throw_input("data reader", "packed and unpacked shards are mixed in one file list");
  return batch_shape(o, packed_files > 0 || o.pack);
}

BatchShape batch_shape(const ReaderOptions& o, bool packed) {
  const int rows = o.batch_rows;
  return {packed, {rows * o.seq_len, rows * (packed ? o.max_sequences_per_row : 1),
                   rows * (packed ? o.packed_max_predictions : o.max_predictions), o.seq_len}};
}

BatchShape batch_shape(const ReaderOptions& o) {
  std::vector<ShardLayout> layouts;
  for (const std::string& path : o.files) layouts.push_back(detect_layout(path));
  return batch_shape(o, layouts);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

namespace {

// Indexes kept in memory for the whole run while all of them together hold at most this many rows (small data, the
// mini benchmark); beyond it each is opened again when the walk reaches it.
constexpr size_t kKeptRows = 4'000'000;
// Shards kept open for reading rows (their file descriptors and index).
constexpr size_t kOpenShards = 64;

}  // namespace

struct PretrainingReader::Impl {
  ReaderOptions opt;
  BatchShape shape;
  bool sample_mode = false;
  bool packs = false;                 // the reader packs unpacked sequences
  std::vector<size_t> owned;          // indices into opt.files this rank reads (shard mode)
  int read_rank = 0, read_world = 1;  // whose rows this rank reads: its own, or (balance) a world of one's
  int chunk_rows = 0;                 // rows gathered before batches are made: batch_rows, or a step's (balance)
  int64_t sample_count = 0;

  struct File {
    size_t rows = 0;
    int64_t sequences = 0;
    std::shared_ptr<const ShardIndex> index;  // while kept (kKeptRows) or being walked
  };
  std::vector<File> files;
  bool keep_indexes = false;
  uint64_t index_bytes = 0;  // lengths read to open indexes

  // The epoch being walked: its files in order and, in sample mode, this rank's rows of each; the file being walked
  // and its planned rows (each one or more of the shard's rows).
  uint64_t epoch = 0;
  bool epoch_open = false, finished = false;
  int64_t epoch_rows = 0, emitted_before = 0, emitted = 0;
  std::vector<size_t> epoch_files;
  size_t next_file = 0;
  std::vector<std::vector<uint32_t>> mine;  // sample mode: this rank's rows of each file, in order
  size_t walk_file = 0;
  std::shared_ptr<const ShardIndex> walk_index;
  PackedRows walk;  // the walked file's planned rows: members are its row numbers
  size_t walk_row = 0;

  // Rows gathered for the next batches: planned row k is file pending_file[k], shard rows
  // pending_members[pending_starts[k] .. pending_starts[k + 1]), pending_tokens[k] real tokens.
  std::vector<uint32_t> pending_file, pending_members, pending_starts{0}, pending_tokens;
  // Batches ready to hand out, each the pending rows it takes (indices into `ready_rows`' planned rows).
  struct ReadyRow {
    uint32_t file, first, count;
  };
  std::vector<ReadyRow> ready_rows;
  std::vector<uint32_t> ready_members;
  std::deque<std::pair<size_t, size_t>> ready;  // [begin, end) in ready_rows

  // Shards open for reading rows, least recently used first.
  std::map<size_t, std::unique_ptr<ShardRows>> open;
  std::deque<size_t> open_order;
  ReadStats stats;
  uint64_t closed_shard_bytes = 0, closed_value_bytes = 0, closed_index_bytes = 0;

  // Deal scratch.
  std::vector<uint32_t> order, owner, by_load, counts;
  std::vector<uint64_t> load;  // real tokens dealt to each batch

  std::shared_ptr<const ShardIndex> index_of(size_t f) {
    if (files[f].index) return files[f].index;
    auto index = ShardIndex::open(opt.files[f]);
    index_bytes += index->bytes();
    check_rows(*index);
    if (keep_indexes) files[f].index = index;
    return index;
  }

  // The run's limits against a shard's lengths and largest ids, before any row is read.
  void check_rows(const ShardIndex& x) const {
    const std::string& path = x.shard();
    if (x.layout() == ShardLayout::PACKED && !shape.packed) throw_input(path, "packed shard mixed with unpacked ones");
    if (opt.vocab_size > 0 && x.largest_token().value >= opt.vocab_size)
      throw_input(path, cat("row ", x.largest_token().row, ": token id ", x.largest_token().value,
                            " is outside the vocabulary of ", opt.vocab_size));
    if (opt.vocab_size > 0 && x.largest_label().value >= opt.vocab_size)
      throw_input(path, cat("row ", x.largest_label().row, ": masked-LM label ", x.largest_label().value,
                            " is outside the vocabulary of ", opt.vocab_size));
    for (size_t r = 0; r < x.rows(); ++r) {
      const auto where = [&](const std::string& what) { throw_input(path, cat("row ", r, ": ", what)); };
      if (x.tokens(r) > opt.seq_len)
        where(cat(x.layout() == ShardLayout::PACKED ? "packed row" : "sequence", " of ", x.tokens(r),
                  " tokens is longer than the maximum ", opt.seq_len));
      if (x.layout() != ShardLayout::PACKED) {
        if (x.predictions(r) > opt.max_predictions)
          where(cat(x.predictions(r), " masked-LM predictions, more than the maximum ", opt.max_predictions));
        continue;
      }
      if (x.row_sequences(r) > opt.max_sequences_per_row)
        where(cat(x.row_sequences(r), " sequences, more than the ", opt.max_sequences_per_row,
                  " of a packed row (max_sequences_per_row)"));
      if (x.predictions(r) > opt.packed_max_predictions)
        where(cat(x.predictions(r), " masked-LM predictions, more than the ", opt.packed_max_predictions,
                  " slots of a packed row (packed_max_predictions)"));
    }
  }

  ShardRows& rows_of_file(size_t f) {
    auto it = open.find(f);
    if (it != open.end()) return *it->second;
    if (open.size() >= kOpenShards) {
      const size_t oldest = open_order.front();
      open_order.pop_front();
      closed_shard_bytes += open[oldest]->shard_bytes_read();
      closed_value_bytes += open[oldest]->value_bytes_read();
      closed_index_bytes += open[oldest]->index_bytes_read();
      open.erase(oldest);
    }
    open_order.push_back(f);
    auto& rows = open[f];
    rows = std::make_unique<ShardRows>(index_of(f), ShardRows::Limits{opt.vocab_size, opt.max_predictions});
    return *rows;
  }

  // The planned rows of file f from its rows `row_order` (in order): its own rows, or sequences packed by us.
  void plan_file(const ShardIndex& x, const std::vector<uint32_t>& row_order) {
    walk_row = 0;
    if (packs) {
      std::vector<uint32_t> tokens(row_order.size()), predictions(row_order.size());
      for (size_t i = 0; i < row_order.size(); ++i) {
        tokens[i] = static_cast<uint32_t>(x.tokens(row_order[i]));
        predictions[i] = static_cast<uint32_t>(x.predictions(row_order[i]));
      }
      pack_sequences(tokens, predictions, opt.seq_len, {opt.max_sequences_per_row, opt.packed_max_predictions}, walk);
      for (uint32_t& member : walk.members) member = row_order[member];
      return;
    }
    walk.members = row_order;
    walk.row_starts.resize(row_order.size() + 1);
    std::iota(walk.row_starts.begin(), walk.row_starts.end(), 0u);
  }

  void start_epoch() {
    const uint64_t epoch_key = splitmix64(opt.seed + epoch);
    epoch_rows = 0;
    emitted_before = emitted;
    next_file = 0;
    walk_index.reset();
    walk = PackedRows();
    walk_row = 0;
    if (sample_mode) {
      // All files as one list of rows; this rank takes every W-th after the common shuffle.
      std::vector<std::pair<uint32_t, uint32_t>> all;  // (file, row)
      for (size_t f = 0; f < files.size(); ++f)
        for (size_t r = 0; r < files[f].rows; ++r) all.emplace_back(static_cast<uint32_t>(f), static_cast<uint32_t>(r));
      if (opt.shuffle) PythonRandom(epoch_key).shuffle(all);
      mine.assign(files.size(), {});
      for (size_t p = static_cast<size_t>(read_rank); p < all.size(); p += static_cast<size_t>(read_world))
        mine[all[p].first].push_back(all[p].second);
      // Rows keep their shuffled order within a file; files follow one another.
      epoch_files.resize(files.size());
      std::iota(epoch_files.begin(), epoch_files.end(), size_t{0});
    } else {
      epoch_files = owned;
      if (opt.shuffle) PythonRandom(epoch_key).shuffle(epoch_files);
    }
    epoch_open = true;
  }

  // The next planned row of the epoch into `pending`; false at the epoch's end.
  bool plan_next_row() {
    while (!walk_index || walk_row == walk.rows()) {
      if (next_file == epoch_files.size()) return false;
      walk_file = epoch_files[next_file++];
      walk_index = index_of(walk_file);
      std::vector<uint32_t> row_order;
      if (sample_mode) {
        row_order = std::move(mine[walk_file]);
      } else {
        row_order.resize(walk_index->rows());
        std::iota(row_order.begin(), row_order.end(), 0u);
        if (opt.shuffle) PythonRandom(splitmix64(splitmix64(opt.seed + epoch) + walk_file + 1)).shuffle(row_order);
      }
      plan_file(*walk_index, row_order);
    }
    uint32_t tokens = 0;
    for (uint32_t k = walk.row_starts[walk_row]; k < walk.row_starts[walk_row + 1]; ++k) {
      pending_members.push_back(walk.members[k]);
      tokens += static_cast<uint32_t>(walk_index->tokens(walk.members[k]));
    }
    ++walk_row;
    pending_file.push_back(static_cast<uint32_t>(walk_file));
    pending_starts.push_back(static_cast<uint32_t>(pending_members.size()));
    pending_tokens.push_back(tokens);
    ++epoch_rows;
    return true;
  }

  void clear_pending() {
    pending_file.clear();
    pending_members.clear();
    pending_starts.assign(1, 0);
    pending_tokens.clear();
  }

  // Makes the pending rows into ready batches: all of them as one, or this rank's share of a step (balance).
  void emit() {
    const size_t count = pending_file.size();
    const auto add_batch = [&](auto&& rows) {
      const size_t begin = ready_rows.size();
      for (uint32_t k : rows) {
        ready_rows.push_back({pending_file[k], static_cast<uint32_t>(ready_members.size()),
                              pending_starts[k + 1] - pending_starts[k]});
        ready_members.insert(ready_members.end(), pending_members.begin() + pending_starts[k],
                             pending_members.begin() + pending_starts[k + 1]);
      }
      ready.emplace_back(begin, ready_rows.size());
      ++emitted;
    };
    if (!opt.balance) {
      std::vector<uint32_t> all(count);
      std::iota(all.begin(), all.end(), 0u);
      add_batch(all);
    } else {
      deal(count);
      std::vector<uint32_t> rows;
      for (int m = 0; m < opt.micro_batches; ++m) {
        const uint32_t j = static_cast<uint32_t>(m * opt.world_size + opt.rank);
        rows.clear();
        for (uint32_t k = 0; k < count; ++k)
          if (owner[k] == j) rows.push_back(k);  // in read order
        add_batch(rows);
      }
    }
    clear_pending();
  }

  // Deals the pending rows into world_size x micro_batches batches by real tokens (reader.h): owner[k] is the batch
  // of pending row k. A rank deals every row of a step, so this is the part of its work that grows with the world,
  // and both orderings are counting passes: the rows by tokens (most first, ties in read order: tokens are at most
  // seq_len), and each round's batches by load (fewest first, ties by index: the batches are counted in index order,
  // and their loads span at most the longest row dealt, so the counts are few).
  void deal(size_t count) {
    const size_t B = size_t(opt.world_size) * size_t(opt.micro_batches);
    const size_t most = static_cast<size_t>(opt.seq_len);
    counts.assign(most + 2, 0);
    for (size_t k = 0; k < count; ++k) ++counts[most - std::min<size_t>(pending_tokens[k], most) + 1];
    for (size_t t = 1; t < counts.size(); ++t) counts[t] += counts[t - 1];
    order.resize(count);
    for (size_t k = 0; k < count; ++k)
      order[counts[most - std::min<size_t>(pending_tokens[k], most)]++] = static_cast<uint32_t>(k);
    owner.assign(count, 0);
    load.assign(B, 0);
    by_load.resize(B);
    std::iota(by_load.begin(), by_load.end(), 0u);  // all loads 0: index order
    for (size_t round = 0; round < count; round += B) {
      if (round > 0) {
        const auto [low, high] = std::minmax_element(load.begin(), load.end());
        const uint64_t least = *low;
        counts.assign(static_cast<size_t>(*high - least) + 2, 0);
        for (size_t j = 0; j < B; ++j) ++counts[load[j] - least + 1];
        for (size_t t = 1; t < counts.size(); ++t) counts[t] += counts[t - 1];
        for (size_t j = 0; j < B; ++j) by_load[counts[load[j] - least]++] = static_cast<uint32_t>(j);
      }
      for (size_t i = 0; i < B && round + i < count; ++i) {
        const uint32_t row = order[round + i], batch = by_load[i];
        owner[row] = batch;
        load[batch] += pending_tokens[row];
      }
    }
  }

  // Plans until a batch is ready; false at the end of a non-repeating pass.
  bool plan() {
    while (ready.empty()) {
      if (finished) return false;
      if (!epoch_open) start_epoch();
      if (plan_next_row()) {
        if (static_cast<int>(pending_file.size()) == chunk_rows) emit();
        continue;
      }
      // The epoch's end.
      if (!pending_file.empty()) {
        if (!opt.drop_last) {
          emit();
        } else {
          clear_pending();
        }
      }
      epoch_open = false;
      if (emitted == emitted_before && opt.repeat)
        throw_input(opt.files.size() == 1 ? opt.files[0] : "data reader",
                    cat("the training data gives this rank ", epoch_rows, " rows per epoch, fewer than one batch of ",
                        chunk_rows, " rows: nothing to train on"));
      ++epoch;
      if (!opt.repeat) finished = true;
    }
    return true;
  }

  void fill(BatchView& view) {
    const auto [begin, end] = ready.front();
    ready.pop_front();
    BatchWriter writer(view, opt.pad_predictions, shape.packed ? opt.packed_max_predictions : opt.max_predictions);
    for (size_t k = begin; k < end; ++k) {
      const ReadyRow& row = ready_rows[k];
      ShardRows& rows = rows_of_file(row.file);
      for (uint32_t i = row.first; i < row.first + row.count; ++i) rows.read(ready_members[i], writer);
      writer.end_row();
    }
    writer.finish();
    stats.rows += static_cast<int64_t>(end - begin);
    if (ready.empty()) {
      ready_rows.clear();
      ready_members.clear();
    }
  }
};

PretrainingReader::PretrainingReader(ReaderOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(options);
  const ReaderOptions& o = m.opt;
  if (o.files.empty()) throw_input("data reader", "no data files");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw_input("data reader", cat("rank ", o.rank, " is outside a world of ", o.world_size));
  if (o.batch_rows < 1) throw_input("data reader", cat("batch_rows must be at least 1, got ", o.batch_rows));
  if (o.seq_len < 2 || o.max_predictions < 1 || o.max_sequences_per_row < 1 || o.packed_max_predictions < 1)
    throw_input("data reader", "seq_len, max_predictions, max_sequences_per_row and packed_max_predictions must be positive");
  if (o.pack && o.max_predictions > o.packed_max_predictions)
    throw_input("data reader", "packed_max_predictions must be at least max_predictions");
  if (o.balance && (o.micro_batches < 1 || !o.drop_last))
    throw_input("data reader", "balanced batches need micro_batches >= 1 and drop_last");
  m.read_rank = o.balance ? 0 : o.rank;
  m.read_world = o.balance ? 1 : o.world_size;
  m.chunk_rows = o.balance ? o.batch_rows * o.world_size * o.micro_batches : o.batch_rows;
  const int R = m.read_rank, W = m.read_world;
  m.sample_mode = o.files.size() < static_cast<size_t>(W);
  for (size_t f = static_cast<size_t>(R); f < o.files.size(); f += static_cast<size_t>(W)) m.owned.push_back(f);

  // The layouts first (a file that is no shard fails here, naming it), then every index this rank plans from, so a
  // bad file, index or row length fails before training starts.
  std::vector<ShardLayout> layouts;
  for (const auto& path : o.files) layouts.push_back(detect_layout(path));
  m.shape = batch_shape(o, layouts);  // refuses packed and unpacked files in one list
  m.packs = o.pack && layouts[0] != ShardLayout::PACKED;
  std::vector<size_t> planned = m.owned;  // the files whose lengths this rank plans from
  if (m.sample_mode) {
    planned.resize(o.files.size());
    std::iota(planned.begin(), planned.end(), size_t{0});
  }
  m.files.resize(o.files.size());
  size_t total_rows = 0;
  for (size_t f : planned) {
    const auto index = m.index_of(f);
    m.files[f].rows = index->rows();
    m.files[f].sequences = index->sequences();
    total_rows += m.files[f].rows;
    if (total_rows <= kKeptRows) m.files[f].index = index;
  }
  m.keep_indexes = total_rows <= kKeptRows;
  if (!m.keep_indexes)
    for (auto& file : m.files) file.index.reset();

  int64_t mine = 0;
  if (m.sample_mode) {
    for (size_t f = 0; f < o.files.size(); ++f) mine += m.files[f].sequences;
    if (layouts[0] != ShardLayout::PACKED) {
      const int64_t rows = mine;
      mine = rows / W + (R < rows % W ? 1 : 0);
    } else {
      // Packed rows hold different numbers of sequences: count epoch 0's assignment.
      std::vector<std::pair<size_t, size_t>> all;
      for (size_t f = 0; f < o.files.size(); ++f)
        for (size_t r = 0; r < m.files[f].rows; ++r) all.emplace_back(f, r);
      if (o.shuffle) PythonRandom(splitmix64(o.seed)).shuffle(all);
      mine = 0;
      for (size_t p = static_cast<size_t>(R); p < all.size(); p += static_cast<size_t>(W))
        mine += m.index_of(all[p].first)->row_sequences(all[p].second);
    }
  } else {
    for (size_t f : m.owned) mine += m.files[f].sequences;
  }
  m.sample_count = o.balance ? mine / o.world_size : mine;  // balanced: a share of everything
}

PretrainingReader::~PretrainingReader() = default;

bool PretrainingReader::next(BatchView& batch) {
  Impl& m = *impl_;
  const BatchCapacity& c = m.shape.capacity;
  BERT_CHECK(batch.capacity.tokens == c.tokens && batch.capacity.sequences == c.sequences &&
                 batch.capacity.predictions == c.predictions && batch.capacity.max_seqlen == c.max_seqlen,
             "a reader's batch must have its capacity");
  if (!m.plan()) return false;
  m.fill(batch);
  return true;
}

int64_t PretrainingReader::samples() const { return impl_->sample_count; }
BatchShape PretrainingReader::shape() const { return impl_->shape; }

ReadStats PretrainingReader::stats() const {
  const Impl& m = *impl_;
  ReadStats s = m.stats;
  s.shard_bytes = m.closed_shard_bytes;
  s.value_bytes = m.closed_value_bytes;
  s.index_bytes = m.closed_index_bytes + m.index_bytes;
  for (const auto& [f, rows] : m.open) {
    s.shard_bytes += rows->shard_bytes_read();
    s.value_bytes += rows->value_bytes_read();
    s.index_bytes += rows->index_bytes_read();
  }
  return s;
}

}  // namespace bertperf
