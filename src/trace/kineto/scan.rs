//! One element of `traceEvents`, read straight from the bytes it lies in.
//!
//! A small JSON reader that knows the few keys the import uses and checks, without building,
//! everything else: strings (escapes, no raw control characters), numbers, literals, nesting.
//! Nothing is allocated per event: keys are matched as bytes, the name stays a slice of the
//! input, numbers stay digits until the importer needs them. Running off the end of the bytes
//! is [`ScanError::Incomplete`]: the caller reads more and starts that event again.
#![forbid(unsafe_code)]

use super::bytes::{
    controls_inside, find_string_special, find_structural, flat_bytes, flat_lines_bytes,
};
use super::numbers::{Num, Time, digits, ends_value, exact_ns, read_number};

/// Deepest nesting accepted inside an event (as serde_json's default limit).
const MAX_DEPTH: u32 = 128;

#[derive(Debug, PartialEq)]
pub(super) enum ScanError {
    /// The bytes end inside the value.
    Incomplete,
    /// The bytes end inside an event already known not to be imported: the caller can step
    /// over the rest of it as it reads, without holding it.
    IncompleteIgnored,
    /// Not valid here (boxed: results on the hot path stay small).
    Bad(Box<Bad>),
}

/// What is wrong, and where: `at` is the offset in the scanned bytes.
#[derive(Debug, PartialEq)]
pub(super) struct Bad {
    pub at: usize,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    #[default]
    Missing,
    Complete,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Cat {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    Driver,
    UserAnnotation,
    CpuOp,
    /// A Python call traced by `with_stack=True` (`python_function`).
    PythonFunction,
    /// Meta's MTIA accelerator: its runtime calls and device activity (`mtia_runtime`,
    /// `mtia_ccp_events`), counted so a trace of nothing else is named for what it is.
    Mtia,
    #[default]
    Other,
}

impl Cat {
    fn from_bytes(s: &[u8]) -> Cat {
        match s {
            b"kernel" | b"Kernel" => Cat::Kernel,
            b"gpu_memcpy" | b"Memcpy" => Cat::Memcpy,
            b"gpu_memset" | b"Memset" => Cat::Memset,
            b"cuda_runtime" | b"Runtime" => Cat::Runtime,
            b"cuda_driver" | b"Driver" => Cat::Driver,
            b"user_annotation" => Cat::UserAnnotation,
            b"cpu_op" | b"Operator" => Cat::CpuOp,
            b"python_function" => Cat::PythonFunction,
            b"mtia_runtime" | b"mtia_ccp_events" => Cat::Mtia,
            _ => Cat::Other,
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Cat::Kernel => "kernel",
            Cat::Memcpy => "gpu_memcpy",
            Cat::Memset => "gpu_memset",
            Cat::Runtime => "cuda_runtime",
            Cat::Driver => "cuda_driver",
            Cat::UserAnnotation => "user_annotation",
            Cat::CpuOp => "cpu_op",
            Cat::PythonFunction => "python_function",
            Cat::Mtia => "mtia",
            Cat::Other => "other",
        }
    }
}

/// A JSON string as written, without its quotes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Str<'a> {
    pub raw: &'a [u8],
    /// Holds a backslash escape: decode before use.
    pub escaped: bool,
}

impl Str<'_> {
    /// The string's text: borrowed when there are no escapes.
    pub(super) fn text(&self) -> Result<std::borrow::Cow<'_, str>, String> {
        if self.escaped {
            let mut quoted = Vec::with_capacity(self.raw.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(self.raw);
            quoted.push(b'"');
            serde_json::from_slice::<String>(&quoted)
                .map(Into::into)
                .map_err(|e| format!("invalid string: {e}"))
        } else {
            std::str::from_utf8(self.raw)
                .map(Into::into)
                .map_err(|_| "a string is not valid UTF-8".to_owned())
        }
    }
}

/// An `args` value: absent (`None`), not a non-negative integer (`Some(None)`), or one.
pub(super) type ArgVal = Option<Option<u64>>;

#[derive(Debug, Default)]
pub(super) struct Args {
    pub device: ArgVal,
    pub stream: ArgVal,
    pub correlation: ArgVal,
    pub graph: ArgVal,
    pub node: ArgVal,
    pub bytes: ArgVal,
}

/// The parts of one event the import uses.
#[derive(Debug, Default)]
pub(super) struct RawEvent<'a> {
    pub ph: Phase,
    pub cat: Cat,
    pub name: Option<Str<'a>>,
    pub ts: Option<Time<'a>>,
    pub dur: Option<Time<'a>>,
    pub tid: Option<u32>,
    pub args: Args,
}

/// The members of an event the import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKey {
    Ph,
    Cat,
    Name,
    Ts,
    Dur,
    Tid,
    Args,
    Other,
}

impl EventKey {
    fn of(key: &[u8]) -> EventKey {
        match key {
            b"ph" => EventKey::Ph,
            b"cat" => EventKey::Cat,
            b"name" => EventKey::Name,
            b"ts" => EventKey::Ts,
            b"dur" => EventKey::Dur,
            b"tid" => EventKey::Tid,
            b"args" => EventKey::Args,
            _ => EventKey::Other,
        }
    }

    /// The key at the start of `rest` and its length with quotes and colon, when it is one of
    /// the keys torch writes in every event, written plainly (`"ts":`).
    #[inline(always)]
    fn written(rest: &[u8]) -> Option<(EventKey, usize)> {
        let hit =
            |pattern: &'static [u8], key| rest.starts_with(pattern).then_some((key, pattern.len()));
        match rest.get(1)? {
            b'p' => hit(b"\"ph\":", EventKey::Ph).or_else(|| hit(b"\"pid\":", EventKey::Other)),
            b'c' => hit(b"\"cat\":", EventKey::Cat),
            b'n' => hit(b"\"name\":", EventKey::Name),
            b't' => hit(b"\"ts\":", EventKey::Ts).or_else(|| hit(b"\"tid\":", EventKey::Tid)),
            b'd' => hit(b"\"dur\":", EventKey::Dur),
            b'a' => hit(b"\"args\":", EventKey::Args),
            b'i' => hit(b"\"id\":", EventKey::Other),
            _ => None,
        }
    }
}

/// The `args` members the import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgKey {
    Device,
    Stream,
    Correlation,
    Graph,
    Node,
    Bytes,
    Other,
}

