//! CPU reference of one HT-decode step, bit-for-bit the conventions of `kernels/ht_decode.cu`.
//!
//! Inputs come from a seeded RNG per rank ([`generate_inputs`], [`generate_topk`]), so any
//! party (the emulated all-gather backend, a checker) can rebuild every rank's routing map
//! ([`reference_all_gather`]) from the shared base seed alone. [`compare`] turns a step's
//! downloaded device buffers into a [`CheckReport`].
#![forbid(unsafe_code)]

use super::config::HtDecodeConfig;
pub use super::config::{BlockLayout, HEADER_INTS};

/// Relative L2 error allowed between the device and reference combine outputs (bf16 output).
pub const COMBINE_REL_L2_TOLERANCE: f64 = 1e-2;

// ---------------------------------------------------------------------------------------------
// bf16 and RNG
// ---------------------------------------------------------------------------------------------

/// f32 → bf16 bits, round to nearest even; NaN stays a quiet NaN (as the kernels do).
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x0040) as u16;
    }
    let rounded = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (rounded >> 16) as u16
}

/// bf16 bits → f32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// SplitMix64, used to derive independent seeds.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Small xorshift64* generator; deterministic across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from any seed (0 included).
    pub fn new(seed: u64) -> Self {
        let s = splitmix64(seed);
        Rng(if s == 0 { 0x2545_f491_4f6c_dd1d } else { s })
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0); the bias of the modulo is irrelevant here.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// What each rank's inputs draw from, so one part can be regenerated without the others.
#[derive(Debug, Clone, Copy)]
enum Stream {
    TopK = 1,
    Weights = 2,
    Tokens = 3,
}

/// Seed of one input stream of one rank, derived from the config's base seed.
fn stream_seed(base: u64, rank: usize, stream: Stream) -> u64 {
    splitmix64(splitmix64(base ^ (rank as u64).wrapping_mul(0xd134_2543_de82_ef95)) ^ stream as u64)
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// One rank's step inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct RankInputs {
    /// Top-k expert indices, `[T × K]`, distinct within a row, each in `0..E`.
    pub topk: Vec<i32>,
    /// Top-k weights, `[T × K]`, positive, each row summing to 1.
    pub weights: Vec<f32>,
    /// Tokens, bf16 bits, `[T × H]`, never ±0.
    pub tokens: Vec<u16>,
}

/// Top-k indices of `rank` (`[T × K]`, distinct per token), from the config's seed.
pub fn generate_topk(cfg: &HtDecodeConfig, rank: usize) -> Vec<i32> {
    let mut rng = Rng::new(stream_seed(cfg.seed, rank, Stream::TopK));
    let (t, k, e) = (cfg.tokens, cfg.top_k, cfg.experts);
    let mut out = Vec::with_capacity(t * k);
    for _ in 0..t {
        let row_start = out.len();
        while out.len() - row_start < k {
            let cand = rng.below(e) as i32;
            if !out[row_start..].contains(&cand) {
                out.push(cand);
            }
        }
    }
    out
}

/// All inputs of `rank`, from the config's seed.
pub fn generate_inputs(cfg: &HtDecodeConfig, rank: usize) -> RankInputs {
    let topk = generate_topk(cfg, rank);
    let mut rng = Rng::new(stream_seed(cfg.seed, rank, Stream::Weights));
    let (t, k, h) = (cfg.tokens, cfg.top_k, cfg.hidden);
    let mut weights = Vec::with_capacity(t * k);
    for _ in 0..t {
        let row: Vec<f32> = (0..k).map(|_| 0.05 + 0.95 * rng.unit_f32()).collect();
        let sum: f32 = row.iter().sum();
        weights.extend(row.iter().map(|w| w / sum));
    }
    let mut rng = Rng::new(stream_seed(cfg.seed, rank, Stream::Tokens));
    let tokens = (0..t * h)
        .map(|_| {
            let bits = rng.next_u64();
            let mag = 0.0625 + 0.9375 * ((bits >> 40) as f32 / (1u64 << 24) as f32);
            let v = if bits & 1 == 1 { -mag } else { mag };
            f32_to_bf16(v)
        })
        .collect();
    RankInputs {
        topk,
        weights,
        tokens,
    }
}

