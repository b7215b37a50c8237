//! `gapscope record` passes the signals sent to it on to the program (issue 25 f): a job
//! manager's SIGTERM or a `kill -INT` must end the program the way the program chooses (its
//! trace written), and gapscope exit with the program's status. Runs without a GPU: the program
//! is a shell script, run untraced.
#![cfg(unix)]

mod common;

use common::{bin, stderr};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs `script` under `gapscope record`, waits for its "ready" line, sends `signal` to the
/// gapscope process only, and returns gapscope's exit code, the time it took to end after the
/// signal, and its stderr.
fn record_then_signal(script: &str, signal: Signal) -> (Option<i32>, Duration, String) {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libgapscope.so");
    std::fs::write(&lib, b"\x7fELF").unwrap(); // a stub: its header only
    let program = dir.path().join("program.sh");
    std::fs::write(&program, script).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut child = bin()
        .args(["record", "-o", dir.path().join("o").to_str().unwrap(), "--"])
        .arg(&program)
        .env("GAPSCOPE_INJECTION_LIB", &lib)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let sent = Instant::now();
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), sent.elapsed(), stderr(&out))
}

#[test]
fn a_signal_sent_to_record_reaches_the_program_and_its_status_is_kept() {
    // The program traps the signal and ends with its own code (as a Python program ends on
    // KeyboardInterrupt, or one that writes its results on SIGTERM).
    for (signal, name, code) in [(Signal::SIGTERM, "TERM", 42), (Signal::SIGINT, "INT", 43)] {
        let script = format!(
            "#!/bin/sh\ntrap 'exit {code}' {name}\necho ready\nwhile :; do sleep 0.05; done\n"
        );
        let (status, took, err) = record_then_signal(&script, signal);
        assert_eq!(status, Some(code), "{name}: {err}");
        assert!(took < Duration::from_secs(20), "{name}: {took:?}");
        assert!(
            err.contains(&format!("exited with status {code}")),
            "{name}: {err}"
        );
    }
}

#[test]
fn a_program_ended_by_the_forwarded_signal_gives_128_plus_its_number() {
    // `exec sleep` leaves no shell to trap it: the forwarded SIGTERM ends the program.
    let (status, _, err) =
        record_then_signal("#!/bin/sh\necho ready\nexec sleep 60\n", Signal::SIGTERM);
    assert_eq!(status, Some(143), "{err}");
    assert!(err.contains("was killed by signal 15 (SIGTERM)"), "{err}");
}