impl ArgKey {
    fn of(key: &[u8]) -> ArgKey {
        match key {
            b"device" => ArgKey::Device,
            b"stream" => ArgKey::Stream,
            b"correlation" => ArgKey::Correlation,
            b"graph id" | b"graph_id" => ArgKey::Graph,
            b"graph node id" | b"graph_node_id" => ArgKey::Node,
            b"bytes" => ArgKey::Bytes,
            _ => ArgKey::Other,
        }
    }

    /// As [`EventKey::written`], for the `args` keys of torch's kernels and API calls.
    #[inline(always)]
    fn written(rest: &[u8]) -> Option<(ArgKey, usize)> {
        let hit =
            |pattern: &'static [u8], key| rest.starts_with(pattern).then_some((key, pattern.len()));
        match rest.get(1)? {
            b'E' => hit(b"\"External id\":", ArgKey::Other),
            b'q' => hit(b"\"queued\":", ArgKey::Other),
            b'd' => hit(b"\"device\":", ArgKey::Device),
            b'c' => hit(b"\"context\":", ArgKey::Other)
                .or_else(|| hit(b"\"correlation\":", ArgKey::Correlation))
                .or_else(|| hit(b"\"cbid\":", ArgKey::Other)),
            b's' => hit(b"\"stream\":", ArgKey::Stream)
                .or_else(|| hit(b"\"shared memory\":", ArgKey::Other)),
            b'r' => hit(b"\"registers per thread\":", ArgKey::Other),
            b'g' => hit(b"\"grid\":", ArgKey::Other),
            b'b' => hit(b"\"block\":", ArgKey::Other).or_else(|| hit(b"\"bytes\":", ArgKey::Bytes)),
            b'e' => hit(b"\"est. achieved occupancy %\":", ArgKey::Other),
            _ => None,
        }
    }
}

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