// ---------------------------------------------------------------------------------------------
// Stages
// ---------------------------------------------------------------------------------------------

/// `convert_topk_to_routing_map`: `[M × ceil(E/8)]` bytes; expert e is bit `e & 7` of byte
/// `e >> 3`; rows ≥ T zero; indices outside `0..E` ignored.
pub fn routing_map(cfg: &HtDecodeConfig, topk: &[i32]) -> Vec<u8> {
    let b = cfg.bytes_per_row();
    let mut map = vec![0u8; cfg.max_tokens * b];
    for t in 0..cfg.tokens {
        for &e in &topk[t * cfg.top_k..(t + 1) * cfg.top_k] {
            if e >= 0 && (e as usize) < cfg.experts {
                let e = e as usize;
                map[t * b + (e >> 3)] |= 1 << (e & 7);
            }
        }
    }
    map
}

/// The routing all-gather's result, `[R × M × ceil(E/8)]`: every rank's map, each rebuilt
/// from its own seed.
pub fn reference_all_gather(cfg: &HtDecodeConfig) -> Vec<u8> {
    let mut out = Vec::with_capacity(cfg.gathered_bytes());
    for r in 0..cfg.ranks {
        out.extend(routing_map(cfg, &generate_topk(cfg, r)));
    }
    out
}

/// `preprocess_metadata`'s outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Pairs routed to each expert over all ranks, `[E]`.
    pub counts: Vec<i32>,
    /// Exclusive prefix sum of `counts`, `[E + 1]`.
    pub offsets: Vec<i32>,
    /// This rank's tokens routed to each expert, `[E]`.
    pub local_counts: Vec<i32>,
    /// Exclusive prefix sum of `local_counts`, `[E + 1]`.
    pub local_offsets: Vec<i32>,
    /// Rank s's tokens routed to expert e at `s * E + e`, `[R × E]`.
    pub rank_counts: Vec<i32>,
    /// Tokens of ranks < s routed to expert e at `s * E + e`, `[R × E]`.
    pub rank_prefix: Vec<i32>,
    /// Pairs routed by this rank (`local_offsets[E]`).
    pub local_total: i32,
    /// Pairs routed to this rank's E/R local experts, over all ranks.
    pub recv_total: i32,
    /// Pairs routed over all ranks (`offsets[E]`).
    pub total: i32,
}

impl Metadata {
    /// The device block, header word 0 (the kernel's done-block counter) left 0.
    pub fn to_block(&self, layout: &BlockLayout) -> Vec<i32> {
        let mut b = vec![0i32; layout.len];
        b[1] = self.local_total;
        b[2] = self.recv_total;
        b[3] = self.total;
        let parts: [(usize, &[i32]); 6] = [
            (layout.counts, &self.counts),
            (layout.offsets, &self.offsets),
            (layout.local_counts, &self.local_counts),
            (layout.local_offsets, &self.local_offsets),
            (layout.rank_counts, &self.rank_counts),
            (layout.rank_prefix, &self.rank_prefix),
        ];
        for (at, src) in parts {
            b[at..at + src.len()].copy_from_slice(src);
        }
        b
    }
}

fn exclusive_prefix(counts: &[i32]) -> Vec<i32> {
    let mut out = Vec::with_capacity(counts.len() + 1);
    let mut run = 0i32;
    for &c in counts {
        out.push(run);
        run += c;
    }
    out.push(run);
    out
}

