//! Golden reports: `analyze` of every committed trace (each file of `traces/` and
//! `tests/fixtures/kineto/`, the bundled four together) and `merge` of every rank folder give
//! the reports (Markdown, JSON, SVG, Perfetto protobuf; Chrome JSON Perfetto for the bundled
//! four and the first rank folder) stored in `tests/fixtures/reports/`, byte for byte, and,
//! run without `-o`, the stdout and stderr stored there (`stdout.txt`, `stderr.txt`), as that
//! path analyses with less detail kept. The Markdown reports and the streams are stored as
//! they are (a diff shows what changed); the other outputs, as their FNV-1a hash and length
//! (`NAME.fnv64`), to keep the fixtures small. A
//! change that is meant to change a report regenerates them with
//! `cargo test --test reports -- --ignored regenerate_report_fixtures` (and the diff shows
//! what changed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The four traces `gapscope run` analyses on a machine without a GPU (src/trace/bundled.rs).
const BUNDLED: [&str; 4] = [
    "traces/emu-h200.json",
    "traces/ht-decode-h200.json",
    "traces/ht-decode-2rank-h200/mode1-rank0.json",
    "traces/ht-decode-2rank-h200/mode2-rank0.json",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/reports")
}

/// Trace files under `dir` (relative to the project root), recursively, sorted.
fn trace_files(dir: &str, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = format!("{dir}/{}", p.file_name().unwrap().to_string_lossy());
        if p.is_dir() {
            // A `gapscope try` folder is judged whole by tests/try_cmd.rs.
            if !p.file_name().unwrap().to_string_lossy().starts_with("try-") {
                trace_files(&rel, out);
            }
        } else if rel.ends_with(".json") || rel.ends_with(".json.gz") {
            out.push(rel);
        }
    }
}

/// A golden case: its fixture folder's name and the gapscope arguments before `-o DIR`.
struct Case {
    name: String,
    args: Vec<String>,
}

/// Committed files that are not traces gapscope reads: tests/third_party_traces.rs checks the
/// one error line each gets.
const REFUSED: [&str; 2] = [
    "traces/hta/simple-add-execution-trace.json.gz",
    "traces/hta/mtia-inference-rank0.json.gz",
];

fn cases() -> Vec<Case> {
    let mut files = Vec::new();
    trace_files("traces", &mut files);
    files.retain(|f| !REFUSED.contains(&f.as_str()));
    trace_files("tests/fixtures/kineto", &mut files);
    let mut cases: Vec<Case> = files
        .iter()
        .map(|f| Case {
            name: format!("analyze-{}", f.replace('/', "__")),
            args: vec!["analyze".into(), f.clone()],
        })
        .collect();
    cases.push(Case {
        name: "analyze-bundled".into(),
        args: std::iter::once("analyze".to_owned())
            .chain(BUNDLED.iter().map(|s| s.to_string()))
            .collect(),
    });
    // Every folder of rank files (trace-0.json, trace-1.json…) is a merge.
    let mut rank_dirs: Vec<&str> = files
        .iter()
        .filter(|f| f.ends_with("/trace-0.json"))
        .map(|f| f.trim_end_matches("/trace-0.json"))
        .collect();
    rank_dirs.dedup();
    if let Some(first) = rank_dirs.first() {
        cases.push(Case {
            name: format!("merge-{}-perfetto-json", first.replace('/', "__")),
            args: vec![
                "merge".into(),
                (*first).to_owned(),
                "--perfetto-json".into(),
            ],
        });
    }
    for dir in rank_dirs {
        cases.push(Case {
            name: format!("merge-{}", dir.replace('/', "__")),
            args: vec!["merge".into(), dir.to_owned()],
        });
    }
    cases.push(Case {
        name: "analyze-bundled-perfetto-json".into(),
        args: std::iter::once("analyze".to_owned())
            .chain(BUNDLED.iter().map(|s| s.to_string()))
            .chain(std::iter::once("--perfetto-json".to_owned()))
            .collect(),
    });
    cases
}

