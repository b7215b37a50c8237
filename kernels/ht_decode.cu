// HT-decode step kernels (nccl_ep `ncclEpUpdateHandle` + dispatch + combine), per rank.
//
// Compiled at run time by NVRTC (src/runner/htdecode.rs); plain CUDA C with no includes.
// The host enqueues, in order, on one stream:
//   1. memset of the preprocessing block to 0, memset of the sparse-to-dense map to 0xFF;
//   2. convert_topk_to_routing_map;
//   3. the routing all-gather (a collective backend, not in this file);
//   4. preprocess_metadata; 5. dispatch; 6. expert_standin (optional); 7. combine.
//
// Conventions (the CPU reference in src/runner/reference.rs mirrors every one of them):
// - tokens are bf16 stored as unsigned short; weights are float; top-k indices are int.
// - routing map: M rows of B = ceil(E/8) bytes; expert e is bit (e & 7) of byte (e >> 3);
//   rows >= T are zero. The gathered map is R such maps back to back, rank-major.
// - preprocessing block (int): header[4] = { done-block counter, local_total, recv_total,
//   total }, counts[E], offsets[E+1], local_counts[E], local_offsets[E+1], rank_counts[R*E],
//   rank_prefix[R*E]. The host passes a pointer to each part.
//     counts[e]        pairs (rank, token) routed to expert e, over all ranks
//     offsets          exclusive prefix sum of counts (offsets[E] = total)
//     local_counts[e]  this rank's tokens routed to expert e
//     local_offsets    exclusive prefix sum of local_counts (local_offsets[E] = local_total)
//     rank_counts[s*E+e]  rank s's tokens routed to expert e
//     rank_prefix[s*E+e]  tokens of ranks < s routed to expert e
//     recv_total       pairs routed to this rank's E/R local experts, over all ranks
// - sparse-to-dense map: int [M x E]; -1 (0xFF bytes) where token t does not route to e,
//   else the token's row ("slot") in the receive buffer, which holds this rank's T*K routed
//   copies grouped by expert: slot = local_offsets[e] + (rank of t among this rank's tokens
//   routed to e).
// Kernel launches use int sizes; the host checks that every element count fits.

#define FULL_MASK 0xffffffffu
#define MAX_TOP_K 64

__device__ __forceinline__ float bf16_to_f32(unsigned short b)
{
    return __uint_as_float(((unsigned int)b) << 16);
}

// Round to nearest even; NaN stays NaN (quiet).
__device__ __forceinline__ unsigned short f32_to_bf16(float f)
{
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// 2. top-k expert indices [T x K] -> routing bitmap [M x B]; rows >= T zeroed.
// Indices outside [0, E) are ignored. Grid-stride over M*B bytes.
extern "C" __global__ void convert_topk_to_routing_map(
    const int* __restrict__ topk,
    int tokens,
    int top_k,
    int experts,
    int max_tokens,
    int bytes_per_row,
    unsigned char* __restrict__ routing_map)
{
    long long total = (long long)max_tokens * bytes_per_row;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int row = (int)(i / bytes_per_row);
        int byte = (int)(i - (long long)row * bytes_per_row);
        unsigned int bits = 0;
        if (row < tokens) {
            const int* idx = topk + (long long)row * top_k;
            for (int k = 0; k < top_k; ++k) {
                int e = idx[k];
                if (e >= 0 && e < experts && (e >> 3) == byte) {
                    bits |= 1u << (e & 7);
                }
            }
        }
        routing_map[i] = (unsigned char)bits;
    }
}