/// `preprocess_metadata`: metadata and the sparse-to-dense map `[M × E]` (−1 where unrouted)
/// of `cfg.rank`, from the gathered maps and that rank's top-k indices.
pub fn preprocess(cfg: &HtDecodeConfig, gathered: &[u8], topk: &[i32]) -> (Metadata, Vec<i32>) {
    let (e_n, r_n, m_n, b) = (cfg.experts, cfg.ranks, cfg.max_tokens, cfg.bytes_per_row());
    assert_eq!(gathered.len(), r_n * m_n * b, "gathered buffer size");
    let mut rank_counts = vec![0i32; r_n * e_n];
    let mut rank_prefix = vec![0i32; r_n * e_n];
    let mut counts = vec![0i32; e_n];
    // in-expert index of each of this rank's (token, expert) pairs, before offsets
    let mut s2d = vec![-1i32; m_n * e_n];
    for s in 0..r_n {
        let map = &gathered[s * m_n * b..(s + 1) * m_n * b];
        for (m, row) in map.chunks_exact(b).enumerate() {
            for e in 0..e_n {
                if row[e >> 3] & (1 << (e & 7)) != 0 {
                    if s == cfg.rank && m < cfg.tokens {
                        s2d[m * e_n + e] = rank_counts[s * e_n + e];
                    }
                    rank_counts[s * e_n + e] += 1;
                }
            }
        }
        for e in 0..e_n {
            rank_prefix[s * e_n + e] = counts[e];
            counts[e] += rank_counts[s * e_n + e];
        }
    }
    let local_counts = rank_counts[cfg.rank * e_n..(cfg.rank + 1) * e_n].to_vec();
    let offsets = exclusive_prefix(&counts);
    let local_offsets = exclusive_prefix(&local_counts);
    // per-expert index → receive-buffer slot, once per distinct valid index of a row
    for t in 0..cfg.tokens {
        let row = &topk[t * cfg.top_k..(t + 1) * cfg.top_k];
        for (k, &e) in row.iter().enumerate() {
            if e < 0 || e as usize >= e_n || row[..k].contains(&e) {
                continue;
            }
            let e = e as usize;
            let v = &mut s2d[t * e_n + e];
            if *v >= 0 {
                *v += local_offsets[e];
            }
        }
    }
    let local = cfg.local_experts();
    let meta = Metadata {
        local_total: local_offsets[e_n],
        recv_total: offsets[local.end] - offsets[local.start],
        total: offsets[e_n],
        counts,
        offsets,
        local_counts,
        local_offsets,
        rank_counts,
        rank_prefix,
    };
    (meta, s2d)
}

/// `dispatch`: the receive buffer `[T·K × H]`; rows no pair lands in stay 0.
pub fn dispatch(cfg: &HtDecodeConfig, tokens: &[u16], topk: &[i32], s2d: &[i32]) -> Vec<u16> {
    let (h, e_n) = (cfg.hidden, cfg.experts);
    let mut recv = vec![0u16; cfg.recv_rows() * h];
    for t in 0..cfg.tokens {
        for &e in &topk[t * cfg.top_k..(t + 1) * cfg.top_k] {
            if e < 0 || e as usize >= e_n {
                continue;
            }
            let slot = s2d[t * e_n + e as usize];
            if slot < 0 {
                continue;
            }
            let slot = slot as usize;
            recv[slot * h..(slot + 1) * h].copy_from_slice(&tokens[t * h..(t + 1) * h]);
        }
    }
    recv
}

/// The stand-in's scale of expert `e`.
pub fn standin_scale(e: usize) -> f32 {
    0.01 * (e + 1) as f32
}

/// `expert_standin`: rows of expert e scaled in place by [`standin_scale`], rounded to bf16.
pub fn expert_standin(cfg: &HtDecodeConfig, recv: &mut [u16], local_offsets: &[i32]) {
    let h = cfg.hidden;
    for e in 0..cfg.experts {
        let scale = standin_scale(e);
        let (lo, hi) = (local_offsets[e] as usize, local_offsets[e + 1] as usize);
        for v in &mut recv[lo * h..hi * h] {
            *v = f32_to_bf16(bf16_to_f32(*v) * scale);
        }
    }
}

