//! The template fast paths: events as torch writes them, read by templates of its layouts
//! before the general reader (`scan`) is tried.
//!
//! [`Scanner::event`] reads one element of `traceEvents`. A kernel or a runtime call written
//! compactly or as libkineto lays it out is read with the bytes between its values compared as
//! literals ([`Layout`]); an event whose first members are torch's, in its order, with any
//! white space between tokens, by [`Scanner::spaced_event`], its `args` with torch's keys
//! compared first (`expected_args!`). Each value is read by the general reader's reader for
//! its key; at anything else a template gives up and [`Scanner::any_event`] reads the event
//! from its start. The outcome, the event read and where the scan stops are the same either
//! way (the tests hold every template against [`Scanner::any_event`]).
#![forbid(unsafe_code)]

use super::scan::{ArgKey, Args, Cat, Phase, RawEvent, ScanError, Scanner};

/// A reader of `args` for [`Scanner::spaced_event`] that reads it as [`Scanner::args`] does,
/// with the keys torch writes for one kind of event compared first, as written, in torch's
/// order: at each key of the list in turn, when the next member's key is written so
/// (`"stream":`, then white space), its value and what follows it are read as
/// [`Scanner::args_rest`] reads them for the [`ArgKey`] given there (the one [`ArgKey::of`]
/// names for that text, as the tests check through the list's `const`); a key of the list
/// not there is passed by. The members left after the list (another key, or one out of
/// order) are read by [`Scanner::args_rest`], as [`Scanner::args`] reads every member.
macro_rules! expected_args {
    ($(#[$doc:meta])* fn $reader:ident, const $list:ident = [$($key:literal => $arg:ident),* $(,)?];) => {
        #[cfg(test)]
        const $list: &[(&[u8], ArgKey)] = &[$(($key, ArgKey::$arg)),*];

        impl Scanner<'_> {
            $(#[$doc])*
            #[inline(always)]
            fn $reader(&mut self, args: &mut Args) -> Result<(), ScanError> {
                if self.object_open("an object for \"args\"")? {
                    return Ok(());
                }
                // Whether the `}` closing `args` has been read.
                let mut closed = false;
                $(
                    if !closed && self.key_lit($key).is_some() {
                        closed = self.arg_member(ArgKey::$arg, args)?;
                    }
                )*
                if closed {
                    return Ok(());
                }
                self.args_rest(args)
            }
        }
    };
}

expected_args! {
    /// `args` of a kernel.
    fn kernel_args, const KERNEL_ARGS = [
        b"\"External id\":" => Other,
        b"\"queued\":" => Other,
        b"\"device\":" => Device,
        b"\"context\":" => Other,
        b"\"stream\":" => Stream,
        b"\"correlation\":" => Correlation,
        b"\"graph id\":" => Graph,
        b"\"graph node id\":" => Node,
        b"\"registers per thread\":" => Other,
        b"\"shared memory\":" => Other,
        b"\"blocks per SM\":" => Other,
        b"\"warps per SM\":" => Other,
        b"\"grid\":" => Other,
        b"\"block\":" => Other,
        b"\"est. achieved occupancy %\":" => Other,
    ];
}

expected_args! {
    /// `args` of a runtime or driver call.
    fn runtime_args, const RUNTIME_ARGS = [
        b"\"External id\":" => Other,
        b"\"cbid\":" => Other,
        b"\"correlation\":" => Correlation,
    ];
}

expected_args! {
    /// `args` of a copy or a memset.
    fn memory_args, const MEMORY_ARGS = [
        b"\"External id\":" => Other,
        b"\"device\":" => Device,
        b"\"context\":" => Other,
        b"\"stream\":" => Stream,
        b"\"correlation\":" => Correlation,
        b"\"graph id\":" => Graph,
        b"\"graph node id\":" => Node,
        b"\"bytes\":" => Bytes,
        b"\"memory bandwidth (GB/s)\":" => Other,
    ];
}

expected_args! {
    /// `args` of the other events read (annotations, steps).
    fn other_args, const OTHER_ARGS = [
        b"\"External id\":" => Other,
        b"\"Record function id\":" => Other,
        b"\"Ev Idx\":" => Other,
    ];
}

/// The bytes between the values of a kernel or a runtime call, as one writer lays them out:
/// each literal runs from the end of a value (or the event's start) to the start of the next
/// value, separators and keys included, for [`Scanner::laid_out_event`].
struct Layout {
    open: &'static [u8],
    cat: &'static [u8],
    kernel_name: &'static [u8],
    runtime_name: &'static [u8],
    pid: &'static [u8],
    tid: &'static [u8],
    ts: &'static [u8],
    dur: &'static [u8],
    /// Up to the first key of `args`.
    args: &'static [u8],
    /// The first key, when present; its value is followed by a bare `,`.
    external_id: &'static [u8],
    queued: &'static [u8],
    device: &'static [u8],
    context: &'static [u8],
    stream: &'static [u8],
    /// Kernels' and runtime calls' alike.
    correlation: &'static [u8],
    registers: &'static [u8],
    shared_memory: &'static [u8],
    blocks_per_sm: &'static [u8],
    warps_per_sm: &'static [u8],
    grid: &'static [u8],
    block: &'static [u8],
    occupancy: &'static [u8],
    cbid: &'static [u8],
    /// From the last value to the end of the event.
    close: &'static [u8],
    /// A CUDA flow event's (`ph` `s` or `f`, torch's `ac2g`), after its `ph`: up to its `id`,
    /// up to its `ts` (on the first line, unlike a kernel's), from its `ts` to the end of its
    /// `name`, its flow end's `bp`, and from there to the end of the event.
    flow_id: &'static [u8],
    flow_ts: &'static [u8],
    flow_cat_name: &'static [u8],
    flow_bp: &'static [u8],
    flow_close: &'static [u8],
    /// Whether events are written over lines: the skip of ignored events then looks for
    /// control characters inside strings as it counts quotes, not in a second pass.
    lines: bool,
}

/// A [`Layout`] from its white space: `sp` after each `,` and `:` on a line, `nl` (a line break
/// and indentation, or nothing) before `ts` and `args`, `inner` after the `{` of `args`, `wide`
/// (torch's padding) before some of the args, `close` from the last value to the end, and
/// `flow_close` from a flow event's last value to its end.
macro_rules! layout {
    (
        sp: $sp:literal,
        nl: $nl:literal,
        inner: $inner:literal,
        wide: $wide:literal,
        close: $close:literal,
        flow_close: $flow_close:literal
    ) => {
        Layout {
            open: concat!("{", $nl, "\"ph\":", $sp).as_bytes(),
            cat: concat!(",", $sp, "\"cat\":", $sp, "\"").as_bytes(),
            kernel_name: concat!("kernel\",", $sp, "\"name\":", $sp).as_bytes(),
            runtime_name: concat!("cuda_runtime\",", $sp, "\"name\":", $sp).as_bytes(),
            pid: concat!(",", $sp, "\"pid\":", $sp).as_bytes(),
            tid: concat!(",", $sp, "\"tid\":", $sp).as_bytes(),
            ts: concat!(",", $nl, "\"ts\":", $sp).as_bytes(),
            dur: concat!(",", $sp, "\"dur\":", $sp).as_bytes(),
            args: concat!(",", $nl, "\"args\":", $sp, "{", $inner).as_bytes(),
            external_id: concat!("\"External id\":", $sp).as_bytes(),
            queued: concat!($wide, "\"queued\":", $sp).as_bytes(),
            device: concat!(",", $sp, "\"device\":", $sp).as_bytes(),
            context: concat!(",", $sp, "\"context\":", $sp).as_bytes(),
            stream: concat!(",", $wide, "\"stream\":", $sp).as_bytes(),
            correlation: concat!(",", $sp, "\"correlation\":", $sp).as_bytes(),
            registers: concat!(",", $wide, "\"registers per thread\":", $sp).as_bytes(),
            shared_memory: concat!(",", $wide, "\"shared memory\":", $sp).as_bytes(),
            blocks_per_sm: concat!(",", $wide, "\"blocks per SM\":", $sp).as_bytes(),
            warps_per_sm: concat!(",", $wide, "\"warps per SM\":", $sp).as_bytes(),
            grid: concat!(",", $wide, "\"grid\":", $sp).as_bytes(),
            block: concat!(",", $wide, "\"block\":", $sp).as_bytes(),
            occupancy: concat!(",", $wide, "\"est. achieved occupancy %\":", $sp).as_bytes(),
            cbid: concat!($wide, "\"cbid\":", $sp).as_bytes(),
            close: $close.as_bytes(),
            flow_id: concat!(",", $sp, "\"id\":", $sp).as_bytes(),
            flow_ts: concat!(",", $sp, "\"ts\":", $sp).as_bytes(),
            flow_cat_name: concat!(
                ",",
                $nl,
                "\"cat\":",
                $sp,
                "\"ac2g\",",
                $sp,
                "\"name\":",
                $sp,
                "\"ac2g\""
            )
            .as_bytes(),
            flow_bp: concat!(",", $sp, "\"bp\":", $sp, "\"e\"").as_bytes(),
            flow_close: $flow_close.as_bytes(),
            lines: !$nl.is_empty(),
        }
    };
}

/// Events written compactly (`{"ph":"X","cat":"kernel",…`), one per line.
const COMPACT_LAYOUT: Layout = layout!(
    sp: "",
    nl: "",
    inner: "",
    wide: "",
    close: "}}",
    flow_close: "}"
);

/// Events as libkineto writes them (torch.profiler's `export_chrome_trace`): over four lines,
/// six spaces before some args.
const LIBKINETO_LAYOUT: Layout = layout!(
    sp: " ",
    nl: "\n    ",
    inner: "\n      ",
    wide: "      ",
    close: "\n    }\n  }",
    flow_close: "\n  }"
);

impl<'a> Scanner<'a> {
    /// One element of `traceEvents`, into `ev` (cleared first); at its first byte. An event
    /// written as torch writes them is read by a template of torch's members:
    /// [`Scanner::compact_event`] when it is written compactly (`{"ph":"`, every member as
    /// torch's kernels and runtime calls have them), [`Scanner::libkineto_event`] when it is
    /// laid out as torch's own writer lays it out (`{\n    "ph": "`), else
    /// [`Scanner::spaced_event`] (any white space between tokens, other args); anything else
    /// (everything they leave) from its start by [`Scanner::any_event`], with the same outcome
    /// either way.
    #[inline(always)]
    pub(super) fn event(&mut self, ev: &mut RawEvent<'a>) -> Result<(), ScanError> {
        *ev = RawEvent::default();
        let start = self.pos;
        let rest = self.bytes.get(start..).unwrap_or_default();
        if rest.starts_with(COMPACT_LAYOUT.open) {
            if let Some(outcome) = self.compact_event(ev) {
                return outcome;
            }
            *ev = RawEvent::default();
            self.pos = start;
        } else if rest.starts_with(LIBKINETO_LAYOUT.open) {
            if let Some(outcome) = self.libkineto_event(ev) {
                return outcome;
            }
            *ev = RawEvent::default();
            self.pos = start;
        }
        if let Some(outcome) = self.spaced_event(ev) {
            return outcome;
        }
        self.pos = start;
        self.any_event(ev)
    }

    /// The literal `word` at the position: steps past it, or `None` (moving nothing).
    #[inline(always)]
    fn lit(&mut self, word: &'static [u8]) -> Option<()> {
        let have = self.bytes.get(self.pos..self.pos + word.len())?;
        if have != word {
            return None;
        }
        self.pos += word.len();
        Some(())
    }

    /// An event as [`COMPACT_LAYOUT`] lays it out, `ph` first: [`Scanner::laid_out_event`].
    #[inline(always)]
    fn compact_event(&mut self, ev: &mut RawEvent<'a>) -> Option<Result<(), ScanError>> {
        self.laid_out_event(ev, &COMPACT_LAYOUT)
    }

    /// An event as torch's own writer lays it out ([`LIBKINETO_LAYOUT`]): [`Scanner::laid_out_event`].
    #[inline(always)]
    fn libkineto_event(&mut self, ev: &mut RawEvent<'a>) -> Option<Result<(), ScanError>> {
        self.laid_out_event(ev, &LIBKINETO_LAYOUT)
    }

    /// An event laid out as `layout` says, `ph` first: a kernel or a runtime call with the
    /// members torch writes, in its order
    /// (`{"ph":"X","cat":"kernel","name":"…","pid":0,"tid":7,"ts":…`), or an event of another
    /// phase (a flow event, `{"ph":"s","id":…`) to step over. The bytes between values are
    /// compared as literals, each value is read by the reader [`Scanner::any_event`] would use
    /// for its key, and an event of another phase is stepped over from where
    /// [`Scanner::any_event`] would step over it. So when it gives an outcome, it is the one
    /// [`Scanner::any_event`] would give, leaving `ev` and the position as it would. At
    /// anything else (a byte not as laid out here, other white space, another member, a value
    /// its reader refuses, the end of the bytes) it gives up with `None`, leaving the event to
    /// [`Scanner::spaced_event`], then [`Scanner::any_event`], which read it from its start.
    /// Always inlined with a constant `layout`: each literal's length is then known.
    #[inline(always)]
    fn laid_out_event(
        &mut self,
        ev: &mut RawEvent<'a>,
        layout: &Layout,
    ) -> Option<Result<(), ScanError>> {
        self.lit(layout.open)?;
        ev.ph = self.phase_value().ok()?;
        if ev.ph == Phase::Other {
            let after_ph = self.pos;
            if self.flow_rest(layout).is_some() {
                return Some(Ok(()));
            }
            self.pos = after_ph;
            self.lit(b",")?;
            self.skip_ws();
            return Some(self.skip_ignored_rest(layout.lines));
        }
        self.lit(layout.cat)?;
        let kernel = match self.bytes.get(self.pos)? {
            b'k' => {
                self.lit(layout.kernel_name)?;
                ev.cat = Cat::Kernel;
                true
            }
            b'c' => {
                self.lit(layout.runtime_name)?;
                ev.cat = Cat::Runtime;
                false
            }
            _ => return None,
        };
        ev.name = Some(self.str_value("name").ok()?);
        self.lit(layout.pid)?;
        self.skip_member_value(2).ok()?;
        self.lit(layout.tid)?;
        ev.tid = Some(self.tid_value().ok()?);
        self.lit(layout.ts)?;
        ev.ts = Some(self.time_value("ts").ok()?);
        self.lit(layout.dur)?;
        ev.dur = Some(self.time_value("dur").ok()?);
        self.lit(layout.args)?;
        // Graph replays' ops have no `External id` (torch then keeps the padding before the
        // next key, without its comma).
        if self.lit(layout.external_id).is_some() {
            self.skip_member_value(3).ok()?;
            self.lit(b",")?;
        }
        let args = &mut ev.args;
        if kernel {
            self.lit(layout.queued)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.device)?;
            args.device = Some(self.arg_value().ok()?);
            self.lit(layout.context)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.stream)?;
            args.stream = Some(self.arg_value().ok()?);
            self.lit(layout.correlation)?;
            args.correlation = Some(self.arg_value().ok()?);
            self.lit(layout.registers)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.shared_memory)?;
            self.skip_member_value(3).ok()?;
            // Written by newer torch only.
            if self.lit(layout.blocks_per_sm).is_some() {
                self.skip_member_value(3).ok()?;
                self.lit(layout.warps_per_sm)?;
                self.skip_member_value(3).ok()?;
            }
            self.lit(layout.grid)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.block)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.occupancy)?;
            self.skip_member_value(3).ok()?;
        } else {
            self.lit(layout.cbid)?;
            self.skip_member_value(3).ok()?;
            self.lit(layout.correlation)?;
            args.correlation = Some(self.arg_value().ok()?);
        }
        self.lit(layout.close)?;
        Some(Ok(()))
    }

    /// The rest of a CUDA flow event after its `ph`, laid out as `layout` says
    /// (`,"id":100,"pid":4242,"tid":4242,"ts":1000.000,"cat":"ac2g","name":"ac2g"}`, with
    /// `,"bp":"e"` before the `}` at the flow's end): steps past its `}`. Its values are
    /// checked by the readers [`Scanner::skip_value`] would take for them, so it moves only
    /// where [`Scanner::skip_object_rest`] would step over the same bytes, to the same place.
    /// `None` (the position left anywhere) at anything else.
    #[inline(always)]
    fn flow_rest(&mut self, layout: &Layout) -> Option<()> {
        self.lit(layout.flow_id)?;
        self.plain_integer()?;
        self.lit(layout.pid)?;
        self.plain_integer()?;
        self.lit(layout.tid)?;
        self.plain_integer()?;
        self.lit(layout.flow_ts)?;
        self.kineto_time()?;
        self.lit(layout.flow_cat_name)?;
        // Only at the flow's end.
        let _ = self.lit(layout.flow_bp);
        self.lit(layout.flow_close)
    }

    /// `,` between two members, with any white space around it (as
    /// [`Scanner::object_next`] steps over it); `None` (the position left anywhere) at
    /// anything else.
    #[inline(always)]
    fn comma(&mut self) -> Option<()> {
        self.skip_ws();
        self.lit(b",")?;
        self.skip_ws();
        Some(())
    }

    /// The key `pattern` (`"ts":`, its quotes and colon, as `EventKey::written` and
    /// [`ArgKey::written`] know keys) and the white space after it: where
    /// [`Scanner::known_key`] or [`Scanner::key`] would leave a key written so.
    #[inline(always)]
    fn key_lit(&mut self, pattern: &'static [u8]) -> Option<()> {
        self.lit(pattern)?;
        self.skip_ws();
        Some(())
    }

    /// [`Scanner::laid_out_event`] of an event in any of the layouts torch's events come in,
    /// with the args torch writes that it does not know: an event whose first members are
    /// those torch writes first, in its order, written compactly (`{"ph":"X","cat":"kernel",…`),
    /// over several lines as libkineto writes them (`{\n    "ph": "X", "cat": "kernel", …`)
    /// or as Python's `json.dump` rewrites them (`{"ph": "X", "cat": "kernel", …`):
    /// `ph`, `cat`, `name`, `pid`, `tid`, `ts`, `dur`, then at most `args`, the event's last
    /// member. Between tokens any white space is stepped over, as [`Scanner::any_event`]
    /// steps over it; keys are compared as written (quotes and colon, no escape); each value
    /// is read by the reader [`Scanner::any_event`] uses for its key, and `args` by a reader
    /// of `expected_args!`, which reads it as [`Scanner::args`] does. An event of another
    /// phase, or one the import will not use (known from `ph`, `cat` and `name`, as
    /// [`Scanner::any_event`] knows it), is stepped over from where
    /// [`Scanner::any_event`] would step over it. So when it gives an outcome, it is the one
    /// [`Scanner::any_event`] would give, leaving `ev` and the position as it would. At
    /// anything else (a key not as written here, another member or order, a value its reader
    /// refuses, the end of the bytes) it gives up with `None`, leaving the event to
    /// [`Scanner::any_event`], which reads it from its start as without this.
    #[inline(always)]
    fn spaced_event(&mut self, ev: &mut RawEvent<'a>) -> Option<Result<(), ScanError>> {
        self.lit(b"{")?;
        self.skip_ws();
        self.key_lit(b"\"ph\":")?;
        ev.ph = self.phase_value().ok()?;
        if ev.ph == Phase::Other {
            self.comma()?;
            return Some(self.skip_ignored_rest(true));
        }
        self.next_key(b"\"cat\":")?;
        ev.cat = self.cat_value()?;
        if !ev.may_be_imported() {
            self.comma()?;
            return Some(self.skip_ignored_rest(true));
        }
        self.next_key(b"\"name\":")?;
        ev.name = Some(self.str_value("name").ok()?);
        // What the import will use depends on `ph`, `cat` and `name` only: known from here.
        if !ev.may_be_imported() {
            self.comma()?;
            return Some(self.skip_ignored_rest(true));
        }
        // As in `laid_out_event`, written out: a shared function taking the separator as a
        // closure inlined worse on this hot path (benches/README.md, "Torch's own layout").
        self.next_key(b"\"pid\":")?;
        self.skip_member_value(2).ok()?;
        self.next_key(b"\"tid\":")?;
        ev.tid = Some(self.tid_value().ok()?);
        self.next_key(b"\"ts\":")?;
        ev.ts = Some(self.time_value("ts").ok()?);
        self.next_key(b"\"dur\":")?;
        ev.dur = Some(self.time_value("dur").ok()?);
        if self.next_key(b"\"args\":").is_some() {
            let args = &mut ev.args;
            match ev.cat {
                Cat::Kernel => self.kernel_args(args),
                Cat::Runtime | Cat::Driver => self.runtime_args(args),
                Cat::Memcpy | Cat::Memset => self.memory_args(args),
                _ => self.other_args(args),
            }
            .ok()?;
        }
        self.skip_ws();
        self.lit(b"}")?;
        Some(Ok(()))
    }

    /// After a member's value: the `,` and the next key, `key` as written (`"ts":`, its
    /// quotes and colon), and the white space around the comma and after the key, which
    /// [`Scanner::object_next`] then [`Scanner::known_key`] or [`Scanner::key`] would step
    /// over. Past them, or `None` with the position left as it was.
    #[inline(always)]
    fn next_key(&mut self, key: &'static [u8]) -> Option<()> {
        let at = self.pos;
        let found = self.comma().and_then(|()| self.key_lit(key));
        if found.is_none() {
            self.pos = at;
        }
        found
    }

    /// `cat`, as [`Scanner::word_value`] reads it, with torch's two most frequent categories
    /// compared as written.
    #[inline(always)]
    fn cat_value(&mut self) -> Option<Cat> {
        if self.lit(b"\"kernel\"").is_some() {
            return Some(Cat::Kernel);
        }
        if self.lit(b"\"cuda_runtime\"").is_some() {
            return Some(Cat::Runtime);
        }
        self.word_value("cat", Cat::from_bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::kineto::fixtures::{COMPACT, JSON_DUMP, LIBKINETO, REAL, event};
    use crate::trace::kineto::numbers::Time;

    /// Every event of `fixtures`, in each layout: those the templates read.
    fn torch_events() -> impl Iterator<Item = &'static str> {
        COMPACT
            .into_iter()
            .chain(LIBKINETO)
            .chain(JSON_DUMP)
            .chain(REAL)
    }

    /// Reads `text` with [`Scanner::event`] and with [`Scanner::any_event`] alone and checks
    /// that both give the same outcome, leave the same event and stop at the same byte.
    fn same_as_any_event(text: &[u8]) -> Result<(), ScanError> {
        let (mut fast, mut full) = (Scanner::new(text, 0), Scanner::new(text, 0));
        let (mut fast_ev, mut full_ev) = (RawEvent::default(), RawEvent::default());
        let outcome = fast.event(&mut fast_ev);
        let doc = String::from_utf8_lossy(text);
        assert_eq!(outcome, full.any_event(&mut full_ev), "{doc}");
        assert_eq!(fast.pos, full.pos, "{doc}");
        let full_ev = format!("{full_ev:?}");
        assert_eq!(format!("{fast_ev:?}"), full_ev, "{doc}");
        // Each template alone, where it gives an outcome.
        for template in [
            Scanner::compact_event,
            Scanner::libkineto_event,
            Scanner::spaced_event,
        ] {
            let (mut s, mut ev) = (Scanner::new(text, 0), RawEvent::default());
            if let Some(alone) = template(&mut s, &mut ev) {
                assert_eq!(alone, outcome, "{doc}");
                assert_eq!(s.pos, full.pos, "{doc}");
                assert_eq!(format!("{ev:?}"), full_ev, "{doc}");
            }
        }
        outcome
    }

    /// Whether [`Scanner::spaced_event`] gives `text` an outcome (rather than leaving it).
    fn read_spaced(text: &[u8]) -> bool {
        Scanner::new(text, 0)
            .spaced_event(&mut RawEvent::default())
            .is_some()
    }

    /// Whether [`Scanner::libkineto_event`] gives `text` an outcome (rather than leaving it).
    fn read_as_libkineto(text: &[u8]) -> bool {
        Scanner::new(text, 0)
            .libkineto_event(&mut RawEvent::default())
            .is_some()
    }

    /// Compact flow events that are not as torch writes them, which the flow template leaves
    /// to the skip.
    fn flows_left_to_the_skip() -> impl Iterator<Item = String> {
        let flow = COMPACT[1];
        [
            flow.replace("ac2g", "fwdbwd"),
            flow.replace("1000.000", "1000.0005"),
            flow.replace("\"id\":100", "\"id\":0100"),
            flow.replace("\"id\":100", "\"id\":-100"),
            flow.replace("\"id\":100", "\"id\":\"100\""),
            flow.replace("\"ac2g\"}", "\"ac2g\",\"bp\":\"s\"}"),
            flow.replace("\"ac2g\"}", "\"ac2g\",\"bp\":\"e\",\"x\":1}"),
        ]
        .into_iter()
    }

    /// Whether [`Scanner::flow_rest`] of `layout` reads `text` (after its `ph`) to its end.
    fn read_by_flow_template(text: &str, layout: &Layout) -> bool {
        let mut s = Scanner::new(text.as_bytes(), 0);
        s.lit(layout.open).is_some()
            && s.phase_value() == Ok(Phase::Other)
            && s.flow_rest(layout).is_some()
            && s.pos == text.len()
    }

    #[test]
    fn torch_flow_events_are_read_by_the_flow_template() {
        for (text, layout) in [
            (COMPACT[1], &COMPACT_LAYOUT),
            (COMPACT[3], &COMPACT_LAYOUT),
            (LIBKINETO[1], &LIBKINETO_LAYOUT),
            (LIBKINETO[3], &LIBKINETO_LAYOUT),
            (REAL[1], &LIBKINETO_LAYOUT),
            (REAL[3], &LIBKINETO_LAYOUT),
        ] {
            assert!(read_by_flow_template(text, layout), "{text}");
            assert_eq!(same_as_any_event(text.as_bytes()), Ok(()));
        }
        // Not flow events as torch writes them: left to the skip (which reads them as the
        // general path does: `other_layouts_of_torch_events_are_left_to_the_general_path`).
        for other in flows_left_to_the_skip().chain([COMPACT[0].to_owned()]) {
            assert!(!read_by_flow_template(&other, &COMPACT_LAYOUT), "{other}");
        }
        assert!(!read_by_flow_template(REAL[1], &COMPACT_LAYOUT));
    }

    /// Whether [`Scanner::compact_event`] gives `text` an outcome (rather than leaving it).
    fn read_compactly(text: &[u8]) -> bool {
        Scanner::new(text, 0)
            .compact_event(&mut RawEvent::default())
            .is_some()
    }

    #[test]
    fn torch_events_read_as_the_general_path_reads_them() {
        for text in torch_events() {
            for after in ["", ",\n", "]}", " "] {
                let doc = format!("{text}{after}");
                // All but the two events of `REAL` that do not start with `ph`.
                let starts_with_ph = !doc.starts_with("{\n    \"name\"");
                assert_eq!(read_spaced(doc.as_bytes()), starts_with_ph, "{doc}");
                assert_eq!(read_compactly(doc.as_bytes()), COMPACT.contains(&text));
                assert_eq!(same_as_any_event(doc.as_bytes()), Ok(()));
            }
        }
        // The three layouts of an event read the same.
        for layout in [LIBKINETO, JSON_DUMP] {
            for (text, compact) in layout.into_iter().zip(COMPACT) {
                let (ev, compact_ev) = (event(text).unwrap(), event(compact).unwrap());
                assert_eq!(format!("{ev:?}"), format!("{compact_ev:?}"));
            }
        }
        // The real kernel's args, "blocks per SM" and all.
        let ev = event(REAL[2]).unwrap();
        let a = &ev.args;
        assert_eq!(
            (ev.cat, a.device, a.stream, a.correlation),
            (Cat::Kernel, Some(Some(0)), Some(Some(7)), Some(Some(33)))
        );
        let ev = event(REAL[4]).unwrap();
        assert_eq!(
            (ev.cat, ev.args.bytes, ev.args.correlation),
            (Cat::Memcpy, Some(Some(1_048_576)), Some(Some(126)))
        );
        assert_eq!(event(REAL[0]).unwrap().args.correlation, Some(Some(9)));
        let ev = event(COMPACT[2]).unwrap();
        assert_eq!(
            (ev.ph, ev.cat, ev.tid),
            (Phase::Complete, Cat::Kernel, Some(7))
        );
        assert_eq!(ev.ts.unwrap().to_ns("ts"), Ok(1_003_525));
        assert!(matches!(ev.dur, Some(Time::Ns(6705))));
        let a = &ev.args;
        assert_eq!(
            (a.device, a.stream, a.correlation, a.graph),
            (Some(Some(0)), Some(Some(7)), Some(Some(100)), None)
        );
        let ev = event(COMPACT[0]).unwrap();
        assert_eq!(
            (ev.cat, ev.args.correlation),
            (Cat::Runtime, Some(Some(100)))
        );
        assert_eq!(ev.name.unwrap().text().unwrap(), "cudaLaunchKernel");
        assert_eq!(event(COMPACT[1]).unwrap().ph, Phase::Other);
    }

    #[test]
    fn every_cut_of_a_torch_event_reads_as_the_general_path_reads_it() {
        for text in torch_events() {
            for cut in 0..text.len() {
                let outcome = same_as_any_event(&text.as_bytes()[..cut]);
                assert!(
                    matches!(
                        outcome,
                        Err(ScanError::Incomplete | ScanError::IncompleteIgnored)
                    ),
                    "{cut}: {outcome:?}"
                );
            }
        }
    }

    #[test]
    fn every_byte_changed_in_a_torch_event_reads_as_the_general_path_reads_it() {
        let bytes = b" \n\"\\{}[],:.-+e0179aXxs\x01\x7f\xc3\xff";
        for text in torch_events() {
            for at in 0..text.len() {
                for &b in bytes {
                    let mut doc = text.as_bytes().to_vec();
                    doc[at] = b;
                    let _ = same_as_any_event(&doc);
                    doc.insert(at, b);
                    let _ = same_as_any_event(&doc);
                    doc.remove(at);
                    doc.remove(at);
                    let _ = same_as_any_event(&doc);
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn random_edits_of_torch_events_read_as_the_general_path_reads_them(
            which in 0..COMPACT.len() + LIBKINETO.len() + JSON_DUMP.len() + REAL.len(),
            edits in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(),
                 proptest::prelude::any::<u8>()),
                1..4,
            ),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let mut doc = torch_events().nth(which).unwrap().as_bytes().to_vec();
            for (at, b) in edits {
                let at = at.index(doc.len());
                doc[at] = b;
            }
            let _ = same_as_any_event(&doc);
            let _ = same_as_any_event(&doc[..cut.index(doc.len())]);
        }
    }

    #[test]
    fn other_layouts_of_torch_events_are_left_to_the_general_path() {
        let [runtime, flow, kernel, _] = COMPACT;
        let variants = [
            // White space.
            kernel.replace(",\"", ", \""),
            kernel.replace("\":", "\": "),
            kernel.replace("{\"", "{ \""),
            kernel.replace("}}", "} }"),
            runtime.replace(",\"args", ",\n\"args"),
            flow.replace("{\"ph\"", "{ \"ph\""),
            flow.replace("\"s\",", "\"s\" ,"),
            // Escapes: in a name (read the same, escaped), a key, a phase, a category.
            kernel.replace("ampere", "amp\\u0065re"),
            kernel.replace("ampere", "amp\\\"ere"),
            kernel.replace("ampere", "amp\\qere"),
            kernel.replace("ampere", "amp\\u00zzre"),
            kernel.replace("\"tid\"", "\"t\\u0069d\""),
            kernel.replace("\"X\"", "\"\\u0058\""),
            runtime.replace("cuda_runtime", "cuda\\u005fruntime"),
            flow.replace("\"s\"", "\"\\u0073\""),
            // Reordered, missing, extra and repeated members.
            kernel.replace(
                "\"ts\":1003.525,\"dur\":6.705",
                "\"dur\":6.705,\"ts\":1003.525",
            ),
            kernel.replace(
                "\"ph\":\"X\",\"cat\":\"kernel\"",
                "\"cat\":\"kernel\",\"ph\":\"X\"",
            ),
            kernel.replace("\"queued\":0,", ""),
            kernel.replace("\"queued\":0,", "\"queued\":0,\"graph id\":3,"),
            runtime.replace("\"External id\":2,", ""),
            runtime.replace("}}", "},\"ts\":5}"),
            runtime.replace("}}", ",\"correlation\":7}}"),
            runtime.replace("\"tid\":4242", "\"tid\":4242,\"tid\":5"),
            kernel.replace("}}", ",\"bytes\":64}}"),
            // Other values: times, thread ids, arguments, categories, phases.
            kernel.replace("1003.525", "1003.5255"),
            kernel.replace("1003.525", "1.003525e3"),
            kernel.replace("1003.525", "1003"),
            kernel.replace("1003.525", "01003.525"),
            kernel.replace("6.705", "-6.705"),
            kernel.replace("6.705", "\"6.705\""),
            kernel.replace("\"tid\":7", "\"tid\":\"stream 7\""),
            kernel.replace("\"tid\":7", "\"tid\":\"7\""),
            kernel.replace("\"tid\":7", "\"tid\":-7"),
            kernel.replace("\"tid\":7", "\"tid\":99999999999"),
            kernel.replace("\"tid\":7", "\"tid\":7.5"),
            kernel.replace("\"pid\":0", "\"pid\":\"rank 0\""),
            kernel.replace("\"stream\":7", "\"stream\":7.0"),
            kernel.replace("\"stream\":7", "\"stream\":null"),
            kernel.replace("\"device\":0", "\"device\":-1"),
            kernel.replace(
                "\"correlation\":100",
                "\"correlation\":18446744073709551615",
            ),
            kernel.replace("[2,1,1]", "[2, 1, 1]"),
            kernel.replace("[2,1,1]", "[]"),
            kernel.replace(
                "\"est. achieved occupancy %\":0",
                "\"est. achieved occupancy %\":12.5",
            ),
            kernel.replace("\"kernel\"", "\"Kernel\""),
            kernel.replace("\"kernel\"", "\"kernels\""),
            runtime.replace("cuda_runtime", "cuda_driver"),
            kernel.replace("\"X\"", "\"i\""),
            kernel.replace("\"X\"", "\"XX\""),
            kernel.replace("\"X\"", "\"\"\""),
            flow.replace("\"s\"", "\"\""),
            flow.replace("\"ac2g\"}", "\"ac2g\",\"x\":[{}]}"),
            flow.replace("\"ac2g\"}", "\"ac2g\",\"x\":\"\\q\"}"),
            "{\"ph\":\"s\"}".to_owned(),
            "{\"ph\":\"X\"}".to_owned(),
            "{\"ph\":7,\"x\":1}".to_owned(),
            "{}".to_owned(),
        ]
        .into_iter()
        .chain(flows_left_to_the_skip())
        .collect::<Vec<_>>();
        for doc in &variants {
            let _ = same_as_any_event(doc.as_bytes());
            let with_next = format!("{doc},\n{kernel}");
            let _ = same_as_any_event(with_next.as_bytes());
            for cut in 0..doc.len() {
                let _ = same_as_any_event(&doc.as_bytes()[..cut]);
            }
        }
        // Escaped names and string thread ids are read compactly too, with what the general
        // path reads; white space and reordered members are not.
        assert!(read_compactly(variants[7].as_bytes()));
        assert!(event(&variants[7]).unwrap().name.unwrap().escaped);
        assert!(read_compactly(variants[30].as_bytes()));
        assert!(!read_compactly(variants[0].as_bytes()));
        assert!(!read_compactly(variants[15].as_bytes()));
        // White space between tokens and other args are read by the spaced template;
        // reordered members are not.
        for i in [0, 1, 2, 3, 4, 5, 6, 17, 18, 19, 21, 23] {
            assert!(read_spaced(variants[i].as_bytes()), "{}", variants[i]);
        }
        assert!(!read_spaced(variants[15].as_bytes()));
        assert!(!read_spaced(variants[16].as_bytes()));
        // A phase of three quotes is an empty string and a stray quote: not JSON.
        let three_quotes = kernel.replace("\"X\"", "\"\"\"");
        assert!(matches!(event(&three_quotes), Err(ScanError::Bad(_))));
        // The events as torch's own writer lays them out, over several lines.
        let kineto = r#"{
    "ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT", "pid": 0, "tid": 7,
    "ts": 5183240911118.455, "dur": 5.888,
    "args": {
      "External id": 2,      "queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": 16,      "registers per thread": 168,      "shared memory": 213268,      "blocks per SM": 0.969697,      "warps per SM": 11.636364,      "grid": [2, 64, 1],      "block": [384, 1, 1],      "est. achieved occupancy %": 0
    }
  }"#;
        assert!(!read_compactly(kineto.as_bytes()));
        assert!(read_spaced(kineto.as_bytes()));
        assert!(read_as_libkineto(kineto.as_bytes()));
        assert_eq!(same_as_any_event(kineto.as_bytes()), Ok(()));
        // A graph replay's kernel: no `External id`, its padding kept.
        let replayed = r#"{
    "ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT", "pid": 0, "tid": 7,
    "ts": 5183240931024.376, "dur": 5.825,
    "args": {
            "queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": 5433,      "registers per thread": 168,      "shared memory": 213268,      "blocks per SM": 0.969697,      "warps per SM": 11.636364,      "grid": [2, 64, 1],      "block": [384, 1, 1],      "est. achieved occupancy %": 0
    }
  }"#;
        assert!(read_as_libkineto(replayed.as_bytes()));
        assert_eq!(same_as_any_event(replayed.as_bytes()), Ok(()));
        assert_eq!(event(replayed).unwrap().args.correlation, Some(Some(5433)));
        // torch's own runtime calls, kernels and flow events (with and without `External id`)
        // are read by the libkineto template; copies and annotations by the spaced one.
        for (i, text) in REAL.iter().enumerate() {
            assert_eq!(read_as_libkineto(text.as_bytes()), i < 4, "{text}");
        }
        for cut in 0..replayed.len() {
            let outcome = same_as_any_event(&replayed.as_bytes()[..cut]);
            assert_eq!(outcome, Err(ScanError::Incomplete), "{cut}");
        }
    }

    #[test]
    fn other_layouts_of_spaced_torch_events_are_read_as_the_general_path_reads_them() {
        let [runtime, flow, kernel, _] = LIBKINETO;
        let [dumped_runtime, _, dumped_kernel, _] = JSON_DUMP;
        let variants = [
            // White space elsewhere: before a colon or a comma, none, tabs and CRs.
            kernel.replace("\"ph\":", "\"ph\" :"),
            kernel.replace("\"device\":", "\"device\" :"),
            kernel.replace(", \"tid\"", " , \"tid\""),
            kernel.replace("\n", "\r\n"),
            kernel.replace("      ", "\t"),
            kernel.replace(": ", ":"),
            kernel.replace("\n    }", "}"),
            runtime.replace("{\n", "{"),
            flow.replace("\"s\",", "\"s\"\n,"),
            dumped_kernel.replace(", ", ","),
            dumped_runtime.replace("}}", "} }"),
            // Other args: reordered, unknown, repeated, escaped, nested, missing, none.
            kernel.replace("\"queued\": 0,", "\"graph id\": 3, \"queued\": 0,"),
            kernel.replace("\"stream\": 7,", "\"stream\": 7, \"stream\": 9,"),
            kernel.replace("\"grid\"", "\"grid size\""),
            kernel.replace("\"grid\"", "\"gr\\u0069d\""),
            kernel.replace("\"stream\"", "\"str\\u0065am\""),
            kernel.replace("[2, 1, 1]", "{\"x\": [2, {}], \"y\": null}"),
            kernel.replace("[2, 1, 1]", "[2, 1, 1"),
            kernel.replace("\"correlation\": 100,", ""),
            runtime.replace("\"cbid\": 211,", "\"cbid\": 211, \"graph node id\": 4,"),
            runtime.replace("\"External id\": 2,      \"cbid\": 211,      ", ""),
            runtime.replace(
                "\"External id\": 2,      \"cbid\": 211,      \"correlation\": 100",
                "",
            ),
            REAL[2].replace("1.939394", "1.939394e0"),
            REAL[2].replace("1.939394", "-1.9"),
            REAL[4].replace("910.2222222222222", "\"fast\""),
            REAL[5].replace("\"Ev Idx\": 0", "\"Ev Idx\": 0, \"stream\": 3"),
            // Other members: after args, between the first ones, missing, repeated.
            kernel.replace("\n    }\n  }", "\n    }, \"extra\": 1\n  }"),
            kernel.replace("\"pid\": 0,", "\"pid\": 0, \"x\": 1,"),
            kernel.replace("\"pid\": 0,", ""),
            kernel.replace("\"ts\": 1003.525,", "\"ts\": 1003.525, \"ts\": 1,"),
            kernel.replace(",\n    \"args\": {", ", \"args\": 5, \"a\": {"),
            REAL[6].replace("aten::matmul", "ProfilerStep#3"),
            REAL[6].replace("aten::matmul", "Profiler\\u0053tep#3"),
            REAL[7].replace("gpu_user_annotation", "user_annotation"),
            REAL[8].replace("\"overhead\"", "\"gpu_memset\""),
            REAL[9].replace("\"Trace\"", "\"kernel\""),
        ];
        for doc in &variants {
            let _ = same_as_any_event(doc.as_bytes());
            let with_next = format!("{doc},\n  {kernel}");
            let _ = same_as_any_event(with_next.as_bytes());
            for cut in 0..doc.len() {
                let _ = same_as_any_event(&doc.as_bytes()[..cut]);
            }
        }
        // Left to the general path: a space before an event key's colon, an args value that
        // does not end, members out of torch's order, missing or after args, args not an
        // object; everything else is read by the fast path.
        let left = [0, 17, 26, 27, 28, 29, 30, 35];
        for (i, doc) in variants.iter().enumerate() {
            assert_eq!(read_spaced(doc.as_bytes()), !left.contains(&i), "{doc}");
        }
    }

    #[test]
    fn the_expected_args_keys_are_named_as_the_general_path_names_them() {
        for order in [KERNEL_ARGS, RUNTIME_ARGS, MEMORY_ARGS, OTHER_ARGS] {
            for &(pattern, key) in order {
                let text = &pattern[1..pattern.len() - 2];
                assert_eq!(pattern.first(), Some(&b'"'));
                assert!(pattern.ends_with(b"\":"));
                assert!(text.iter().all(|&b| b != b'"' && b != b'\\' && b >= 0x20));
                assert_eq!(ArgKey::of(text), key, "{}", String::from_utf8_lossy(text));
                if let Some((written, len)) = ArgKey::written(pattern) {
                    assert_eq!((written, len), (key, pattern.len()));
                }
            }
        }
    }
}