/// A position in a byte slice.
pub(super) struct Scanner<'a> {
    bytes: &'a [u8],
    pub pos: usize,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(bytes: &'a [u8], pos: usize) -> Scanner<'a> {
        Scanner { bytes, pos }
    }

    #[inline(always)]
    pub(super) fn peek(&self) -> Result<u8, ScanError> {
        self.bytes
            .get(self.pos)
            .copied()
            .ok_or(ScanError::Incomplete)
    }

    #[inline(always)]
    pub(super) fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    pub(super) fn bad<T>(&self, message: impl Into<String>) -> Result<T, ScanError> {
        Err(ScanError::Bad(Box::new(Bad {
            at: self.pos,
            message: message.into(),
        })))
    }

    /// Consumes `byte` (after white space) or fails with `what`.
    #[inline(always)]
    fn expect(&mut self, byte: u8, what: &str) -> Result<(), ScanError> {
        self.skip_ws();
        if self.peek()? != byte {
            return self.bad(what);
        }
        self.pos += 1;
        self.skip_ws();
        Ok(())
    }

    /// A string; at its opening quote.
    #[inline(always)]
    fn string(&mut self) -> Result<Str<'a>, ScanError> {
        let start = self.pos + 1;
        let escaped = self.string_end(start)?;
        Ok(Str {
            raw: &self.bytes[start..self.pos - 1],
            escaped,
        })
    }

    /// Steps over the rest of a string whose text starts at `start`; returns whether it holds
    /// escapes. Leaves `pos` after the closing quote.
    #[inline(always)]
    fn string_end(&mut self, start: usize) -> Result<bool, ScanError> {
        let b = self.bytes;
        let mut i = start;
        let mut escaped = false;
        loop {
            let rest = b.get(i..).unwrap_or_default();
            let Some(p) = find_string_special(rest) else {
                return Err(ScanError::Incomplete);
            };
            i += p;
            match b[i] {
                b'"' => {
                    self.pos = i + 1;
                    return Ok(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match b.get(i + 1) {
                        None => return Err(ScanError::Incomplete),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            let hex = b.get(i + 2..i + 6).ok_or(ScanError::Incomplete)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                self.pos = i;
                                return self.bad("invalid \\u escape in a string");
                            }
                            i += 6;
                        }
                        Some(_) => {
                            self.pos = i;
                            return self.bad("invalid escape in a string");
                        }
                    }
                }
                _ => {
                    self.pos = i;
                    return self.bad("control character in a string (must be escaped)");
                }
            }
        }
    }

    /// A number; at its first byte. Digits are read into values on the way.
    #[inline(always)]
    fn number(&mut self) -> Result<Num<'a>, ScanError> {
        let len = self.bytes.len();
        match read_number(self.bytes, self.pos) {
            // It may go on in bytes not read yet.
            Ok(n) if self.pos + n.text.len() == len => Err(ScanError::Incomplete),
            Ok(n) => {
                self.pos += n.text.len();
                Ok(n)
            }
            Err((at, _)) if at == len => Err(ScanError::Incomplete),
            Err((at, message)) => {
                self.pos = at;
                self.bad(message)
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ScanError> {
        let have = &self.bytes[self.pos..self.bytes.len().min(self.pos + word.len())];
        if have != &word[..have.len()] {
            return self.bad("expected a value");
        }
        if have.len() < word.len() {
            return Err(ScanError::Incomplete);
        }
        self.pos += word.len();
        Ok(())
    }

    /// Checks and steps over any value.
    fn skip_value(&mut self, depth: u32) -> Result<(), ScanError> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'0'..=b'9' if self.plain_integer().is_some() => Ok(()),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            open @ (b'{' | b'[') => {
                if depth >= MAX_DEPTH {
                    return self.bad("nested too deeply");
                }
                let close = if open == b'{' { b'}' } else { b']' };
                self.pos += 1;
                self.skip_ws();
                if self.peek()? == close {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    if open == b'{' {
                        if self.peek()? != b'"' {
                            return self.bad("expected a key (a string)");
                        }
                        self.string()?;
                        self.expect(b':', "expected ':' after a key")?;
                    }
                    self.skip_value(depth + 1)?;
                    self.skip_ws();
                    match self.peek()? {
                        b',' => {
                            self.pos += 1;
                            self.skip_ws();
                        }
                        c if c == close => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ if open == b'{' => return self.bad("expected ',' or '}' in an object"),
                        _ => return self.bad("expected ',' or ']' in an array"),
                    }
                }
            }
            _ => self.bad("expected a value"),
        }
    }

    /// [`Scanner::skip_value`] of a member's value, with the plain integers most skipped
    /// members hold (`"pid":4242`, `"queued":0`) stepped over here, without the call.
    #[inline(always)]
    fn skip_member_value(&mut self, depth: u32) -> Result<(), ScanError> {
        if self.plain_integer().is_some() || self.plain_decimal() || self.integer_array() {
            return Ok(());
        }
        self.skip_value(depth)
    }

    /// A non-negative number with a fraction and no exponent, followed by a byte that ends a
    /// value (`0.015152`, as torch writes a kernel's `blocks per SM`): steps over it as
    /// [`Scanner::skip_value`] would. `false` moves nothing.
    #[inline(always)]
    fn plain_decimal(&mut self) -> bool {
        let (b, start) = (self.bytes, self.pos);
        let int_end = digits(b, start).0;
        let int_len = int_end - start;
        if int_len == 0 || (int_len > 1 && b[start] == b'0') || b.get(int_end) != Some(&b'.') {
            return false;
        }
        let end = digits(b, int_end + 1).0;
        if end == int_end + 1 || !ends_value(b, end) {
            return false;
        }
        self.pos = end;
        true
    }

    /// A non-empty array of plain integers (`[128,1,1]`, `[128, 1, 1]`, as torch writes a
    /// kernel's grid and block): steps over it as [`Scanner::skip_value`] would, with the white
    /// space it steps over. `false` moves nothing.
    #[inline(always)]
    fn integer_array(&mut self) -> bool {
        let start = self.pos;
        if self.bytes.get(start) != Some(&b'[') {
            return false;
        }
        self.pos += 1;
        self.skip_ws();
        loop {
            if self.plain_integer().is_none() {
                break;
            }
            if self.bytes.get(self.pos) != Some(&b',') {
                self.skip_ws();
            }
            match self.bytes.get(self.pos) {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    return true;
                }
                _ => break,
            }
        }
        self.pos = start;
        false
    }

    /// A string value for `key`.
    #[inline(always)]
    fn str_value(&mut self, key: &str) -> Result<Str<'a>, ScanError> {
        if self.peek()? != b'"' {
            return self.bad(format!("\"{key}\" must be a string"));
        }
        self.string()
    }

    /// A string value for `key`, mapped through `f` (decoded first when it has escapes).
    fn word_value<T>(&mut self, key: &str, f: fn(&[u8]) -> T) -> Result<T, ScanError> {
        let at = self.pos;
        let s = self.str_value(key)?;
        if !s.escaped {
            return Ok(f(s.raw));
        }
        let text = s.text().or_else(|m| {
            self.pos = at;
            self.bad(m)
        })?;
        Ok(f(text.as_bytes()))
    }

    /// A non-negative number of microseconds for `key`.
    #[inline(always)]
    fn time_value(&mut self, key: &str) -> Result<Time<'a>, ScanError> {
        let message = || format!("\"{key}\" must be a non-negative number of microseconds");
        match self.peek()? {
            b'0'..=b'9' => {
                if let Some(ns) = self.kineto_time() {
                    return Ok(Time::Ns(ns));
                }
                Ok(Time::Number(self.number()?.text))
            }
            _ => self.bad(message()),
        }
    }

    /// `1003.525` (microseconds with up to 3 decimals, as Kineto writes times) in nanoseconds,
    /// followed by a byte that ends a value. `None` leaves the position alone.
    #[inline(always)]
    fn kineto_time(&mut self) -> Option<u64> {
        let b = self.bytes;
        let start = self.pos;
        let (int_end, us) = digits(b, start);
        let int_len = int_end - start;
        if int_len == 0 || int_len > 15 || (int_len > 1 && b[start] == b'0') {
            return None;
        }
        let (end, frac, frac_len) = match b.get(int_end) {
            Some(b'.') => {
                let (end, frac) = digits(b, int_end + 1);
                (end, frac, end - int_end - 1)
            }
            _ => (int_end, 0, 0),
        };
        let ends = matches!(b.get(end), Some(b',' | b'}' | b' ' | b'\n' | b'\r' | b'\t'));
        if !ends || frac_len > 3 || (b.get(int_end) == Some(&b'.') && frac_len == 0) {
            return None;
        }
        self.pos = end;
        Some(exact_ns(us, frac, frac_len))
    }

    /// `tid`: an integer, or a string (a number, or hashed).
    fn tid_value(&mut self) -> Result<u32, ScanError> {
        match self.peek()? {
            b'"' => {
                let at = self.pos;
                let s = self.string()?;
                let text = s.text().or_else(|m| {
                    self.pos = at;
                    self.bad(m)
                })?;
                Ok(text.parse::<u32>().unwrap_or_else(|_| hash_tid(&text)))
            }
            b'0'..=b'9' if let Some(v) = self.plain_integer() => Ok(tid_of(v)),
            b'-' | b'0'..=b'9' => {
                let at = self.pos;
                let n = self.number()?;
                if let Some(v) = n.as_plain_u64() {
                    return Ok(tid_of(v));
                }
                if n.negative
                    && !n.exponent
                    && n.frac_digits == 0
                    && let Ok(v) = std::str::from_utf8(n.text).unwrap_or("").parse::<i64>()
                {
                    return Ok(v as u32);
                }
                self.pos = at;
                self.bad("\"tid\" must be an integer or a string")
            }
            _ => self.bad("\"tid\" must be an integer or a string"),
        }
    }

    /// An `args` value for a key the import reads.
    #[inline(always)]
    fn arg_value(&mut self) -> Result<Option<u64>, ScanError> {
        match self.peek()? {
            b'0'..=b'9' => {
                if let Some(v) = self.plain_integer() {
                    return Ok(Some(v));
                }
                Ok(self.number()?.as_arg())
            }
            b'-' => Ok(self.number()?.as_arg()),
            _ => {
                self.skip_value(3)?;
                Ok(None)
            }
        }
    }

    /// A non-negative integer of at most 19 digits, without leading zero, fraction or
    /// exponent, followed by a byte that ends a value: its value (most numbers of a Kineto
    /// file). `None` leaves the position alone for [`Scanner::number`] to read and check.
    #[inline(always)]
    fn plain_integer(&mut self) -> Option<u64> {
        let start = self.pos;
        let (end, value) = digits(self.bytes, start);
        let len = end - start;
        if !ends_value(self.bytes, end)
            || len == 0
            || len > 19
            || (len > 1 && self.bytes[start] == b'0')
        {
            return None;
        }
        self.pos = end;
        Some(value)
    }

    /// A key and its `:`; at the key's opening quote. Decoded only when it has escapes.
    #[inline(always)]
    fn key<'k>(&mut self, decoded: &'k mut String) -> Result<&'k [u8], ScanError>
    where
        'a: 'k,
    {
        if self.peek()? != b'"' {
            return self.bad("expected a key (a string)");
        }
        let at = self.pos;
        let key = self.string()?;
        self.expect(b':', "expected ':' after a key")?;
        if !key.escaped {
            return Ok(key.raw);
        }
        *decoded = key
            .text()
            .or_else(|m| {
                self.pos = at;
                self.bad(m)
            })?
            .into_owned();
        Ok(decoded.as_bytes())
    }

    /// After a member of an object: `true` at its closing `}`, `false` after a `,`.
    #[inline(always)]
    fn object_next(&mut self, what: &str) -> Result<bool, ScanError> {
        // Compact JSON (`1,"next"`) first: no white space to step over before the comma.
        if self.bytes.get(self.pos) == Some(&b',') {
            self.pos += 1;
            self.skip_ws();
            return Ok(false);
        }
        self.skip_ws();
        match self.peek()? {
            b',' => {
                self.pos += 1;
                self.skip_ws();
                Ok(false)
            }
            b'}' => {
                self.pos += 1;
                Ok(true)
            }
            _ => self.bad(format!("expected ',' or '}}' in {what}")),
        }
    }

    /// Opens an object: `true` when it is empty (and closed).
    fn object_open(&mut self, what: &str) -> Result<bool, ScanError> {
        if self.peek()? != b'{' {
            return self.bad(format!("expected {what}"));
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    fn args(&mut self, args: &mut Args) -> Result<(), ScanError> {
        if self.object_open("an object for \"args\"")? {
            return Ok(());
        }
        self.args_rest(args)
    }

    /// The members of `args` from one at its key's opening quote to the `}` closing it.
    fn args_rest(&mut self, args: &mut Args) -> Result<(), ScanError> {
        let mut decoded = String::new();
        loop {
            let key = match self.known_key(ArgKey::written) {
                Some(key) => key,
                None => ArgKey::of(self.key(&mut decoded)?),
            };
            if self.arg_member(key, args)? {
                return Ok(());
            }
        }
    }

    /// The value of an `args` member whose key is `key` (into its slot, or stepped over) and
    /// what follows it: `true` at the `}` that closes `args`, `false` after a `,`.
    #[inline(always)]
    fn arg_member(&mut self, key: ArgKey, args: &mut Args) -> Result<bool, ScanError> {
        self.arg_member_value(key, args)?;
        self.object_next("\"args\"")
    }

    /// The value of an `args` member whose key is `key`: into its slot, or stepped over.
    #[inline(always)]
    fn arg_member_value(&mut self, key: ArgKey, args: &mut Args) -> Result<(), ScanError> {
        let slot = match key {
            ArgKey::Device => &mut args.device,
            ArgKey::Stream => &mut args.stream,
            ArgKey::Correlation => &mut args.correlation,
            ArgKey::Graph => &mut args.graph,
            ArgKey::Node => &mut args.node,
            ArgKey::Bytes => &mut args.bytes,
            ArgKey::Other => return self.skip_member_value(3),
        };
        *slot = Some(self.arg_value()?);
        Ok(())
    }

    /// At a key's opening quote: when the key is written as `written` knows it (`"name":`, no
    /// escape, no space before the colon, as torch writes keys), steps past it, its colon and
    /// the white space after, and returns what it is: the same as [`Scanner::key`] then a
    /// match on its bytes would, without looking for the string's end. `None` moves nothing.
    #[inline(always)]
    fn known_key<K>(&mut self, written: fn(&[u8]) -> Option<(K, usize)>) -> Option<K> {
        let rest = self.bytes.get(self.pos..)?;
        let (key, len) = written(rest)?;
        self.pos += len;
        self.skip_ws();
        Some(key)
    }

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

    /// The key `pattern` (`"ts":`, its quotes and colon, as [`EventKey::written`] and
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
    /// of [`expected_args!`], which reads it as [`Scanner::args`] does. An event of another
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

    /// [`Scanner::skip_object_rest`] of an event known not to be imported.
    #[inline(always)]
    fn skip_ignored_rest(&mut self, lines: bool) -> Result<(), ScanError> {
        match self.skip_object_rest(lines) {
            Err(ScanError::Incomplete) => Err(ScanError::IncompleteIgnored),
            other => other,
        }
    }

    /// [`Scanner::event`] of any element, member by member. Once the members read show that
    /// the import will not use the event (`ph` and `cat` come first in torch's output), the
    /// rest is stepped over with [`Scanner::skip_object_rest`].
    fn any_event(&mut self, ev: &mut RawEvent<'a>) -> Result<(), ScanError> {
        *ev = RawEvent::default();
        if self.object_open("an event object")? {
            return Ok(());
        }
        let mut decoded = String::new();
        let mut cat_seen = false;
        loop {
            let key = match self.known_key(EventKey::written) {
                Some(key) => key,
                None => EventKey::of(self.key(&mut decoded)?),
            };
            match key {
                EventKey::Ph => ev.ph = self.phase_value()?,
                EventKey::Cat => {
                    ev.cat = self.word_value("cat", Cat::from_bytes)?;
                    cat_seen = true;
                }
                EventKey::Name => ev.name = Some(self.str_value("name")?),
                EventKey::Ts => ev.ts = Some(self.time_value("ts")?),
                EventKey::Dur => ev.dur = Some(self.time_value("dur")?),
                EventKey::Tid => ev.tid = Some(self.tid_value()?),
                EventKey::Args => self.args(&mut ev.args)?,
                EventKey::Other => self.skip_member_value(2)?,
            }
            if self.object_next("an event")? {
                return Ok(());
            }
            if ev.ph == Phase::Other || (cat_seen && !ev.may_be_imported()) {
                return self.skip_ignored_rest(true);
            }
        }
    }

    /// `ph`: `"X"` is a complete event; any other string is another phase.
    #[inline(always)]
    fn phase_value(&mut self) -> Result<Phase, ScanError> {
        let of = |s: &[u8]| match s {
            b"X" => Phase::Complete,
            _ => Phase::Other,
        };
        // One plain character between quotes (torch's every phase): read as it stands.
        if let Some(&[b'"', c, b'"']) = self.bytes.get(self.pos..self.pos + 3)
            && c != b'\\'
            && c != b'"'
            && c >= 0x20
        {
            self.pos += 3;
            return Ok(of(&[c]));
        }
        self.word_value("ph", of)
    }

    /// Steps to just after the `}` that closes the object the scan is in (after a `,`),
    /// checking strings and the nesting of brackets only: members the import does not read.
    fn skip_object_rest(&mut self, lines: bool) -> Result<(), ScanError> {
        if self.skip_flat_object_rest(lines) {
            return Ok(());
        }
        self.skip_any_object_rest()
    }

    /// [`Scanner::skip_object_rest`] of any rest: each string and bracket in turn.
    fn skip_any_object_rest(&mut self) -> Result<(), ScanError> {
        let mut nesting = Nesting::inside_one_object();
        loop {
            let rest = self.bytes.get(self.pos..).unwrap_or_default();
            let Some(p) = find_structural(rest) else {
                return Err(ScanError::Incomplete);
            };
            self.pos += p;
            let byte = self.bytes[self.pos];
            if byte == b'"' {
                self.string()?;
                continue;
            }
            let closed_all = if byte == b'{' || byte == b'[' {
                nesting.push(byte).map(|()| false)
            } else {
                nesting.pop(byte)
            };
            match closed_all {
                Err(message) => return self.bad(message),
                Ok(done) => {
                    self.pos += 1;
                    if done {
                        return Ok(());
                    }
                }
            }
        }
    }
}

impl Scanner<'_> {
    /// [`Scanner::skip_object_rest`] of a rest holding no `[`, `]`, backslash or control
    /// character inside a string before its `}` (`"id":1,"cat":"ac2g"}`, or written over
    /// lines, `"id": 1,\n    "cat": "ac2g"\n  }`, as torch's flow events are, or with objects
    /// inside, `"ts": 1.5,\n    "args": {\n      "Ev Idx": 1\n    }\n  }`, as its CPU ops are):
    /// then its strings are the stretches between pairs of quotes, all valid, and each `{` or
    /// `}` after an even number of quotes opens or closes an object, as the full skip finds
    /// (which reads nothing outside strings but brackets). `false` (nothing moved) for anything
    /// else, which the full skip then reads. `lines`: the rest is likely to hold line breaks
    /// (events written over lines), looked for as quotes are counted ([`flat_lines_bytes`]);
    /// else in a second pass only where some are found ([`controls_inside`]): the outcome is
    /// the same, only the cost differs.
    #[inline(always)]
    fn skip_flat_object_rest(&mut self, lines: bool) -> bool {
        let Some(rest) = self.bytes.get(self.pos..) else {
            return false;
        };
        if rest.first() != Some(&b'"') {
            return false;
        }
        let (mut from, mut quotes, mut depth) = (0, 0, 1u32);
        loop {
            let Some(brace) = memchr::memchr2(b'{', b'}', &rest[from..]).map(|p| from + p) else {
                return false;
            };
            let span = &rest[from..brace];
            let odd = quotes % 2 == 1;
            let (q, bad) = if lines {
                flat_lines_bytes(span, odd)
            } else {
                let (q, special, control) = flat_bytes(span);
                (q, special || (control && controls_inside(span, odd)))
            };
            if bad {
                return false;
            }
            quotes += q;
            from = brace + 1;
            // A brace inside a string is stepped over.
            if quotes % 2 == 1 {
                continue;
            }
            if rest[brace] == b'}' {
                depth -= 1;
                if depth == 0 {
                    self.pos += brace + 1;
                    return true;
                }
            } else if depth >= Nesting::MAX_DEPTH {
                // The full skip refuses it, with its message.
                return false;
            } else {
                depth += 1;
            }
        }
    }
}

