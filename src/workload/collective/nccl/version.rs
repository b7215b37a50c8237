//! NCCL versions ([`NcclVersion`]) and how the graph usage mode reaches a given NCCL
//! ([`ModeRoute`]: the config field from 2.29 on, the environment before).
#![forbid(unsafe_code)]

use crate::workload::collective::GraphUsageMode;
use std::fmt;

/// An NCCL version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> NcclVersion {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    /// Decodes `ncclGetVersion`'s integer (≥ 2.9: M*10000+m*100+p; before: M*1000+m*100+p).
    pub fn from_code(code: i32) -> NcclVersion {
        let c = code.max(0) as u32;
        if c >= 10000 {
            NcclVersion::new(c / 10000, (c % 10000) / 100, c % 100)
        } else {
            NcclVersion::new(c / 1000, (c % 1000) / 100, c % 100)
        }
    }

    /// `NCCL_VERSION(major, minor, patch)` for 2.9 and later.
    pub const fn code(self) -> u32 {
        self.major * 10000 + self.minor * 100 + self.patch
    }

    /// `ncclConfig_t::graphUsageMode` exists from 2.29 on.
    pub fn has_graph_usage_mode(self) -> bool {
        self >= NcclVersion::new(2, 29, 0)
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// How the graph usage mode reaches NCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeRoute {
    /// `ncclCommInitRankConfig` with `graphUsageMode` (NCCL ≥ 2.29).
    ConfigField(GraphUsageMode),
    /// `NCCL_GRAPH_MIXING_SUPPORT=<value>` before comm init (NCCL < 2.29).
    MixingEnv(&'static str),
}

impl ModeRoute {
    /// The route for `mode` on NCCL `version`.
    pub fn select(version: NcclVersion, mode: GraphUsageMode) -> ModeRoute {
        if version.has_graph_usage_mode() {
            ModeRoute::ConfigField(mode)
        } else {
            ModeRoute::MixingEnv(mode.mixing_env_value())
        }
    }

    /// The environment assignment this route needs, if any.
    pub fn env_assignment(self) -> Option<(&'static str, &'static str)> {
        match self {
            ModeRoute::ConfigField(_) => None,
            ModeRoute::MixingEnv(v) => Some(("NCCL_GRAPH_MIXING_SUPPORT", v)),
        }
    }
}

impl fmt::Display for ModeRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModeRoute::ConfigField(m) => write!(f, "ncclConfig_t.graphUsageMode={m}"),
            ModeRoute::MixingEnv(v) => write!(f, "NCCL_GRAPH_MIXING_SUPPORT={v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_decoding() {
        assert_eq!(NcclVersion::from_code(22803), NcclVersion::new(2, 28, 3));
        assert_eq!(NcclVersion::from_code(23007), NcclVersion::new(2, 30, 7));
        assert_eq!(NcclVersion::from_code(2708), NcclVersion::new(2, 7, 8));
        assert_eq!(NcclVersion::new(2, 28, 3).to_string(), "2.28.3");
        assert_eq!(NcclVersion::new(2, 29, 0).code(), 22900);
        assert!(!NcclVersion::new(2, 28, 9).has_graph_usage_mode());
        assert!(NcclVersion::new(2, 29, 0).has_graph_usage_mode());
        assert!(NcclVersion::new(2, 30, 7).has_graph_usage_mode());
    }

    #[test]
    fn mode_route_selection() {
        let old = NcclVersion::new(2, 28, 3);
        let new = NcclVersion::new(2, 30, 7);
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Two),
            ModeRoute::MixingEnv("1")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::One),
            ModeRoute::MixingEnv("0")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Zero),
            ModeRoute::MixingEnv("0")
        );
        assert_eq!(
            ModeRoute::select(old, GraphUsageMode::Two).env_assignment(),
            Some(("NCCL_GRAPH_MIXING_SUPPORT", "1"))
        );
        assert_eq!(
            ModeRoute::select(new, GraphUsageMode::One),
            ModeRoute::ConfigField(GraphUsageMode::One)
        );
        assert_eq!(
            ModeRoute::select(new, GraphUsageMode::One).env_assignment(),
            None
        );
        assert_eq!(
            ModeRoute::MixingEnv("0").to_string(),
            "NCCL_GRAPH_MIXING_SUPPORT=0"
        );
        assert_eq!(
            ModeRoute::ConfigField(GraphUsageMode::Two).to_string(),
            "ncclConfig_t.graphUsageMode=2"
        );
    }
}
