//! The lines the injection library writes on the traced program's stderr.

/// A `gapscope: warning: …` line from inside the traced process (it runs on regardless; a
/// stderr it cannot write to loses the line, see [`crate::messages`]).
pub(super) fn say(msg: &str) {
    crate::messages::warning(msg);
}

/// `gapscope: note: MSG` on the traced process's stderr, on one line.
pub(super) fn say_note(msg: &str) {
    crate::messages::note(msg);
}