/// The brackets open around a skipped member, innermost in the low bit (1 for `[`, 0 for
/// `{`), at most 64 deep: what both skips (here and in the streaming reader) check of what
/// they do not read.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Nesting {
    open: u64,
    depth: u32,
}

impl Nesting {
    /// Inside one `{` already read.
    pub(super) fn inside_one_object() -> Nesting {
        Nesting { open: 0, depth: 1 }
    }

    /// The most brackets open at once.
    pub(super) const MAX_DEPTH: u32 = 64;

    /// A `{` or `[`.
    pub(super) fn push(&mut self, byte: u8) -> Result<(), &'static str> {
        if self.depth >= Self::MAX_DEPTH {
            return Err("nested too deeply");
        }
        self.open = self.open << 1 | u64::from(byte == b'[');
        self.depth += 1;
        Ok(())
    }

    /// A `}` or `]`; true when it closes the outermost bracket.
    pub(super) fn pop(&mut self, byte: u8) -> Result<bool, &'static str> {
        if self.depth == 0 || self.open & 1 != u64::from(byte == b']') {
            return Err("mismatched bracket");
        }
        self.open >>= 1;
        self.depth -= 1;
        Ok(self.depth == 0)
    }
}

impl RawEvent<'_> {
    /// Whether the members read so far leave the event possibly imported: a complete event
    /// (or `ph` not read yet) of a category the import reads; a `cpu_op` only as a step.
    fn may_be_imported(&self) -> bool {
        match self.cat {
            Cat::Other => false,
            Cat::CpuOp => self.name.is_none_or(|n| n.escaped || is_step_name(n.raw)),
            _ => true,
        }
    }

    /// Whether the event becomes a record.
    pub(super) fn imported(&self) -> bool {
        self.ph == Phase::Complete
            && match self.cat {
                Cat::Other => false,
                Cat::CpuOp => self
                    .name
                    .is_some_and(|n| n.text().is_ok_and(|t| is_step_name(t.as_bytes()))),
                _ => true,
            }
    }
}

