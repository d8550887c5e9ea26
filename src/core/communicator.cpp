#include "core/communicator.h"

#include <cstdlib>

#include "core/error.h"

namespace sbp {

double Communicator::sum(double x) {
  sum(std::span<double>(&x, 1));
  return x;
}

int64_t Communicator::sum(int64_t x) {
  sum(std::span<int64_t>(&x, 1));
  return x;
}

int64_t Communicator::max(int64_t x) {
  max(std::span<int64_t>(&x, 1));
  return x;
}

Communicator& single_process() {
  static SingleProcess one;  // constant after construction: shared by everyone
  return one;
}

ShapeOnlyCommunicator::ShapeOnlyCommunicator(int rank, int ranks) : rank_(rank), ranks_(ranks) {
  SBP_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "ShapeOnlyCommunicator: rank out of range");
}

std::vector<std::vector<double>> ShapeOnlyCommunicator::allgather(std::span<const double> mine) {
  return std::vector<std::vector<double>>(static_cast<size_t>(ranks_),
                                          std::vector<double>(mine.begin(), mine.end()));
}

std::vector<std::string> ShapeOnlyCommunicator::allgather(const std::string& mine) {
  return std::vector<std::string>(static_cast<size_t>(ranks_), mine);
}

std::unique_ptr<Communicator> ShapeOnlyCommunicator::split(int, int) {
  SBP_CHECK(ranks_ == 1, "ShapeOnlyCommunicator: split of a shape-only world of several ranks");
  return std::make_unique<ShapeOnlyCommunicator>(0, 1);
}

void ShapeOnlyCommunicator::abort(int exit_code) { std::exit(exit_code); }

bool ShapeOnlyCommunicator::test(Request& r) {
  r.id = -1;
  return true;
}

}  // namespace sbp
