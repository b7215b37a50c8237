//! Byte searches eight bytes at a time (SWAR): where the Kineto scanner's strings end and
//! where the next bracket or string starts. Each has a one-byte-at-a-time twin it must agree
//! with (tested).
#![forbid(unsafe_code)]

/// Index of the first `"`, `{`, `}`, `[` or `]` in `s`.
#[inline(always)]
pub(super) fn find_structural(s: &[u8]) -> Option<usize> {
    find_first(s, structural_bytes, |b| {
        matches!(b, b'"' | b'{' | b'}' | b'[' | b']')
    })
}

/// High bit set in each byte of `x` (eight bytes) below `n` (n <= 0x80). Only the lowest
/// flagged byte is sure (a borrow can flag bytes above it), which is all the searches use; the
/// lowest flag over several such masks is the first byte any of them matches.
#[inline(always)]
fn bytes_below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(ONES * u64::from(n)) & !x & (ONES * 0x80)
}

/// The bytes of `x` equal to `b`, flagged as [`bytes_below`] does.
#[inline(always)]
fn bytes_equal(x: u64, b: u8) -> u64 {
    bytes_below(x ^ (ONES * u64::from(b)), 1)
}

/// `"`, `\\` and control characters (below 0x20): where a string's scan stops.
#[inline(always)]
fn special_bytes(x: u64) -> u64 {
    bytes_equal(x, b'"') | bytes_equal(x, b'\\') | bytes_below(x, 0x20)
}

/// `"` and the four brackets.
#[inline(always)]
fn structural_bytes(x: u64) -> u64 {
    // Setting bit 5 turns `[` `]` into `{` `}` (and no other byte into either).
    let folded = x | (ONES * 0x20);
    bytes_equal(x, b'"') | bytes_equal(folded, b'{') | bytes_equal(folded, b'}')
}

