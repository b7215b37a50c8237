//! How a trace's bytes reach the parsers: the path is opened once and read once, front to back
//! (so a pipe, `/dev/stdin`, `<(…)` or a FIFO works as a file does), gzip data is decompressed
//! as it streams (whatever the format inside), and the first bytes after decompression are
//! kept aside ([`Opened::head`]) for the format to be told from them.
//!
//! The input is bounded however it is wrapped; each limit is checked as bytes are read, so a
//! refusal comes early, in memory of about the limit, with one line that names it:
//! - no NUL byte (JSON text never holds one): zeros are refused at the first;
//! - at most [`MAX_RUN_BYTES`] without `"`, `,` or `:`: one string, number or stretch of white
//!   space that long is not a trace (records are far shorter), whichever format it claims;
//! - gzip data may expand at most [`MAX_GZIP_RATIO`] times beyond its first
//!   [`GZIP_FREE_BYTES`] (torch's traces expand about 20 times): a decompression bomb stops
//!   there; gzip inside gzip is refused, and so are bytes after the last gzip member.
#![forbid(unsafe_code)]

use std::io::{self, BufRead, BufReader, Chain, Cursor, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The longest run of bytes without `"`, `,` or `:` accepted.
pub const MAX_RUN_BYTES: u64 = 128 << 20;
/// How many times its own size gzip data may expand (beyond [`GZIP_FREE_BYTES`]).
pub const MAX_GZIP_RATIO: u64 = 250;
/// Decompressed bytes accepted before [`MAX_GZIP_RATIO`] applies.
pub const GZIP_FREE_BYTES: u64 = 256 << 20;
/// How much of the (decompressed) input is read before its format is decided.
pub const HEAD_BYTES: usize = 64 << 10;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// An input refused by a limit, or damaged compression: carried through the parsers inside an
/// [`io::Error`] ([`refusal`] finds it again), displayed as one line.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refuse(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, Refused(message))
}

/// The message of an error that [`Opened`] raised to refuse its input.
pub fn refusal(e: &io::Error) -> Option<&str> {
    e.get_ref()?.downcast_ref::<Refused>().map(|r| r.0.as_str())
}

/// `n` bytes in MiB or GiB, for messages.
fn size(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    }
}

/// Counts the bytes read through it (the compressed size, for the gzip ratio).
struct Counted<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The raw input: the bytes read to tell whether it is gzip, then the rest.
type Raw<R> = Counted<Chain<Cursor<Vec<u8>>, R>>;

/// Gzip members one after another, as `gzip` writes them when files are concatenated;
/// anything else after the last member is refused (not silently ignored).
struct GzMembers<R: Read> {
    member: Option<flate2::bufread::GzDecoder<BufReader<Raw<R>>>>,
}

impl<R: Read> GzMembers<R> {
    fn read_member(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(member) = &mut self.member else {
                return Ok(0);
            };
            let n = member.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(member) = self.member.take() else {
                return Ok(0);
            };
            let mut rest = member.into_inner();
            let next = rest.fill_buf()?;
            let (first, buffered) = (next.first().copied(), next.len() as u64);
            match first {
                None => return Ok(0),
                Some(b) if b == GZIP_MAGIC[0] => {
                    self.member = Some(flate2::bufread::GzDecoder::new(rest));
                }
                Some(_) => {
                    let at = rest.get_ref().count.load(Ordering::Relaxed) - buffered;
                    return Err(refuse(format!(
                        "the gzip data ends at byte {at} of the file and other bytes follow (not gzip): cut them off or decompress it (gunzip) first"
                    )));
                }
            }
        }
    }
}

impl<R: Read> Read for GzMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_member(buf).map_err(|e| {
            // A damaged or cut stream shows up as a read error: say what it is.
            let damaged = matches!(
                e.kind(),
                io::ErrorKind::InvalidInput | io::ErrorKind::UnexpectedEof
            ) || (e.kind() == io::ErrorKind::InvalidData && refusal(&e).is_none());
            if damaged {
                refuse(format!("gzip data is damaged or cut short: {e}"))
            } else {
                e
            }
        })
    }
}

/// The input decompressed (or as it is).
enum Decoded<R: Read> {
    Plain(Raw<R>),
    Gzip(GzMembers<R>),
}

impl<R: Read> Read for Decoded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoded::Plain(r) => r.read(buf),
            Decoded::Gzip(r) => r.read(buf),
        }
    }
}

/// The limits, checked on each piece read.
struct Limits {
    /// Bytes (decompressed) seen so far.
    offset: u64,
    /// Bytes since the last `"`, `,` or `:`.
    run: u64,
    /// For gzip data: the compressed bytes read so far.
    compressed: Option<Arc<AtomicU64>>,
}

