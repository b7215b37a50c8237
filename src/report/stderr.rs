#![forbid(unsafe_code)]
//! The one home of every line gapscope writes to stderr: `gapscope: note: …`,
//! `gapscope: warning: …` and `gapscope: error: …`, each escaped to one line
//! ([`super::printable`]).
//!
//! A stderr that cannot be written (`2>/dev/full`, a reader that has gone) loses the line and
//! nothing else: the command goes on and exits with the code it would have had. (`eprintln!`
//! panics there, turning any exit into 101.)

use std::io::Write;

/// `gapscope: note: MESSAGE`.
pub fn note(message: &str) {
    tagged("note", message);
}

/// `gapscope: warning: MESSAGE`.
pub fn warning(message: &str) {
    tagged("warning", message);
}

/// `gapscope: error: MESSAGE`: the last line a failing command writes.
pub fn error(message: &str) {
    tagged("error", message);
}

/// A line already in one of the forms above (made elsewhere, e.g.
/// [`crate::library_search::using_note`]), or a test's diagnostic, written as it is.
pub fn line(text: &str) {
    // One write of the whole line, so that lines of several threads do not interleave.
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&bytes);
}

fn tagged(level: &str, message: &str) {
    line(&format!("gapscope: {level}: {}", super::printable(message)));
}
