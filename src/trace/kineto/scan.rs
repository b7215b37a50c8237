//! The general reader of one element of `traceEvents`, straight from the bytes it lies in
//! ([`Scanner::any_event`]), and the readers of values that it and the templates share.
//!
//! A small JSON reader that knows the few keys the import uses and checks, without building,
//! everything else: strings (escapes, no raw control characters), numbers, literals, nesting.
//! Nothing is allocated per event: keys are matched as bytes, the name stays a slice of the
//! input, numbers stay digits until the importer needs them. Running off the end of the bytes
//! is [`ScanError::Incomplete`]: the caller reads more and starts that event again.
//!
//! The events as torch writes them are read first by templates of its layouts (`templates`,
//! through [`Scanner::event`]), which read each value with the readers here and leave any
//! other event to [`Scanner::any_event`], with the same outcome.
#![forbid(unsafe_code)]

use super::bytes::{
    controls_inside, find_string_special, find_structural, flat_bytes, flat_lines_bytes,
};
use super::error::EventError;
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
    pub(super) fn from_bytes(s: &[u8]) -> Cat {
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
    pub(super) fn text(&self) -> Result<std::borrow::Cow<'_, str>, EventError> {
        if self.escaped {
            let mut quoted = Vec::with_capacity(self.raw.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(self.raw);
            quoted.push(b'"');
            serde_json::from_slice::<String>(&quoted)
                .map(Into::into)
                .map_err(|e| EventError::InvalidString(e.to_string()))
        } else {
            std::str::from_utf8(self.raw)
                .map(Into::into)
                .map_err(|_| EventError::NotUtf8)
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
pub(super) enum ArgKey {
    Device,
    Stream,
    Correlation,
    Graph,
    Node,
    Bytes,
    Other,
}

impl ArgKey {
    pub(super) fn of(key: &[u8]) -> ArgKey {
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
    pub(super) fn written(rest: &[u8]) -> Option<(ArgKey, usize)> {
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

/// A position in a byte slice.
pub(super) struct Scanner<'a> {
    pub bytes: &'a [u8],
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
    pub(super) fn skip_member_value(&mut self, depth: u32) -> Result<(), ScanError> {
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
    pub(super) fn str_value(&mut self, key: &str) -> Result<Str<'a>, ScanError> {
        if self.peek()? != b'"' {
            return self.bad(format!("\"{key}\" must be a string"));
        }
        self.string()
    }

    /// A string value for `key`, mapped through `f` (decoded first when it has escapes).
    pub(super) fn word_value<T>(&mut self, key: &str, f: fn(&[u8]) -> T) -> Result<T, ScanError> {
        let at = self.pos;
        let s = self.str_value(key)?;
        if !s.escaped {
            return Ok(f(s.raw));
        }
        let text = s.text().or_else(|m| {
            self.pos = at;
            self.bad(m.to_string())
        })?;
        Ok(f(text.as_bytes()))
    }

    /// A non-negative number of microseconds for `key`.
    #[inline(always)]
    pub(super) fn time_value(&mut self, key: &str) -> Result<Time<'a>, ScanError> {
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
    pub(super) fn kineto_time(&mut self) -> Option<u64> {
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
    pub(super) fn tid_value(&mut self) -> Result<u32, ScanError> {
        match self.peek()? {
            b'"' => {
                let at = self.pos;
                let s = self.string()?;
                let text = s.text().or_else(|m| {
                    self.pos = at;
                    self.bad(m.to_string())
                })?;
                Ok(text.parse::<u32>().unwrap_or_else(|_| hash_tid(&text)))
            }
            b'-' | b'0'..=b'9' => {
                // The common case first: a plain integer (None, reading nothing, for "-…").
                // Not an `if let` guard on the arm, which needs Rust 1.95 (rust-version).
                if let Some(v) = self.plain_integer() {
                    return Ok(tid_of(v));
                }
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
    pub(super) fn arg_value(&mut self) -> Result<Option<u64>, ScanError> {
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
    pub(super) fn plain_integer(&mut self) -> Option<u64> {
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
                self.bad(m.to_string())
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
    pub(super) fn object_open(&mut self, what: &str) -> Result<bool, ScanError> {
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
    pub(super) fn args_rest(&mut self, args: &mut Args) -> Result<(), ScanError> {
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
    pub(super) fn arg_member(&mut self, key: ArgKey, args: &mut Args) -> Result<bool, ScanError> {
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
    /// [`Scanner::skip_object_rest`] of an event known not to be imported.
    #[inline(always)]
    pub(super) fn skip_ignored_rest(&mut self, lines: bool) -> Result<(), ScanError> {
        match self.skip_object_rest(lines) {
            Err(ScanError::Incomplete) => Err(ScanError::IncompleteIgnored),
            other => other,
        }
    }

    /// [`Scanner::event`] of any element, member by member. Once the members read show that
    /// the import will not use the event (`ph` and `cat` come first in torch's output), the
    /// rest is stepped over with [`Scanner::skip_object_rest`].
    pub(super) fn any_event(&mut self, ev: &mut RawEvent<'a>) -> Result<(), ScanError> {
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
    pub(super) fn phase_value(&mut self) -> Result<Phase, ScanError> {
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
    pub(super) fn may_be_imported(&self) -> bool {
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
    use crate::trace::kineto::fixtures::{JSON_DUMP, LIBKINETO, REAL, event};

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