// 4. Scan of the gathered maps. One warp per expert; blocks of any multiple of 32 threads
// (at least 64). The last block to finish (counter in header[0], zeroed by the host memset
// before every step) computes the prefix sums and turns the per-expert ranks written into
// the sparse-to-dense map into receive-buffer slots.
extern "C" __global__ void preprocess_metadata(
    const unsigned char* __restrict__ gathered,
    const int* __restrict__ topk,
    int tokens,
    int top_k,
    int experts,
    int ranks,
    int rank,
    int max_tokens,
    int bytes_per_row,
    int* header,
    int* counts,
    int* offsets,
    int* local_counts,
    int* local_offsets,
    int* rank_counts,
    int* rank_prefix,
    int* sparse_to_dense)
{
    __shared__ int is_last;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int warps_per_block = blockDim.x >> 5;
    const int e = blockIdx.x * warps_per_block + warp;

    if (e < experts) {  // uniform across the warp
        const int byte = e >> 3;
        const unsigned int bit = 1u << (e & 7);
        const unsigned int lanes_below = (1u << lane) - 1u;
        int total = 0;
        for (int s = 0; s < ranks; ++s) {
            const unsigned char* map = gathered + (long long)s * max_tokens * bytes_per_row;
            int c = 0;
            for (int base = 0; base < max_tokens; base += 32) {
                const int m = base + lane;
                int set = 0;
                if (m < max_tokens) {
                    set = (map[(long long)m * bytes_per_row + byte] & bit) != 0;
                }
                const unsigned int ballot = __ballot_sync(FULL_MASK, set);
                if (s == rank && set && m < tokens) {
                    sparse_to_dense[(long long)m * experts + e] = c + __popc(ballot & lanes_below);
                }
                c += __popc(ballot);
            }
            if (lane == 0) {
                rank_counts[(long long)s * experts + e] = c;
                rank_prefix[(long long)s * experts + e] = total;
                if (s == rank) {
                    local_counts[e] = c;
                }
            }
            total += c;
        }
        if (lane == 0) {
            counts[e] = total;
        }
    }

    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int prev = atomicAdd((unsigned int*)&header[0], 1u);
        is_last = (prev == gridDim.x - 1) ? 1 : 0;
    }
    __syncthreads();
    if (!is_last) {
        return;
    }
    __threadfence();

    // Exclusive prefix sums: warp 0 over counts, warp 1 over local_counts.
    if (warp < 2) {
        volatile const int* src = (warp == 0) ? counts : local_counts;
        int* dst = (warp == 0) ? offsets : local_offsets;
        const int chunk = (experts + 31) / 32;
        int lo = lane * chunk;
        if (lo > experts) lo = experts;
        int hi = lo + chunk;
        if (hi > experts) hi = experts;
        int sum = 0;
        for (int i = lo; i < hi; ++i) sum += src[i];
        int incl = sum;
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(FULL_MASK, incl, d);
            if (lane >= d) incl += v;
        }
        int run = incl - sum;
        for (int i = lo; i < hi; ++i) {
            dst[i] = run;
            run += src[i];
        }
        if (lane == 31) {
            dst[experts] = incl;
            header[(warp == 0) ? 3 : 1] = incl;
        }
    }
    __syncthreads();

    if (threadIdx.x == 0) {
        const int per_rank = experts / ranks;
        const int first = rank * per_rank;
        header[2] = offsets[first + per_rank] - offsets[first];
    }

    // Per-expert rank -> receive-buffer slot. A repeated index in a token's top-k row
    // names one map entry: fix it up once.
    const int pairs = tokens * top_k;
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        const int t = i / top_k;
        const int k = i - t * top_k;
        const int ex = topk[i];
        if (ex < 0 || ex >= experts) continue;
        int dup = 0;
        for (int j = 0; j < k; ++j) {
            if (topk[t * top_k + j] == ex) dup = 1;
        }
        if (dup) continue;
        volatile int* p = sparse_to_dense + (long long)t * experts + ex;
        const int v = *p;
        if (v >= 0) *p = v + local_offsets[ex];
    }
}

