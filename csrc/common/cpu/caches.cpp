// Detection of the CPU's cache sizes (caches.h). Baseline ISA: cpuid only reads.
#include "common/cpu/caches.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <unistd.h>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define LINTF_HAS_CPUID 1
#endif

namespace lintf::cpu {
namespace {

// What a CPU reports nothing about gets these (an L1d of 32 KiB and an L2 of 256 KiB are the smallest
// of the x86-64 CPUs with AVX2): the choices then err towards small spans.
constexpr int64_t kDefaultL1d = int64_t(32) << 10, kDefaultL2 = int64_t(256) << 10;
constexpr int64_t kMaxKiB = int64_t(1) << 30;  // 1 TiB: larger is surely a typo

// Fills the sizes from one deterministic cache-parameters leaf (4 or 0x8000001D); false if it lists none.
bool from_cpuid_leaf(unsigned leaf, CacheSizes& sizes) {
#if defined(LINTF_HAS_CPUID)
  unsigned a, b, c, d;
  if (__get_cpuid_max(leaf & 0x80000000u, nullptr) < leaf) return false;
  bool found = false;
  for (unsigned sub = 0; sub < 16; ++sub) {
    __cpuid_count(leaf, sub, a, b, c, d);
    const unsigned type = a & 31, level = (a >> 5) & 7;  // type 1: data, 2: instruction, 3: unified
    if (type == 0) break;
    if (type == 2) continue;
    const int64_t bytes = int64_t((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (int64_t(c) + 1);
    if (level == 1) sizes.l1d = bytes;
    if (level == 2) sizes.l2 = bytes;
    if (level == 3) sizes.l3 = bytes, sizes.l3_shared_by = ((a >> 14) & 0xfff) + 1;
    found = found || level == 2;
  }
  return found;
#else
  (void)leaf, (void)sizes;
  return false;
#endif
}

bool from_cpuid(CacheSizes& sizes) {
#if defined(LINTF_HAS_CPUID)
  unsigned a, b, c, d;
  const bool amd_leaf = __get_cpuid(0x80000001u, &a, &b, &c, &d) && ((c >> 22) & 1);  // topology extensions
  if (amd_leaf && from_cpuid_leaf(0x8000001Du, sizes)) return sizes.source = "cpuid leaf 0x8000001D", true;
  if (from_cpuid_leaf(4, sizes)) return sizes.source = "cpuid leaf 4", true;
#else
  (void)sizes;
#endif
  return false;
}

bool from_sysconf(CacheSizes& sizes) {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l2 <= 0) return false;
  sizes.l1d = l1 > 0 ? l1 : 0, sizes.l2 = l2, sizes.l3 = l3 > 0 ? l3 : 0;
  sizes.source = "sysconf";
  return true;
#else
  (void)sizes;
  return false;
#endif
}

// "32K", "1024K", "32M" -> bytes; 0 when unreadable.
int64_t sysfs_bytes(const std::string& text) {
  std::istringstream in(text);
  int64_t value = 0;
  char unit = 0;
  if (!(in >> value)) return 0;
  in >> unit;
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : unit == 'G' ? value << 30 : value;
}

std::string sysfs_read(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

// CPUs listed by a sysfs cpu list such as "0-1,4" (at least 1).
int64_t listed_cpus(const std::string& list) {
  int64_t count = 0;
  std::istringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    const auto dash = part.find('-');
    count += dash == std::string::npos ? 1 : std::atoll(part.c_str() + dash + 1) - std::atoll(part.c_str()) + 1;
  }
  return std::max<int64_t>(count, 1);
}

bool from_sysfs(CacheSizes& sizes) {
  bool found = false;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string type = sysfs_read(dir + "type"), level = sysfs_read(dir + "level");
    if (type.empty() || type == "Instruction") continue;
    const int64_t bytes = sysfs_bytes(sysfs_read(dir + "size"));
    if (level == "1") sizes.l1d = bytes;
    if (level == "2") sizes.l2 = bytes, found = bytes > 0;
    if (level == "3") sizes.l3 = bytes, sizes.l3_shared_by = listed_cpus(sysfs_read(dir + "shared_cpu_list"));
  }
  if (found) sizes.source = "/sys/devices/system/cpu/cpu0/cache";
  return found;
}

CacheSizes detect() {
  CacheSizes sizes;
  if (!from_cpuid(sizes) && !from_sysconf(sizes) && !from_sysfs(sizes)) sizes.source = "none reported: defaults";
  if (sizes.l1d <= 0) sizes.l1d = kDefaultL1d;
  if (sizes.l2 <= 0) sizes.l2 = kDefaultL2;
  return sizes;
}

[[noreturn]] void refuse(const std::string& value, const std::string& why) {
  TORCH_CHECK_VALUE(false, "lintf: LINTF_CPU_CACHE_KB=", value, " ", why, "; give three whole numbers of KiB, ",
                    "l1d,l2,l3 (e.g. 48,2048,32768; l3 may be 0 for none, l1d and l2 from 1 to ", kMaxKiB,
                    "), or leave it unset for the sizes this CPU reports");
}

// Parses "l1,l2,l3" (KiB) into byte sizes, or refuses it.
CacheSizes parse_override(const std::string& value) {
  std::vector<int64_t> kib;
  std::istringstream in(value);
  for (std::string part; std::getline(in, part, ',');) {
    const auto begin = part.find_first_not_of(' '), end = part.find_last_not_of(' ');
    if (begin == std::string::npos) refuse(value, "has an empty field");
    part = part.substr(begin, end - begin + 1);
    if (part.find_first_not_of("0123456789") != std::string::npos || part.size() > 12) {
      refuse(value, "has a field that is not a whole number (" + part + ")");
    }
    kib.push_back(std::stoll(part));
  }
  if (kib.size() != 3 || value.back() == ',') refuse(value, "does not have three fields");
  if (kib[0] < 1 || kib[1] < 1) refuse(value, "gives an L1d or L2 of 0 KiB");
  if (kib[0] > kMaxKiB || kib[1] > kMaxKiB || kib[2] > kMaxKiB) refuse(value, "gives a cache over 1 TiB");
  if (kib[0] > kib[1]) refuse(value, "gives an L1d larger than the L2");
  CacheSizes sizes;
  sizes.l1d = kib[0] << 10, sizes.l2 = kib[1] << 10, sizes.l3 = kib[2] << 10;
  sizes.source = "LINTF_CPU_CACHE_KB";
  return sizes;
}

}  // namespace

const CacheSizes& detected_caches() {
  static const CacheSizes sizes = detect();
  return sizes;
}

CacheSizes cache_sizes() {
  const char* forced = std::getenv("LINTF_CPU_CACHE_KB");
  if (forced == nullptr || *forced == '\0') return detected_caches();
  return parse_override(forced);
}

}  // namespace lintf::cpu