impl Limits {
    fn check(&mut self, piece: &[u8]) -> io::Result<()> {
        if let Some(at) = memchr::memchr(0, piece) {
            return Err(refuse(format!(
                "not JSON: a NUL byte at byte {} (JSON text has none)",
                self.offset + at as u64
            )));
        }
        let delimiter = |b: &[u8]| memchr::memchr3(b'"', b',', b':', b);
        // Pieces are at most MAX_RUN_BYTES long, so a run over the limit spans pieces: it is
        // enough to look at each piece's first and last delimiter.
        match delimiter(piece) {
            None => self.run += piece.len() as u64,
            Some(first) => {
                self.run += first as u64;
                if self.run <= MAX_RUN_BYTES {
                    let last = memchr::memrchr3(b'"', b',', b':', piece).unwrap_or(first);
                    self.run = (piece.len() - 1 - last) as u64;
                }
            }
        }
        if self.run > MAX_RUN_BYTES {
            return Err(refuse(format!(
                "refused at byte {}: more than {} without a `\"`, `,` or `:` (one string, number or stretch of white space over gapscope's limit of {} on one value)",
                self.offset + piece.len() as u64,
                size(MAX_RUN_BYTES),
                size(MAX_RUN_BYTES)
            )));
        }
        self.offset += piece.len() as u64;
        if let Some(compressed) = &self.compressed {
            let compressed = compressed.load(Ordering::Relaxed).max(1);
            if self.offset > GZIP_FREE_BYTES && self.offset > MAX_GZIP_RATIO * compressed {
                return Err(refuse(format!(
                    "refused: the gzip data expands more than {MAX_GZIP_RATIO} times ({} from {}), a likely decompression bomb (gapscope's limit: {MAX_GZIP_RATIO} times beyond the first {})",
                    size(self.offset),
                    size(compressed),
                    size(GZIP_FREE_BYTES)
                )));
            }
        }
        Ok(())
    }
}

/// The rest of the input after the head, limits checked.
pub struct Bounded<R: Read> {
    inner: Decoded<R>,
    limits: Limits,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let max = buf.len().min(MAX_RUN_BYTES as usize);
        let n = self.inner.read(&mut buf[..max])?;
        self.limits.check(&buf[..n])?;
        Ok(n)
    }
}

/// An input opened for reading once: its first [`HEAD_BYTES`] (decompressed) in hand, the rest
/// to be read.
pub struct Opened<R: Read> {
    head: Vec<u8>,
    rest: Bounded<R>,
    /// The size of a plain regular file (to size the buffer of a whole read).
    size_hint: Option<u64>,
}

/// How long a FIFO is waited on for a writer before it reads as empty (and is refused as
/// such): long enough for a producer started beside gapscope to open it, short enough that a
/// FIFO nobody writes does not hang the command.
pub const FIFO_WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An input file as opened. A FIFO (or a pipe) is opened without blocking, so that one no
/// process writes cannot hang the command in `open`; its reads then wait for data, and for a
/// writer at most [`FIFO_WRITER_WAIT`].
pub struct InputFile {
    file: std::fs::File,
    fifo: bool,
    /// A writer has shown itself (data, or a read that would block): from then on, a read of
    /// nothing is the end.
    writer_seen: bool,
    opened: std::time::Instant,
}

impl InputFile {
    pub fn open(path: &Path) -> io::Result<InputFile> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let fifo = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo());
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        if fifo {
            options.custom_flags(nix::libc::O_NONBLOCK);
        }
        Ok(InputFile {
            file: options.open(path)?,
            fifo,
            writer_seen: false,
            opened: std::time::Instant::now(),
        })
    }
}