/// FNV-1a (64 bits) of `bytes`, with their length: what a big output is stored as.
fn fingerprint(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64 {h:016x} bytes {}\n", bytes.len())
}

/// Runs a case into a fresh folder; returns the report files it wrote, by name, sorted, and
/// the stdout and stderr of the case run without `-o`.
fn run_case(case: &Case) -> Vec<(String, Vec<u8>)> {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .current_dir(root())
        // The reports do not depend on the number of threads; two is what CI machines have.
        .env("GAPSCOPE_THREADS", "2")
        .env_remove("GAPSCOPE_TIMINGS")
        .args(&case.args)
        .arg("-o")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}: {}",
        case.name,
        String::from_utf8_lossy(&run.stderr)
    );
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    let bare = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .current_dir(root())
        .env("GAPSCOPE_THREADS", "2")
        .env_remove("GAPSCOPE_TIMINGS")
        .args(&case.args)
        .output()
        .unwrap();
    assert!(
        bare.status.success(),
        "{} without -o: {}",
        case.name,
        String::from_utf8_lossy(&bare.stderr)
    );
    files.push(("stdout.txt".into(), bare.stdout));
    files.push(("stderr.txt".into(), bare.stderr));
    files.sort();
    files
}

/// What a case's fixture folder holds for its outputs: (stored name, stored bytes).
fn stored_form(files: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|(name, bytes)| {
            if !name.ends_with(".md") && !name.ends_with(".txt") {
                (format!("{name}.fnv64"), fingerprint(bytes).into_bytes())
            } else {
                (name.clone(), bytes.clone())
            }
        })
        .collect()
}

