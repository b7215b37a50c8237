//! Shape and inputs of one rank's HT-decode step ([`HtDecodeConfig`]), the layout of the
//! device preprocessing block ([`BlockLayout`]) and the workload's error type. Both the device
//! step and the CPU reference build on this file; it depends on neither.
#![forbid(unsafe_code)]

use cudarc::driver::DriverError;
use std::ops::Range;

/// Largest top-k the combine kernel supports (its `MAX_TOP_K`).
pub const MAX_TOP_K: usize = 64;

/// Number of ints before `counts` in the preprocessing block:
/// `[done-block counter, local_total, recv_total, total]`.
pub const HEADER_INTS: usize = 4;

/// Offsets (in ints) of each part of the device preprocessing block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    pub counts: usize,
    pub offsets: usize,
    pub local_counts: usize,
    pub local_offsets: usize,
    pub rank_counts: usize,
    pub rank_prefix: usize,
    /// Total length in ints.
    pub len: usize,
}

impl BlockLayout {
    /// The layout for `experts` experts and `ranks` ranks.
    pub fn new(experts: usize, ranks: usize) -> Self {
        let counts = HEADER_INTS;
        let offsets = counts + experts;
        let local_counts = offsets + experts + 1;
        let local_offsets = local_counts + experts;
        let rank_counts = local_offsets + experts + 1;
        let rank_prefix = rank_counts + ranks * experts;
        let len = rank_prefix + ranks * experts;
        BlockLayout {
            counts,
            offsets,
            local_counts,
            local_offsets,
            rank_counts,
            rank_prefix,
            len,
        }
    }
}

/// Errors of the HT-decode workload.
#[derive(Debug, thiserror::Error)]
pub enum HtDecodeError {
    #[error("invalid HT decode config: {0}")]
    Config(String),
    #[error("CUDA driver error in {what}: {source}")]
    Driver {
        what: &'static str,
        #[source]
        source: DriverError,
    },
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// The kernels did not compile.
    #[error("NVRTC: {0}")]
    Compile(#[from] crate::workload::cuda::nvrtc::CompileError),
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    #[error("the stream belongs to another CUDA context than this HtDecode's")]
    WrongContext,
}

pub(crate) fn drv(what: &'static str) -> impl FnOnce(DriverError) -> HtDecodeError {
    move |source| HtDecodeError::Driver { what, source }
}

/// Shape and inputs of one rank's HT-decode step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtDecodeConfig {
    /// Tokens of this step, T (1…512 in the sweep).
    pub tokens: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// Experts per token K.
    pub top_k: usize,
    /// Experts E; rank r owns experts `r·E/R .. (r+1)·E/R`.
    pub experts: usize,
    /// Ranks R.
    pub ranks: usize,
    /// Rows of the routing map, M ≥ T (rows ≥ T are zero).
    pub max_tokens: usize,
    /// Run the `expert_standin` kernel (scale expert e's rows by 0.01·(e+1)).
    pub expert_standin: bool,
    /// This rank, `< ranks`.
    pub rank: usize,
    /// Base seed of every rank's inputs (the same on all ranks of a run).
    pub seed: u64,
}

impl Default for HtDecodeConfig {
    fn default() -> Self {
        HtDecodeConfig {
            tokens: 1,
            hidden: 7168,
            top_k: 8,
            experts: 256,
            ranks: 8,
            max_tokens: 1,
            expert_standin: true,
            rank: 0,
            seed: 0x005e_ed0f_47de_c0de,
        }
    }
}

impl HtDecodeConfig {
    /// The default config with T = M = `tokens`.
    pub fn with_tokens(tokens: usize) -> Self {
        HtDecodeConfig {
            tokens,
            max_tokens: tokens,
            ..Default::default()
        }
    }

    /// Bytes of one routing-map row, ceil(E/8).
    pub fn bytes_per_row(&self) -> usize {
        self.experts.div_ceil(8)
    }

