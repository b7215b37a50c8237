#![forbid(unsafe_code)]
//! The Chrome trace JSON encoding of [`super::write_chrome_trace`]: events written one per line
//! from integers (no float formatting), trace strings escaped once each.

use super::{Annotate, CellLayout, Payload, SliceName, mid};
use crate::trace::Trace;
use rustc_hash::{FxHashMap, FxHashSet};
use std::fmt::Write as _;
use std::io::{self, Write};

/// `ns` as microseconds with exactly three decimals, from integers: 1234567 → "1234.567".
pub fn fmt_us(ns: u64) -> String {
    let mut s = String::new();
    push_us(&mut s, ns);
    s
}

pub(super) fn push_us(s: &mut String, ns: u64) {
    push_u64(s, ns / 1000);
    let r = ns % 1000;
    s.push('.');
    for d in [r / 100, r / 10 % 10, r % 10] {
        s.push(char::from(b'0' + d as u8));
    }
}

/// Decimal digits of `v`, without `core::fmt` (the export writes millions of numbers).
pub(super) fn push_u64(s: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[i..]).expect("ASCII digits"));
}

pub(super) fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a str always serialises")
}

/// JSON-escaped trace strings, escaped once each.
pub(super) struct NameCache<'t> {
    trace: Option<&'t Trace>,
    escaped: Vec<Option<Box<str>>>,
}

impl<'t> NameCache<'t> {
    pub(super) fn new(trace: Option<&'t Trace>) -> NameCache<'t> {
        NameCache {
            trace,
            escaped: vec![None; trace.map_or(0, |t| t.strings.len())],
        }
    }

    /// The JSON string literal (quotes included) of string `id`.
    pub(super) fn get(&mut self, id: u32) -> &str {
        match self.escaped.get_mut(id as usize) {
            Some(slot) => slot.get_or_insert_with(|| {
                json_str(self.trace.map_or("?", |t| t.str(id))).into_boxed_str()
            }),
            None => "\"?\"",
        }
    }
}

/// The `args` object of an event, appended to the event's buffer (keys are fixed identifiers).
pub(super) struct Args<'b, 't> {
    buf: &'b mut String,
    names: &'b mut NameCache<'t>,
    any: bool,
}

impl Args<'_, '_> {
    fn key(&mut self, k: &str) {
        if self.any {
            self.buf.push(',');
        }
        self.any = true;
        self.buf.push('"');
        self.buf.push_str(k);
        self.buf.push_str("\":");
    }
}

impl Annotate for Args<'_, '_> {
    fn num(&mut self, k: &'static str, v: u64) {
        self.key(k);
        push_u64(self.buf, v);
    }
    fn bool(&mut self, k: &'static str, v: bool) {
        self.key(k);
        self.buf.push_str(if v { "true" } else { "false" });
    }
    fn str(&mut self, k: &'static str, v: &str) {
        self.key(k);
        self.buf.push_str(&json_str(v));
    }
    fn hex(&mut self, k: &'static str, v: u64) {
        self.key(k);
        let _ = write!(self.buf, "\"{v:#x}\"");
    }
    fn trace_str(&mut self, k: &'static str, id: u32) {
        self.key(k);
        self.buf.push_str(self.names.get(id));
    }
    fn null(&mut self, k: &'static str) {
        self.key(k);
        self.buf.push_str("null");
    }
}

/// Writes the `traceEvents` array one event per line, commas between; each event is built in
/// one reusable buffer and written with one call.
pub(super) struct EventWriter<'a> {
    w: &'a mut dyn Write,
    first: bool,
    buf: String,
}

