// CudaBackend: construction, memory (the arena), transfers, scratch, and the factory functions
// of cuda_factory.h.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/attention_args.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda_factory.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {
// cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper; taken once, so no GEMM
// allocates.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// New arena segments: 1 GiB, or the request when larger. Big enough that a training step takes
// a handful of cudaMallocs, small enough that the last segment wastes little.
constexpr size_t kSegmentBytes = size_t{1} << 30;

__global__ void fill_nan_kernel(cuda::FPtr x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x.st(i, NAN);
}
}  // namespace

CudaBackend::CudaBackend(int device)
    : device_(device), host_(std::make_unique<PinnedHostSpace>(*this)) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    throw InputError(std::string("cuda: no usable CUDA driver or device (") +
                     cudaGetErrorString(e) + ")");
  if (device < 0 || device >= count)
    throw InputError("cuda: no device " + std::to_string(device) + " (this machine has " +
                     std::to_string(count) + ")");
  SBP_CUDA(cudaSetDevice(device_));
  SBP_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  staging_ = std::make_unique<cuda::UploadStaging>(stream_);
  SBP_CUBLAS(cublasLtCreate(&lt_));
  // STREAMBP_CUDA_ARENA=per_tensor: every tensor its own cudaMalloc (slow: each free
  // synchronises), so that compute-sanitizer's memcheck sees each tensor's bounds; the default
  // carves tensors out of 1 GiB segments, inside which an overrun into the next tensor is
  // invisible to it.
  auto placement = cuda::DeviceArena::Placement::segments;
  if (const char* arena = std::getenv("STREAMBP_CUDA_ARENA"); arena && *arena) {
    const std::string kind(arena);
    if (kind == "per_tensor")
      placement = cuda::DeviceArena::Placement::per_tensor;
    else if (kind != "segments")
      throw InputError("STREAMBP_CUDA_ARENA: '" + kind +
                       "' is not an arena placement; use segments (the default) or per_tensor "
                       "(a cudaMalloc per tensor, for compute-sanitizer)");
  }
  const int dev = device_;
  arena_ = std::make_unique<cuda::DeviceArena>(
      [dev](size_t bytes) -> void* {
        void* p = nullptr;
        SBP_CUDA(cudaSetDevice(dev));
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
          // Out of memory, and only that: the arena trims and retries, the Pool reports it.
          cudaGetLastError();  // not sticky: clear it
          return nullptr;
        }
        // Anything else (a sticky fault of an earlier kernel, most likely) is not "out of
        // memory": name the call and the last kernel launched.
        if (e != cudaSuccess) cuda::fail_cuda(e, "cudaMalloc", __FILE__, __LINE__);
        return p;
      },
      [dev](void* p, size_t) {
        cudaSetDevice(dev);
        cudaFree(p);
      },
      kSegmentBytes, placement);
  workspace_ = arena_->allocate(kWorkspaceBytes);
  SBP_CHECK(workspace_, "cuda: cannot allocate the 32 MiB cuBLASLt workspace");
  SBP_CUDA(cudaMallocHost(&pinned_, sizeof(cuda::CheckState)));
  checks_ = static_cast<cuda::CheckState*>(arena_->allocate(sizeof(cuda::CheckState)));
  SBP_CHECK(checks_, "cuda: cannot allocate the index check records");
  SBP_CUDA(cudaMemsetAsync(checks_, 0, sizeof(cuda::CheckState), stream_));
  int optin = 0;
  SBP_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
  smem_optin_ = static_cast<size_t>(optin);
  const char* attn = std::getenv("STREAMBP_CUDA_ATTENTION");
  if (attn && *attn) {
    const std::string kind(attn);
    if (kind != "simt" && kind != "tc")
      throw InputError("STREAMBP_CUDA_ATTENTION: '" + kind +
                       "' is not an attention kernel; use tc (tensor cores, the default) or "
                       "simt (fp32 CUDA cores)");
    simt_attention_ = kind == "simt";
  }
}

bool CudaBackend::use_tensor_core_attention(int h) const {
  return !simt_attention_ && cuda::tc_attention_supported(h, smem_optin_);
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (const PendingRead& read : pending_reads_) cudaFreeHost(read.staging);  // never read
  staging_.reset();
  destroy_copy_resources();
  host_.reset();  // the pinned blocks, before the device goes
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
  if (pinned_) cudaFreeHost(pinned_);
  arena_.reset();  // gives every segment back
}

