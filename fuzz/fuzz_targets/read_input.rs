//! The compressed and piped readers: any bytes, as they are or gzip-compressed, read whole or
//! trickled a few bytes per read (as a pipe delivers them), through the input layer and the
//! format dispatch. Never a panic; the same trace or error line whichever way they arrive;
//! gzip-compressed bytes read as the bytes themselves, and never more bytes than went in.
#![no_main]

use gapscope::trace::input::Opened;
use gapscope::trace::kineto::ImportOptions;
use libfuzzer_sys::fuzz_target;
use std::io::{Read, Write};
use std::path::Path;

/// Hands out `step` bytes per read, as a pipe may.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// `bytes` as gzip data: deflate-compressed (`compress`), or in stored blocks, made by hand
/// (an encoder's set-up costs more than the rest of a run).
fn gzip(bytes: &[u8], compress: bool) -> Vec<u8> {
    if compress {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        return e.finish().unwrap();
    }
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut blocks = bytes.chunks(65535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let len = block.len() as u16;
        out.push(u8::from(blocks.peek().is_none()));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out
}

/// The bytes the input layer yields, or its error line.
fn bytes_of(r: impl Read) -> Result<Vec<u8>, String> {
    Opened::new(r)
        .and_then(Opened::read_all)
        .map_err(|e| e.to_string())
}

/// The trace read, or its error line (Kineto blocks of 4 KiB on one thread: the same trace as
/// any other split, and no 16 MiB block to allocate per run).
fn trace_of(r: impl Read) -> Result<gapscope::trace::Trace, String> {
    let opts = ImportOptions {
        block_bytes: 4 << 10,
        threads: 1,
        parallel_min_bytes: usize::MAX,
    };
    gapscope::trace::read_any_from(r, Path::new("fuzz.json"), &opts).map_err(|e| e.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let input = if mode & 1 == 1 {
        gzip(body, mode & 2 == 2)
    } else {
        body.to_vec()
    };
    let step = 1 + usize::from(mode >> 2) % 7;
    let trickle = || Trickle {
        bytes: &input,
        step,
    };
    let whole = bytes_of(&input[..]);
    if mode & 1 == 1 && !body.starts_with(&[0x1f, 0x8b]) {
        assert_eq!(whole, bytes_of(body), "gzip changes what is read");
    }
    if let Ok(bytes) = &whole {
        assert!(bytes.len() <= input.len().max(body.len()));
    }
    let (a, b) = (trace_of(&input[..]), trace_of(trickle()));
    match (&a, &b) {
        (Ok(a), Ok(b)) => assert!(a == b, "the trickled trace differs"),
        _ => assert_eq!(
            a.as_ref().err(),
            b.as_ref().err(),
            "one way ok, the other not"
        ),
    }
});
