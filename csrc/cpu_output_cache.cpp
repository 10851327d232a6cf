// The CPU output cache (see cpu_output_cache.h).
#include "cpu_output_cache.h"

#include <torch/library.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lintf::cpu {
namespace {

constexpr std::size_t kHugePage = std::size_t(1) << 21;

// Sizes are rounded up to whole 2 MB pages: outputs of nearby lengths share buffers and every
// buffer can be backed by transparent huge pages.
std::size_t rounded(std::size_t nbytes) { return (nbytes + kHugePage - 1) & ~(kHugePage - 1); }

std::size_t limit_from_env() {
  const char* text = std::getenv("LINTF_CPU_OUTPUT_CACHE_MB");
  if (text == nullptr || *text == '\0') return std::size_t(1024) << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(text, &end, 10);
  TORCH_CHECK(end != text && *end == '\0' && mb >= 0 && mb < (1LL << 40),
              "LINTF_CPU_OUTPUT_CACHE_MB must be a whole number of MB >= 0 and below 2^40 ",
              "(0 turns the output cache off), got '", text, "'");
  return static_cast<std::size_t>(mb) << 20;
}

// A fresh 2 MB-aligned buffer, advised to use huge pages, its pages faulted in by this thread
// (faults taken by several threads at once cost far more; see cpu_output.h).
void* fresh_buffer(std::size_t bytes) {
  void* p = std::aligned_alloc(kHugePage, bytes);
  if (p == nullptr) throw std::bad_alloc();
  advise_fresh_pages(p, bytes);
  return p;
}

class OutputCache final : public c10::Allocator {
 public:
  OutputCache() : limit_(limit_from_env()) {}

  c10::DataPtr allocate(std::size_t nbytes) override {
    const std::size_t bytes = rounded(nbytes);
    void* p = take(bytes);
    if (p == nullptr) p = fresh_or_after_emptying(bytes);
    return {p, new Block{p, bytes}, &release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(cached_), static_cast<int64_t>(in_use_), reused_, fresh_,
            static_cast<int64_t>(limit_)};
  }

  void empty() {
    std::multimap<std::size_t, void*> buffers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      buffers.swap(free_);
      cached_ = 0;
    }
    for (auto& entry : buffers) std::free(entry.second);
  }

  bool enabled() const { return limit_ > 0; }

 private:
  struct Block {
    void* data;
    std::size_t bytes;
  };

  void* take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ += bytes;
    const auto [first, last] = free_.equal_range(bytes);
    if (first == last) {
      ++fresh_;
      return nullptr;
    }
    const auto it = std::prev(last);  // the buffer freed last (equal keys keep insertion order): warmest
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    ++reused_;
    return p;
  }

  // A fresh buffer; when memory runs out, the cached buffers are freed and the allocation tried once more.
  void* fresh_or_after_emptying(std::size_t bytes) {
    try {
      return fresh_buffer(bytes);
    } catch (const std::bad_alloc&) {
      empty();
    }
    try {
      return fresh_buffer(bytes);
    } catch (const std::bad_alloc&) {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_ -= bytes;
      --fresh_;
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "lintf CPU op: not enough memory for a ", bytes >> 20,
                     " MB output, also after freeing the CPU output cache");
    return nullptr;
  }

  static void release(void* context);

  void give_back(Block* block) {
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_ -= block->bytes;
      if (cached_ + block->bytes <= limit_) {
        free_.emplace(block->bytes, block->data);
        cached_ += block->bytes;
        keep = true;
      }
    }
    if (!keep) std::free(block->data);
    delete block;
  }

  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // rounded size -> buffer
  std::size_t cached_ = 0, in_use_ = 0;
  const std::size_t limit_;
  int64_t reused_ = 0, fresh_ = 0;
};

OutputCache& cache() {
  static auto* instance = new OutputCache();  // never destroyed: outputs may be freed after static destructors
  return *instance;
}

void OutputCache::release(void* context) { cache().give_back(static_cast<Block*>(context)); }

}  // namespace

void advise_fresh_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = kHugePage, kPage = std::uintptr_t(1) << 12;
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  const auto begin = reinterpret_cast<std::uintptr_t>(data), end = begin + bytes;
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = end & ~(kHuge - 1);
  if (begin != 0 && last > first) {  // at least one whole huge page: a fresh mapping of its own
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
    const std::uintptr_t page_begin = begin & ~(kPage - 1), page_end = (end + kPage - 1) & ~(kPage - 1);
    madvise(reinterpret_cast<void*>(page_begin), page_end - page_begin, kPopulateWrite);
  }
#endif
}

c10::Allocator* output_cache_allocator() { return cache().enabled() ? &cache() : nullptr; }

std::vector<int64_t> output_cache_stats() { return cache().stats(); }

void empty_output_cache() { cache().empty(); }

}  // namespace lintf::cpu

TORCH_LIBRARY_FRAGMENT(lintf, m) {
  m.def("cpu_output_cache_stats() -> int[]", [] { return lintf::cpu::output_cache_stats(); });
  m.def("empty_cpu_output_cache() -> ()", [] { lintf::cpu::empty_output_cache(); });
}
