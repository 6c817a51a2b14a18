"""Expert GEMM for Hopper (H100/H200): C = A @ B, fp32 accumulation, output in the input dtype.

Data layout
-----------
A is (M, K) and B is (K, N), both row-major; C is (M, N), row-major. C is cut into
BLOCK_M x BLOCK_N tiles; a tile is the product of a BLOCK_M-row panel of A and a BLOCK_N-column
panel of B, which the K-loop walks BLOCK_K columns (rows of B) at a time:

              K                      N                         N
        +-----------+          +-----------+             +-----------+
        |           |          |   |   |   |             |           |
      M |===A panel=|   @    K |   | B |   |    =      M |   [tile]  |
        |           |          |   |   |   |             |           |
        +-----------+          +-----------+             +-----------+

Optimizations, each a recognisable construct below:
- autotune: @triton.autotune over tile shape / warps / stages, keyed on (M, N, K); configs that would
  leave more than half the SMs idle (wave quantization on small problems) are pruned before timing.
- tile-size + num-warps: 128x256x64 tiles with 8 warps (two consumer warpgroups) for large problems.
- pipelining: num_stages in every config (TMA loads of the next K-steps overlap the wgmma of this one).
- tma: tl.make_tensor_descriptor loads and stores (bulk tensor copies, zero padding at the edges,
  so the main kernel needs no masks at all); needs triton.set_allocator for the descriptors.
- persistent: NUM_SMS programs loop over tiles (tl.range(..., flatten=True) lets the compiler
  overlap one tile's epilogue with the next tile's loads).
- grouped-order: GROUP_SIZE_M tile swizzle so concurrently running programs share A/B panels in L2.
- epilogue subtiling: the accumulator is stored as two BLOCK_M x BLOCK_N/2 halves (less shared
  memory for the epilogue, so more pipeline stages fit).
- fp32-accumulate: tl.dot into an fp32 accumulator, one downcast at the store.
- mask-elision (fallback kernel only): TMA needs 16-byte aligned row strides (K and N multiples of 8
  for 16-bit types); otherwise a pointer kernel runs, with EVEN_K choosing an unmasked K-loop.
"""

import torch
import triton
import triton.language as tl

_SM_COUNT = {}


def _num_sms(device: torch.device) -> int:
    """Multiprocessor count of ``device`` (a small number on CPU, where the interpreter runs)."""
    if device.type != "cuda":
        return 4
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def _launch(kernel, grid, device: torch.device, *args, **kwargs) -> None:
    """Launch an autotuned kernel; under the CPU interpreter (nothing to time) use its first config."""
    if device.type == "cuda":
        kernel[grid](*args, **kwargs)
    else:
        kernel.fn[grid](*args, **kwargs, **kernel.configs[0].all_kwargs())


def _tma_configs():
    """(BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, epilogue subtile) tuned for sm_90."""
    table = [
        (128, 256, 64, 3, 8, True),
        (128, 256, 64, 4, 8, True),
        (128, 128, 64, 4, 8, False),
        (128, 128, 64, 5, 4, False),
        (64, 128, 64, 5, 4, False),
    ]
    return [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_SIZE_M": 8, "EPILOGUE_SUBTILE": sub},
            num_stages=s, num_warps=w,
        )
        for bm, bn, bk, s, w, sub in table
    ]


def _prune_small_grids(configs, named_args, **kwargs):
    """Wave quantization: drop tile shapes that leave over half the SMs idle when another shape does not.

    At 1024^3, 128x256 tiles make 32 programs on 132 SMs; 64x128 tiles make 128. Timing the starved
    configs is also the noisiest part of autotuning small problems.
    """
    m, n = named_args["M"], named_args["N"]
    sms = kwargs.get("NUM_SMS", 132)

    def tiles(c):
        return triton.cdiv(m, c.kwargs["BLOCK_M"]) * triton.cdiv(n, c.kwargs["BLOCK_N"])

    kept = [c for c in configs if tiles(c) >= sms // 2]
    return kept or [max(configs, key=tiles)]


@triton.jit
def _tile_coords(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M: tl.constexpr):
    # Grouped ordering: walk GROUP_SIZE_M tile-rows column by column, so the programs that run
    # together reuse the same few A panels and B panels from L2.
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.autotune(configs=_tma_configs(), key=["M", "N", "K"],
                 prune_configs_by={"early_config_prune": _prune_small_grids})
@triton.jit
def _matmul_tma_persistent_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr,
):
    dtype = c_ptr.dtype.element_ty
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_SIZE_M * num_pid_n

    # Device-side TMA descriptors; out-of-bounds boxes are zero-filled on load and clipped on store,
    # so tiles that overhang M, N or K need no masks.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    if EPILOGUE_SUBTILE:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])

    # A second tile counter for the epilogue keeps prologue and epilogue independent after flattening.
    tile_id_c = start_pid - NUM_SMS
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_am = pid_m * BLOCK_M
        offs_bn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_k, offs_bn])
            acc = tl.dot(a, b, acc)

        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_cm = pid_m * BLOCK_M
        offs_cn = pid_n * BLOCK_N
        if EPILOGUE_SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([offs_cm, offs_cn], acc0.to(dtype))
            c_desc.store([offs_cm, offs_cn + BLOCK_N // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_cm, offs_cn], acc.to(dtype))


def _fallback_configs():
    return [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_SIZE_M": 8}, num_stages=3, num_warps=8),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_SIZE_M": 8}, num_stages=3, num_warps=4),
    ]


@triton.autotune(configs=_fallback_configs(), key=["M", "N", "K"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def _matmul_masked_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    # Pointer-based kernel for operands whose strides TMA cannot describe (not 16-byte aligned).
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile_coords(pid, GROUP_SIZE_M * num_pid_n, num_pid_m, GROUP_SIZE_M)

    # Rows/columns past the edge are clamped to 0 (read, never stored), so A and B loads need a mask
    # only along K, and only when K is not a multiple of BLOCK_K.
    offs_am = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_bn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_am = tl.where(offs_am < M, offs_am, 0)
    offs_bn = tl.where(offs_bn < N, offs_bn, 0)
    offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def _tma_compatible(*tensors: torch.Tensor) -> bool:
    """TMA needs a 16-byte aligned base, 16-byte aligned row strides and a contiguous last dim."""
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    return True


def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B for A (M, K) and B (K, N) of one 16-bit dtype; returns C (M, N) in that dtype."""
    M, K = a.shape
    K2, N = b.shape
    if K2 != K or a.dtype != b.dtype:
        raise ValueError(f"incompatible operands {tuple(a.shape)} {a.dtype} @ {tuple(b.shape)} {b.dtype}")
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if _tma_compatible(a, b, c):
        device = a.device

        def alloc(size: int, alignment: int, stream):
            # Scratch for the device-side TMA descriptors (128 bytes each, per program).
            return torch.empty(size, device=device, dtype=torch.int8)

        triton.set_allocator(alloc)
        num_sms = _num_sms(device)

        def grid(meta):
            tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
            return (min(num_sms, tiles),)

        _launch(_matmul_tma_persistent_kernel, grid, device, a, b, c, M, N, K, NUM_SMS=num_sms)
    else:
        def grid(meta):
            return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

        _launch(
            _matmul_masked_kernel, grid, a.device, a, b, c, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        )
    return c