// 5. Copy each routed (token, expert) pair's row into its receive-buffer slot.
// One block per pair (grid = T*K).
extern "C" __global__ void dispatch(
    const unsigned short* __restrict__ tokens_in,
    const int* __restrict__ topk,
    const int* __restrict__ sparse_to_dense,
    int tokens,
    int top_k,
    int experts,
    int hidden,
    unsigned short* __restrict__ recv)
{
    const int pair = blockIdx.x;
    if (pair >= tokens * top_k) return;
    const int t = pair / top_k;
    const int e = topk[pair];
    if (e < 0 || e >= experts) return;
    const int slot = sparse_to_dense[(long long)t * experts + e];
    if (slot < 0) return;
    const unsigned short* src = tokens_in + (long long)t * hidden;
    unsigned short* dst = recv + (long long)slot * hidden;
    if ((hidden & 7) == 0) {
        const uint4* s4 = (const uint4*)src;
        uint4* d4 = (uint4*)dst;
        const int n = hidden >> 3;
        for (int i = threadIdx.x; i < n; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
    }
}

__device__ __forceinline__ unsigned int scale_pair(unsigned int packed, float scale)
{
    const unsigned short lo = f32_to_bf16(bf16_to_f32((unsigned short)(packed & 0xffffu)) * scale);
    const unsigned short hi = f32_to_bf16(bf16_to_f32((unsigned short)(packed >> 16)) * scale);
    return (unsigned int)lo | ((unsigned int)hi << 16);
}

// 6. Expert stand-in: slot rows of expert e are scaled in place by 0.01 * (e + 1), rounded
// to bf16. One block per slot (grid = T*K, an upper bound on local_offsets[E]).
extern "C" __global__ void expert_standin(
    unsigned short* recv,
    const int* __restrict__ local_offsets,
    int experts,
    int hidden)
{
    const int slot = blockIdx.x;
    if (slot >= local_offsets[experts]) return;
    // Largest e with local_offsets[e] <= slot: the expert whose rows hold this slot.
    int lo = 0;
    int hi = experts - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (local_offsets[mid] <= slot) lo = mid; else hi = mid - 1;
    }
    const float scale = 0.01f * (float)(lo + 1);
    unsigned short* row = recv + (long long)slot * hidden;
    if ((hidden & 7) == 0) {
        uint4* r4 = (uint4*)row;
        const int n = hidden >> 3;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            uint4 v = r4[i];
            v.x = scale_pair(v.x, scale);
            v.y = scale_pair(v.y, scale);
            v.z = scale_pair(v.z, scale);
            v.w = scale_pair(v.w, scale);
            r4[i] = v;
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
            row[i] = f32_to_bf16(bf16_to_f32(row[i]) * scale);
        }
    }
}

__device__ __forceinline__ void acc_pair(float* acc, unsigned int packed, float w)
{
    acc[0] = fmaf(w, bf16_to_f32((unsigned short)(packed & 0xffffu)), acc[0]);
    acc[1] = fmaf(w, bf16_to_f32((unsigned short)(packed >> 16)), acc[1]);
}

__device__ __forceinline__ unsigned int pack_pair(float a, float b)
{
    return (unsigned int)f32_to_bf16(a) | ((unsigned int)f32_to_bf16(b) << 16);
}

// 7. out[t, :] = bf16( sum_k weights[t, k] * recv[slot(t, k), :] ), accumulated in f32 in
// k order with fmaf; pairs whose index is outside [0, E) or has no slot add nothing.
// One block per token (grid = T); top_k <= MAX_TOP_K.
extern "C" __global__ void combine(
    const unsigned short* __restrict__ recv,
    const int* __restrict__ topk,
    const float* __restrict__ weights,
    const int* __restrict__ sparse_to_dense,
    int tokens,
    int top_k,
    int experts,
    int hidden,
    unsigned short* __restrict__ out)
{
    __shared__ int s_slot[MAX_TOP_K];
    __shared__ float s_weight[MAX_TOP_K];
    const int t = blockIdx.x;
    if (t >= tokens) return;
    for (int k = threadIdx.x; k < top_k; k += blockDim.x) {
        const int e = topk[t * top_k + k];
        int slot = -1;
        if (e >= 0 && e < experts) slot = sparse_to_dense[(long long)t * experts + e];
        s_slot[k] = slot;
        s_weight[k] = weights[t * top_k + k];
    }
    __syncthreads();
    unsigned short* dst = out + (long long)t * hidden;
    if ((hidden & 7) == 0) {
        const int n = hidden >> 3;
        const uint4* r4 = (const uint4*)recv;
        uint4* d4 = (uint4*)dst;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float acc[8];
            for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
            for (int k = 0; k < top_k; ++k) {
                const int slot = s_slot[k];
                if (slot < 0) continue;
                const float w = s_weight[k];
                const uint4 v = r4[(long long)slot * n + i];
                acc_pair(acc + 0, v.x, w);
                acc_pair(acc + 2, v.y, w);
                acc_pair(acc + 4, v.z, w);
                acc_pair(acc + 6, v.w, w);
            }
            uint4 o;
            o.x = pack_pair(acc[0], acc[1]);
            o.y = pack_pair(acc[2], acc[3]);
            o.z = pack_pair(acc[4], acc[5]);
            o.w = pack_pair(acc[6], acc[7]);
            d4[i] = o;
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
            float acc = 0.0f;
            for (int k = 0; k < top_k; ++k) {
                const int slot = s_slot[k];
                if (slot < 0) continue;
                acc = fmaf(s_weight[k], bf16_to_f32(recv[(long long)slot * hidden + i]), acc);
            }
            dst[i] = f32_to_bf16(acc);
        }
    }
}
