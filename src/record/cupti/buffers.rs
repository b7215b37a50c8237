//! The activity-buffer callbacks: host buffers lent to CUPTI from a pool, and the records of
//! each completed buffer decoded into the recorder's state.

use super::activity;
use super::loader::{self, Cupti};
use super::state::{PANICS, Shared, active, lock};
use super::sys;
use crate::record::spill::{Delivered, SpillWriter};
use crate::trace::ApiDomain;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Host buffers handed to CUPTI, reused. Addresses are stored as `usize` (the pool owns them).
#[derive(Debug, Default)]
struct Pool {
    /// Size of new buffers, in bytes (multiple of 8).
    bytes: usize,
    /// Buffers not currently lent to CUPTI.
    free: Vec<usize>,
    /// Every buffer the pool allocated (free or lent): address → length in u64 words.
    owned: BTreeMap<usize, usize>,
    /// At most this many buffers allocated (0: no limit). CUPTI drops records, and counts
    /// them, when no buffer is available.
    max_buffers: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    max_buffers: 0,
    bytes: 0,
    free: Vec::new(),
    owned: BTreeMap::new(),
});

/// Buffers handed out but not given back yet (for diagnostics).
static LENT: AtomicUsize = AtomicUsize::new(0);

/// Sets the size of buffers handed out from now on, and the most buffers allocated at once
/// (0: no limit).
pub(crate) fn set_buffer_bytes(bytes: usize, max_buffers: usize) {
    let mut pool = lock(&POOL);
    pool.bytes = bytes;
    pool.max_buffers = max_buffers;
}

impl Pool {
    fn take(&mut self) -> Option<(*mut u8, usize)> {
        let words = self.bytes / 8;
        if words == 0 {
            return None;
        }
        while let Some(addr) = self.free.pop() {
            if self.owned.get(&addr) == Some(&words) {
                return Some((addr as *mut u8, words * 8));
            }
            self.dealloc(addr);
        }
        if self.max_buffers != 0 && self.owned.len() >= self.max_buffers {
            return None;
        }
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(words).ok()?;
        v.resize(words, 0);
        let raw = Box::into_raw(v.into_boxed_slice()) as *mut u64;
        self.owned.insert(raw as usize, words);
        Some((raw as *mut u8, words * 8))
    }

    /// Takes a buffer back; false if the pool does not own it.
    fn give_back(&mut self, addr: usize) -> bool {
        if !self.owned.contains_key(&addr) {
            return false;
        }
        self.free.push(addr);
        true
    }

    fn dealloc(&mut self, addr: usize) {
        if let Some(words) = self.owned.remove(&addr) {
            let slice = std::ptr::slice_from_raw_parts_mut(addr as *mut u64, words);
            // SAFETY: `addr` came from Box::into_raw of a boxed slice of `words` u64 in
            // `take`, and was removed from `owned`, so it is freed exactly once; CUPTI has
            // given it back (it is on the free list).
            drop(unsafe { Box::from_raw(slice) });
        }
    }

    /// Frees every buffer not lent to CUPTI.
    fn release_free(&mut self) {
        let free = std::mem::take(&mut self.free);
        for addr in free {
            self.dealloc(addr);
        }
    }
}

/// Frees the pooled buffers CUPTI is not using (after a forced flush).
pub(crate) fn release_free_buffers() {
    lock(&POOL).release_free();
}

/// CUPTI asks for a buffer.
pub(crate) unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_num_records: *mut usize,
) {
    let got = catch_unwind(|| lock(&POOL).take()).unwrap_or_else(|_| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        None
    });
    if buffer.is_null() || size.is_null() {
        if let Some((p, _)) = got {
            let _ = catch_unwind(|| lock(&POOL).give_back(p as usize));
        }
        return;
    }
    let (p, n) = got.unwrap_or((std::ptr::null_mut(), 0));
    if !p.is_null() {
        LENT.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: CUPTI passes valid out-pointers (checked non-null above); a null buffer with
    // size 0 tells CUPTI no buffer is available (it then drops records and counts them).
    unsafe {
        *buffer = p;
        *size = n;
        if !max_num_records.is_null() {
            *max_num_records = 0; // as many records as fit
        }
    }
}

