// The training-data reader (reader.h): a producer thread walks epochs, shards and rows and builds
// batches into a small queue; next() takes them.
#include "data/reader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/errors.h"
#include "data/layouts.h"
#include "data/python_random.h"

namespace bertperf {

BatchShape batch_shape(const ReaderOptions& o, const std::vector<ShardLayout>& layouts) {
  const auto packed_files = std::count(layouts.begin(), layouts.end(), ShardLayout::packed);
  if (packed_files > 0 && packed_files < static_cast<std::ptrdiff_t>(layouts.size()))
    throw_input("data reader", "packed and unpacked shards are mixed in one file list");
  BatchShape s;
  s.packed = packed_files > 0 || o.pack;
  const int rows = o.batch_rows;
  s.capacity = {rows * o.seq_len, rows * (s.packed ? o.max_sequences_per_row : 1),
                rows * (s.packed ? o.packed_max_predictions : o.max_predictions), o.seq_len};
  return s;
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

// A row: indices of its sequences in one shard's SequenceStore.
using Row = std::vector<size_t>;

// Greedy first-fit packing of sequences (in the given order) into rows (reader.h).
std::vector<Row> pack_sequences(const SequenceStore& s, const std::vector<size_t>& order, const ReaderOptions& o) {
  constexpr size_t kWindow = 64;
  struct Open {
    size_t row;
    size_t tokens, predictions;
  };
  std::vector<Row> rows;
  std::deque<Open> open;
  for (size_t i : order) {
    const size_t len = s.length(i), preds = s.predictions(i);
    auto fits = [&](const Open& r) {
      return rows[r.row].size() < static_cast<size_t>(o.max_sequences_per_row) && r.tokens + len <= static_cast<size_t>(o.seq_len) &&
             r.predictions + preds <= static_cast<size_t>(o.packed_max_predictions);
    };
    auto it = std::find_if(open.begin(), open.end(), fits);
    if (it == open.end()) {
      rows.emplace_back();
      open.push_back({rows.size() - 1, 0, 0});
      if (open.size() > kWindow) open.pop_front();
      it = open.end() - 1;
    }
    rows[it->row].push_back(i);
    it->tokens += len;
    it->predictions += preds;
    if (rows[it->row].size() == static_cast<size_t>(o.max_sequences_per_row)) open.erase(it);
  }
  return rows;
}

}  // namespace

struct PretrainingReader::Impl {
  ReaderOptions opt;
  ShardLimits limits;
  bool sample_mode = false;
  BatchShape shape;
  std::vector<size_t> owned;  // indices into opt.files this rank reads (shard mode)
  int read_rank = 0, read_world = 1;  // whose rows this rank reads: its own, or (balance) a world of one's
  int chunk_rows = 0;                 // rows gathered before batches are made: batch_rows, or a step's (balance)
  int64_t sample_count = 0;
  std::map<size_t, std::shared_ptr<const ShardData>> cache;  // shards kept in memory across epochs
  bool cache_all = false;

  // Rows waiting to fill a batch, copied out of their shard.
  SequenceStore pending;
  std::vector<size_t> pending_rows{0};  // row k = pending sequences [pending_rows[k], pending_rows[k+1])

  std::thread worker;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Batch> queue;
  bool finished = false, stop = false;
  std::exception_ptr error;
  int64_t pushed = 0;  // batches handed to the queue, to tell an epoch that yields none (which would spin forever)
  int64_t epoch_rows = 0;

  std::shared_ptr<const ShardData> load(size_t file) {
    auto it = cache.find(file);
    if (it != cache.end()) return it->second;
    auto data = std::make_shared<const ShardData>(read_shard(opt.files[file], limits));
    if (data->layout == ShardLayout::packed && !shape.packed)
      throw_input(opt.files[file], "packed shard mixed with unpacked ones");
    for (size_t r = 0; r < data->rows() && shape.packed; ++r) {
      const size_t seqs = data->row_offsets[r + 1] - data->row_offsets[r];
      if (seqs > static_cast<size_t>(opt.max_sequences_per_row))
        throw_input(opt.files[file], cat("row ", r, ": ", seqs, " sequences, more than the ", opt.max_sequences_per_row,
                                         " of a packed row (max_sequences_per_row)"));
      size_t preds = 0;
      for (size_t q = data->row_offsets[r]; q < data->row_offsets[r + 1]; ++q) preds += data->sequences.predictions(q);
      if (preds > static_cast<size_t>(opt.packed_max_predictions))
        throw_input(opt.files[file], cat("row ", r, ": ", preds, " masked-LM predictions, more than the ",
                                         opt.packed_max_predictions, " slots of a packed row (packed_max_predictions)"));
    }
    if (cache_all) cache[file] = data;
    return data;
  }

