//! The device timeline: kernels, memcpys and memsets of one trace in start order.
#![forbid(unsafe_code)]

use super::model::{Op, OpKind, TraceTimeline};
use crate::trace::{ApiCall, Kernel, MemOp, Trace};

/// Collects the trace's device operations, sorted by (start, end). Records with zero
/// timestamps (CUPTI ran out of timestamp memory) are left out; they are counted as dropped by
/// the recorder.
pub fn build(trace: &Trace) -> TraceTimeline {
    let mut ops =
        Vec::with_capacity(trace.kernels.len() + trace.memcpys.len() + trace.memsets.len());
    ops.extend(trace.kernels.iter().filter(|k| k.end != 0).map(kernel_op));
    for (kind, list) in [
        (OpKind::Memcpy, &trace.memcpys),
        (OpKind::Memset, &trace.memsets),
    ] {
        ops.extend(list.iter().filter(|m| m.end != 0).map(|m| mem_op(m, kind)));
    }
    sorted(ops)
}

/// [`build`], moving the records out of `trace` (its kernels, memcpys and memsets are left
/// empty): the kernels become ops in their own memory, so a million kernels are not held
/// twice.
pub fn build_taking(trace: &mut Trace) -> TraceTimeline {
    // A map over a vector's own iterator into a type of the same size reuses its memory.
    let mut ops: Vec<Op> = std::mem::take(&mut trace.kernels)
        .into_iter()
        .filter(|k| k.end != 0)
        .map(|k| kernel_op(&k))
        .collect();
    for (kind, list) in [
        (OpKind::Memcpy, std::mem::take(&mut trace.memcpys)),
        (OpKind::Memset, std::mem::take(&mut trace.memsets)),
    ] {
        ops.extend(list.iter().filter(|m| m.end != 0).map(|m| mem_op(m, kind)));
    }
    sorted(ops)
}

fn kernel_op(k: &Kernel) -> Op {
    Op {
        start: k.start,
        end: k.end,
        device: k.device,
        stream: k.stream,
        corr: k.corr,
        name: k.name,
        kind: OpKind::Kernel,
        graph: k.graph,
        node: k.node,
    }
}

fn mem_op(m: &MemOp, kind: OpKind) -> Op {
    Op {
        start: m.start,
        end: m.end,
        device: m.device,
        stream: m.stream,
        corr: m.corr,
        name: m.kind,
        kind,
        graph: m.graph,
        node: m.node,
    }
}

fn sorted(mut ops: Vec<Op>) -> TraceTimeline {
    // Records usually arrive nearly sorted; sort_by is adaptive on runs (and stable, so ops
    // with equal times keep the order above).
    ops.sort_by_key(|o| (o.start, o.end));
    TraceTimeline { ops }
}

/// Idle time of a set of intervals inside `[from, to]`: the length not covered by any of
/// them (the union over streams, never a per-stream sum). `intervals` must be sorted by start.
pub fn idle_within(intervals: impl IntoIterator<Item = (u64, u64)>, from: u64, to: u64) -> u64 {
    let mut covered_until = from;
    let mut idle = 0;
    for (start, end) in intervals {
        let (start, end) = (start.clamp(from, to), end.clamp(from, to));
        if start > covered_until {
            idle += start - covered_until;
        }
        covered_until = covered_until.max(end);
    }
    idle + to.saturating_sub(covered_until)
}

/// Busy time of each stream in `[from, to]` (per-stream union), for the per-stream view.
pub fn busy_per_stream(ops: &[Op], from: u64, to: u64) -> Vec<(u32, u64)> {
    let mut streams: Vec<u32> = ops.iter().map(|o| o.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    streams
        .into_iter()
        .map(|s| {
            let idle = idle_within(
                ops.iter()
                    .filter(|o| o.stream == s)
                    .map(|o| (o.start, o.end)),
                from,
                to,
            );
            (s, (to - from) - idle)
        })
        .collect()
}

/// Launch calls by correlation id, for joining ops to host markers and launch times. It
/// holds positions in the trace's `api_calls`, not copies of the calls: 4 bytes a call.
pub struct LaunchIndex<'t> {
    calls: &'t [ApiCall],
    /// Positions in `calls`, sorted by correlation id; empty when `dense` is used.
    by_corr: Vec<u32>,
    /// When no correlation id repeats and the ids are dense (as CUPTI and Kineto number
    /// them): the position in `calls` by `corr - first`, `u32::MAX` for none. A lookup is then
    /// one load instead of a binary search over a million calls, with the same answer.
    dense: Vec<u32>,
    first: u32,
}

impl<'t> LaunchIndex<'t> {
    pub fn new(trace: &'t Trace) -> LaunchIndex<'t> {
        let calls = &trace.api_calls[..];
        let mut by_corr: Vec<u32> = (0..calls.len() as u32).collect();
        // Usually sorted already (calls are recorded in order): a run-detecting stable sort,
        // so that among equal ids the first call recorded comes first.
        by_corr.sort_by_key(|&i| calls[i as usize].corr);
        let corr = |i: &u32| calls[*i as usize].corr;
        let unique = by_corr.windows(2).all(|w| corr(&w[0]) != corr(&w[1]));
        let first = by_corr.first().map_or(0, corr);
        let span = by_corr.last().map_or(0, |i| (corr(i) - first) as usize + 1);
        let mut dense = Vec::new();
        if unique && span <= 4 * by_corr.len() + 1024 {
            dense = vec![u32::MAX; span];
            for i in &by_corr {
                dense[(corr(i) - first) as usize] = *i;
            }
            by_corr = Vec::new();
        }
        LaunchIndex {
            calls,
            by_corr,
            dense,
            first,
        }
    }

    /// (start, end, thread) of the API call with this correlation id.
    pub fn call(&self, corr: u32) -> Option<(u64, u64, u32)> {
        let i = if self.dense.is_empty() {
            let at = self
                .by_corr
                .binary_search_by_key(&corr, |&i| self.calls[i as usize].corr)
                .ok()?;
            self.by_corr[at]
        } else {
            let slot = *self.dense.get(corr.checked_sub(self.first)? as usize)?;
            (slot != u32::MAX).then_some(slot)?
        };
        let a = &self.calls[i as usize];
        Some((a.start, a.end, a.thread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_streams_are_not_double_counted() {
        // Stream A busy 0..10, stream B busy 5..15, window 0..20: the device is idle 15..20 only.
        let intervals = [(0, 10), (5, 15)];
        assert_eq!(idle_within(intervals, 0, 20), 5);
        // A per-stream sum would claim 10 + 10 idle; the per-stream view keeps them apart.
        let op = |start, end, stream| Op {
            start,
            end,
            device: 0,
            stream,
            corr: 0,
            name: 0,
            kind: OpKind::Kernel,
            graph: 0,
            node: 0,
        };
        let ops = [op(0, 10, 1), op(5, 15, 2)];
        assert_eq!(busy_per_stream(&ops, 0, 20), vec![(1, 10), (2, 10)]);
    }

    #[test]
    fn gaps_between_and_after() {
        assert_eq!(idle_within([(2, 4), (6, 8)], 0, 10), 2 + 2 + 2);
        assert_eq!(idle_within([(0, 10)], 0, 10), 0);
    }
}
