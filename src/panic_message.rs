//! A panic's message as one line: the panic hooks that must not print a multi-line report (the
//! injection library, examples) print it.
#![forbid(unsafe_code)]

/// A panic's message as one line, for panic hooks that must not print a multi-line report
/// (the injection library, examples).
pub fn one_line(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
        .replace('\n', " ")
}