/// CUPTI returns a buffer holding `valid` bytes of records.
pub(crate) unsafe extern "C" fn buffer_completed(
    context: sys::CUcontext,
    stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let parsed = catch_unwind(AssertUnwindSafe(|| {
        if let (Some(shared), Some(cupti)) = (active(), loader::loaded()) {
            // SAFETY: CUPTI hands us a buffer we lent it, with `valid` bytes of records.
            unsafe { parse_buffer(cupti, &shared, buffer, valid) };
            let mut dropped = 0usize;
            // SAFETY: resolved at load; context/stream are the ones CUPTI passed in.
            let rc = unsafe {
                cupti
                    .raw()
                    .cuptiActivityGetNumDroppedRecords(context, stream_id, &mut dropped)
            };
            if rc == sys::CUPTI_SUCCESS {
                shared.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
            } else {
                lock(&shared.state).problem(format!(
                    "cuptiActivityGetNumDroppedRecords failed in the buffer callback: {}",
                    cupti.result_name(rc)
                ));
            }
            deliver(&shared);
        }
    }));
    if parsed.is_err() {
        PANICS.fetch_add(1, Ordering::Relaxed);
    }
    if buffer.is_null() {
        return;
    }
    let returned = catch_unwind(|| lock(&POOL).give_back(buffer as usize));
    match returned {
        Ok(true) => {
            LENT.fetch_sub(1, Ordering::Relaxed);
        }
        // Not ours (cannot happen unless another registration lent it): leave it alone.
        Ok(false) => {}
        Err(_) => {
            PANICS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Where completed buffers' records go as they complete (`gapscope record`'s spill file), and
/// how far they have been delivered.
#[derive(Debug)]
struct Delivering {
    writer: SpillWriter,
    /// The process delivering (a child forked later must not write into its parent's file).
    pid: u32,
    delivered: Delivered,
    /// The recorder's own markers (`State::markers`) delivered.
    own_markers: usize,
    /// The graph table's size at the last delivery of the graph.
    graph_size: (usize, usize, usize),
}

static DELIVERING: Mutex<Option<Delivering>> = Mutex::new(None);

pub(crate) fn start_delivering(writer: SpillWriter) {
    *lock(&DELIVERING) = Some(Delivering {
        writer,
        pid: std::process::id(),
        delivered: Delivered::default(),
        own_markers: 0,
        graph_size: (0, 0, 0),
    });
}

/// Stops delivering (the trace is being written whole). Never waits: a delivery under way
/// (possibly interrupted by the signal this runs for) keeps it.
pub(crate) fn stop_delivering() {
    if let Ok(mut d) = DELIVERING.try_lock() {
        *d = None;
    }
}

/// Hands what was decoded since the last delivery to the spill file: records, strings, the
/// graph when it changed, the sampling record and the dropped count. Copies under the state
/// lock, encodes and writes outside it. Never waits for another delivery: what it would have
/// delivered goes with the next one.
fn deliver(shared: &Shared) {
    let Ok(mut guard) = DELIVERING.try_lock() else {
        return;
    };
    let Some(d) = guard.as_mut().filter(|d| d.pid == std::process::id()) else {
        return;
    };
    let (part, graph, sample, zero) = {
        let state = lock(&shared.state);
        let trace = &state.records.builder.trace;
        let mut part = d.delivered.new_part(trace);
        part.markers
            .extend_from_slice(state.markers.get(d.own_markers..).unwrap_or_default());
        d.delivered = Delivered::of(trace);
        d.own_markers = state.markers.len();
        let size = state.graph.size();
        let graph = (size != d.graph_size).then(|| state.graph.clone());
        d.graph_size = size;
        let sample = shared
            .budget
            .as_ref()
            .and_then(|b| state.records.marker_sample(&lock(&b.markers)));
        (part, graph, sample, state.records.zero_timestamp_kernels)
    };
    // Library-call ranges tag the nodes when the trace is rebuilt, from every marker.
    let dag = graph.map(|g| g.into_dag(&crate::trace::HostRanges::default()));
    let sampling = shared.budget.as_ref().and_then(|b| {
        let mut s = b.decisions.try_lock().ok()?.sampling();
        if let Some(sample) = sample {
            s.get_or_insert_with(Default::default).markers = Some(sample);
        }
        s
    });
    let dropped = shared.dropped.load(Ordering::Relaxed) + zero;
    let chosen = shared.step_range.chosen().map(str::to_owned);
    if let Err(e) = d.writer.deliver(part, dag, sampling, dropped, chosen) {
        let path = d.writer.path().display().to_string();
        *guard = None;
        lock(&shared.state).problem(format!(
            "cannot write {path} ({e}): records no longer handed to gapscope record as they complete"
        ));
    }
}

/// # Safety
/// `buffer` holds `valid` bytes of CUPTI activity records (or is null).
unsafe fn parse_buffer(cupti: &Cupti, shared: &Shared, buffer: *mut u8, valid: usize) {
    if buffer.is_null() || valid == 0 {
        return;
    }
    let resolve = |domain: ApiDomain, cbid: u32| cupti.api_call_name(domain, cbid);
    // The windows as they stand: every record in this buffer ended before now, so no later
    // decision can change whether it overlaps one.
    let windows = shared.budget.as_ref().map(|b| lock(&b.markers).snapshot());
    let mut state = lock(&shared.state);
    if let (Some(keeping), Some(windows)) = (&mut state.records.marker_keeping, windows) {
        keeping.set_windows(windows);
    }
    let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: resolved at load; CUPTI walks its own buffer and advances `record`.
        let rc = unsafe {
            cupti
                .raw()
                .cuptiActivityGetNextRecord(buffer, valid, &mut record)
        };
        if rc == sys::CUPTI_SUCCESS {
            // SAFETY: CUPTI returned a complete record inside the buffer; kernel names are
            // valid C strings while the buffer callback runs (we copy them).
            state
                .records
                .add_record(unsafe { activity::read(record) }, &resolve);
        } else if rc == sys::CUPTI_ERROR_MAX_LIMIT_REACHED {
            break;
        } else {
            state.problem(format!(
                "cuptiActivityGetNextRecord failed: {}; rest of that buffer lost",
                cupti.result_name(rc)
            ));
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_and_frees_buffers() {
        let mut pool = Pool {
            bytes: 4096,
            ..Default::default()
        };
        pool.max_buffers = 0;
        let (a, n) = pool.take().unwrap();
        assert_eq!(n, 4096);
        assert_eq!(a as usize % 8, 0);
        assert!(pool.give_back(a as usize));
        let (b, _) = pool.take().unwrap();
        assert_eq!(a, b, "a returned buffer is reused");
        assert!(!pool.give_back(12345), "foreign buffers are refused");
        pool.give_back(b as usize);
        pool.bytes = 8192;
        let (c, n) = pool.take().unwrap();
        assert_eq!(n, 8192, "a size change retires old buffers");
        assert_eq!(pool.owned.len(), 1);
        pool.give_back(c as usize);
        pool.release_free();
        assert!(pool.owned.is_empty());
    }
}
