//! Traces gapscope did not make: HTA's public test corpus (facebookresearch/
//! HolisticTraceAnalysis, `tests/data`), a few files of it in traces/hta/ (traces/README.md says
//! which, and how the large ones were trimmed). Each gets its steps and a period, or one line
//! that says why not.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hta(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/hta")
        .join(name)
}

fn gapscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(args)
        .output()
        .unwrap()
}

/// `gapscope analyze TRACE ARGS…`: exit status, stdout, stderr.
fn analyze(name: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let path = hta(name);
    let mut all = vec!["analyze", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = gapscope(&all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The one error line of a refused input, which must name the file and exit 2.
fn refused(name: &str) -> String {
    let (code, stdout, stderr) = analyze(name, &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("gapscope: error: "), "{stderr}");
    assert!(lines[0].contains(name), "{stderr}");
    lines[0].to_owned()
}

#[test]
fn an_execution_trace_is_named_and_refused_with_what_to_record_instead() {
    let line = refused("simple-add-execution-trace.json.gz");
    assert!(
        line.contains("a PyTorch execution trace")
            && line.contains("not a profiler trace: record with torch.profiler"),
        "{line}"
    );
    assert!(!line.contains("schema_version"), "{line}");
}

#[test]
fn an_mtia_trace_is_named_and_refused_as_unsupported() {
    let line = refused("mtia-inference-rank0.json.gz");
    assert!(
        line.contains("MTIA device activity (40 ")
            && line.contains("MTIA traces are not supported"),
        "{line}"
    );
    assert!(
        !line.contains("profile with ProfilerActivity.CUDA"),
        "{line}"
    );
}
