# The one CUDA arch table of qmoe.
#   QMOE_CUDA_ARCHS_PORTABLE : the mma.sync / cp.async family (sm_80 and up)
#   QMOE_CUDA_ARCHS_HOPPER   : wgmma / TMA files, which need the arch-specific 90a target
# Override with -DQMOE_CUDA_ARCHS_PORTABLE="80;90a" etc. for a quicker dev build.
set(QMOE_CUDA_ARCHS_PORTABLE "80-real;90a-real" CACHE STRING "CUDA archs for portable kernels")
set(QMOE_CUDA_ARCHS_HOPPER "90a-real" CACHE STRING "CUDA archs for Hopper-only kernels")