/// `combine`: `[T × H]` bf16, f32 accumulation in k order with fused multiply-add.
pub fn combine(
    cfg: &HtDecodeConfig,
    recv: &[u16],
    topk: &[i32],
    weights: &[f32],
    s2d: &[i32],
) -> Vec<u16> {
    let (h, e_n, k_n) = (cfg.hidden, cfg.experts, cfg.top_k);
    let mut out = vec![0u16; cfg.tokens * h];
    let mut acc = vec![0f32; h];
    for t in 0..cfg.tokens {
        acc.iter_mut().for_each(|a| *a = 0.0);
        for k in 0..k_n {
            let e = topk[t * k_n + k];
            if e < 0 || e as usize >= e_n {
                continue;
            }
            let slot = s2d[t * e_n + e as usize];
            if slot < 0 {
                continue;
            }
            let w = weights[t * k_n + k];
            let row = &recv[slot as usize * h..(slot as usize + 1) * h];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = w.mul_add(bf16_to_f32(v), *a);
            }
        }
        for (o, &a) in out[t * h..(t + 1) * h].iter_mut().zip(&acc) {
            *o = f32_to_bf16(a);
        }
    }
    out
}

/// Everything one step produces on `cfg.rank`.
#[derive(Debug, Clone)]
pub struct StepReference {
    pub routing_map: Vec<u8>,
    pub gathered: Vec<u8>,
    pub metadata: Metadata,
    pub sparse_to_dense: Vec<i32>,
    /// Receive buffer after the stand-in (if enabled); only rows `< local_total` are defined.
    pub recv: Vec<u16>,
    pub out: Vec<u16>,
}

/// The whole step for `cfg.rank` with the given inputs and gathered maps.
pub fn reference_step(cfg: &HtDecodeConfig, inputs: &RankInputs, gathered: &[u8]) -> StepReference {
    let map = routing_map(cfg, &inputs.topk);
    let (metadata, s2d) = preprocess(cfg, gathered, &inputs.topk);
    let mut recv = dispatch(cfg, &inputs.tokens, &inputs.topk, &s2d);
    if cfg.expert_standin {
        expert_standin(cfg, &mut recv, &metadata.local_offsets);
    }
    let out = combine(cfg, &recv, &inputs.topk, &inputs.weights, &s2d);
    StepReference {
        routing_map: map,
        gathered: gathered.to_vec(),
        metadata,
        sparse_to_dense: s2d,
        recv,
        out,
    }
}

// ---------------------------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------------------------

/// A step's device buffers, downloaded.
#[derive(Debug, Clone, Default)]
pub struct DeviceOutputs {
    pub routing_map: Vec<u8>,
    pub gathered: Vec<u8>,
    /// The whole preprocessing block ([`BlockLayout`]).
    pub block: Vec<i32>,
    pub sparse_to_dense: Vec<i32>,
    pub recv: Vec<u16>,
    pub out: Vec<u16>,
}

/// Result of comparing one step against the CPU reference.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    pub tokens: usize,
    pub rank: usize,
    pub routing_map_mismatches: usize,
    pub gathered_mismatches: usize,
    /// Preprocessing block words that differ (the done-block counter excluded).
    pub metadata_mismatches: usize,
    pub sparse_to_dense_mismatches: usize,
    /// Receive-buffer elements (rows `< local_total`) that differ.
    pub recv_mismatches: usize,
    /// ‖device − reference‖₂ / ‖reference‖₂ over the combine output, in f64.
    pub combine_rel_l2: f64,
    /// Combine outputs that are NaN or infinite.
    pub combine_nonfinite: usize,
    pub tolerance: f64,
    /// First mismatch of each kind, for a human.
    pub notes: Vec<String>,
}

