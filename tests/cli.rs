//! End-to-end tests of the `gapscope` binary.

mod common;
use common::{gapscope, write};
use gapscope::trace::synthetic::{self, SyntheticCell};
use std::process::Output;

fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("gapscope: error: "), "{stderr}");
    stderr
}

#[test]
fn unknown_schema_version_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = serde_json::to_value(synthetic::emu_experiment(2)).unwrap();
    v["schema_version"] = 7.into();
    let p = dir.path().join("future.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let out = gapscope(&["analyze", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).contains("schema version 7"));
}

#[test]
fn malformed_input_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = serde_json::to_vec(&synthetic::emu_experiment(2)).unwrap();
    let out_dir = dir.path().join("out");
    for (name, bytes) in [
        ("cut.json", good[..good.len() / 2].to_vec()),
        ("empty.json", Vec::new()),
        (
            "wrongtype.json",
            br#"{"schema_version":1,"metadata":{"tool":1}}"#.to_vec(),
        ),
        ("binary.json", vec![0xff, 0xfe, 0x00, 0x12]),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = gapscope(&[
            "analyze",
            p.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(one_error_line(&out).contains(name));
        assert!(
            !out_dir.exists(),
            "{name}: output folder created for bad input"
        );
    }
    let missing = gapscope(&["analyze", "/nonexistent/trace.json"]);
    assert_eq!(missing.status.code(), Some(2));
    one_error_line(&missing);
}

/// The packets of a protobuf Perfetto trace file, each checked to be a well-formed message.
fn perfetto_packets(path: &std::path::Path) -> usize {
    use gapscope::report::perfetto::wire::fields;
    let bytes = std::fs::read(path).unwrap();
    fields(&bytes)
        .map(|f| {
            let (number, value) = f.expect("well-formed protobuf");
            assert_eq!(number, 1, "a Trace holds packets only");
            let packet = value.as_bytes().expect("a packet is a message");
            assert!(fields(packet).all(|f| f.is_ok()));
        })
        .count()
}

#[test]
fn analyze_writes_all_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "emu.json", &synthetic::emu_experiment(30));
    let out_dir = dir.path().join("out");
    let out = gapscope(&["analyze", &p, "-o", out_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The terminal gets a summary that says where the full report is.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("NCCL graph usage mode 2"), "{stdout}");
    assert!(stdout.lines().count() < 40, "{stdout}");
    let report = out_dir.join("report.md").display().to_string();
    assert!(
        stdout
            .trim_end()
            .ends_with(&format!("Full report: {report}")),
        "{stdout}"
    );
    let full = gapscope(&["analyze", &p, "--full"]);
    assert!(String::from_utf8_lossy(&full.stdout).contains("synthetic"));
    for f in [
        "report.md",
        "report.json",
        "trace.perfetto-trace",
        "step.svg",
    ] {
        let bytes = std::fs::read(out_dir.join(f)).unwrap_or_else(|_| panic!("{f} missing"));
        assert!(!bytes.is_empty());
    }
    // The Perfetto trace is TrackEvent protobuf: a Trace message of packets (field 1).
    let packets = perfetto_packets(&out_dir.join("trace.perfetto-trace"));
    assert!(packets > 100, "{packets} packets");
    assert!(!out_dir.join("trace.perfetto.json").exists());
    // --perfetto-json: the Chrome JSON instead, and the protobuf of the earlier run goes.
    let out = gapscope(&[
        "analyze",
        &p,
        "-o",
        out_dir.to_str().unwrap(),
        "--perfetto-json",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("open trace.perfetto.json"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("trace.perfetto.json")).unwrap())
            .unwrap();
    assert!(
        json["traceEvents"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    assert!(!out_dir.join("trace.perfetto-trace").exists());
    // export: protobuf by default, JSON on request.
    let file = dir.path().join("one.perfetto-trace");
    let out = gapscope(&["export", &p, "-o", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(perfetto_packets(&file) > 100);
    let file = dir.path().join("one.perfetto.json");
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "perfetto-json",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(json["traceEvents"].is_array());
    // No temporary files left behind.
    assert!(
        std::fs::read_dir(&out_dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp"))
    );
}

#[test]
fn compare_gates_on_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mode = |m| synthetic::trace(&[SyntheticCell::emu(true, m, 80)], 5);
    let base = write(dir.path(), "mode1.json", &mode(1));
    let head = write(dir.path(), "mode2.json", &mode(2));
    // mode 2 adds ~0.9 µs to a ~24 µs period: beyond 1 %, within 10 %.
    let strict = gapscope(&["compare", &base, &head, "--threshold", "1.01"]);
    assert_eq!(
        strict.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&strict.stdout)
    );
    let summary = String::from_utf8_lossy(&strict.stdout);
    assert!(summary.starts_with("gapscope compare: FAIL"), "{summary}");
    let full = gapscope(&["compare", &base, &head, "--threshold", "1.01", "--full"]);
    assert!(String::from_utf8_lossy(&full.stdout).contains("external event wait"));
    let loose = gapscope(&["compare", &base, &head, "--threshold", "1.10"]);
    assert_eq!(loose.status.code(), Some(0));
    let same = gapscope(&["compare", &base, &base, "--json"]);
    assert_eq!(same.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
    assert!(v.to_string().contains("no_change"), "{v}");
}

#[test]
fn run_without_gpu_analyses_bundled_traces() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = gapscope(&["run", "--bundled", "-o", out_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("bundled"));
    assert!(out_dir.join("report.md").exists());
}

/// `--origin-step` (was `--align-step`, still accepted) names itself in its refusal, and
/// `merge --clock` (was `--align`) is what the help shows.
#[test]
fn renamed_flags_and_their_old_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    let o = dir.path().join("out");
    for flag in ["--origin-step", "--align-step"] {
        let out = gapscope(&["analyze", &p, flag, "1000000", "-o", o.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(one_error_line(&out).contains(&format!("{flag} 1000000")));
        assert!(!o.exists(), "{flag}: output written");
    }
    let help = gapscope(&["merge", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--clock <CLOCK>"), "{help}");
    assert!(!help.contains("--align"), "{help}");
    let help = gapscope(&["analyze", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--origin-step <ORIGIN_STEP>"), "{help}");
    assert!(!help.contains("--align-step"), "{help}");
}

/// A fix that removes a cause is named by that cause: mode 2 → mode 1 on the bundled HT-decode
/// trace removes the external event wait, whose gap the head's ops no longer have.
#[test]
fn compare_books_a_removed_gap_under_the_cause_the_base_had() {
    let out = common::compare_ht_decode_modes(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{:?}", out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cell = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["head_label"] == "graphed mode=1 T=512 fresh")
        .expect("the T=512 fresh pair");
    let top = &cell["gap_growth_by_cause"][0];
    assert_eq!(top[0], "external_event_wait", "{cell:#}");
    assert!(top[2].as_f64().unwrap() < -40_000.0, "{top}");
    assert_eq!(cell["causes_gone_in_head"][0], "external_event_wait");
    let summary = common::compare_ht_decode_modes(&[]);
    let text = common::unwrapped(&String::from_utf8_lossy(&summary.stdout));
    let row = text
        .lines()
        .find(|l| l.contains("T=512 fresh →"))
        .expect("the T=512 fresh row");
    assert!(
        row.contains("external event-wait node") && row.contains("gone in head"),
        "{row}"
    );
}

/// The `changed-gap` labels of a comparison picture, in drawing order (BASE first).
fn changed_gap_labels(svg: &str) -> Vec<String> {
    svg.split("class=\"changed-gap\"")
        .skip(1)
        .map(|t| t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].to_owned())
        .collect()
}

#[test]
fn compare_writes_one_timeline_and_a_picture_of_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let o = out_dir.to_str().unwrap();
    let out = common::compare_ht_decode_modes(&["-o", o]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim_end().ends_with(&format!(
            "Full report: {o}/compare.md (with compare.json, compare.perfetto-trace, compare.svg)"
        )),
        "{stdout}"
    );
    assert!(perfetto_packets(&out_dir.join("compare.perfetto-trace")) > 0);
    let svg = std::fs::read_to_string(out_dir.join("compare.svg")).unwrap();
    // The T=512 fresh pair: the external event wait (≈ 44 µs) in BASE, gone in HEAD.
    assert!(svg.contains(">BASE (top) vs HEAD (bottom): faster"));
    assert!(svg.contains(">graphed mode=2 T=512 fresh [graphed] step "));
    assert!(svg.contains(">graphed mode=1 T=512 fresh [graphed] step "));
    let labels = changed_gap_labels(&svg);
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels[0].starts_with("external event wait 4"), "{labels:?}");
    assert!(
        labels[1].starts_with("external event wait: gone"),
        "{labels:?}"
    );
    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    assert!(md.contains("](compare.svg)"), "{md}");
    // --format github: the picture, then the table folded under it.
    let github = common::compare_ht_decode_modes(&["--format", "github", "-o", o]);
    let text = String::from_utf8_lossy(&github.stdout);
    let picture = text
        .find(&format!("]({o}/compare.svg)"))
        .expect("the picture");
    assert!(picture < text.find("<details>").unwrap(), "{text}");
}

/// The subcommands the top-level help lists (the hidden ones are for tests).
fn listed_subcommands() -> Vec<String> {
    let top = String::from_utf8_lossy(&gapscope(&["--help"]).stdout).into_owned();
    let commands = top
        .split_once("Commands:\n")
        .expect("a Commands: section")
        .1;
    commands
        .lines()
        .take_while(|l| !l.trim().is_empty())
        // A command's line is indented 2; its wrapped description further.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Every help text fits a 100-column terminal when piped (clap wraps it; COLUMNS, which clap
/// reads when no terminal is there, cannot widen it): the top level's, and each command's by
/// `-h`, `--help` and `help COMMAND`.
#[test]
fn every_help_line_fits_100_columns() {
    let commands = listed_subcommands();
    assert!(
        ["analyze", "record", "try", "merge", "man", "help"]
            .iter()
            .all(|c| commands.iter().any(|x| x == c)),
        "{commands:?}"
    );
    let mut asked: Vec<Vec<String>> = vec![
        vec!["--help".into()],
        vec!["-h".into()],
        vec!["help".into()],
    ];
    for c in &commands {
        // `help` takes no flags: `help help` is its help.
        if c != "help" {
            asked.push(vec![c.clone(), "--help".into()]);
            asked.push(vec![c.clone(), "-h".into()]);
        }
        asked.push(vec!["help".into(), c.clone()]);
    }
    for args in &asked {
        for columns in [None, Some("300")] {
            let mut cmd = common::bin();
            cmd.args(args);
            match columns {
                Some(c) => cmd.env("COLUMNS", c),
                None => cmd.env_remove("COLUMNS"),
            };
            let out = cmd.output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{args:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.lines().count() > 3, "{args:?}: {text}");
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "{args:?} (COLUMNS {columns:?}): {} characters: {line}",
                    line.chars().count()
                );
            }
        }
    }
}

/// The package states the oldest Rust that builds it — no older than any dependency asks
/// for — and the README's install section says it; its license is in Cargo.toml, in
/// pyproject.toml and in LICENSE alike.
#[test]
fn rust_version_and_license_are_stated() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = |v: &serde_json::Value| -> Option<Vec<u64>> {
        let parts = v.as_str()?.split('.').map(|p| p.parse().ok());
        let mut parts: Vec<u64> = parts.collect::<Option<_>>()?;
        parts.resize(3, 0);
        Some(parts)
    };
    let packages = meta["packages"].as_array().unwrap();
    let ours = packages.iter().find(|p| p["name"] == "gapscope").unwrap();
    let ours_rust = version(&ours["rust_version"]).expect("rust-version in Cargo.toml");
    for p in packages {
        if let Some(theirs) = version(&p["rust_version"]) {
            assert!(theirs <= ours_rust, "{} needs Rust {theirs:?}", p["name"]);
        }
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let stated = ours["rust_version"].as_str().unwrap();
    assert!(
        readme.contains(&format!("Rust {stated} or later")),
        "README"
    );
    let license = ours["license"].as_str().expect("license in Cargo.toml");
    let text = std::fs::read_to_string(root.join("LICENSE")).unwrap();
    assert!(text.starts_with(&format!("{license} License")), "{text}");
    let pyproject = std::fs::read_to_string(root.join("pyproject.toml")).unwrap();
    assert!(
        pyproject.contains(&format!("license = {{ text = \"{license}\" }}")),
        "pyproject.toml"
    );
}
