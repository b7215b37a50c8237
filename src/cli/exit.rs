#![forbid(unsafe_code)]
//! Every exit code the commands choose, in one place: from a failure's type ([`Failure`]), from
//! a program `record` ran, from a finding (`compare`'s slowdown, `try`'s fix not confirmed) and
//! from a signal. The codes themselves are named in [`gapscope::exit`].

use gapscope::exit;
use gapscope::trace::TraceError;
use std::process::ExitCode;

/// A failure with its exit code; displayed as one line.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Bad input (exit 2): a usage error, a bad value, an unreadable or malformed input.
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: exit::BAD_INPUT,
            error: error.into(),
        }
    }

    /// A runtime failure (exit 1): the GPU, a library, a write, our own recordings.
    pub fn runtime(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: exit::FAILURE,
            error: error.into(),
        }
    }
}

/// A trace that cannot be read or is malformed is bad input; anything else (a write, the GPU,
/// a library) is a runtime failure.
impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        let error = e.into();
        let bad_input = error
            .downcast_ref::<TraceError>()
            .is_some_and(|e| !matches!(e, TraceError::Write { .. }));
        if bad_input {
            Failure::bad_input(error)
        } else {
            Failure::runtime(error)
        }
    }
}

/// A usage error (exit 2).
pub fn usage() -> ExitCode {
    ExitCode::from(exit::BAD_INPUT)
}

/// Why a program could not be started, and the code a shell would give (127 not found, 126
/// not runnable).
pub fn not_started(kind: std::io::ErrorKind) -> (ExitCode, &'static str) {
    let (code, what) = match kind {
        std::io::ErrorKind::NotFound => (exit::NOT_FOUND, "command not found"),
        std::io::ErrorKind::PermissionDenied => (exit::CANNOT_RUN, "not executable"),
        _ => (exit::CANNOT_RUN, "cannot be run"),
    };
    (ExitCode::from(code), what)
}

/// The program's own exit code, or 128 + N when signal N ended it (`record` exits with it).
pub fn of_program(status: std::process::ExitStatus) -> ExitCode {
    ExitCode::from(program_code(status))
}

/// [`of_program`] as a number (what `try` keeps of each run).
pub fn program_code(status: std::process::ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return exit::passed_through(code);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return exit::killed_by(sig);
        }
    }
    exit::FAILURE
}

/// A command stopped by signal `signal`: 128 + its number.
pub fn of_signal(signal: i32) -> u8 {
    exit::killed_by(signal)
}

/// `compare`: 3 when a cell of HEAD is slower beyond the threshold.
pub fn of_comparison(breached: bool) -> ExitCode {
    ExitCode::from(if breached {
        exit::THRESHOLD_BREACHED
    } else {
        exit::SUCCESS
    })
}

/// `try --expect-fix`: 4 when the expected variant did not remove a gap.
pub fn of_expected_fix(met: Option<bool>) -> ExitCode {
    ExitCode::from(match met {
        Some(false) => exit::FIX_NOT_CONFIRMED,
        _ => exit::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_s_status_is_passed_on_and_a_signal_is_128_plus_its_number() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(program_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(program_code(std::process::ExitStatus::from_raw(15)), 143);
        assert_eq!(of_signal(2), 130);
    }
}
