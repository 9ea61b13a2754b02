// sm_90 asynchronous-copy and barrier helpers shared by the Hopper kernels (sm90_moe_gemm.cu, the
// bulk-streaming decode kernel of moe_decode.cu): mbarrier phases and byte-counting bulk copies.
// QMOE_SM90A is 1 in the device pass for sm_90a only; kernel bodies that use wgmma / setmaxnreg or
// the bulk copies are compiled under it (other passes get an empty body that is never launched).
#pragma once
#include <cstdint>

#include "cuda/device_common.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QMOE_SM90A 1
#else
#define QMOE_SM90A 0
#endif

namespace qmoe::cuda::dev {

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Named barrier `id` (1..15) over `count` threads (a multiple of 32), e.g. the consumer warpgroups.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async proxy (bulk copies) before first use.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// 1-D bulk copy global -> shared completing `bytes` on `bar` (16-byte aligned, size % 16 == 0).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// An arrival on `bar` when this thread's earlier cp.asyncs have landed (counted in the barrier's
// arrival count: .noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Orders shared-memory writes of the generic proxy (cp.async, st.shared) that this thread has
// synchronized with before its later async-proxy reads (wgmma operands, bulk copies).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- clusters of CTAs (the tile kernel's CTA pairs: Sm90Gemm::cluster2) ----------------------------
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The shared::cluster address of `p` (this CTA's shared memory) in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_addr(const void* p, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
// An arrival on the barrier at shared::cluster address `bar` (another CTA's), with the default
// (.release.cta) semantics, as CUTLASS's ClusterBarrier: what it orders is this thread's reads of
// shared memory before the other CTA writes there. (.release.cluster compiles to MEMBAR.ALL.GPU +
// ERRBAR before the arrival: once per stage per consumer warp it made the tile kernel's CTA pairs
// 0.66-0.90x of single CTAs on the H200, twenty-fourth session.)
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// A 4-byte store into another CTA's shared memory (shared::cluster address `addr`) that completes
// 4 bytes of transaction on the barrier at `bar` there: the value is visible to the threads that
// see that barrier's phase complete (its owner expects the 4 bytes with mbar_expect_tx).
__device__ __forceinline__ void st_async_u32(uint32_t addr, uint32_t v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];\n" ::"r"(addr), "r"(v),
               "r"(bar)
               : "memory");
}
// Every thread of the cluster (not warp-aligned: callable from divergent code).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// L2 policy "evict first" for data read once (a streamed weight box), so that it does not push
// out what is read again (token tiles, scales).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// An L2 policy that keeps the lines it loads ahead of normal and evict-first ones.
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// bulk_load with an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void bulk_load_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
      : "memory");
}

}  // namespace qmoe::cuda::dev
