// The CPU output cache (see output_cache.h for its policy).
#include "common/cpu/output_cache.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>

#if defined(__linux__) || defined(__APPLE__)
#include <sys/mman.h>
#define LINTF_MMAP_BUFFERS 1
#endif

namespace lintf::cpu {
namespace {

constexpr std::size_t kHugePage = std::size_t(1) << 21;

// Sizes are rounded up to whole 2 MB pages: outputs of nearby lengths share buffers and every
// buffer can be backed by transparent huge pages.
std::size_t rounded(std::size_t nbytes) { return (nbytes + kHugePage - 1) & ~(kHugePage - 1); }

// The explicit cap on cached bytes, or -1 when LINTF_CPU_OUTPUT_CACHE_MB is unset (the adaptive default).
int64_t cap_from_env() {
  const char* text = std::getenv("LINTF_CPU_OUTPUT_CACHE_MB");
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long long mb = std::strtoll(text, &end, 10);
  TORCH_CHECK(end != text && *end == '\0' && mb >= 0 && mb < (1LL << 40),
              "LINTF_CPU_OUTPUT_CACHE_MB must be a whole number of MB >= 0 and below 2^40 ",
              "(0 turns the output cache off), got '", text, "'");
  return static_cast<int64_t>(mb) << 20;
}

// A fresh 2 MB-aligned buffer of its own mapping (so that freeing it returns its pages to the
// system at once), advised to use huge pages, its pages faulted in by this thread (faults taken by
// several threads at once cost far more; see output.h).
void* map_buffer(std::size_t bytes) {
#if defined(LINTF_MMAP_BUFFERS)
  const std::size_t span = bytes + kHugePage;  // room to align the start to a huge page
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto begin = reinterpret_cast<std::uintptr_t>(mapped);
  const std::uintptr_t aligned = (begin + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > begin) munmap(mapped, aligned - begin);
  if (aligned + bytes < begin + span) munmap(reinterpret_cast<void*>(aligned + bytes), begin + span - aligned - bytes);
  void* p = reinterpret_cast<void*>(aligned);
#else
  void* p = std::aligned_alloc(kHugePage, bytes);
  if (p == nullptr) throw std::bad_alloc();
#endif
  advise_fresh_pages(p, bytes);
  return p;
}

// Gives a buffer of map_buffer back to the system.
void unmap_buffer(void* p, std::size_t bytes) {
#if defined(LINTF_MMAP_BUFFERS)
  munmap(p, bytes);
#else
  (void)bytes;
  std::free(p);
#endif
}

struct Buffer {
  void* data;
  std::size_t bytes;
};

class OutputCache final : public c10::Allocator {
 public:
  OutputCache() : cap_(cap_from_env()) {}

  c10::DataPtr allocate(std::size_t nbytes) override {
    const std::size_t bytes = rounded(nbytes);
    void* p = take(bytes);
    if (p == nullptr) p = fresh_or_after_emptying(bytes);
    return {p, new Buffer{p, bytes}, &release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto limit = cap_ >= 0 ? cap_ : static_cast<int64_t>(peak_ + largest_);
    return {static_cast<int64_t>(cached_), static_cast<int64_t>(in_use_), reused_, fresh_, limit,
            static_cast<int64_t>(peak_), evicted_};
  }

  // Unmaps every free buffer and starts the default bound afresh from the bytes in use now.
  void empty() {
    std::vector<Buffer> buffers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      buffers.swap(free_);
      cached_ = 0;
      peak_ = in_use_;
      largest_ = 0;
    }
    for (const Buffer& buffer : buffers) unmap_buffer(buffer.data, buffer.bytes);
  }

  bool enabled() const { return cap_ != 0; }

 private:
  // A free buffer of exactly bytes (the one freed last: warmest), or null after counting a fresh
  // allocation and evicting what the policy no longer allows beside it.
  void* take(std::size_t bytes) {
    std::vector<Buffer> evicted;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_ += bytes;
      const auto it = std::find_if(free_.rbegin(), free_.rend(), [&](const Buffer& b) { return b.bytes == bytes; });
      if (it != free_.rend()) {
        p = it->data;
        free_.erase(std::next(it).base());
        cached_ -= bytes;
        ++reused_;
      } else {
        ++fresh_;
        peak_ = std::max(peak_, in_use_);
        largest_ = std::max(largest_, bytes);
        evict_oldest(evicted);
      }
    }
    for (const Buffer& buffer : evicted) unmap_buffer(buffer.data, buffer.bytes);
    return p;
  }

  // The most bytes free buffers may take now (mutex_ held): the cap, or what the default bound
  // (peak + largest, kept and in use together) leaves beside the bytes in use.
  std::size_t cached_limit() const {
    if (cap_ >= 0) return static_cast<std::size_t>(cap_);
    return peak_ + largest_ > in_use_ ? peak_ + largest_ - in_use_ : 0;
  }

  // Moves the oldest free buffers to evicted until the cached bytes are within cached_limit() (mutex_ held).
  void evict_oldest(std::vector<Buffer>& evicted) {
    const std::size_t limit = cached_limit();
    std::size_t n = 0;
    while (cached_ > limit) {
      cached_ -= free_[n].bytes;
      evicted.push_back(free_[n++]);
    }
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
    evicted_ += static_cast<int64_t>(n);
  }

  // A fresh buffer; when memory runs out, the cached buffers are freed and the allocation tried once more.
  void* fresh_or_after_emptying(std::size_t bytes) {
    try {
      return map_buffer(bytes);
    } catch (const std::bad_alloc&) {
      empty();
    }
    try {
      return map_buffer(bytes);
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

  // A freed output's buffer is kept (the newest free buffer), the oldest ones evicted while the
  // cached bytes exceed the cap. Under the default bound nothing is evicted here: the bytes kept and
  // in use together stay what they were.
  void give_back(Buffer* buffer) {
    std::vector<Buffer> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_use_ -= buffer->bytes;
      free_.push_back(*buffer);
      cached_ += buffer->bytes;
      evict_oldest(evicted);
    }
    for (const Buffer& b : evicted) unmap_buffer(b.data, b.bytes);
    delete buffer;
  }

  std::mutex mutex_;
  std::vector<Buffer> free_;  // free buffers, the oldest freed first
  std::size_t cached_ = 0, in_use_ = 0;
  std::size_t peak_ = 0, largest_ = 0;  // the most bytes in use at once, the largest buffer: since start or empty()
  const int64_t cap_;  // LINTF_CPU_OUTPUT_CACHE_MB in bytes, -1 when unset
  int64_t reused_ = 0, fresh_ = 0, evicted_ = 0;
};

OutputCache& cache() {
  static auto* instance = new OutputCache();  // never destroyed: outputs may be freed after static destructors
  return *instance;
}

void OutputCache::release(void* context) { cache().give_back(static_cast<Buffer*>(context)); }

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