/// torch's step annotations: `ProfilerStep#12`.
pub(super) fn is_step_name(name: &[u8]) -> bool {
    name.starts_with(b"ProfilerStep#")
}

/// A non-negative integer `tid` as a 32-bit thread id: itself when it fits, else its halves
/// folded.
#[inline(always)]
fn tid_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or((v ^ (v >> 32)) as u32)
}

/// FNV-1a: a stable 32-bit thread id for a string `tid`.
pub(super) fn hash_tid(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Result<RawEvent<'_>, ScanError> {
        let mut s = Scanner::new(text.as_bytes(), 0);
        let mut ev = RawEvent::default();
        s.event(&mut ev).map(|()| ev)
    }

    fn num(text: &str) -> Num<'_> {
        let mut s = Scanner::new(text.as_bytes(), 0);
        s.number().unwrap()
    }

    #[test]
    fn timestamps_round_to_nanoseconds() {
        assert_eq!(num("1234567.891 ").to_ns("ts"), Ok(1_234_567_891));
        assert_eq!(num("1234567.8915 ").to_ns("ts"), Ok(1_234_567_892));
        assert_eq!(num("0.0005 ").to_ns("ts"), Ok(1));
        assert_eq!(num("7 ").to_ns("ts"), Ok(7000));
        assert_eq!(num("7.5 ").to_ns("ts"), Ok(7500));
        assert_eq!(num("1e3 ").to_ns("ts"), Ok(1_000_000));
        assert_eq!(num("123456789012345678 ").to_ns("ts").ok(), None);
        assert_eq!(
            num("1234567890123456 ").to_ns("ts"),
            Ok(1_234_567_890_123_456_000)
        );
        assert!(num("1e30 ").to_ns("ts").is_err());
        assert!(num("18446744073709551615 ").to_ns("ts").is_err());
    }

    #[test]
    fn fast_paths_agree_with_the_full_number_reader() {
        for text in [
            "0",
            "7",
            "42",
            "1003.525",
            "1003.5",
            "1003.",
            "1003.5255",
            "01",
            "1e3",
            "-3",
            "0.0",
            "999999999999999.999",
            "9999999999999999.9",
            "12345678901234567890",
            "1234567890123456789",
        ] {
            for end in [",", "}", "]", " ", "x"] {
                let doc = format!("{text}{end}");
                let full = Scanner::new(doc.as_bytes(), 0).number();
                if let Some(ns) = Scanner::new(doc.as_bytes(), 0).kineto_time() {
                    assert_eq!(Ok(ns), full.as_ref().unwrap().to_ns("ts"), "{doc}");
                }
                if let Some(v) = Scanner::new(doc.as_bytes(), 0).plain_integer() {
                    assert_eq!(Some(v), full.as_ref().unwrap().as_arg(), "{doc}");
                }
            }
        }
        let fast = |doc: &str| Scanner::new(doc.as_bytes(), 0).kineto_time();
        assert_eq!(fast("1003.525,"), Some(1_003_525));
        assert_eq!(
            (fast("1003.,"), fast("01,"), fast("1.2345,")),
            (None, None, None)
        );
    }

    #[test]
    fn integer_arguments() {
        for (text, want) in [
            ("7 ", Some(7)),
            ("7.0 ", Some(7)),
            ("7.5 ", None),
            ("-3 ", None),
            ("-0 ", Some(0)),
            ("1e2 ", Some(100)),
            ("18446744073709551615 ", Some(u64::MAX)),
            ("99999999999999999999 ", None),
        ] {
            assert_eq!(num(text).as_arg(), want, "{text}");
        }
    }

    #[test]
    fn reads_the_keys_it_needs_and_checks_the_rest() {
        let ev = event(
            r#"{"ph":"X","cat":"kernel","name":"k\"1","ts":1.5,"dur":2,"tid":"stream 7",
               "x":[1,{"a":[true,false,null]},"s"],"args":{"stream":7,"correlation":"c",
               "graph id":3.0,"device":{"a":1}}}"#,
        )
        .unwrap();
        assert_eq!((ev.ph, ev.cat), (Phase::Complete, Cat::Kernel));
        assert_eq!(ev.name.unwrap().text().unwrap(), "k\"1");
        assert_eq!(ev.ts.unwrap().to_ns("ts"), Ok(1500));
        assert_eq!(ev.tid, Some(hash_tid("stream 7")));
        let a = &ev.args;
        assert_eq!(
            (a.stream, a.correlation, a.graph),
            (Some(Some(7)), Some(None), Some(Some(3)))
        );
        assert_eq!(a.device, Some(None));
        assert_eq!(a.bytes, None);
        // Escaped keys and values are decoded.
        let ev = event(r#"{"\u0063at":"ker\u006eel","p\u0068":"X"}"#).unwrap();
        assert_eq!((ev.ph, ev.cat), (Phase::Complete, Cat::Kernel));
    }

    #[test]
    fn every_cut_is_incomplete_and_every_break_is_bad() {
        let text = r#"{"ph":"X","cat":"kernel","name":"a\u00e9\n","ts":1.5e1,"args":{"x":[-1,{}],"y":true}}"#;
        assert!(event(text).is_ok());
        for cut in 0..text.len() {
            assert_eq!(
                event(&text[..cut]).err(),
                Some(ScanError::Incomplete),
                "cut {cut}"
            );
        }
        for bad in [
            r#"{"ph":X}"#,
            r#"{"ph":"X",}"#,
            r#"{"ph" "X"}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1e}"#,
            r#"{"a":tru}"#,
            r#"{"a":"\q"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":[1 2]}"#,
            r#"{"a":{"b"}}"#,
            r#"{"ts":"1"}"#,
            r#"{"ts":-1}"#,
            r#"{"cat":7}"#,
            r#"{"tid":1.5}"#,
            r#"{"args":[]}"#,
            r#"7"#,
        ] {
            assert!(
                matches!(event(bad), Err(ScanError::Bad(_))),
                "{bad}: {:?}",
                event(bad).err()
            );
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(event(&deep), Err(ScanError::Bad(b)) if b.message.contains("deep")));
    }

    #[test]
    fn the_flat_skip_ends_where_the_full_skip_does() {
        for lines in [false, true] {
            flat_skip_ends_where_the_full_skip_does(lines);
        }
    }

    /// [`Scanner::skip_flat_object_rest`] with one of its two ways of looking for control
    /// characters.
    fn flat_skip_ends_where_the_full_skip_does(lines: bool) {
        let rests = [
            r#""id":1,"pid":4242,"ts":1003.525,"cat":"ac2g","name":"ac2g"},{"#,
            r#""name":"a}b","x":"}}"},"#,
            r#""a":"}","b":"c"}"#,
            r#""a":1}"#,
            r#""a":[1],"b":2}"#,
            r#""a":{"b":1},"c":2}"#,
            "\"ts\": 1.5,\n    \"args\": {\n      \"Ev Idx\": 1, \"x\": {}\n    }\n  }",
            r#""a":"{","b":{"c":"}"}}"#,
            r#""a":"x\"}","b":1}"#,
            "\"a\":\"x\ty\"}",
            "\"a\":1,\n\"b\":2}",
            "\"a\": 1,\n    \"b\": \"c\"\n  }",
            "\"a\": \"x\ny\", \"b\": 2}",
            "\"a\": \"xy\"\t, \"b\"\r: \"c\ty}\"\n}",
            "\"a\":\"0123456\", \"b\": \"01234567\n\"}",
            r#""a":"é€ ünïcode}","b":"ok"}  "#,
            r#""a":"unterminated}"#,
            r#""a":1"#,
            r#""abcdefghijklmnopqrstuvwxyz":"0123456789abcdef","q":"r"}"#,
        ];
        for rest in rests {
            let (mut flat, mut full) = (
                Scanner::new(rest.as_bytes(), 0),
                Scanner::new(rest.as_bytes(), 0),
            );
            let full_result = full.skip_any_object_rest();
            if flat.skip_flat_object_rest(lines) {
                assert_eq!(full_result, Ok(()), "{rest}");
                assert_eq!(flat.pos, full.pos, "{rest}");
            } else {
                assert_eq!(flat.pos, 0, "{rest}: moved without skipping");
            }
        }
        // Taken where torch's flow events and CPU ops stand, compact or over lines, braces
        // inside strings or not; not with a control character inside a string, wherever it
        // falls in a word, nor with an array.
        for (i, flat) in [
            (0, true),
            (4, false),
            (5, true),
            (6, true),
            (7, true),
            (11, true),
            (12, false),
            (13, false),
            (14, false),
        ] {
            let mut s = Scanner::new(rests[i].as_bytes(), 0);
            assert_eq!(s.skip_flat_object_rest(lines), flat, "{}", rests[i]);
        }
        for text in LIBKINETO.into_iter().chain(JSON_DUMP).chain(REAL) {
            let Some(at) = text.find("\"id\"") else {
                continue;
            };
            let mut s = Scanner::new(text.as_bytes(), at);
            assert!(s.skip_flat_object_rest(lines), "{text}");
            assert_eq!(s.pos, text.len());
        }
        for text in REAL.iter().filter(|t| t.contains("\"cpu_op\"")) {
            let at = text.find("\"pid\"").unwrap();
            let mut s = Scanner::new(text.as_bytes(), at);
            assert!(s.skip_flat_object_rest(lines), "{text}");
            assert_eq!(s.pos, text.len());
        }
        // Every eight-byte stretch of a flat rest, whatever its length.
        for len in 0..40 {
            let rest = format!("\"k\":\"{}\"}}", "v".repeat(len));
            let mut s = Scanner::new(rest.as_bytes(), 0);
            assert!(s.skip_flat_object_rest(lines), "{rest}");
            assert_eq!(s.pos, rest.len());
        }
        // Random rests of the bytes that matter: wherever the flat skip ends, the full one does.
        let alphabet = b"\"\"\"\"}}}aaaa,,::{[]\\\n\xc3";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut flat_ones = 0;
        for _ in 0..20_000 {
            let mut rest = vec![b'"'];
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for k in 0..(x % 24) {
                rest.push(alphabet[((x >> (k % 50)) % alphabet.len() as u64) as usize]);
            }
            let (mut flat, mut full) = (Scanner::new(&rest, 0), Scanner::new(&rest, 0));
            let full_result = full.skip_any_object_rest();
            if flat.skip_flat_object_rest(lines) {
                assert_eq!((full_result, flat.pos), (Ok(()), full.pos), "{rest:?}");
                flat_ones += 1;
            } else {
                assert_eq!(flat.pos, 0);
            }
        }
        assert!(flat_ones > 500, "{flat_ones} flat rests");
        for b in 0..=255u8 {
            let mut bytes = br#""k":"0123456789abcdef","#.to_vec();
            bytes[7] = b;
            bytes.extend_from_slice(b"\"z\":1}");
            let special = b == b'\\' || b == b'[' || b == b']' || b < 0x20;
            let quote = b == b'"';
            let mut s = Scanner::new(&bytes, 0);
            let skipped = s.skip_flat_object_rest(lines);
            assert_eq!(skipped, !special && !quote, "byte {b}");
        }
    }

    /// torch's events as `examples/gen_kineto.rs` writes them: a runtime call, its flow start,
    /// a kernel, its flow end.
    const COMPACT: [&str; 4] = [
        r#"{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4242,"tid":4242,"ts":1000.000,"dur":3.985,"args":{"External id":2,"cbid":211,"correlation":100}}"#,
        r#"{"ph":"s","id":100,"pid":4242,"tid":4242,"ts":1000.000,"cat":"ac2g","name":"ac2g"}"#,
        r#"{"ph":"X","cat":"kernel","name":"ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn","pid":0,"tid":7,"ts":1003.525,"dur":6.705,"args":{"External id":2,"queued":0,"device":0,"context":1,"stream":7,"correlation":100,"registers per thread":32,"shared memory":0,"grid":[2,1,1],"block":[128,1,1],"est. achieved occupancy %":0}}"#,
        r#"{"ph":"f","id":100,"pid":0,"tid":7,"ts":1003.525,"cat":"ac2g","name":"ac2g","bp":"e"}"#,
    ];

    /// The events of [`COMPACT`] as libkineto lays them out (over several lines, spaces after
    /// commas and colons).
    const LIBKINETO: [&str; 4] = [
        r##"{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": 1000.000, "dur": 3.985,
    "args": {
      "External id": 2,      "cbid": 211,      "correlation": 100
    }
  }"##,
        r##"{
    "ph": "s", "id": 100, "pid": 4242, "tid": 4242, "ts": 1000.000,
    "cat": "ac2g", "name": "ac2g"
  }"##,
        r##"{
    "ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "pid": 0, "tid": 7,
    "ts": 1003.525, "dur": 6.705,
    "args": {
      "External id": 2,      "queued": 0,      "device": 0,      "context": 1,      "stream": 7,      "correlation": 100,      "registers per thread": 32,      "shared memory": 0,      "grid": [2, 1, 1],      "block": [128, 1, 1],      "est. achieved occupancy %": 0
    }
  }"##,
        r##"{
    "ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 1003.525,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }"##,
    ];

    /// The events of [`COMPACT`] as Python's `json.dump` writes them (one line, `", "` and
    /// `": "` between tokens), times as Python prints floats.
    const JSON_DUMP: [&str; 4] = [
        r##"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 1000.0, "dur": 3.985, "args": {"External id": 2, "cbid": 211, "correlation": 100}}"##,
        r##"{"ph": "s", "id": 100, "pid": 4242, "tid": 4242, "ts": 1000.0, "cat": "ac2g", "name": "ac2g"}"##,
        r##"{"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "pid": 0, "tid": 7, "ts": 1003.525, "dur": 6.705, "args": {"External id": 2, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 100, "registers per thread": 32, "shared memory": 0, "grid": [2, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 0}}"##,
        r##"{"ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 1003.525, "cat": "ac2g", "name": "ac2g", "bp": "e"}"##,
    ];

    /// One event of each kind in `traces/torch-step-kineto-h200.json` (torch 2.x, H200), as
    /// written there.
    const REAL: [&str; 12] = [
        r##"{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaStreamIsCapturing", "pid": 469, "tid": 469,
    "ts": 5095587836765.929, "dur": 3.752,
    "args": {
            "cbid": 317, "correlation": 9
    }
  }"##,
        r##"{
    "ph": "s", "id": 33, "pid": 469, "tid": 469, "ts": 5095587837374.958,
    "cat": "ac2g", "name": "ac2g"
  }"##,
        r##"{
    "ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", "pid": 0, "tid": 7,
    "ts": 5095587837414.412, "dur": 10.240,
    "args": {
      "External id": 3,      "queued": 0, "device": 0, "context": 1,      "stream": 7, "correlation": 33,      "registers per thread": 121,      "shared memory": 12672,      "blocks per SM": 1.939394,      "warps per SM": 7.757576,      "grid": [8, 8, 4],      "block": [128, 1, 1],      "est. achieved occupancy %": 12
    }
  }"##,
        r##"{
    "ph": "f", "id": 9, "pid": 469, "tid": 469, "ts": 5095587836765.929,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  }"##,
        r##"{
    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
    "ts": 5095587837985.582, "dur": 1.152,
    "args": {
      "External id": 45,      "device": 0, "context": 1,      "stream": 7, "correlation": 126,      "bytes": 1048576, "memory bandwidth (GB/s)": 910.2222222222222
    }
  }"##,
        r##"{
    "ph": "X", "cat": "user_annotation", "name": "step", "pid": 469, "tid": 469,
    "ts": 5095587837002.975, "dur": 1046.265,
    "args": {
      "External id": 1,"Record function id": 0, "Ev Idx": 0
    }
  }"##,
        r##"{
    "ph": "X", "cat": "cpu_op", "name": "aten::matmul", "pid": 469, "tid": 469,
    "ts": 5095587837051.048, "dur": 385.646,
    "args": {
      "External id": 2,"Record function id": 0, "Sequence number": 0, "Fwd thread id": 0, "Ev Idx": 1
    }
  }"##,
        r##"{
    "ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "tid": 7,
    "ts": 5095587844191.717, "dur": 158.082,
    "args": {
      "External id": 1261
    }
  }"##,
        r##"{
    "ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
    "ts": 5095587834559.908, "dur": 2187.653
  }"##,
        r##"{
    "ph": "X", "cat": "Trace", "ts": 5095587834366.578, "dur": 11899.304,
    "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)",
    "args": {
      "Op count": 0
    }
  }"##,
        r##"{
    "name": "process_name", "ph": "M", "ts": 5095587834440.340, "pid": 469, "tid": 0,
    "args": {
      "name": "python3"
    }
  }"##,
        r##"{
    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",
    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 5095587834366.578
  }"##,
    ];

    /// Every event above, in each layout: those the templates read.
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

    /// Checks that [`Scanner::skip_member_value`] of `text` gives what [`Scanner::skip_value`]
    /// gives, and that its fast path `fast` either moves where the latter does or not at all.
    fn skipped_as_any_value_is(text: &str, fast: impl Fn(&mut Scanner<'_>) -> bool) {
        let (mut member, mut full) = (
            Scanner::new(text.as_bytes(), 0),
            Scanner::new(text.as_bytes(), 0),
        );
        assert_eq!(member.skip_member_value(3), full.skip_value(3), "{text}");
        assert_eq!(member.pos, full.pos, "{text}");
        let mut s = Scanner::new(text.as_bytes(), 0);
        let expected = if fast(&mut s) { full.pos } else { 0 };
        assert_eq!(s.pos, expected, "{text}");
    }

    #[test]
    fn integer_arrays_are_stepped_over_as_any_value_is() {
        let arrays = [
            "[2,1,1]",
            "[2, 1, 1]",
            "[ 2 ,1\n]",
            "[2 ]",
            "[ ]",
            "[]",
            "[2,]",
            "[2 1]",
            "[01]",
            "[2,\t1]",
            "[2, -1]",
            "[2, 1.5]",
            "[2, [1]]",
            "[2, 1",
            "[2, 1 ",
            "[2,\r\n1]",
        ];
        for array in arrays {
            for after in ["", ",", "}", " ,", "]"] {
                skipped_as_any_value_is(&format!("{array}{after}"), |s| s.integer_array());
            }
        }
        let mut s = Scanner::new(b"[8, 8, 4],", 0);
        assert!(s.integer_array());
        assert_eq!(s.pos, 9);
    }

    #[test]
    fn numbers_are_stepped_over_as_any_value_is() {
        let numbers = [
            "0.015152",
            "1.939394",
            "12.5",
            "0.0",
            "0",
            "7",
            "10.",
            "01.5",
            "00.5",
            ".5",
            "1.5e3",
            "1.5E-3",
            "1.5.5",
            "-0.5",
            "1.",
            "1.x",
            "1.5x",
            "2.25\"",
            "123456789012345678901.5",
        ];
        for number in numbers {
            for after in ["", ",", "}", "]", " ,", "\n", "\t", "e", "-"] {
                skipped_as_any_value_is(&format!("{number}{after}"), |s| s.plain_decimal());
            }
        }
        let mut s = Scanner::new(b"0.969697,", 0);
        assert!(s.plain_decimal());
        assert_eq!(s.pos, 8);
    }

    proptest::proptest! {
        #[test]
        fn random_numbers_are_stepped_over_as_any_value_is(
            text in "[0-9.eE+-]{0,12}[,} \n\\]x]?",
        ) {
            let (mut fast, mut full) = (
                Scanner::new(text.as_bytes(), 0),
                Scanner::new(text.as_bytes(), 0),
            );
            proptest::prop_assert_eq!(fast.skip_member_value(3), full.skip_value(3));
            proptest::prop_assert_eq!(fast.pos, full.pos);
        }
    }

    #[test]
    fn string_tids_hash_stably() {
        assert_eq!(hash_tid("stream 7"), hash_tid("stream 7"));
        assert_ne!(hash_tid("stream 7"), hash_tid("stream 8"));
    }
}
