//! The CUPTI calls of a pause or a resume: which kinds and callbacks each [`Level`] has on, and
//! in which order they are switched ([`switch_plan`]). `callbacks` makes the calls.
#![forbid(unsafe_code)]

use super::super::sys;

/// One CUPTI call of a pause or resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchOp {
    /// `cuptiEnableCallback(on, …)` for one API callback.
    Callback {
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
    },
    /// `cuptiActivityEnable`/`cuptiActivityDisable` of one kind.
    Kind(sys::CUpti_ActivityKind),
    /// `cuptiActivityEnable{Runtime,Driver}Api` for one call (the filter, after a resume).
    ApiRecord {
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
        on: bool,
    },
}

/// What the recorder records at a moment under a trace budget, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Nothing but the budget's own callbacks.
    Off,
    /// The device kinds alone (kernel, copy and memset records with their device timestamps):
    /// the untraced launches or steps just after each pause, whose device periods the analysis
    /// sets against the traced ones. No API records and none of the graph-building callbacks,
    /// whose host cost is what makes a traced replay slower than the program's own.
    Measured,
    /// Everything: device and API kinds, the graph-building callbacks.
    Traced,
}

/// Whether an activity kind records API calls (paused below [`Level::Traced`]) rather than
/// device work (paused below [`Level::Measured`]).
pub(crate) fn is_api_kind(kind: sys::CUpti_ActivityKind) -> bool {
    kind == sys::CUPTI_ACTIVITY_KIND_RUNTIME || kind == sys::CUPTI_ACTIVITY_KIND_DRIVER
}

/// Whether `kind` is enabled at `level`.
pub(crate) fn kind_on_at(kind: sys::CUpti_ActivityKind, level: Level) -> bool {
    match level {
        Level::Traced => true,
        Level::Measured => !is_api_kind(kind),
        Level::Off => false,
    }
}

/// The CUPTI calls that take recording from level `from` to `to`, in order: going up turns the
/// callbacks on first (so they see everything the kinds record), then the kinds, then the
/// per-call API filter again (re-enabling an API kind records every call); going down turns
/// the kinds off, then the callbacks. With `filter_off_on_pause` (the recorder's default),
/// leaving [`Level::Traced`] first switches off the calls the filter records: a disabled API
/// kind whose calls stay switched on in the filter keeps costing each of them host time
/// (benches/README.md, "What a paused step still costs").
pub(crate) fn switch_plan(
    from: Level,
    to: Level,
    kinds: &[sys::CUpti_ActivityKind],
    callbacks: &[(sys::CUpti_CallbackDomain, u32)],
    api_filter: Option<&[(sys::CUpti_CallbackDomain, u32, bool)]>,
    filter_off_on_pause: bool,
) -> Vec<SwitchOp> {
    let callbacks = callbacks
        .iter()
        .map(|&(domain, cbid)| SwitchOp::Callback { domain, cbid });
    let changed = kinds
        .iter()
        .filter(|&&k| kind_on_at(k, from) != kind_on_at(k, to))
        .map(|&k| SwitchOp::Kind(k));
    let filter = api_filter.unwrap_or_default().iter();
    let api_changes = kinds
        .iter()
        .any(|&k| is_api_kind(k) && kind_on_at(k, from) != kind_on_at(k, to));
    let callbacks_change = (from == Level::Traced) != (to == Level::Traced);
    let callbacks = callbacks.filter(|_| callbacks_change);
    if to > from {
        let filter = filter
            .filter(|_| api_changes)
            .map(|&(domain, cbid, on)| SwitchOp::ApiRecord { domain, cbid, on });
        callbacks.chain(changed).chain(filter).collect()
    } else {
        let recorded = filter
            .filter(|&&(_, _, on)| on && filter_off_on_pause && api_changes)
            .map(|&(domain, cbid, _)| SwitchOp::ApiRecord {
                domain,
                cbid,
                on: false,
            });
        recorded.chain(changed).chain(callbacks).collect()
    }
}