impl CheckReport {
    /// Whether every comparison passed.
    pub fn passed(&self) -> bool {
        self.routing_map_mismatches == 0
            && self.gathered_mismatches == 0
            && self.metadata_mismatches == 0
            && self.sparse_to_dense_mismatches == 0
            && self.recv_mismatches == 0
            && self.combine_nonfinite == 0
            && self.combine_rel_l2.is_finite()
            && self.combine_rel_l2 <= self.tolerance
    }

    /// One line: verdict and every count.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} map={} gather={} metadata={} s2d={} recv={} combine_rel_l2={:.3e} (tol {:.0e}, nonfinite {})",
            if self.passed() { "PASS" } else { "FAIL" },
            self.routing_map_mismatches,
            self.gathered_mismatches,
            self.metadata_mismatches,
            self.sparse_to_dense_mismatches,
            self.recv_mismatches,
            self.combine_rel_l2,
            self.tolerance,
            self.combine_nonfinite,
        );
        if !self.notes.is_empty() {
            s.push_str(" [");
            s.push_str(&self.notes.join("; "));
            s.push(']');
        }
        s
    }
}

fn count_mismatches<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &[T],
    want: &[T],
    skip: impl Fn(usize) -> bool,
    notes: &mut Vec<String>,
) -> usize {
    if got.len() != want.len() {
        notes.push(format!("{what}: length {} != {}", got.len(), want.len()));
        return got.len().max(want.len());
    }
    let mut n = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w && !skip(i) {
            if n == 0 {
                notes.push(format!("{what}[{i}] = {g:?}, want {w:?}"));
            }
            n += 1;
        }
    }
    n
}

