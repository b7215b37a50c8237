//! JSON numbers as the Kineto scanner reads them: the grammar checked and the digits read in
//! one pass ([`read_number`]), times in microseconds turned into exact nanoseconds where
//! Kineto's three decimals allow ([`Num::to_ns`]).
#![forbid(unsafe_code)]

use super::error::EventError;

/// A JSON number as written (its grammar checked), with its digits read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Num<'a> {
    pub text: &'a [u8],
    pub negative: bool,
    pub exponent: bool,
    /// The digits before the point, when there are at most 19 of them.
    pub int: Option<u64>,
    pub int_digits: usize,
    /// The digits after the point as an integer (meaningful up to 19 of them).
    pub frac: u64,
    pub frac_digits: usize,
}

impl Num<'_> {
    pub(super) fn as_f64(&self) -> f64 {
        // The text is ASCII digits, sign, point and exponent, which Rust's parser reads exactly
        // (correctly rounded), so this cannot fail.
        std::str::from_utf8(self.text)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN)
    }

    /// The integer, when the number is written as one that fits.
    pub(super) fn as_plain_u64(&self) -> Option<u64> {
        if self.negative || self.exponent || self.frac_digits > 0 {
            return None;
        }
        match self.int {
            Some(v) => Some(v),
            // 20 digits may still fit.
            None if self.int_digits == 20 => std::str::from_utf8(self.text).ok()?.parse().ok(),
            None => None,
        }
    }

    /// An integer argument: a non-negative integer, written as one or as a float with no
    /// fraction; `None` for anything else.
    pub(super) fn as_arg(&self) -> Option<u64> {
        if let Some(v) = self.as_plain_u64() {
            return Some(v);
        }
        if self.negative && !self.exponent && self.frac_digits == 0 {
            return (self.int == Some(0)).then_some(0);
        }
        let v = self.as_f64();
        (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19).then_some(v as u64)
    }

    /// Microseconds (`ts`, `dur`) to nanoseconds, rounded to the nearest. Kineto writes three
    /// decimals, read exactly from the digits; anything else goes through `f64`.
    pub(super) fn to_ns(self, what: &'static str) -> Result<u64, EventError> {
        if !self.exponent && self.frac_digits <= 3 && self.int_digits <= 15 && !self.negative {
            return Ok(exact_ns(self.int.unwrap_or(0), self.frac, self.frac_digits));
        }
        if let Some(us) = self.as_plain_u64() {
            return us
                .checked_mul(1000)
                .ok_or(EventError::TimeOverflows { what, us });
        }
        let us = self.as_f64();
        let ns = (us * 1000.0).round();
        // 2^64 as f64; anything at or above it does not fit.
        if !(0.0..18_446_744_073_709_551_616.0).contains(&ns) {
            return Err(EventError::TimeOutOfRange { what, us });
        }
        Ok(ns as u64)
    }
}

/// A time in microseconds as read: already in nanoseconds when written as Kineto writes it
/// (up to 15 digits, a point, up to 3 decimals), else the number's text (checked), converted
/// when used: kept small, as every event carries two.
#[derive(Debug, Clone, Copy)]
pub(super) enum Time<'a> {
    Ns(u64),
    Number(&'a [u8]),
}

impl Time<'_> {
    pub(super) fn to_ns(self, what: &'static str) -> Result<u64, EventError> {
        match self {
            Time::Ns(ns) => Ok(ns),
            Time::Number(text) => read_number(text, 0)
                .map_err(|(_, message)| EventError::Number(message))?
                .to_ns(what),
        }
    }
}

/// The number at `b[start..]` (its first byte), its grammar checked, digits read on the way;
/// or where it breaks the grammar and how. It ends where the grammar stops, which may be the
/// end of `b`.
#[inline(always)]
pub(super) fn read_number(b: &[u8], start: usize) -> Result<Num<'_>, (usize, &'static str)> {
    let negative = b.get(start) == Some(&b'-');
    let int_start = start + usize::from(negative);
    let (mut i, int) = digits(b, int_start);
    let int_digits = i - int_start;
    if int_digits == 0 {
        return Err((i, "invalid number"));
    }
    if int_digits > 1 && b[int_start] == b'0' {
        return Err((int_start, "invalid number: leading zero"));
    }
    let (mut frac, mut frac_digits) = (0, 0);
    if b.get(i) == Some(&b'.') {
        i += 1;
        let from = i;
        (i, frac) = digits(b, i);
        frac_digits = i - from;
        if frac_digits == 0 {
            return Err((i, "invalid number: no digit after the point"));
        }
    }
    let mut exponent = false;
    if let Some(b'e' | b'E') = b.get(i) {
        exponent = true;
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let from = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == from {
            return Err((i, "invalid number: no digit in the exponent"));
        }
    }
    Ok(Num {
        text: &b[start..i],
        negative,
        exponent,
        // Values wrap beyond 19 digits; those numbers go through `f64` (from `text`).
        int: (int_digits <= 19).then_some(int),
        int_digits,
        frac,
        frac_digits,
    })
}

/// `us` microseconds and `frac` written with `frac_digits` (at most 3) decimals, in
/// nanoseconds: exact, no floating point (`us` has at most 15 digits, so it cannot overflow).
#[inline(always)]
pub(super) fn exact_ns(us: u64, frac: u64, frac_digits: usize) -> u64 {
    us * 1000 + frac * [1000, 100, 10, 1][frac_digits]
}

/// Whether `b[at]` is a byte that may follow a number in a document (a separator, a closing
/// bracket or white space), so that the number ends there.
#[inline(always)]
pub(super) fn ends_value(b: &[u8], at: usize) -> bool {
    matches!(
        b.get(at),
        Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
    )
}

/// The end of the run of digits at `i`, and its value (wrapping past 19 digits).
#[inline(always)]
pub(super) fn digits(b: &[u8], mut i: usize) -> (usize, u64) {
    let mut value = 0u64;
    while let Some(&d) = b.get(i) {
        let v = d.wrapping_sub(b'0');
        if v > 9 {
            break;
        }
        value = value.wrapping_mul(10).wrapping_add(u64::from(v));
        i += 1;
    }
    (i, value)
}