#[test]
#[ignore = "writes tests/fixtures/reports"]
fn regenerate_report_fixtures() {
    let _ = std::fs::remove_dir_all(fixtures());
    for case in cases() {
        let dir = fixtures().join(&case.name);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in stored_form(&run_case(&case)) {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

#[test]
fn reports_of_every_committed_trace_are_unchanged() {
    let cases = cases();
    let mut stored: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    stored.sort();
    let mut wanted: Vec<String> = cases.iter().map(|c| c.name.clone()).collect();
    wanted.sort();
    assert_eq!(
        stored, wanted,
        "one fixture folder per case (regenerate_report_fixtures)"
    );
    let mut changed = Vec::new();
    for case in &cases {
        let dir = fixtures().join(&case.name);
        let mut want: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        want.sort();
        let got = stored_form(&run_case(case));
        let names = |v: &[(String, Vec<u8>)]| v.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        if names(&got) != names(&want) {
            changed.push(format!(
                "{}: wrote {:?}, fixture has {:?}",
                case.name,
                names(&got),
                names(&want)
            ));
            continue;
        }
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            if g != w {
                changed.push(format!("{}/{name}", case.name));
            }
        }
    }
    assert!(
        changed.is_empty(),
        "reports changed (if meant, run regenerate_report_fixtures and review the diff): {changed:#?}"
    );
}

/// The kernel-duration check a Markdown line prints ("- kernel durations …"), as a key: its
/// verdict, max |Δ| %, aligned kernels, kernels listed and "and N more".
fn duration_line_key(line: &str) -> String {
    let line = line.trim_start_matches("- kernel durations");
    if line.starts_with(": no aligned kernels") {
        return "none".into();
    }
    if let Some(rest) = line.strip_prefix(" identical within ") {
        let (pct, rest) = rest.split_once(" % (max |Δ| over ").unwrap();
        let n = rest.split_once(' ').unwrap().0;
        return format!("identical {pct} {n}");
    }
    let rest = line
        .strip_prefix(" differ beyond spread (max |Δ| ")
        .unwrap_or_else(|| panic!("an unknown duration line: {line}"));
    let (pct, rest) = rest.split_once(" % over ").unwrap();
    let (n, list) = rest.split_once(" aligned kernels): ").unwrap();
    let (list, more) = match list.rsplit_once("; and ") {
        Some((l, m)) if m.ends_with(" more") => (l, m.trim_end_matches(" more")),
        _ => (list, "0"),
    };
    format!("differ {pct} {n} {} {more}", list.matches(" → ").count())
}

/// The same key from a comparison's typed `kernel_durations`.
fn duration_json_key(p: &serde_json::Value) -> String {
    let k = &p["kernel_durations"];
    if k.is_null() {
        return "none".into();
    }
    let pct = format!("{:.2}", k["max_delta_pct"].as_f64().unwrap());
    let n = k["aligned"].as_u64().unwrap();
    if p["durations_within_spread"].as_bool().unwrap() {
        return format!("identical {pct} {n}");
    }
    let listed = k["differing"].as_array().unwrap().len() as u64;
    let more = k["differing_count"].as_u64().unwrap() - listed;
    format!("differ {pct} {n} {listed} {more}")
}

/// Every verdict `report.md` prints that a reader could want from `report.json` is carried
/// there as a typed field, on every committed trace: the kernel-duration check of each
/// eager ↔ graphed pair, "the graphs differ only by" external event nodes and the external
/// event wait's share of Δ in the mode table, the first-launch note and the CUPTI launch-cost
/// note (which cells, with their node counts).
#[test]
fn every_verdict_the_markdown_prints_is_in_the_json() {
    let count = |s: &str, what: &str| s.matches(what).count();
    for case in cases() {
        let files = run_case(&case);
        let file = |name: &str| {
            let bytes = &files.iter().find(|f| f.0 == name).unwrap().1;
            String::from_utf8(bytes.clone()).unwrap()
        };
        let (md, json) = (file("report.md"), file("report.json"));
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        let name = &case.name;
        if json["kind"] != "analysis" {
            for phrase in [
                "kernel durations",
                "graphs differ only",
                "First launches recorded",
            ] {
                assert!(!md.contains(phrase), "{name}: {phrase}");
            }
            continue;
        }
        let list = |key: &str| json[key].as_array().unwrap().clone();
        let mut from_md: Vec<String> = md
            .lines()
            .filter(|l| l.starts_with("- kernel durations"))
            .map(duration_line_key)
            .collect();
        let mut from_json: Vec<String> =
            list("regime_pairs").iter().map(duration_json_key).collect();
        from_md.sort();
        from_json.sort();
        assert_eq!(from_md, from_json, "{name}: kernel durations");

        // The mode table explains Δ where the period changed beyond the spread.
        let explained: Vec<serde_json::Value> = list("mode_pairs")
            .into_iter()
            .filter(|p| !p["period_delta"].is_null() && p["change"] != "no_change")
            .collect();
        let flagged = |key: &str, p: &serde_json::Value| p[key] == true || p[key].is_f64();
        assert_eq!(
            count(&md, "the graphs differ only by "),
            explained
                .iter()
                .filter(|p| flagged("graphs_differ_only_by_external", p))
                .count(),
            "{name}: graphs differ only by external nodes"
        );
        // "external event wait +11.65 = 89 % of Δ — …"
        let shares = md
            .split("external event wait ")
            .skip(1)
            .filter(|s| {
                s.split_once(' ')
                    .is_some_and(|(_, rest)| rest.starts_with("= "))
            })
            .count();
        assert_eq!(
            shares,
            explained
                .iter()
                .filter(|p| flagged("external_event_share", p))
                .count(),
            "{name}: external event wait's share of Δ"
        );

        let cells = list("cells");
        assert_eq!(
            md.contains("First launches recorded by CUPTI are inflated"),
            cells
                .iter()
                .any(|c| c["first_launches_inflated_by_cupti"] == true),
            "{name}: first-launch note"
        );
        let mut nodes_md: Vec<u64> = md
            .split(" nodes, host-bound launch gaps of ")
            .collect::<Vec<_>>()
            .split_last()
            .map(|(_, before)| before)
            .unwrap_or_default()
            .iter()
            .map(|b| b.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        let mut nodes_json: Vec<u64> = cells
            .iter()
            .filter_map(|c| c["cupti_launch_cost"]["nodes"].as_u64())
            .collect();
        nodes_md.sort_unstable();
        nodes_json.sort_unstable();
        assert_eq!(nodes_md, nodes_json, "{name}: CUPTI launch-cost note");
    }
}
