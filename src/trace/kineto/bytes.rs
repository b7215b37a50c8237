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

const ONES: u64 = 0x0101_0101_0101_0101;

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