  // The rows of `data` to use, in order: its own rows, or sequences packed by us.
  std::vector<Row> rows_of(const ShardData& data, std::vector<size_t> row_order) {
    std::vector<Row> rows;
    if (opt.pack && data.layout != ShardLayout::packed) {
      std::vector<size_t> seqs;
      for (size_t r : row_order)
        for (size_t q = data.row_offsets[r]; q < data.row_offsets[r + 1]; ++q) seqs.push_back(q);
      return pack_sequences(data.sequences, seqs, opt);
    }
    for (size_t r : row_order) {
      Row row(data.row_offsets[r + 1] - data.row_offsets[r]);
      std::iota(row.begin(), row.end(), data.row_offsets[r]);
      rows.push_back(std::move(row));
    }
    return rows;
  }

  // Pushes a batch, waiting while the queue is full; false when the reader is being destroyed.
  bool push(Batch&& batch) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stop || queue.size() < static_cast<size_t>(std::max(1, opt.prefetch)); });
    if (stop) return false;
    queue.push_back(std::move(batch));
    ++pushed;
    changed.notify_all();
    return true;
  }

  // Pending rows `rows` (indices, in order) as one Batch (reader.h, data/batch.h); the arrays start as filler.
  Batch build_batch(const std::vector<size_t>& rows) {
    const int P = shape.packed ? opt.packed_max_predictions : opt.max_predictions;
    Batch b;
    b.capacity = shape.capacity;
    const BatchCapacity& cap = b.capacity;
    b.input_ids.assign(cap.tokens, 0);
    b.segment_ids.assign(cap.tokens, 0);
    b.position_ids.assign(cap.tokens, 0);
    b.cu_seqlens.assign(cap.sequences + 1, 0);
    b.nsp_labels.assign(cap.sequences, 0);
    b.mlm_positions.assign(cap.predictions, 0);
    b.mlm_labels.assign(cap.predictions, 0);
    b.mlm_weights.assign(cap.predictions, 0.0f);
    int t = 0, s = 0, m = 0, row_start = 0;
    for (size_t r : rows) {
      row_start = t;
      const int row_slots = m + P;
      for (size_t q = pending_rows[r]; q < pending_rows[r + 1]; ++q) {
        const auto tok = pending.tokens(q), pos = pending.positions(q), lab = pending.labels(q);
        const auto seg = pending.segments(q);
        const int len = static_cast<int>(tok.size());
        // The shard checks (load, layouts.cpp) and the packer keep every row within its share of the capacity.
        BERT_CHECK(s < cap.sequences && t + len <= cap.tokens && m + static_cast<int>(pos.size()) <= cap.predictions,
                   "batch over its capacity");
        b.nsp_labels[s] = pending.nsp_labels[q];
        for (int j = 0; j < len; ++j) {
          b.input_ids[t + j] = tok[j];
          b.segment_ids[t + j] = seg[j];
          b.position_ids[t + j] = j;
        }
        for (size_t j = 0; j < pos.size(); ++j, ++m) {
          b.mlm_positions[m] = t + pos[j];
          b.mlm_labels[m] = lab[j];
          b.mlm_weights[m] = 1.0f;
        }
        t += len;
        b.cu_seqlens[++s] = t;
      }
      // Empty slots point at the row's first token with label 0 and weight 0, as in the reference.
      if (opt.pad_predictions)
        for (; m < row_slots; ++m) b.mlm_positions[m] = row_start;
    }
    if (m == 0) {  // at least one slot per batch: the last row's first token, weight 0
      b.mlm_positions[0] = row_start;
      m = 1;
    }
    std::fill(b.cu_seqlens.begin() + s + 1, b.cu_seqlens.end(), t);
    b.tokens = t;
    b.sequences = s;
    b.predictions = m;
    return b;
  }

  void clear_pending() {
    pending = SequenceStore();
    pending_rows.assign(1, 0);
  }

  // The pending rows as batches (all of them as one, or this rank's share of a step when balancing); false when
  // stopping.
  bool emit() {
    const size_t count = pending_rows.size() - 1;
    std::vector<std::vector<size_t>> batches;
    if (!opt.balance) {
      batches.emplace_back(count);
      std::iota(batches[0].begin(), batches[0].end(), size_t{0});
    } else {
      const auto dealt = deal_rows(count);
      for (int m = 0; m < opt.micro_batches; ++m) batches.push_back(dealt[size_t(m) * opt.world_size + opt.rank]);
    }
    std::vector<Batch> built;
    for (const auto& rows : batches) built.push_back(build_batch(rows));
    clear_pending();
    for (Batch& b : built)
      if (!push(std::move(b))) return false;
    return true;
  }

  // Deals the pending rows into world_size x micro_batches batches by real tokens (reader.h).
  std::vector<std::vector<size_t>> deal_rows(size_t count) {
    const size_t B = size_t(opt.world_size) * size_t(opt.micro_batches);
    std::vector<size_t> tokens(count), order(count);
    for (size_t r = 0; r < count; ++r)
      tokens[r] = pending.token_offsets[pending_rows[r + 1]] - pending.token_offsets[pending_rows[r]];
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tokens[a] > tokens[b]; });
    std::vector<std::vector<size_t>> dealt(B);
    std::vector<size_t> load(B, 0), by_load(B);
    for (size_t round = 0; round < count; round += B) {
      std::iota(by_load.begin(), by_load.end(), size_t{0});
      std::stable_sort(by_load.begin(), by_load.end(), [&](size_t a, size_t b) { return load[a] < load[b]; });
      for (size_t i = 0; i < B && round + i < count; ++i) {
        const size_t row = order[round + i];
        dealt[by_load[i]].push_back(row);
        load[by_load[i]] += tokens[row];
      }
    }
    for (auto& rows : dealt) std::sort(rows.begin(), rows.end());
    return dealt;
  }

  // Adds rows of `data`; emits full batches. False when stopping.
  bool add_rows(const ShardData& data, const std::vector<Row>& rows) {
    for (const Row& row : rows) {
      for (size_t q : row) pending.append_from(data.sequences, q);
      pending_rows.push_back(pending.size());
      ++epoch_rows;
      if (static_cast<int>(pending_rows.size() - 1) == chunk_rows && !emit()) return false;
    }
    return true;
  }

  void produce() {
    for (uint64_t epoch = 0;; ++epoch) {
      const uint64_t epoch_key = splitmix64(opt.seed + epoch);
      const int64_t pushed_before = pushed;
      epoch_rows = 0;
      if (sample_mode) {
        // All files as one list of rows; this rank takes every W-th after the common shuffle.
        std::vector<std::shared_ptr<const ShardData>> shards;
        std::vector<std::pair<size_t, size_t>> all;  // (file, row)
        for (size_t f = 0; f < opt.files.size(); ++f) {
          shards.push_back(load(f));
          for (size_t r = 0; r < shards.back()->rows(); ++r) all.emplace_back(f, r);
        }
        if (opt.shuffle) PythonRandom(epoch_key).shuffle(all);
        std::vector<std::vector<size_t>> mine(opt.files.size());
        for (size_t p = static_cast<size_t>(read_rank); p < all.size(); p += static_cast<size_t>(read_world))
          mine[all[p].first].push_back(all[p].second);
        // Rows keep their shuffled order within a file; files follow one another.
        for (size_t f = 0; f < opt.files.size(); ++f)
          if (!add_rows(*shards[f], rows_of(*shards[f], mine[f]))) return;
      } else {
        std::vector<size_t> order = owned;
        if (opt.shuffle) PythonRandom(epoch_key).shuffle(order);
        for (size_t f : order) {
          const auto data = load(f);
          std::vector<size_t> row_order(data->rows());
          std::iota(row_order.begin(), row_order.end(), size_t{0});
          if (opt.shuffle) PythonRandom(splitmix64(epoch_key + f + 1)).shuffle(row_order);
          if (!add_rows(*data, rows_of(*data, row_order))) return;
        }
      }
      if (pending.size() > 0) {
        if (!opt.drop_last) {
          if (!emit()) return;
        } else {
          clear_pending();
        }
      }
      if (!opt.repeat) return;
      if (pushed == pushed_before)
        throw_input(opt.files.size() == 1 ? opt.files[0] : "data reader",
                    cat("the training data gives this rank ", epoch_rows, " rows per epoch, fewer than one batch of ",
                        chunk_rows, " rows: nothing to train on"));
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
  m.limits = {o.vocab_size, o.seq_len, o.max_predictions};
  m.read_rank = o.balance ? 0 : o.rank;
  m.read_world = o.balance ? 1 : o.world_size;
  m.chunk_rows = o.balance ? o.batch_rows * o.world_size * o.micro_batches : o.batch_rows;
  const int R = m.read_rank, W = m.read_world;
  m.sample_mode = o.files.size() < static_cast<size_t>(W);
  for (size_t f = static_cast<size_t>(R); f < o.files.size(); f += static_cast<size_t>(W)) m.owned.push_back(f);

  // Open and classify every file now, so a missing or foreign file fails before training starts.
  std::vector<ShardCounts> counts;
  std::vector<ShardLayout> layouts;
  for (const auto& path : o.files) {
    counts.push_back(count_shard(path));
    layouts.push_back(counts.back().layout);
  }
  m.shape = batch_shape(o, layouts);  // refuses packed and unpacked files in one list
  const bool any_packed = !layouts.empty() && layouts[0] == ShardLayout::packed;

  int64_t mine = 0;
  if (m.sample_mode) {
    m.cache_all = true;  // fewer files than ranks: few and read every epoch
    for (size_t f = 0; f < o.files.size(); ++f) mine += counts[f].sequences;
    if (!any_packed) {
      const int64_t rows = mine;
      mine = rows / W + (R < rows % W ? 1 : 0);
    } else {
      // Packed rows hold different numbers of sequences: count epoch 0's assignment.
      std::vector<std::pair<size_t, size_t>> all;
      for (size_t f = 0; f < o.files.size(); ++f)
        for (int64_t r = 0; r < counts[f].rows; ++r) all.emplace_back(f, static_cast<size_t>(r));
      if (o.shuffle) PythonRandom(splitmix64(o.seed)).shuffle(all);
      mine = 0;
      for (size_t p = static_cast<size_t>(R); p < all.size(); p += static_cast<size_t>(W)) {
        auto data = m.load(all[p].first);
        mine += static_cast<int64_t>(data->row_offsets[all[p].second + 1] - data->row_offsets[all[p].second]);
      }
    }
  } else {
    int64_t rows_total = 0;
    for (size_t f : m.owned) {
      mine += counts[f].sequences;
      rows_total += counts[f].rows;
    }
    m.cache_all = rows_total <= 200000;  // small data (the mini benchmark) stays in memory
  }
  m.sample_count = o.balance ? mine / o.world_size : mine;  // balanced: a share of everything
  m.worker = std::thread([&m] {
    try {
      m.produce();
    } catch (...) {
      std::lock_guard<std::mutex> lock(m.mutex);
      m.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(m.mutex);
    m.finished = true;
    m.changed.notify_all();
  });
}

PretrainingReader::~PretrainingReader() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
    impl_->changed.notify_all();
  }
  if (impl_->worker.joinable()) impl_->worker.join();
}

bool PretrainingReader::next(Batch& batch) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mutex);
  m.changed.wait(lock, [&] { return !m.queue.empty() || m.finished; });
  if (!m.queue.empty()) {
    batch = std::move(m.queue.front());
    m.queue.pop_front();
    m.changed.notify_all();
    return true;
  }
  if (m.error) std::rethrow_exception(m.error);
  return false;
}

int64_t PretrainingReader::samples() const { return impl_->sample_count; }
BatchCapacity PretrainingReader::capacity() const { return impl_->shape.capacity; }
bool PretrainingReader::packed() const { return impl_->shape.packed; }

}  // namespace bertperf