void* CudaBackend::allocate_bytes(size_t bytes) {
  SBP_CUDA(cudaSetDevice(device_));
  return arena_->allocate(bytes);
}

void CudaBackend::release_bytes(void* p, size_t) {
  // No synchronisation: every access to the arena's memory (kernels, cuBLASLt, transfers) is
  // on stream_, so the block's next owner is ordered after the kernels still queued on it.
  arena_->release(p);
}

void* CudaBackend::scratch(Slot slot, size_t bytes) {
  ScratchBuf& s = scratch_[slot];
  if (s.bytes >= bytes && s.p) return s.p;
  arena_->release(s.p);  // queued kernels that use it are ordered before its next owner
  s = ScratchBuf{};
  void* p = arena_->allocate(bytes);
  if (!p)
    throw Error("cuda: no device memory for " + std::to_string(bytes) +
                           " bytes of kernel scratch");
  s = ScratchBuf{p, bytes};
  return p;
}

void CudaBackend::open_memory() { SBP_CUDA(cudaSetDevice(device_)); }

// No host wait: through pinned staging (upload_staging.h), so the caller may reuse its buffer
// at once and the copy is asynchronous.
void CudaBackend::upload_impl(void* dst, const void* host, size_t bytes) {
  upload_async(dst, host, bytes);
}

void CudaBackend::upload_async(void* dst, const void* host, size_t bytes) {
  staging_->upload(dst, host, bytes);
}

void CudaBackend::note_fallback(const std::string& what, const std::string& detail) {
  ++fallbacks_;
  if (fallbacks_printed_.insert(what).second)
    std::fprintf(stderr, "gpu fallback: %s%s\n", what.c_str(), detail.c_str());
}

// The step's end (and the profiler): waits for the stream and reports failed index checks.
void CudaBackend::synchronize_impl() {
  queue_check_readback();
  SBP_CUDA(cudaStreamSynchronize(stream_));
  staging_->stream_idle();
  complete_reads();
  flush_checks();
}

// One wait for the copy, the check records and the reads queued before it together.
void CudaBackend::download_impl(void* host, const void* src, size_t bytes) {
  queue_check_readback();
  SBP_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  SBP_CUDA(cudaStreamSynchronize(stream_));
  staging_->stream_idle();
  complete_reads();
  flush_checks();
}

// Into pinned memory the copy is asynchronous (pageable memory would make it a wait); the
// staging is given back once its bytes have gone to dst.
void CudaBackend::download_at_next_wait_impl(const Tensor& src,
                                             std::shared_ptr<std::vector<float>> dst) {
  const size_t bytes = dst->size() * sizeof(float);
  PendingRead read{nullptr, std::move(dst)};
  SBP_CUDA(cudaMallocHost(&read.staging, bytes));
  pending_reads_.push_back(read);  // before the copy: given back by complete_reads if it throws
  SBP_CUDA(cudaMemcpyAsync(read.staging, src.data, bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::finish_reads_impl() {
  if (!pending_reads_.empty()) synchronize_impl();
}

void CudaBackend::complete_reads() {
  for (const PendingRead& read : pending_reads_) {
    std::memcpy(read.dst->data(), read.staging, read.dst->size() * sizeof(float));
    cudaFreeHost(read.staging);
  }
  pending_reads_.clear();
}

void CudaBackend::zero_impl(const Tensor& t) {
  SBP_CUDA(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
}

void CudaBackend::poison_impl(const Tensor& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16) return;
  SBP_LAUNCH(fill_nan_kernel, cuda::grid_for(t.numel(), 256), 256, 0, stream_,
             cuda::fptr(t), t.numel());
}

// ---- factory (cuda_factory.h) ----

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = cudaGetErrorString(e);
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device";
  return count;
}

int64_t cuda_device_peak_reserved(const Backend& be) {
  const auto* c = dynamic_cast<const CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->arena().peak_reserved()) : -1;
}

int64_t cuda_device_peak_in_use(const Backend& be) {
  const auto* c = dynamic_cast<const CudaBackend*>(&be);
  return c ? static_cast<int64_t>(c->arena().peak_in_use()) : -1;
}

int64_t cuda_fallbacks(const Backend& be) {
  const auto* c = dynamic_cast<const CudaBackend*>(&be);
  return c ? c->fallbacks() : -1;
}

}  // namespace sbp
