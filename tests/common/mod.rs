//! Helpers the end-to-end tests of the `gapscope` binary share (`mod common;` in each).
#![allow(dead_code)] // each test file uses its own part

use gapscope::trace;
use std::path::Path;
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
}

pub fn gapscope(args: &[&str]) -> Output {
    bin().args(args).output().expect("run gapscope")
}

pub fn write(dir: &Path, name: &str, t: &trace::Trace) -> String {
    let p = dir.join(name);
    trace::write_trace(&p, t).unwrap();
    p.display().to_string()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A screen as whole lines: the lines `fit_screen` broke (continued 4 or more spaces in) joined.
pub fn unwrapped(screen: &str) -> String {
    let mut out = String::with_capacity(screen.len());
    for (i, line) in screen.split('\n').enumerate() {
        if i > 0 && line.starts_with("    ") {
            out.push(' ');
            out.push_str(line.trim_start());
        } else {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(line);
        }
    }
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit `code`, the error the last line on stderr, only notes before it; returns the error.
pub fn fails_after_notes(out: &Output, code: i32) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    let (last, notes) = lines.split_last().expect("an error line");
    assert!(last.starts_with("gapscope: error: "), "{err}");
    assert!(
        notes.iter().all(|l| l.starts_with("gapscope: note: ")),
        "{err}"
    );
    last.to_string()
}

/// Exit `code` with exactly one line on stderr, the error; returns it.
pub fn fails_in_one_line(out: &Output, code: i32) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("gapscope: error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// gapscope's temporary files left in `dir`.
pub fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp") || n.contains(".tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `dir`, recursively, that `keep` accepts.
pub fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if keep(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `gapscope compare` of the bundled ht-decode run with itself, its mode-2 cells against its
/// mode-1 cells, then `extra` arguments: the mode pair every compare test reads.
pub fn compare_ht_decode_modes(extra: &[&str]) -> Output {
    let t = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/ht-decode-h200.json");
    let mut args = vec![
        "compare",
        t,
        t,
        "--base-select",
        "graph_usage_mode=2",
        "--head-select",
        "graph_usage_mode=1",
    ];
    args.extend_from_slice(extra);
    gapscope(&args)
}
