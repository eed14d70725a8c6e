# Sourced by the GPU-machine scripts (gpu_run.sh, torch_run.sh): the folder their logs go to ($OUT,
# default ./out, made here) and the environment every program they start keeps. Leaves in
# NCCL_NOTE which NCCL that is, for the caller's log.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"

# Never NVLink multicast (gpu-machine.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Emulated ranks bring two streams each: enough hardware queues that none alias (world_gpu.c).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}

# NCCL: the device API reads structs the library fills, so the library must match the headers we
# built with (2.28.9). On the GPU machine the system NCCL is 2.28.3; the PyTorch wheel holds 2.28.9.
NCCL_PKG=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
if [ -n "$NCCL_PKG" ] && [ -e "$NCCL_PKG/lib/libnccl.so.2" ]; then
    export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    NCCL_NOTE="NCCL from the PyTorch wheel: $NCCL_PKG/lib"
else
    NCCL_NOTE="NCCL: no PyTorch wheel NCCL found; using the default search path"
fi
