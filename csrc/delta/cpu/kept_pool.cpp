// The free list behind take_kept, give_kept and release_kept (declared in ../delta_rule.h): blocks of
// what the delta rule's backward keeps per head, tens of MiB each, handed from one head to the next
// within a call. Large blocks are 2 MiB aligned and, on Linux, asked for in huge pages.
#include "delta/delta_rule.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lintf::delta {
namespace {

constexpr std::size_t kHuge = std::size_t(2) << 20;
constexpr std::size_t kAlign = 64;

std::mutex pool_mutex;
std::vector<std::pair<std::size_t, void*>> pool;  // returned blocks: (bytes, address)

void* allocate(std::size_t bytes) {
  const std::size_t align = bytes >= kHuge ? kHuge : kAlign;
  void* block = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (block == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kHuge) madvise(block, bytes, MADV_HUGEPAGE);  // a hint: refusal only costs speed
#endif
  return block;
}

}  // namespace

void* take_kept(std::size_t bytes) {
  {
    const std::lock_guard<std::mutex> lock(pool_mutex);
    for (auto it = pool.begin(); it != pool.end(); ++it) {
      if (it->first >= bytes) {
        void* block = it->second;
        pool.erase(it);
        return block;
      }
    }
  }
  return allocate(bytes);
}

void give_kept(void* block, std::size_t bytes) {
  const std::lock_guard<std::mutex> lock(pool_mutex);
  pool.emplace_back(bytes, block);
}

void release_kept() {
  std::vector<std::pair<std::size_t, void*>> blocks;
  {
    const std::lock_guard<std::mutex> lock(pool_mutex);
    blocks.swap(pool);
  }
  for (auto& [bytes, block] : blocks) std::free(block);
}

}  // namespace lintf::delta
