#pragma once
// Whether this program was built with AddressSanitizer: gcc defines __SANITIZE_ADDRESS__, clang
// (the sanitizer tree's compiler) answers __has_feature(address_sanitizer) instead. Code that
// would hide a use after free from it (a cache of freed blocks) and tests whose measurements
// mean nothing under it (resident sizes) ask this.
#if defined(__SANITIZE_ADDRESS__)
#define STREAMBP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STREAMBP_ASAN 1
#endif
#endif
#ifndef STREAMBP_ASAN
#define STREAMBP_ASAN 0
#endif

namespace sbp {

inline constexpr bool kAddressSanitizer = STREAMBP_ASAN != 0;

}  // namespace sbp