/// Index of the first byte of `s` that `hits` flags, eight bytes at a time (`is_hit`: the
/// same test on one byte, for the tail).
#[inline(always)]
fn find_first(s: &[u8], hits: impl Fn(u64) -> u64, is_hit: impl Fn(u8) -> bool) -> Option<usize> {
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let flagged = hits(u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])));
        if flagged != 0 {
            return Some(i + (flagged.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    s[i..].iter().position(|&b| is_hit(b)).map(|p| i + p)
}

/// Index of the first `"`, `\\` or control character in `s`: names and keys are most of a
/// Kineto file, and this is the scan's inner loop.
#[inline(always)]
pub(super) fn find_string_special(s: &[u8]) -> Option<usize> {
    find_first(s, special_bytes, is_string_special)
}

pub(super) fn is_string_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The quotes in `s`, whether it holds a bracket but `}` or a backslash, and whether it
/// holds a control character: eight bytes at a time, with no branch on the bytes.
#[inline(always)]
pub(super) fn flat_bytes(s: &[u8]) -> (usize, bool, bool) {
    let mut words = s.chunks_exact(8);
    let (mut quotes, mut special, mut control) = (0, 0, 0);
    for word in words.by_ref() {
        let (q, sp, c) = flat_word(u64::from_le_bytes(word.try_into().unwrap_or([0; 8])));
        quotes += q;
        special |= sp;
        control |= c;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let (q, sp, c) = flat_word(u64::from_le_bytes(padded(tail)));
        quotes += q;
        special |= sp;
        control |= c;
    }
    (quotes, special != 0, control != 0)
}

/// [`flat_bytes`] and [`controls_inside`] in one pass (`odd`: `s` starts inside a string): the
/// quotes, and whether `s` holds a bracket but `}`, a backslash, or a control character inside a
/// string, branching only on words that hold a control character. Cheaper than the two passes
/// where line breaks are common, dearer where there are none (it counts quotes word by word).
#[inline(always)]
pub(super) fn flat_lines_bytes(s: &[u8], odd: bool) -> (usize, bool) {
    let mut words = s.chunks_exact(8);
    let (mut quotes, mut bad) = (usize::from(odd), false);
    for word in words.by_ref() {
        let (q, b) = flat_lines_word(
            u64::from_le_bytes(word.try_into().unwrap_or([0; 8])),
            quotes,
        );
        quotes += q;
        bad |= b;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let (q, b) = flat_lines_word(u64::from_le_bytes(padded(tail)), quotes);
        quotes += q;
        bad |= b;
    }
    (quotes - usize::from(odd), bad)
}

/// [`flat_lines_bytes`] of eight bytes after `before` quotes.
#[inline(always)]
fn flat_lines_word(x: u64, before: usize) -> (usize, bool) {
    let (_, special, control) = flat_word(x);
    // One in each byte that is a quote; byte k of the product counts the quotes in bytes 0
    // to k (at most eight: no carry between bytes), the top byte all of them.
    let counts = (zero_bytes(x ^ (ONES * u64::from(b'"'))) >> 7).wrapping_mul(ONES);
    let mut bad = special != 0;
    if control != 0 {
        // Bad where a control character lies inside a string, as the low bit of its byte's
        // count, with the quotes before the word, says.
        let inside = (counts ^ if before % 2 == 1 { ONES } else { 0 }) & ONES;
        bad |= (zero_bytes(x & (ONES * 0xe0)) >> 7) & inside != 0;
    }
    ((counts >> 56) as usize, bad)
}

/// Up to eight bytes, padded with a byte that is none of those [`flat_word`] and
/// [`controls_inside`] look for.
#[inline(always)]
fn padded(tail: &[u8]) -> [u8; 8] {
    let mut padded = [b'a'; 8];
    padded[..tail.len()].copy_from_slice(tail);
    padded
}

/// One in each byte, and the high bit of each byte.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each zero byte of `v`, exactly (no borrow runs between bytes).
#[inline(always)]
fn zero_bytes(v: u64) -> u64 {
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    !((v & LOW).wrapping_add(LOW) | v) & HIGH
}

/// [`flat_bytes`] of eight bytes: the quotes, and non-zero for the others.
#[inline(always)]
fn flat_word(x: u64) -> (usize, u64, u64) {
    // Non-zero when some byte is zero (only whether, not where).
    let any_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote_bytes = zero_bytes(x ^ (ONES * u64::from(b'"')));
    // Each flagged byte adds one to the top byte (at most eight: no carry out).
    let quotes = ((quote_bytes >> 7).wrapping_mul(ONES) >> 56) as usize;
    // Setting bit 5 turns `[` into `{` (and no other byte into it).
    let special = any_zero(x ^ (ONES * u64::from(b'\\')))
        | any_zero((x | (ONES * 0x20)) ^ (ONES * u64::from(b'{')))
        | any_zero(x ^ (ONES * u64::from(b']')));
    (quotes, special, any_zero(x & (ONES * 0xe0)))
}

/// Whether `s` (with no backslash; `odd`: it starts inside a string) holds a control
/// character inside a string, as opposed to only between strings (the line breaks and tabs
/// of events written over lines).
#[inline(always)]
pub(super) fn controls_inside(s: &[u8], odd: bool) -> bool {
    let mut words = s.chunks_exact(8);
    let mut odd = odd;
    let mut word = |x: u64| {
        // One in each byte that is a quote; byte k of the product counts the quotes in bytes
        // 0 to k (at most eight: no carry between bytes), so its low bit says, for a byte that
        // is not a quote, whether it lies inside a string (with `odd`).
        let counts = (zero_bytes(x ^ (ONES * u64::from(b'"'))) >> 7).wrapping_mul(ONES);
        let inside = (counts ^ if odd { ONES } else { 0 }) & ONES;
        odd ^= (counts >> 56) % 2 == 1;
        (zero_bytes(x & (ONES * 0xe0)) >> 7) & inside != 0
    };
    for chunk in words.by_ref() {
        if word(u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]))) {
            return true;
        }
    }
    let tail = words.remainder();
    !tail.is_empty() && word(u64::from_le_bytes(padded(tail)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_string_specials_like_a_byte_loop() {
        let text = "abcdefgh\"ijklmnop\\qrstuvwxyz0123456789\"é€\tx".as_bytes();
        for start in 0..text.len() {
            for end in start..=text.len() {
                let s = &text[start..end];
                let want = s.iter().position(|&b| is_string_special(b));
                assert_eq!(find_string_special(s), want, "{start}..{end}");
            }
        }
        for b in 0..=255u8 {
            for at in [0, 5, 11] {
                let mut s = [b'a'; 19];
                s[at] = b;
                s[15] = b'"';
                let want = s.iter().position(|&b| is_string_special(b));
                assert_eq!(find_string_special(&s), want, "byte {b} at {at}");
            }
        }
    }
}