    /// Bytes of one rank's routing map, M·ceil(E/8).
    pub fn routing_map_bytes(&self) -> usize {
        self.max_tokens * self.bytes_per_row()
    }

    /// Bytes of the gathered maps, R·M·ceil(E/8).
    pub fn gathered_bytes(&self) -> usize {
        self.ranks * self.routing_map_bytes()
    }

    /// Rows of the receive buffer, T·K.
    pub fn recv_rows(&self) -> usize {
        self.tokens * self.top_k
    }

    /// This rank's experts.
    pub fn local_experts(&self) -> Range<usize> {
        let per = self.experts / self.ranks.max(1);
        self.rank * per..(self.rank + 1) * per
    }

    /// Checks the shape; every device element count must fit the kernels' `int`s.
    pub fn validate(&self) -> Result<(), HtDecodeError> {
        let bad = |m: String| Err(HtDecodeError::Config(m));
        if self.tokens == 0 {
            return bad("tokens must be ≥ 1".into());
        }
        if self.max_tokens < self.tokens {
            return bad(format!(
                "max_tokens {} < tokens {}",
                self.max_tokens, self.tokens
            ));
        }
        if self.hidden == 0 || self.experts == 0 || self.ranks == 0 {
            return bad("hidden, experts and ranks must be ≥ 1".into());
        }
        if self.top_k == 0 || self.top_k > self.experts || self.top_k > MAX_TOP_K {
            return bad(format!(
                "top_k {} must be in 1..={}",
                self.top_k,
                self.experts.min(MAX_TOP_K)
            ));
        }
        if !self.experts.is_multiple_of(self.ranks) {
            return bad(format!(
                "experts {} not divisible by ranks {}",
                self.experts, self.ranks
            ));
        }
        if self.rank >= self.ranks {
            return bad(format!("rank {} ≥ ranks {}", self.rank, self.ranks));
        }
        let limit = i32::MAX as u128;
        let sizes = [
            (
                "gathered bytes",
                self.ranks as u128 * self.routing_map_bytes() as u128,
            ),
            (
                "sparse-to-dense entries",
                self.max_tokens as u128 * self.experts as u128,
            ),
            (
                "receive elements",
                self.recv_rows() as u128 * self.hidden as u128,
            ),
            ("token elements", self.tokens as u128 * self.hidden as u128),
            (
                "preprocessing block ints",
                BlockLayout::new(self.experts, self.ranks).len as u128,
            ),
        ];
        for (what, n) in sizes {
            if n > limit {
                return bad(format!("{what} = {n} exceed i32"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_matches_the_design() {
        let c = HtDecodeConfig::default();
        assert_eq!(
            (c.hidden, c.top_k, c.experts, c.ranks, c.tokens),
            (7168, 8, 256, 8, 1)
        );
        assert_eq!(c.max_tokens, 1);
        c.validate().unwrap();
        let c = HtDecodeConfig::with_tokens(512);
        assert_eq!(c.bytes_per_row(), 32);
        assert_eq!(c.routing_map_bytes(), 512 * 32);
        assert_eq!(c.gathered_bytes(), 8 * 512 * 32);
        assert_eq!(c.local_experts(), 0..32);
        c.validate().unwrap();
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let ok = HtDecodeConfig::with_tokens(8);
        for bad in [
            HtDecodeConfig {
                tokens: 0,
                ..ok.clone()
            },
            HtDecodeConfig {
                max_tokens: 7,
                ..ok.clone()
            },
            HtDecodeConfig {
                top_k: 0,
                ..ok.clone()
            },
            HtDecodeConfig {
                top_k: 65,
                experts: 512,
                ..ok.clone()
            },
            HtDecodeConfig {
                experts: 100,
                ..ok.clone()
            },
            HtDecodeConfig {
                rank: 8,
                ..ok.clone()
            },
            HtDecodeConfig {
                tokens: 1 << 20,
                max_tokens: 1 << 20,
                ..ok.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(HtDecodeError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