impl Read for InputFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.fifo {
            return self.file.read(buf);
        }
        loop {
            match self.file.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writer_seen = true,
                // No writer yet (a FIFO with none reads nothing): wait for one, a while.
                Ok(0) if !self.writer_seen && !buf.is_empty() => {
                    if self.opened.elapsed() >= FIFO_WRITER_WAIT {
                        return Ok(0);
                    }
                }
                done => {
                    self.writer_seen |= matches!(done, Ok(n) if n > 0);
                    return done;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

impl Opened<InputFile> {
    /// Opens `path` (once) and reads its head.
    pub fn open(path: &Path) -> io::Result<Opened<InputFile>> {
        let file = InputFile::open(path)?;
        let size = file
            .file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        let mut opened = Opened::new(file)?;
        if matches!(opened.rest.inner, Decoded::Plain(_)) {
            opened.size_hint = size;
        }
        Ok(opened)
    }
}

impl<R: Read> Opened<R> {
    /// Reads the head of `reader`, decompressing it if it is gzip data.
    pub fn new(reader: R) -> io::Result<Opened<R>> {
        let mut start = Vec::with_capacity(HEAD_BYTES);
        let mut reader = reader;
        (&mut reader)
            .take(HEAD_BYTES as u64)
            .read_to_end(&mut start)?;
        let count = Arc::new(AtomicU64::new(0));
        let gzip = start.starts_with(&GZIP_MAGIC);
        let (head, raw_start) = if gzip {
            (Vec::with_capacity(HEAD_BYTES), start)
        } else {
            (start, Vec::new())
        };
        let raw = Counted {
            inner: Cursor::new(raw_start).chain(reader),
            count: count.clone(),
        };
        let inner = if gzip {
            Decoded::Gzip(GzMembers {
                member: Some(flate2::bufread::GzDecoder::new(BufReader::with_capacity(
                    64 << 10,
                    raw,
                ))),
            })
        } else {
            Decoded::Plain(raw)
        };
        let mut opened = Opened {
            head,
            rest: Bounded {
                inner,
                limits: Limits {
                    offset: 0,
                    run: 0,
                    compressed: gzip.then_some(count),
                },
            },
            size_hint: None,
        };
        if gzip {
            let mut head = std::mem::take(&mut opened.head);
            (&mut opened.rest.inner)
                .take(HEAD_BYTES as u64)
                .read_to_end(&mut head)?;
            if head.starts_with(&GZIP_MAGIC) {
                return Err(refuse(
                    "gzip-compressed twice; decompress it once first (gunzip)".into(),
                ));
            }
            opened.head = head;
        }
        opened.rest.limits.check(&opened.head)?;
        Ok(opened)
    }

    /// The first [`HEAD_BYTES`] of the input (decompressed), or all of it if shorter.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The whole input, head first.
    pub fn into_reader(self) -> Chain<Cursor<Vec<u8>>, Bounded<R>> {
        Cursor::new(self.head).chain(self.rest)
    }

    /// Reads the whole input into memory.
    pub fn read_all(mut self) -> io::Result<Vec<u8>> {
        let mut bytes = std::mem::take(&mut self.head);
        if let Some(size) = self.size_hint {
            bytes.reserve(
                usize::try_from(size)
                    .unwrap_or(0)
                    .saturating_sub(bytes.len()),
            );
        }
        self.rest.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read(bytes: &[u8]) -> io::Result<Vec<u8>> {
        Opened::new(bytes)?.read_all()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    }

    fn refused(r: io::Result<Vec<u8>>) -> String {
        let e = r.expect_err("refused");
        refusal(&e)
            .unwrap_or_else(|| panic!("not a refusal: {e}"))
            .to_owned()
    }

    #[test]
    fn plain_and_gzip_read_alike_and_members_concatenate() {
        let text = br#"{"a": [1, 2, "three"]}"#.repeat(5000);
        assert_eq!(read(&text).unwrap(), text);
        assert_eq!(read(&gzip(&text)).unwrap(), text);
        let two = [gzip(&text[..7]), gzip(&text[7..])].concat();
        assert_eq!(read(&two).unwrap(), text);
        let gz = gzip(&text);
        let opened = Opened::new(&gz[..]).unwrap();
        assert_eq!(opened.head(), &text[..HEAD_BYTES]);
    }

    #[test]
    fn nul_bytes_long_runs_and_gzip_oddities_are_refused() {
        assert!(refused(read(b"{\0\0")).contains("NUL byte at byte 1"));
        let mut late = b"{\"a\":1,".repeat(20000);
        late.push(0);
        assert!(refused(read(&late)).contains(&format!("byte {}", late.len() - 1)));
        assert!(refused(read(&gzip(&gzip(b"{}")))).contains("twice"));
        let trailing = [gzip(b"{}"), b"garbage".to_vec()].concat();
        assert!(refused(read(&trailing)).contains("other bytes follow"));
        let cut = gzip(&b"{\"a\":1}".repeat(1000));
        assert!(refused(read(&cut[..cut.len() / 2])).contains("damaged or cut short"));
    }

    #[test]
    fn runs_are_measured_across_pieces() {
        let mut limits = Limits {
            offset: 0,
            run: 0,
            compressed: None,
        };
        let chunk = vec![b' '; (MAX_RUN_BYTES / 4) as usize];
        limits.check(b"{\"a\"").unwrap();
        for _ in 0..4 {
            limits.check(&chunk).unwrap();
        }
        assert_eq!(limits.run, MAX_RUN_BYTES);
        let e = limits.check(b"  ,").unwrap_err();
        assert!(refusal(&e).unwrap().contains("128.0 MiB"));
        // A delimiter resets the run.
        let mut limits = Limits {
            offset: 0,
            run: MAX_RUN_BYTES - 1,
            compressed: None,
        };
        limits.check(b"x,yy").unwrap();
        assert_eq!(limits.run, 2);
    }
}
