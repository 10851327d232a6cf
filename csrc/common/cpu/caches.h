// The CPU's data caches as the kernels' tuning reads them (tuning.h): L1d, L2 and L3 sizes per core
// and how many logical CPUs share the L3.
//
// Detected once: cpuid leaf 0x8000001D on AMD (with topology extensions), leaf 4 on Intel; where
// cpuid reports nothing (another architecture, a hypervisor hiding the leaves), sysconf's
// _SC_LEVEL*_CACHE_SIZE, then /sys/devices/system/cpu/cpu0/cache/index*/. LINTF_CPU_CACHE_KB=l1,l2,l3
// (KiB, read on every call, like LINTF_CPU_PATH) pretends another CPU; a malformed value is a
// ValueError saying what is allowed.
#pragma once

#include <cstdint>
#include <string>

namespace lintf::cpu {

struct CacheSizes {
  int64_t l1d = 0, l2 = 0, l3 = 0;  // bytes; l3 is the whole cache (0: none reported)
  int64_t l3_shared_by = 1;         // logical CPUs that share the L3
  std::string source;               // where the sizes come from (cpuid leaf, sysconf, sysfs, the override, defaults)
};

// The sizes the CPU reports (never the override); cached after the first call.
const CacheSizes& detected_caches();

// LINTF_CPU_CACHE_KB when set (a ValueError when malformed), else detected_caches().
CacheSizes cache_sizes();

}  // namespace lintf::cpu