impl<'a> EventWriter<'a> {
    pub(super) fn new(w: &'a mut dyn Write) -> io::Result<EventWriter<'a>> {
        w.write_all(b"{\"traceEvents\":[\n")?;
        Ok(EventWriter {
            w,
            first: true,
            buf: String::with_capacity(512),
        })
    }

    /// Starts an event: clears the buffer and puts the separator.
    pub(super) fn begin(&mut self) -> &mut String {
        self.buf.clear();
        if !self.first {
            self.buf.push_str(",\n");
        }
        self.first = false;
        &mut self.buf
    }

    pub(super) fn end(&mut self) -> io::Result<()> {
        self.w.write_all(self.buf.as_bytes())
    }

    pub(super) fn meta_process(
        &mut self,
        pid: u64,
        name: &str,
        sort_index: usize,
    ) -> io::Result<()> {
        let b = self.begin();
        let _ = write!(
            b,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
            json_str(name)
        );
        self.end()?;
        let b = self.begin();
        let _ = write!(
            b,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{sort_index}}}}}"
        );
        self.end()
    }

    pub(super) fn meta_thread(&mut self, pid: u64, tid: u64, name: &str) -> io::Result<()> {
        let b = self.begin();
        let _ = write!(
            b,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
            json_str(name)
        );
        self.end()?;
        let b = self.begin();
        let _ = write!(
            b,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}}"
        );
        self.end()
    }

    /// A complete ("X") slice; `args` fills the args object.
    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        pid: u64,
        tid: u64,
        ts: u64,
        dur: u64,
        name: &SliceName,
        cat: &str,
        names: &mut NameCache<'_>,
        args: impl FnOnce(&mut dyn Annotate),
    ) -> io::Result<()> {
        let b = self.begin();
        b.push_str("{\"ph\":\"X\",\"pid\":");
        push_u64(b, pid);
        b.push_str(",\"tid\":");
        push_u64(b, tid);
        b.push_str(",\"ts\":");
        push_us(b, ts);
        b.push_str(",\"dur\":");
        push_us(b, dur);
        b.push_str(",\"name\":");
        match name {
            SliceName::Text(t) => b.push_str(&json_str(t)),
            SliceName::TraceStr(id) => b.push_str(names.get(*id)),
        }
        b.push_str(",\"cat\":\"");
        b.push_str(cat);
        b.push_str("\",\"args\":{");
        args(&mut Args {
            buf: &mut *b,
            names,
            any: false,
        });
        b.push_str("}}");
        self.end()
    }

    /// Flow start ("s", bound to the enclosing launch call) or end ("f", bound to the enclosing
    /// op: `"bp":"e"`); both are placed mid-slice.
    pub(super) fn flow(
        &mut self,
        pid: u64,
        tid: u64,
        ts: u64,
        id: u64,
        end: bool,
    ) -> io::Result<()> {
        let (ph, bp) = if end {
            ("f", ",\"bp\":\"e\"")
        } else {
            ("s", "")
        };
        let b = self.begin();
        b.push_str("{\"ph\":\"");
        b.push_str(ph);
        b.push_str("\",\"pid\":");
        push_u64(b, pid);
        b.push_str(",\"tid\":");
        push_u64(b, tid);
        b.push_str(",\"ts\":");
        push_us(b, ts);
        b.push_str(",\"id\":");
        push_u64(b, id);
        b.push_str(",\"name\":\"launch\",\"cat\":\"launch\"");
        b.push_str(bp);
        b.push('}');
        self.end()
    }

    /// The slices and flow arrows of one laid-out cell (its process and tracks are written).
    pub(super) fn cell(
        &mut self,
        l: &CellLayout<'_>,
        pid: u64,
        next_flow: &mut u64,
    ) -> io::Result<()> {
        let mut names = NameCache::new(l.trace);
        // Where each launch call landed, for the flow arrows.
        let mut api_at: FxHashMap<u32, (u64, u64)> = FxHashMap::default(); // corr -> (tid, ts)
        for (e, &tid) in l.evs.iter().zip(&l.tids) {
            if let Payload::Api(corr, _) = e.payload {
                api_at.insert(corr, (tid, mid(e)));
            }
        }
        // One arrow per launch call: to its first op.
        let mut flowed = FxHashSet::default();
        for &i in &l.order {
            let (e, tid) = (&l.evs[i as usize], l.tids[i as usize]);
            let (ts, dur) = (l.shift.apply(e.start), e.end - e.start);
            let (name, cat) = l.name(e);
            self.slice(pid, tid, ts, dur, &name, cat, &mut names, |a| {
                l.annotate(e, a)
            })?;
            if let Payload::Op(oi, _) = e.payload {
                let corr = l.ops[oi].corr;
                if flowed.insert(corr)
                    && let Some(&(api_tid, api_ts)) = api_at.get(&corr)
                {
                    let id = *next_flow;
                    *next_flow += 1;
                    self.flow(pid, api_tid, l.shift.apply(api_ts), id, false)?;
                    self.flow(pid, tid, l.shift.apply(mid(e)), id, true)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish(self) -> io::Result<()> {
        self.w.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")?;
        self.w.flush()
    }
}