/// Compares downloaded device buffers with the reference: everything exact except the
/// combine output, held to [`COMBINE_REL_L2_TOLERANCE`].
pub fn compare(cfg: &HtDecodeConfig, want: &StepReference, got: &DeviceOutputs) -> CheckReport {
    let mut notes = Vec::new();
    let layout = BlockLayout::new(cfg.experts, cfg.ranks);
    let routing_map_mismatches = count_mismatches(
        "routing_map",
        &got.routing_map,
        &want.routing_map,
        |_| false,
        &mut notes,
    );
    let gathered_mismatches = count_mismatches(
        "gathered",
        &got.gathered,
        &want.gathered,
        |_| false,
        &mut notes,
    );
    let metadata_mismatches = count_mismatches(
        "metadata_block",
        &got.block,
        &want.metadata.to_block(&layout),
        |i| i == 0,
        &mut notes,
    );
    let sparse_to_dense_mismatches = count_mismatches(
        "sparse_to_dense",
        &got.sparse_to_dense,
        &want.sparse_to_dense,
        |_| false,
        &mut notes,
    );
    let defined = want.metadata.local_total.max(0) as usize * cfg.hidden;
    let recv_mismatches = if got.recv.len() < defined || want.recv.len() < defined {
        notes.push(format!(
            "recv: length {} / {} < {defined}",
            got.recv.len(),
            want.recv.len()
        ));
        defined
    } else {
        count_mismatches(
            "recv",
            &got.recv[..defined],
            &want.recv[..defined],
            |_| false,
            &mut notes,
        )
    };
    let (mut diff2, mut ref2, mut nonfinite) = (0f64, 0f64, 0usize);
    if got.out.len() != want.out.len() {
        notes.push(format!(
            "out: length {} != {}",
            got.out.len(),
            want.out.len()
        ));
        diff2 = f64::INFINITY;
    } else {
        for (&g, &w) in got.out.iter().zip(&want.out) {
            let (g, w) = (f64::from(bf16_to_f32(g)), f64::from(bf16_to_f32(w)));
            if !g.is_finite() {
                nonfinite += 1;
                continue;
            }
            diff2 += (g - w) * (g - w);
            ref2 += w * w;
        }
    }
    let combine_rel_l2 = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else if diff2 == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    CheckReport {
        tokens: cfg.tokens,
        rank: cfg.rank,
        routing_map_mismatches,
        gathered_mismatches,
        metadata_mismatches,
        sparse_to_dense_mismatches,
        recv_mismatches,
        combine_rel_l2,
        combine_nonfinite: nonfinite,
        tolerance: COMBINE_REL_L2_TOLERANCE,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(tokens: usize, rank: usize) -> HtDecodeConfig {
        HtDecodeConfig {
            tokens,
            max_tokens: tokens + 3,
            hidden: 40,
            top_k: 8,
            experts: 256,
            ranks: 8,
            rank,
            expert_standin: true,
            seed: 7,
        }
    }

    #[test]
    fn bf16_round_trip_and_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(-2.0), 0xc000);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0)
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (…02)
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        for b in [0x0001u16, 0x3f81, 0x7f7f, 0xbf80, 0x8001] {
            assert_eq!(f32_to_bf16(bf16_to_f32(b)), b);
        }
    }

    #[test]
    fn inputs_are_deterministic_valid_and_nonzero() {
        let cfg = small(33, 2);
        let a = generate_inputs(&cfg, 2);
        assert_eq!(a, generate_inputs(&cfg, 2));
        assert_ne!(a.topk, generate_inputs(&cfg, 3).topk);
        assert_eq!(a.topk, generate_topk(&cfg, 2));
        assert_eq!(a.topk.len(), 33 * 8);
        for row in a.topk.chunks_exact(8) {
            for (k, &e) in row.iter().enumerate() {
                assert!((0..256).contains(&e));
                assert!(!row[..k].contains(&e), "duplicate expert in {row:?}");
            }
        }
        for row in a.weights.chunks_exact(8) {
            assert!(row.iter().all(|&w| w > 0.0));
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        assert_eq!(a.tokens.len(), 33 * 40);
        assert!(
            a.tokens
                .iter()
                .all(|&b| b & 0x7fff != 0 && bf16_to_f32(b).abs() >= 0.0625)
        );
    }

    #[test]
    fn routing_map_has_k_bits_per_valid_row_and_zero_tail() {
        let cfg = small(17, 0);
        let topk = generate_topk(&cfg, 0);
        let map = routing_map(&cfg, &topk);
        let b = cfg.bytes_per_row();
        assert_eq!(map.len(), cfg.max_tokens * b);
        for (m, row) in map.chunks_exact(b).enumerate() {
            let bits: u32 = row.iter().map(|x| x.count_ones()).sum();
            if m < cfg.tokens {
                assert_eq!(bits, 8, "row {m}");
                for &e in &topk[m * 8..(m + 1) * 8] {
                    assert_ne!(row[e as usize / 8] & (1 << (e % 8)), 0);
                }
            } else {
                assert_eq!(bits, 0, "tail row {m}");
            }
        }
    }

    #[test]
    fn routing_map_handles_partial_last_byte() {
        let cfg = HtDecodeConfig {
            experts: 12,
            ranks: 3,
            top_k: 3,
            ..small(5, 1)
        };
        assert_eq!(cfg.bytes_per_row(), 2);
        let topk = generate_topk(&cfg, 1);
        let map = routing_map(&cfg, &topk);
        for row in map.chunks_exact(2).take(5) {
            assert_eq!(row[0].count_ones() + row[1].count_ones(), 3);
            assert_eq!(row[1] & 0xf0, 0);
        }
    }

    #[test]
    fn metadata_counts_sum_and_slots_form_a_permutation() {
        for rank in [0, 5, 7] {
            let cfg = small(29, rank);
            let gathered = reference_all_gather(&cfg);
            assert_eq!(gathered.len(), cfg.gathered_bytes());
            let topk = generate_topk(&cfg, rank);
            assert_eq!(
                &gathered[rank * cfg.routing_map_bytes()..][..cfg.routing_map_bytes()],
                routing_map(&cfg, &topk).as_slice()
            );
            let (meta, s2d) = preprocess(&cfg, &gathered, &topk);
            let (r, t, k, e) = (8, 29, 8, 256);
            assert_eq!(meta.counts.iter().sum::<i32>(), (r * t * k) as i32);
            assert_eq!(meta.total, (r * t * k) as i32);
            assert_eq!(meta.local_total, (t * k) as i32);
            assert_eq!(meta.offsets[e], meta.total);
            assert_eq!(meta.local_offsets.len(), e + 1);
            for x in 0..e {
                assert_eq!(meta.offsets[x + 1] - meta.offsets[x], meta.counts[x]);
                let per_rank: i32 = (0..r).map(|s| meta.rank_counts[s * e + x]).sum();
                assert_eq!(per_rank, meta.counts[x]);
                for s in 0..r {
                    let before: i32 = (0..s).map(|q| meta.rank_counts[q * e + x]).sum();
                    assert_eq!(meta.rank_prefix[s * e + x], before);
                }
            }
            let local: i32 = (rank * 32..(rank + 1) * 32).map(|x| meta.counts[x]).sum();
            assert_eq!(meta.recv_total, local);
            // slots: every routed pair has one, all distinct, inside its expert's range
            let mut seen = vec![false; t * k];
            for tok in 0..t {
                for &ex in &topk[tok * k..(tok + 1) * k] {
                    let slot = s2d[tok * e + ex as usize];
                    assert!(slot >= 0);
                    let ex = ex as usize;
                    assert!(slot >= meta.local_offsets[ex] && slot < meta.local_offsets[ex + 1]);
                    assert!(!std::mem::replace(&mut seen[slot as usize], true));
                }
            }
            assert!(seen.iter().all(|&s| s));
            assert_eq!(s2d.iter().filter(|&&v| v >= 0).count(), t * k);
            // slots within one expert follow token order
            for ex in 0..e {
                let slots: Vec<i32> = (0..t)
                    .map(|tok| s2d[tok * e + ex])
                    .filter(|&v| v >= 0)
                    .collect();
                assert!(slots.windows(2).all(|w| w[1] == w[0] + 1));
            }
        }
    }

    #[test]
    fn combine_of_identity_experts_is_the_weighted_sum() {
        let cfg = HtDecodeConfig {
            expert_standin: false,
            ..small(9, 3)
        };
        let inputs = generate_inputs(&cfg, 3);
        let step = reference_step(&cfg, &inputs, &reference_all_gather(&cfg));
        let h = cfg.hidden;
        for t in 0..cfg.tokens {
            let wsum: f32 = inputs.weights[t * 8..(t + 1) * 8].iter().sum();
            for i in 0..h {
                let x = bf16_to_f32(inputs.tokens[t * h + i]);
                let got = bf16_to_f32(step.out[t * h + i]);
                let want = wsum * x;
                assert!(
                    (got - want).abs() <= want.abs() * 8e-3,
                    "t={t} i={i}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn combine_with_standin_weights_each_expert_scale() {
        let cfg = small(4, 1);
        let inputs = generate_inputs(&cfg, 1);
        let step = reference_step(&cfg, &inputs, &reference_all_gather(&cfg));
        let h = cfg.hidden;
        for t in 0..cfg.tokens {
            for i in 0..h {
                let x = bf16_to_f32(inputs.tokens[t * h + i]);
                let want: f32 = (0..8)
                    .map(|k| {
                        let e = inputs.topk[t * 8 + k] as usize;
                        inputs.weights[t * 8 + k] * bf16_to_f32(f32_to_bf16(x * standin_scale(e)))
                    })
                    .sum();
                let got = bf16_to_f32(step.out[t * h + i]);
                assert!(
                    (got - want).abs() <= want.abs() * 8e-3 + 1e-6,
                    "t={t} i={i}"
                );
            }
        }
        // the stand-in changes the result: it depends on the experts
        let plain = reference_step(
            &HtDecodeConfig {
                expert_standin: false,
                ..cfg.clone()
            },
            &inputs,
            &step.gathered,
        );
        assert_ne!(plain.out, step.out);
    }

    fn outputs_of(step: &StepReference, cfg: &HtDecodeConfig) -> DeviceOutputs {
        let mut block = step
            .metadata
            .to_block(&BlockLayout::new(cfg.experts, cfg.ranks));
        block[0] = 32; // the done-block counter: ignored
        DeviceOutputs {
            routing_map: step.routing_map.clone(),
            gathered: step.gathered.clone(),
            block,
            sparse_to_dense: step.sparse_to_dense.clone(),
            recv: step.recv.clone(),
            out: step.out.clone(),
        }
    }

    #[test]
    fn compare_passes_identical_and_catches_poison() {
        let cfg = small(6, 4);
        let inputs = generate_inputs(&cfg, 4);
        let step = reference_step(&cfg, &inputs, &reference_all_gather(&cfg));
        let ok = compare(&cfg, &step, &outputs_of(&step, &cfg));
        assert!(ok.passed(), "{}", ok.summary());
        assert_eq!(ok.combine_rel_l2, 0.0);

        let mut bad = outputs_of(&step, &cfg);
        bad.routing_map[cfg.bytes_per_row() * cfg.tokens] = 0xab; // a tail row left unwritten
        bad.block[5] += 1;
        bad.sparse_to_dense[3] = 0;
        let r = compare(&cfg, &step, &bad);
        assert!(!r.passed());
        assert_eq!(r.routing_map_mismatches, 1);
        assert_eq!(r.metadata_mismatches, 1);
        assert_eq!(r.sparse_to_dense_mismatches, 1);
        assert_eq!(r.notes.len(), 3);

        // an unwritten combine output (poisoned with 0xABAB) blows the tolerance
        let mut bad = outputs_of(&step, &cfg);
        bad.out
            .iter_mut()
            .take(cfg.hidden)
            .for_each(|v| *v = 0xabab);
        let r = compare(&cfg, &step, &bad);
        assert!(!r.passed(), "{}", r.summary());
        // a NaN is caught even where the L2 sum would hide it
        let mut bad = outputs_of(&step, &cfg);
        bad.out[0] = 0x7fc0;
        let r = compare(&cfg, &step, &bad);
        assert_eq!(r.combine_nonfinite, 1);
        assert!(!r.passed());
        // a slightly perturbed output is within tolerance
        let mut close = outputs_of(&step, &cfg);
        close.out[1] ^= 1;
        let r = compare(&cfg, &step, &close);
        assert!(r.passed(), "{}", r.summary());
        assert!(r.combine_rel_l2 > 0.0);
        // recv rows past local_total are not compared
        let mut tail = outputs_of(&step, &cfg);
        tail.recv.resize(cfg.recv_rows() * cfg.hidden + 5, 0xabab);
        tail.recv
            .truncate(step.metadata.local_total as usize * cfg.hidden);
        assert!(compare(&cfg, &step, &tail).passed());
    }

    #[test]
    fn block_layout_is_contiguous() {
        let l = BlockLayout::new(256, 8);
        assert_eq!(l.counts, 4);
        assert_eq!(l.offsets, 4 + 256);
        assert_eq!(l.local_counts, 4 + 256 + 257);
        assert_eq!(l.local_offsets, 4 + 2 * 256 + 257);
        assert_eq!(l.rank_counts, 4 + 2 * 256 + 2 * 257);
        assert_eq!(l.rank_prefix, l.rank_counts + 2048);
        assert_eq!(l.len, 6 + 4 * 256 + 2 * 8 * 256);
    }
}
