//! Every exit code gapscope gives, in one place (README, "The contract"). The commands choose
//! among these names; no other file writes a code as a number.
#![forbid(unsafe_code)]

/// Success.
pub const SUCCESS: u8 = 0;
/// Runtime failure: GPU, libraries, a write that fails, an output folder another gapscope is
/// writing.
pub const FAILURE: u8 = 1;
/// Bad input: usage errors, bad values, unreadable or malformed traces, `compare` of sets
/// with no cell in common.
pub const BAD_INPUT: u8 = 2;
/// `compare`: a cell of HEAD is slower than `--threshold` beyond the run-to-run spread.
pub const THRESHOLD_BREACHED: u8 = 3;
/// `try --expect-fix LABEL`: the variant LABEL did not remove a gap (it helped, had no effect,
/// hurt or failed). Not 3: that is `compare`'s slowdown, a different finding.
pub const FIX_NOT_CONFIRMED: u8 = 4;
/// `record`: the program could not be run (as shells say it).
pub const CANNOT_RUN: u8 = 126;
/// `record`: the program was not found (as shells say it).
pub const NOT_FOUND: u8 = 127;

/// The code of a process ended by signal `signal`, as shells report it: 128 + N.
pub fn killed_by(signal: i32) -> u8 {
    u8::try_from(128 + signal.clamp(0, 127)).unwrap_or(u8::MAX)
}

/// A program's own exit status passed through (its low 8 bits, as the kernel keeps them).
pub fn passed_through(status: i32) -> u8 {
    (status & 0xff) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_and_statuses_read_as_shells_read_them() {
        assert_eq!(killed_by(15), 143);
        assert_eq!(killed_by(9), 137);
        assert_eq!(passed_through(3), 3);
        assert_eq!(passed_through(256 + 7), 7);
    }
}
