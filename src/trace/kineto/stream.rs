//! The file as it streams by. The few KiB around `traceEvents` are collected for serde (the
//! [`Skeleton`]); the events are read block by block and each block is parsed by several threads
//! at once, each piece into its own [`Sink`], appended in file order.
//!
//! Where a thread starts is a guess (a `{` after `},`, see [`split_point`]): the thread before
//! it checks the guess by parsing up to it, and its records are only kept when that parse lands
//! exactly there, between two elements of the array. Otherwise, or when a thread meets an error,
//! the rest of the block is parsed in order. The trace is therefore the same, to the byte,
//! whatever the block size and the number of threads; only the time differs.
#![forbid(unsafe_code)]

use super::Sink;
use super::scan::{Nesting, RawEvent, ScanError, Scanner};
use std::io::{self, Read};

/// How the events are read and split. The defaults suit files of any size.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Bytes read at a time (memory holds about one block beyond the records).
    pub block_bytes: usize,
    /// Threads parsing each block (1: all in order on the calling thread).
    pub threads: usize,
    /// Blocks smaller than this are parsed on one thread (a thread costs more than it saves).
    pub parallel_min_bytes: usize,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions {
            // Small enough that the two buffers stay few pages to fault in and the parse
            // starts early (benches/README.md, issue 29 round 2); large enough that a
            // block's threads cost little.
            block_bytes: 4 << 20,
            threads: crate::threads::worker_threads(),
            parallel_min_bytes: 1 << 20,
        }
    }
}

/// Buffered input that keeps the unparsed tail of a block and knows the file offset. While
/// helper threads parse a block, the calling thread reads the next one into a second buffer
/// ([`Input::split_ahead`]), which then follows the tail ([`Input::adopt_ahead`]): the read
/// overlaps the parse.
pub(super) struct Input<R> {
    reader: R,
    /// Read bytes in `buf[..len]`; the rest stays initialised from block to block, so reading
    /// into it costs no zeroing.
    buf: Vec<u8>,
    len: usize,
    /// First byte not yet consumed.
    start: usize,
    pub eof: bool,
    /// File offset of `buf[start]`.
    base: u64,
    /// Bytes read ahead, in `ahead[AHEAD_ROOM..AHEAD_ROOM + ahead_len]`: the room before them
    /// takes the tail of the block being parsed, so that it need not be copied after them.
    ahead: Vec<u8>,
    ahead_len: usize,
}

/// Room kept before the bytes read ahead for the tail of the block before (an event or two).
const AHEAD_ROOM: usize = 64 << 10;

/// The reader and the spare buffer of an [`Input`], lent to the thread that reads ahead.
pub(super) struct ReadAhead<'i, R> {
    reader: &'i mut R,
    ahead: &'i mut Vec<u8>,
    ahead_len: &'i mut usize,
    eof: &'i mut bool,
}

