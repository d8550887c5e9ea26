#pragma once
// Deterministic random numbers (splitmix64 + xoshiro256**), identical on every platform,
// unlike std::normal_distribution. Streams are keyed by (seed, name) so independent users
// of randomness (one per parameter tensor, data, dropout-free sampling) do not interfere.
#include <cmath>
#include <cstdint>
#include <string_view>

namespace sbp {

class Rng {
 public:
  explicit Rng(uint64_t seed, std::string_view stream = {}) {
    uint64_t x = seed ^ 0x9e3779b97f4a7c15ull;
    for (char c : stream) x = (x ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;  // FNV mix
    for (auto& s : s_) s = splitmix(x);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  // Standard normal (Box-Muller, no cached second value so the state is the whole story).
  float normal() {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

  // Full state, for checkpoints that resume exactly.
  const uint64_t* state() const { return s_; }
  void set_state(const uint64_t* s) {
    for (int i = 0; i < 4; ++i) s_[i] = s[i];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace sbp
