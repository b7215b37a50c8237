#![forbid(unsafe_code)]
//! The one home of every line gapscope writes to stderr (`gapscope: note: …`,
//! `gapscope: warning: …` and `gapscope: error: …`, each escaped to one line) and of the
//! escaping itself ([`printable`]), which every report and screen goes through too, and of the
//! quoting of a word for a POSIX shell (`shell_word`).
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
    line(&format!("gapscope: {level}: {}", printable(message)));
}

/// `text` with every control and format character escaped as Rust writes it (`\n`, `\u{1b}`,
/// `\u{202e}`): a name from a trace, or a path, can then neither start a new line, nor send the
/// terminal an escape sequence (colours, cursor moves, a changed title), nor reorder or hide
/// what follows it (bidirectional overrides, zero-width characters: `is_format_char`).
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escape_unprintable(text, |_| true)
}

/// [`printable`] for a whole report or screen: line breaks and tabs stay, every other control
/// or format character is escaped.
pub fn printable_lines(text: &str) -> std::borrow::Cow<'_, str> {
    escape_unprintable(text, |c| !matches!(c, '\n' | '\t'))
}

/// A rendered report or screen through [`printable_lines`].
pub(crate) fn printable_report(text: String) -> String {
    match printable_lines(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

/// `word` as a POSIX shell reads it back: as it is when it holds only characters no shell
/// treats specially, else in single quotes (a quote inside closed, escaped and reopened).
pub(crate) fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/=@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn escape_unprintable(text: &str, escaped: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    let is_escaped = |c: char| (c.is_control() && escaped(c)) || is_format_char(c);
    if !text.chars().any(is_escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Unicode's format characters (general category Cf, Unicode 16: bidirectional marks, embeddings,
/// overrides and isolates, zero-width spaces and joiners, the byte-order mark, …) and its line
/// and paragraph separators (U+2028, U+2029): invisible, yet they reorder, hide or break the
/// text around them. (`char::is_control` covers only category Cc.)
pub(crate) fn is_format_char(c: char) -> bool {
    const RANGES: [(char, char); 21] = [
        ('\u{ad}', '\u{ad}'),
        ('\u{600}', '\u{605}'),
        ('\u{61c}', '\u{61c}'),
        ('\u{6dd}', '\u{6dd}'),
        ('\u{70f}', '\u{70f}'),
        ('\u{890}', '\u{891}'),
        ('\u{8e2}', '\u{8e2}'),
        ('\u{180e}', '\u{180e}'),
        ('\u{200b}', '\u{200f}'),
        // U+2028 and U+2029 (Zl, Zp) with U+202A–U+202E.
        ('\u{2028}', '\u{202e}'),
        ('\u{2060}', '\u{2064}'),
        ('\u{2066}', '\u{206f}'),
        ('\u{feff}', '\u{feff}'),
        ('\u{fff9}', '\u{fffb}'),
        ('\u{110bd}', '\u{110bd}'),
        ('\u{110cd}', '\u{110cd}'),
        ('\u{13430}', '\u{1343f}'),
        ('\u{1bca0}', '\u{1bca3}'),
        ('\u{1d173}', '\u{1d17a}'),
        ('\u{e0001}', '\u{e0001}'),
        ('\u{e0020}', '\u{e007f}'),
    ];
    !c.is_ascii()
        && RANGES
            .iter()
            .any(|&(first, last)| (first..=last).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_format_characters_are_escaped() {
        assert_eq!(printable("red \u{1b}[31m\r\n"), "red \\u{1b}[31m\\r\\n");
        assert_eq!(printable_lines("a\tb\n\u{9b}c"), "a\tb\n\\u{9b}c");
        // Bidirectional overrides and isolates, zero-width and byte-order marks, separators.
        assert_eq!(
            printable("k\u{202e}lanrek\u{2066}\u{200b}\u{feff}\u{2028}é"),
            "k\\u{202e}lanrek\\u{2066}\\u{200b}\\u{feff}\\u{2028}é"
        );
        assert_eq!(printable_lines("a\n\u{200f}b"), "a\n\\u{200f}b");
        assert!(matches!(
            printable("naïve→ü"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert!(matches!(printable("plain"), std::borrow::Cow::Borrowed(_)));
    }
}
