//! Which occurrences are traced: the counted schedule ([`sampled`]: the first N, then a window
//! at each doubling) and, for programs with nothing to count, the time schedule
//! ([`paced_level`]).
#![forbid(unsafe_code)]

use super::Level;

/// Whether the `n`-th occurrence (0-based) of a launch or step kind is traced when the first
/// `first` are: after those, one window of `first / 4` consecutive occurrences (at least 1) at
/// each doubling of the count — at `2·first`, `4·first`, `8·first` … — so that a run of any
/// length keeps a logarithmic number, spread over all of it, and a few-hundred-step phase
/// runs mostly untraced (what users run is the default length: issue 41). `first == 0`
/// traces everything.
pub(crate) fn sampled(n: u64, first: u32) -> bool {
    let (window, first) = (u64::from(window_of(first)), u64::from(first));
    if first == 0 || n < first {
        return true;
    }
    // first·2^k ≤ n < first·2^(k+1): the window opens the level, from the second one on.
    let level_start = first << (n / first).ilog2();
    level_start > first && n - level_start < window
}

/// How many consecutive occurrences a window of the schedule holds when the first `first` are
/// traced.
pub(crate) fn window_of(first: u32) -> u32 {
    (first / 4).max(1)
}

/// How many untraced occurrences after each pause are measured, and how many untraced markers
/// are kept after it: twice a window, so that each measured run gives the untraced period
/// several launch-to-launch periods (its last launch is left out); what measuring costs a
/// launch is in benches/README.md ("Seventh H200 session").
pub(crate) fn measured_of(first: u32) -> u32 {
    window_of(first).saturating_mul(2)
}

/// With nothing to count (no step range, no graph launches: an unmarked eager loop such as a
/// model library's `generate()`), tracing follows time instead: on for the first
/// [`PACED_FIRST_NS`] of the recording, then one window of [`PACED_WINDOW_NS`] at each doubling
/// of the time (1 s, 2 s, 4 s …), each followed by a measured window as long. A window holds
/// a few iterations of a loop of tens of ms; the traced share falls as the run lengthens, so a
/// long loop's trace stays a few MB.
pub(crate) const PACED_FIRST_NS: u64 = 500_000_000;
/// See [`PACED_FIRST_NS`].
pub(crate) const PACED_WINDOW_NS: u64 = 100_000_000;
/// How long no launch or step may be counted before time paces the sampling: the counted
/// schedule keeps control while the program marks steps or launches graphs.
pub(crate) const PACED_IDLE_NS: u64 = 200_000_000;
/// How often the pacer looks at the time.
pub(crate) const PACE_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// What the time schedule records `elapsed` ns into the recording ([`PACED_FIRST_NS`]).
pub(crate) fn paced_level(elapsed: u64) -> Level {
    if elapsed < PACED_FIRST_NS {
        return Level::Traced;
    }
    // PACED_FIRST_NS·2^k ≤ elapsed: the window opens the level, from the second one on.
    let level_start = PACED_FIRST_NS << (elapsed / PACED_FIRST_NS).ilog2();
    let into = elapsed - level_start;
    let traced_window = if level_start > PACED_FIRST_NS {
        PACED_WINDOW_NS
    } else {
        0
    };
    if into < traced_window {
        Level::Traced
    } else if into < traced_window + PACED_WINDOW_NS {
        Level::Measured
    } else {
        Level::Off
    }
}