impl<R: Read> ReadAhead<'_, R> {
    /// Reads up to `want` bytes ahead. An error is kept for the caller of
    /// [`Input::adopt_ahead`].
    fn read(self, want: usize) -> io::Result<()> {
        if self.ahead.len() < AHEAD_ROOM + want {
            self.ahead.resize(AHEAD_ROOM + want, 0);
        }
        while *self.ahead_len < want && !*self.eof {
            let at = AHEAD_ROOM + *self.ahead_len;
            match self.reader.read(&mut self.ahead[at..AHEAD_ROOM + want]) {
                Ok(0) => *self.eof = true,
                Ok(n) => *self.ahead_len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl<R: Read> Input<R> {
    pub(super) fn new(reader: R) -> Input<R> {
        Input {
            reader,
            buf: Vec::new(),
            len: 0,
            start: 0,
            eof: false,
            base: 0,
            ahead: Vec::new(),
            ahead_len: 0,
        }
    }

    pub(super) fn available(&self) -> &[u8] {
        &self.buf[self.start..self.len]
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.start += n;
        self.base += n as u64;
    }

    /// File offset of `available()[at]`.
    fn offset(&self, at: usize) -> u64 {
        self.base + at as u64
    }

    /// Reads until `want` bytes are available or the input ends.
    pub(super) fn fill(&mut self, want: usize) -> io::Result<()> {
        debug_assert_eq!(self.ahead_len, 0, "bytes read ahead are adopted first");
        if self.start > 0 {
            self.buf.copy_within(self.start..self.len, 0);
            self.len -= self.start;
            self.start = 0;
        }
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.len < want && !self.eof {
            match self.reader.read(&mut self.buf[self.len..want]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The available bytes, and the means to read what follows them into the spare buffer at
    /// the same time.
    fn split_ahead(&mut self) -> (&[u8], ReadAhead<'_, R>) {
        (
            &self.buf[self.start..self.len],
            ReadAhead {
                reader: &mut self.reader,
                ahead: &mut self.ahead,
                ahead_len: &mut self.ahead_len,
                eof: &mut self.eof,
            },
        )
    }

    /// Puts the bytes read ahead after the available ones; returns how many there were.
    fn adopt_ahead(&mut self) -> usize {
        let added = self.ahead_len;
        if added == 0 {
            return 0;
        }
        let tail = self.len - self.start;
        if tail <= AHEAD_ROOM {
            // The tail goes into the room before the bytes read ahead; the buffers swap.
            let at = AHEAD_ROOM - tail;
            self.ahead[at..AHEAD_ROOM].copy_from_slice(&self.buf[self.start..self.len]);
            std::mem::swap(&mut self.buf, &mut self.ahead);
            self.start = at;
            self.len = AHEAD_ROOM + added;
        } else {
            // A long unfinished element: the bytes read ahead are copied after it.
            self.buf.copy_within(self.start..self.len, 0);
            self.len = tail;
            self.start = 0;
            if self.buf.len() < tail + added {
                self.buf.resize(tail + added, 0);
            }
            self.buf[tail..tail + added]
                .copy_from_slice(&self.ahead[AHEAD_ROOM..AHEAD_ROOM + added]);
            self.len += added;
        }
        self.ahead_len = 0;
        added
    }
}

/// What went wrong inside `traceEvents`.
pub(super) enum EventsError {
    Io(io::Error),
    /// The event at `index` (or the text after it), at file offset `offset`.
    Bad {
        index: u64,
        offset: u64,
        message: String,
    },
    /// The input ends inside the array.
    CutShort {
        index: u64,
    },
}

/// What the parse expects next inside the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Just after `[`: an element or `]`.
    First,
    /// After `,`: an element.
    Element,
    /// After an element: `,` or `]`.
    Next,
}

#[derive(Debug, PartialEq)]
enum Stop {
    /// At the place where the next thread started, between two elements.
    Split,
    /// The bytes end before the array does.
    Incomplete,
    /// The bytes end inside an event the import does not use (at `pos`).
    IncompleteIgnored,
    /// Just after the closing `]`.
    ArrayEnd,
    Bad {
        at: usize,
        message: String,
    },
}

struct Outcome {
    /// Where the parse stopped (for `Incomplete`: the start of the unfinished element).
    pos: usize,
    expect: Expect,
    stop: Stop,
}

/// Parses the elements of a `traceEvents` array whose `[` was just consumed, up to and
/// including its `]`, into `sink`.
pub(super) fn events<R: Read>(
    input: &mut Input<R>,
    sink: &mut Sink,
    opts: &ImportOptions,
) -> Result<(), EventsError> {
    let block = opts.block_bytes.max(1);
    // The first block is smaller and each next one twice as large, up to `block`: the parse
    // starts after a short read, not after a whole block's.
    let mut step = block.min(FIRST_BLOCK_BYTES);
    // A sink per piece of a block, kept from block to block (with allocations and names).
    let mut pool: Vec<Sink> = Vec::new();
    let mut expect = Expect::First;
    let mut want = step;
    loop {
        if input.available().len() < want {
            input.fill(want).map_err(EventsError::Io)?;
        }
        step = (step * 2).min(block);
        let (data, ahead) = input.split_ahead();
        let mut read_ahead = Some(|| ahead.read(step));
        let mut read_error = None;
        let out = parse_block(data, expect, sink, &mut pool, opts, &mut || {
            if let Some(read) = read_ahead.take() {
                read_error = read().err();
            }
        });
        if let Stop::Bad { at, message } = out.stop {
            return Err(EventsError::Bad {
                index: sink.events,
                offset: input.offset(at),
                message,
            });
        }
        input.consume(out.pos);
        let added = input.adopt_ahead();
        if let Some(e) = read_error {
            return Err(EventsError::Io(e));
        }
        expect = out.expect;
        match out.stop {
            Stop::ArrayEnd => return Ok(()),
            Stop::Incomplete if input.eof && added == 0 => {
                return Err(EventsError::CutShort { index: sink.events });
            }
            // An event the import does not use, longer than what is buffered: stepped over
            // as it is read, in constant memory.
            Stop::IncompleteIgnored => {
                skip_element(input, block, sink.events)?;
                sink.events += 1;
                expect = Expect::Next;
                want = step;
            }
            // An element longer than what is buffered: read twice as much before trying again
            // (doubling keeps the re-scans linear in the element's size).
            Stop::Incomplete if out.pos == 0 => want = (input.available().len() * 2).max(step),
            // (`Split` is not returned for a whole block; parsing on from there is right.)
            _ => want = step,
        }
    }
}

/// Steps over the element at the start of `input` (a `{`), reading as it goes and keeping at
/// most one block: strings (with escapes) and the nesting of brackets are checked, nothing is
/// kept. `index` names the event in errors.
fn skip_element<R: Read>(
    input: &mut Input<R>,
    block: usize,
    index: u64,
) -> Result<(), EventsError> {
    let mut nesting = Nesting::default();
    let (mut in_string, mut escaped) = (false, false);
    loop {
        if input.available().is_empty() {
            input.fill(block).map_err(EventsError::Io)?;
            if input.available().is_empty() {
                return Err(EventsError::CutShort { index });
            }
        }
        let data = input.available();
        let mut bad = None;
        let mut end = None;
        for (i, &b) in data.iter().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                } else if b < 0x20 {
                    bad = Some((i, "control character in a string"));
                    break;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => {
                    if let Err(message) = nesting.push(b) {
                        bad = Some((i, message));
                        break;
                    }
                }
                b'}' | b']' => match nesting.pop(b) {
                    Err(message) => {
                        bad = Some((i, message));
                        break;
                    }
                    Ok(true) => {
                        end = Some(i + 1);
                        break;
                    }
                    Ok(false) => {}
                },
                _ => {}
            }
        }
        if let Some((at, message)) = bad {
            return Err(EventsError::Bad {
                index,
                offset: input.offset(at),
                message: message.into(),
            });
        }
        match end {
            Some(n) => {
                input.consume(n);
                return Ok(());
            }
            None => {
                let n = data.len();
                input.consume(n);
            }
        }
    }
}

/// The size of the first block read ([`ImportOptions::block_bytes`] at most).
const FIRST_BLOCK_BYTES: usize = 1 << 20;

/// Pieces per thread in a parallel block: threads take pieces in turn, so a slow piece holds
/// the others up by little.
const PIECES_PER_THREAD: usize = 4;

/// Parses `data` from its start; when it is large enough, in pieces over `opts.threads`
/// threads, each piece into its own sink of `pool` (kept from block to block), then appended
/// to `sink` in order as far as each piece's start is confirmed by the piece before it.
///
/// `meanwhile` runs on the calling thread while helpers parse (the read of the next block),
/// only when the block is parsed in parallel.
fn parse_block(
    data: &[u8],
    expect: Expect,
    sink: &mut Sink,
    pool: &mut Vec<Sink>,
    opts: &ImportOptions,
    meanwhile: &mut dyn FnMut(),
) -> Outcome {
    let threads = opts.threads.max(1);
    let mut starts = vec![0];
    if threads > 1 && data.len() >= opts.parallel_min_bytes {
        let pieces = threads * PIECES_PER_THREAD;
        for k in 1..pieces {
            if let Some(s) = split_point(data, data.len() / pieces * k)
                && starts.last().is_some_and(|&last| s > last)
            {
                starts.push(s);
            }
        }
    }
    if starts.len() == 1 {
        return run(data, 0, expect, None, sink);
    }
    while pool.len() < starts.len() {
        pool.push(Sink::new());
    }
    let work: Vec<(usize, &mut Sink)> = starts.iter().copied().zip(pool.iter_mut()).collect();
    let queue = std::sync::Mutex::new(work.into_iter().enumerate());
    let take = || queue.lock().ok().and_then(|mut q| q.next());
    let parse_pieces = || {
        let mut done = Vec::new();
        while let Some((k, (start, own))) = take() {
            let first = if k == 0 { expect } else { Expect::Element };
            done.push((k, run(data, start, first, starts.get(k + 1).copied(), own)));
        }
        done
    };
    let mut outcomes: Vec<Option<Outcome>> = (0..starts.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(parse_pieces)).collect();
        meanwhile();
        let mine = parse_pieces();
        // A helper that panicked leaves its pieces unset: they are parsed again in order.
        let theirs = helpers.into_iter().filter_map(|h| h.join().ok());
        for (k, out) in theirs.flatten().chain(mine) {
            outcomes[k] = Some(out);
        }
    });
    let mut last: Option<Outcome> = None;
    for (k, out) in outcomes.into_iter().enumerate() {
        let own = &mut pool[k];
        let confirmed = last.as_ref().is_none_or(|l| l.stop == Stop::Split);
        match out {
            _ if !confirmed => own.clear_records(),
            Some(out) if !matches!(out.stop, Stop::Bad { .. }) => {
                sink.append(own);
                last = Some(out);
            }
            // An error (or a lost piece) is found again in order, with the event's index.
            _ => {
                own.clear_records();
                let first = if k == 0 { expect } else { Expect::Element };
                last = Some(run(data, starts[k], first, None, sink));
            }
        }
    }
    // The last piece has no split point, so `last` is never `Split` here.
    last.unwrap_or_else(|| run(data, 0, expect, None, sink))
}

/// Parses elements from `pos` until the array ends, the bytes end, an error, or (with
/// `split_at`) the parse stands exactly at `split_at` expecting an element.
fn run(
    data: &[u8],
    pos: usize,
    mut expect: Expect,
    split_at: Option<usize>,
    sink: &mut Sink,
) -> Outcome {
    let mut s = Scanner::new(data, pos);
    let mut ev = RawEvent::default();
    let bad = |at: usize, message: String, expect| Outcome {
        pos: at,
        expect,
        stop: Stop::Bad { at, message },
    };
    loop {
        s.skip_ws();
        let stopped = |stop, pos| Outcome { pos, expect, stop };
        let Ok(byte) = s.peek() else {
            return stopped(Stop::Incomplete, s.pos);
        };
        if expect == Expect::Next {
            match byte {
                b',' => expect = Expect::Element,
                b']' => return stopped(Stop::ArrayEnd, s.pos + 1),
                _ => return bad(s.pos, "expected ',' or ']' after an event".into(), expect),
            }
            s.pos += 1;
            continue;
        }
        if split_at == Some(s.pos) {
            return stopped(Stop::Split, s.pos);
        }
        match byte {
            b']' if expect == Expect::First => return stopped(Stop::ArrayEnd, s.pos + 1),
            b',' | b']' => return bad(s.pos, "missing event (stray comma)".into(), expect),
            _ => {}
        }
        let start = s.pos;
        match s.event(&mut ev) {
            Ok(()) => {
                if let Err(e) = sink.add_event(&ev) {
                    return bad(start, e.to_string(), expect);
                }
                sink.events += 1;
                expect = Expect::Next;
            }
            Err(ScanError::Incomplete) => return stopped(Stop::Incomplete, start),
            Err(ScanError::IncompleteIgnored) => return stopped(Stop::IncompleteIgnored, start),
            Err(ScanError::Bad(b)) => return bad(b.at, b.message, expect),
        }
    }
}

/// A likely start of an element at or after `from`: a `{` preceded, white space aside, by `},`.
/// Looks through 64 KiB at most.
fn split_point(data: &[u8], from: usize) -> Option<usize> {
    let end = data.len().min(from.saturating_add(64 << 10));
    let before = |mut i: usize| {
        while i > 0 && data[i - 1].is_ascii_whitespace() {
            i -= 1;
        }
        i.checked_sub(1).map(|j| (j, data[j]))
    };
    (from.max(1)..end).find(|&i| {
        data[i] == b'{'
            && matches!(before(i), Some((comma, b',')) if matches!(before(comma), Some((_, b'}'))))
    })
}

/// The document outside the `traceEvents` arrays, collected for serde with each array left
/// empty. Tracks strings, escapes and depth, byte by byte (it sees a few KiB).
pub(super) struct Skeleton {
    pub bytes: Vec<u8>,
    depth: u32,
    in_str: bool,
    esc: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// Start (in `bytes`) of the depth-1 key being read.
    key_start: Option<usize>,
    /// The last depth-1 key was `traceEvents`.
    events_key: bool,
    /// Some array was left out (positions in `bytes` then differ from the file's).
    pub extracted: bool,
}

impl Skeleton {
    pub(super) fn new() -> Skeleton {
        Skeleton {
            bytes: Vec::new(),
            depth: 0,
            in_str: false,
            esc: false,
            expect_key: false,
            key_start: None,
            events_key: false,
            extracted: false,
        }
    }

    /// Takes bytes of `data` up to and including the `[` that opens a `traceEvents` array.
    /// Returns how many it took and whether it stopped at such a `[`.
    pub(super) fn take(&mut self, data: &[u8]) -> (usize, bool) {
        for (i, &b) in data.iter().enumerate() {
            if self.byte(b) {
                return (i + 1, true);
            }
        }
        (data.len(), false)
    }

    /// After the array's elements: its `]`.
    pub(super) fn close_events(&mut self) {
        self.bytes.push(b']');
        self.depth = 1;
    }

    /// One byte; `true` when it opens a `traceEvents` array.
    fn byte(&mut self, b: u8) -> bool {
        self.bytes.push(b);
        if self.in_str {
            if self.esc {
                self.esc = false;
            } else if b == b'\\' {
                self.esc = true;
            } else if b == b'"' {
                self.in_str = false;
                if let Some(start) = self.key_start.take() {
                    self.events_key = self.key_is_trace_events(start - 1);
                    self.expect_key = false;
                }
            }
            return false;
        }
        match b {
            b'"' => {
                self.in_str = true;
                if self.depth == 1 && self.expect_key {
                    self.key_start = Some(self.bytes.len());
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                } else if self.depth == 2 && b == b'[' && self.events_key && !self.expect_key {
                    self.extracted = true;
                    return true;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.events_key = false;
            }
            _ => {}
        }
        false
    }

    /// Whether the quoted key starting at `quote` is `traceEvents` (escapes decoded).
    fn key_is_trace_events(&self, quote: usize) -> bool {
        let quoted = &self.bytes[quote..];
        let raw = &quoted[1..quoted.len() - 1];
        if !raw.contains(&b'\\') {
            return raw == b"traceEvents";
        }
        serde_json::from_slice::<String>(quoted).is_ok_and(|k| k == "traceEvents")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_points_follow_a_closed_element() {
        let doc = b"[{\"a\":{\"b\":1}},\n  {\"c\":[{}, {}]}, {\"d\":1}]";
        let found: Vec<usize> = (0..doc.len()).filter_map(|f| split_point(doc, f)).collect();
        let text = std::str::from_utf8(doc).unwrap();
        assert_eq!(found[0], text.find("{\"c\"").unwrap());
        assert!(found.contains(&text.find("{\"d\"").unwrap()));
        // `{}, {}` inside "c" looks like a boundary too: the parse before it finds out.
        assert!(found.contains(&text.find("{}]").unwrap()));
        assert_eq!(split_point(b"{\"a\":1}", 0), None);
    }

    /// Parses `doc` (the inside of a `traceEvents` array, with its `]`) in one go.
    fn parse_all(doc: &[u8], threads: usize) -> (Sink, Vec<Sink>, Stop) {
        let opts = ImportOptions {
            threads,
            block_bytes: doc.len(),
            parallel_min_bytes: 0,
        };
        let (mut sink, mut pool) = (Sink::new(), Vec::new());
        let out = parse_block(doc, Expect::First, &mut sink, &mut pool, &opts, &mut || {});
        (sink, pool, out.stop)
    }

    #[test]
    fn wrong_guesses_are_caught_and_reparsed_in_order() {
        // Every place a thread may start is inside an event's args: every guess is wrong.
        let event = r#"{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"stream":7,"correlation":1,"x":[{"a":1},{"b":2},{"c":3},{"d":4}]}}"#;
        let doc = format!("{}]", [event; 40].join(",\n"));
        let whole = doc.replace("},\n{", "}, {");
        let (one, _, stop) = parse_all(whole.as_bytes(), 1);
        assert_eq!((stop, one.events), (Stop::ArrayEnd, 40));
        for threads in [2, 3, 8] {
            let (split, pool, stop) = parse_all(whole.as_bytes(), threads);
            assert_eq!(stop, Stop::ArrayEnd);
            assert!(split.b.trace == one.b.trace, "{threads} threads");
            assert_eq!(split.events, 40);
            // The pieces that started in the wrong place were thrown away.
            assert!(
                pool.iter()
                    .all(|p| p.b.trace.kernels.is_empty() && p.events == 0)
            );
        }
        // With true boundaries too (after each "},\n"), the result is the same.
        let (mixed, _, _) = parse_all(doc.as_bytes(), 4);
        assert!(mixed.b.trace == one.b.trace);
    }
}
