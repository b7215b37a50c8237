//! `gapscope merge`: clock alignment on collectives, the per-rank report, the merged Perfetto
//! trace and the refusals.
//!
//! Fixtures (tests/fixtures/ranks/): made by [`one_node`] and [`two_hosts`] from
//! `gapscope::trace::synthetic`; regenerate with
//! `cargo test --test merge -- --ignored regenerate_fixtures`.
//! - `one-node/trace-{0,1}.json`: no host in the metadata (one clock), rank 1 slower (every
//!   gap but the collective's 3 µs longer).
//! - `two-hosts/trace-{0,1}.json`: hosts node-a and node-b; rank 1 is rank 0 with its clock
//!   1.234 ms ahead (every timestamp + 1 234 000 ns) and ±150 ns of jitter per kernel.

use gapscope::analysis::merge::{self, ClockAlignment};
use gapscope::trace::synthetic::{self, SyntheticCell};
use gapscope::trace::{self, Trace};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const COLLECTIVE: &str = "ncclDevKernel_AllGather_RING_LL";
/// Rank 1's clock is this far ahead of rank 0's in the two-host fixture.
const CLOCK_AHEAD_NS: i64 = 1_234_000;
const STEPS: usize = 20;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ranks")
}

fn fixture(set: &str, rank: u32) -> String {
    fixtures()
        .join(set)
        .join(format!("trace-{rank}.json"))
        .display()
        .to_string()
}

fn gapscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(args)
        .output()
        .expect("run gapscope")
}

fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.trim_end().lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with("gapscope: error: "), "{stderr}");
    stderr
}

/// A synthetic rank: eager and graphed mode-2 cells, the collective named like NCCL's.
fn rank_trace(rank: u32, host: Option<&str>, extra_gap: u64, seed: u64) -> Trace {
    let cells: Vec<SyntheticCell> = [false, true]
        .into_iter()
        .map(|graphed| {
            let mut c = SyntheticCell::emu(graphed, 2, STEPS);
            c.gap_other += extra_gap;
            c
        })
        .collect();
    let mut t = synthetic::trace(&cells, seed);
    let coll = t.strings.iter().position(|s| s == "coll").expect("coll");
    t.strings[coll] = COLLECTIVE.to_owned();
    t.metadata.rank = rank;
    t.metadata.world = 2;
    if let Some(h) = host {
        t.metadata.workload.insert("host".into(), h.into());
    }
    t
}

/// Ranks on one host (no host in the metadata), rank 1 slower.
fn one_node() -> [Trace; 2] {
    [rank_trace(0, None, 0, 7), rank_trace(1, None, 3_000, 8)]
}

/// Ranks on two hosts: rank 1 is rank 0's run seen through a clock `CLOCK_AHEAD_NS` ahead,
/// with ±150 ns of jitter per kernel (collective ends included).
fn two_hosts() -> [Trace; 2] {
    let r0 = rank_trace(0, Some("node-a"), 0, 7);
    let mut r1 = r0.clone();
    r1.metadata.rank = 1;
    r1.metadata.workload.insert("host".into(), "node-b".into());
    let ahead = |t: &mut u64| *t = t.checked_add_signed(CLOCK_AHEAD_NS).unwrap();
    for (i, k) in r1.kernels.iter_mut().enumerate() {
        let jitter = (i as i64 * 7919) % 301 - 150;
        for t in [&mut k.start, &mut k.end] {
            ahead(t);
            *t = t.checked_add_signed(jitter).unwrap();
        }
    }
    for a in &mut r1.api_calls {
        ahead(&mut a.start);
        ahead(&mut a.end);
    }
    for m in &mut r1.markers {
        ahead(&mut m.start);
        ahead(&mut m.end);
    }
    assert!(r1.syncs.is_empty() && r1.event_records.is_empty() && r1.memcpys.is_empty());
    [r0, r1]
}

fn paths(n: usize) -> Vec<String> {
    (0..n).map(|r| format!("trace-{r}.json")).collect()
}

#[test]
#[ignore = "writes tests/fixtures/ranks"]
fn regenerate_fixtures() {
    for (set, traces) in [("one-node", one_node()), ("two-hosts", two_hosts())] {
        std::fs::create_dir_all(fixtures().join(set)).unwrap();
        for t in &traces {
            trace::write_trace(Path::new(&fixture(set, t.metadata.rank)), t).unwrap();
        }
    }
}

#[test]
fn fixtures_are_readable_ranks() {
    for set in ["one-node", "two-hosts"] {
        for rank in 0..2 {
            let t = trace::read_trace(Path::new(&fixture(set, rank))).unwrap();
            assert_eq!(t.metadata.rank, rank);
            assert_eq!(t.metadata.world, 2);
            assert_eq!(merge::collective_ends(&t)[COLLECTIVE].len(), 2 * STEPS);
        }
    }
}

#[test]
fn recovers_a_known_clock_offset_within_1us() {
    let merged = merge::merge(two_hosts().to_vec(), paths(2), None).unwrap();
    assert_eq!(
        merged.clock_alignment,
        ClockAlignment::Collectives,
        "hosts differ: aligned"
    );
    assert!(merged.clock_alignment_reason.contains("node-a, node-b"));
    assert_eq!(merged.reference_rank, 0);
    assert_eq!(merged.ranks[0].clock.offset_ns, 0);
    let clock = &merged.ranks[1].clock;
    assert_eq!(clock.instances, 2 * STEPS);
    assert!(
        (clock.offset_ns + CLOCK_AHEAD_NS).abs() <= 1_000,
        "offset {} ns, expected {} ns",
        clock.offset_ns,
        -CLOCK_AHEAD_NS
    );
    let spread = clock.per_instance.unwrap();
    assert!(spread.min >= (-CLOCK_AHEAD_NS - 150) as f64);
    assert!(spread.max <= (-CLOCK_AHEAD_NS + 150) as f64);
    // On the merged clock the collectives end together.
    let ends: Vec<Vec<u64>> = merged
        .traces
        .iter()
        .map(|t| merge::collective_ends(t)[COLLECTIVE].clone())
        .collect();
    for (a, b) in ends[0].iter().zip(&ends[1]) {
        assert!(a.abs_diff(*b) <= 1_000, "{a} vs {b}");
    }
    // The shift changes no period.
    let period = |r: usize, c: usize| merged.ranks[r].cells[c].period.unwrap().median;
    for c in 0..2 {
        assert!((period(0, c) - period(1, c)).abs() < 300.0);
    }
}

#[test]
fn one_host_is_not_aligned_unless_asked() {
    let merged = merge::merge(one_node().to_vec(), paths(2), None).unwrap();
    assert_eq!(merged.clock_alignment, ClockAlignment::None);
    assert!(merged.ranks.iter().all(|r| r.clock.offset_ns == 0));
    // Forced: offsets are computed (the slow rank's collectives end later on one clock, so
    // they drift, and the spread says so).
    let forced = merge::merge(
        one_node().to_vec(),
        paths(2),
        Some(ClockAlignment::Collectives),
    )
    .unwrap();
    assert_eq!(forced.clock_alignment, ClockAlignment::Collectives);
    assert!(forced.ranks[1].clock.per_instance.unwrap().spread() > 5_000.0);
    assert!(forced.warnings.iter().any(|w| w.contains("varies by")));
    // --clock none across hosts: kept as recorded, with a warning.
    let none = merge::merge(two_hosts().to_vec(), paths(2), Some(ClockAlignment::None)).unwrap();
    assert_eq!(none.ranks[1].clock.offset_ns, 0);
    assert!(none.warnings.iter().any(|w| w.contains("several hosts")));
}

#[test]
fn ranks_are_sorted_and_missing_ranks_noted() {
    let [r0, r1] = one_node();
    let merged = merge::merge(vec![r1, r0], vec!["b.json".into(), "a.json".into()], None).unwrap();
    assert_eq!(merged.ranks[0].rank, 0);
    assert_eq!(merged.ranks[0].path, "a.json");
    assert!(merged.warnings.is_empty(), "{:?}", merged.warnings);
    let [_, r1] = one_node();
    let alone = merge::merge(vec![r1], paths(1), None).unwrap();
    assert_eq!(alone.reference_rank, 1);
    assert!(
        alone
            .warnings
            .iter()
            .any(|w| w.contains("no trace of rank 0"))
    );
    assert!(alone.cells.iter().all(|c| c.slowest_rank.is_none()));
}

#[test]
fn slowest_rank_is_highlighted_in_markdown_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("o");
    let out = gapscope(&[
        "merge",
        &fixture("one-node", 0),
        &fixture("one-node", 1),
        "-o",
        o.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The terminal's lines say it too.
    let screen = String::from_utf8(out.stdout).unwrap();
    assert!(
        screen
            .lines()
            .any(|l| l.trim_start().starts_with("rank 1: ") && l.ends_with("(slowest)")),
        "{screen}"
    );
    let md = std::fs::read_to_string(o.join("report.md")).unwrap();
    let row = |rank: u32| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {rank} | `")))
            .unwrap_or_else(|| panic!("no row for rank {rank}:\n{md}"))
            .to_owned()
    };
    assert_eq!(row(1).matches("slowest**").count(), 2, "{}", row(1));
    assert!(!row(0).contains("slowest"), "{}", row(0));
    assert!(md.contains("Clock alignment: **none**"), "{md}");
    assert!(md.contains("slower beyond the run-to-run spread"), "{md}");

    let out = gapscope(&[
        "merge",
        &fixture("one-node", 1),
        &fixture("one-node", 0),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "merge");
    assert_eq!(v["clock"], "none");
    assert_eq!(v["ranks"][0]["rank"], 0);
    assert_eq!(v["ranks"][1]["cells"][0]["slowest"], true);
    for c in v["cells"].as_array().unwrap() {
        assert_eq!(c["slowest_rank"], 1, "{c}");
        assert_eq!(c["fastest_rank"], 0);
        assert!(c["max_over_min"].as_f64().unwrap() > 1.05);
        assert_eq!(c["change"], "slower");
    }
    let p0 = v["ranks"][0]["cells"][0]["period"]["median"]
        .as_f64()
        .unwrap();
    let p1 = v["ranks"][1]["cells"][0]["period"]["median"]
        .as_f64()
        .unwrap();
    assert!(p1 > p0 + 5_000.0, "{p0} vs {p1}");
}

#[test]
fn cli_reports_the_offset_and_writes_one_perfetto_file() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = gapscope(&[
        "merge",
        &fixtures().join("two-hosts").display().to_string(),
        "-o",
        out_dir.to_str().unwrap(),
        "--json",
        "--perfetto-json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clock"], "collectives");
    let offset = v["ranks"][1]["clock"]["offset_ns"].as_i64().unwrap();
    assert!((offset + CLOCK_AHEAD_NS).abs() <= 1_000, "{offset}");
    assert_eq!(v["ranks"][1]["clock"]["per_instance"]["n"], 2 * STEPS);

    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("−1234."), "{md}");
    assert!(md.contains("| 0 | `") && md.contains("reference"), "{md}");

    let doc: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("trace.perfetto.json")).unwrap())
            .unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let processes: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(processes.len(), 4, "{processes:?}");
    for rank in 0..2 {
        assert_eq!(
            processes
                .iter()
                .filter(|p| p.starts_with(&format!("rank {rank}: ")))
                .count(),
            2,
            "{processes:?}"
        );
    }
    // On the merged timeline, the collectives of both ranks end within 1 µs of each other.
    let pid_rank: std::collections::HashMap<u64, char> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| {
            let name = e["args"]["name"].as_str().unwrap();
            (e["pid"].as_u64().unwrap(), name.chars().nth(5).unwrap())
        })
        .collect();
    let mut ends: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for e in events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == COLLECTIVE)
    {
        let end = e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
        let rank = pid_rank[&e["pid"].as_u64().unwrap()];
        ends[usize::from(rank == '1')].push(end);
    }
    ends[0].sort_by(f64::total_cmp);
    ends[1].sort_by(f64::total_cmp);
    assert_eq!(ends[0].len(), ends[1].len());
    assert!(!ends[0].is_empty());
    for (a, b) in ends[0].iter().zip(&ends[1]) {
        assert!((a - b).abs() <= 1.0, "{a} µs vs {b} µs");
    }
    // By default the merged trace is protobuf, and replaces the JSON of the run before.
    let out = gapscope(&[
        "merge",
        &fixtures().join("two-hosts").display().to_string(),
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let pb = std::fs::read(out_dir.join("trace.perfetto-trace")).unwrap();
    assert!(gapscope::report::perfetto::wire::fields(&pb).all(|f| f.is_ok_and(|(n, _)| n == 1)));
    assert!(!out_dir.join("trace.perfetto.json").exists());
}

#[test]
fn same_rank_twice_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = gapscope(&[
        "merge",
        &fixture("one-node", 0),
        &fixture("two-hosts", 0),
        "-o",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let line = one_error_line(&out);
    assert!(line.contains("both hold rank 0"), "{line}");
    assert!(!out_dir.exists(), "nothing written");
}

#[test]
fn malformed_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(fixture("one-node", 1)).unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &good[..good.len() / 2]).unwrap();
    let out = gapscope(&["merge", &fixture("one-node", 0), cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).contains("cut.json"));
    let out = gapscope(&["merge", dir.path().join("missing.json").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    one_error_line(&out);
}

#[test]
fn aligning_without_collectives_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for rank in 0..2 {
        let mut t = synthetic::emu_experiment(3);
        t.metadata.rank = rank;
        let p = dir.path().join(format!("trace-{rank}.json"));
        trace::write_trace(&p, &t).unwrap();
        files.push(p.display().to_string());
    }
    let out = gapscope(&["merge", &files[0], &files[1], "--clock", "collectives"]);
    assert_eq!(out.status.code(), Some(2));
    let line = one_error_line(&out);
    assert!(line.contains("no collective kernel"), "{line}");
    // Without alignment the same traces merge.
    let out = gapscope(&["merge", &files[0], &files[1]]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// Runs gapscope in `dir` (relative paths in the reports).
fn gapscope_in(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run gapscope");
    assert!(
        out.status.success(),
        "gapscope {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Eight ranks on two hosts (ranks 4–7 on node-b, whose clock is `CLOCK_AHEAD_NS` ahead),
/// each a little slower than the one before, as trace files in `dir/traces/`.
fn eight_ranks(dir: &Path) {
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    for rank in 0..8u32 {
        let node_b = rank >= 4;
        let mut t = rank_trace(
            rank,
            Some(if node_b { "node-b" } else { "node-a" }),
            u64::from(rank) * 400,
            100 + u64::from(rank),
        );
        t.metadata.world = 8;
        if node_b {
            t = merge::shift_trace(&t, CLOCK_AHEAD_NS);
        }
        let path = dir.join(format!("traces/trace-{rank}.json"));
        trace::write_trace(&path, &t).unwrap();
    }
}

#[test]
fn merge_of_rank_summaries_gives_the_report_of_merge_of_the_traces() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    eight_ranks(dir);
    std::fs::create_dir_all(dir.join("summaries")).unwrap();
    for rank in 0..8 {
        let trace = format!("traces/trace-{rank}.json");
        let summary = format!("summaries/rank-{rank}.json");
        let out = gapscope_in(dir, &["analyze", &trace, "--summary", &summary]);
        assert!(String::from_utf8_lossy(&out.stderr).contains(&summary));
    }
    let from_traces = gapscope_in(dir, &["merge", "traces", "-o", "from-traces", "--json"]);
    let from_summaries = gapscope_in(
        dir,
        &["merge", "summaries", "-o", "from-summaries", "--json"],
    );
    let json: Value = serde_json::from_slice(&from_traces.stdout).unwrap();
    // The case is not trivial: eight ranks, aligned on collectives, a slowest rank found.
    assert_eq!(json["ranks"].as_array().unwrap().len(), 8);
    assert_eq!(json["clock"], "collectives");
    assert!(json["ranks"][5]["clock"]["offset_ns"].as_i64().unwrap() < -1_000_000);
    assert!(json["cells"][0]["slowest_rank"].as_u64().is_some());
    assert_eq!(
        String::from_utf8_lossy(&from_summaries.stdout),
        String::from_utf8_lossy(&from_traces.stdout),
        "the JSON reports differ"
    );
    let read = |set: &str, name: &str| std::fs::read_to_string(dir.join(set).join(name));
    assert_eq!(
        read("from-summaries", "report.md").unwrap(),
        read("from-traces", "report.md").unwrap()
    );
    let perfetto = |set: &str| dir.join(set).join("trace.perfetto-trace").exists();
    assert!(perfetto("from-traces"));
    assert!(
        !perfetto("from-summaries"),
        "summaries hold no timelines: no Perfetto trace"
    );
    assert!(String::from_utf8_lossy(&from_summaries.stderr).contains("no trace.perfetto-trace"));
    // Traces and summaries mix: the report is the same again.
    std::fs::rename(
        dir.join("traces/trace-3.json"),
        dir.join("summaries/trace-3.json"),
    )
    .unwrap();
    std::fs::remove_file(dir.join("summaries/rank-3.json")).unwrap();
    let mixed = gapscope_in(dir, &["merge", "summaries", "--json"]);
    let mixed: Value = serde_json::from_slice(&mixed.stdout).unwrap();
    assert_eq!(mixed["ranks"][3]["path"], "summaries/trace-3.json");
    assert_eq!(mixed["cells"], json["cells"]);
}

#[test]
fn summary_takes_one_trace_and_a_bad_summary_exits_2_with_one_line() {
    let out = gapscope(&[
        "analyze",
        &fixture("one-node", 0),
        &fixture("one-node", 1),
        "--summary",
        "/nonexistent/s.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&out).contains("--summary summarises one rank"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("rank-0.json");
    std::fs::write(&bad, r#"{"gapscope_summary_version":1,"rank":"x"}"#).unwrap();
    let out = gapscope(&["merge", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let line = one_error_line(&out);
    assert!(line.contains("not a usable gapscope summary"), "{line}");
}

/// A Kineto rank of 100k kernels in 100 steps (1,000 kernels each): its summary is at most
/// 1 % of the trace. (benches/scale.sh checks the same on 1 M kernels.)
#[test]
fn summary_of_a_generated_rank_is_at_most_1_percent_of_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("rank-0.json");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&trace).unwrap());
    trace::synthetic::kineto::write_kineto(&mut w, 100_000, 100, "rank-0").unwrap();
    drop(w);
    let summary = dir.path().join("summary.json");
    gapscope_in(
        dir.path(),
        &["analyze", "rank-0.json", "--summary", "summary.json"],
    );
    let (t, s) = (
        std::fs::metadata(&trace).unwrap().len(),
        std::fs::metadata(&summary).unwrap().len(),
    );
    assert!(s * 100 <= t, "summary {s} bytes, trace {t} bytes");
    let parsed: Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(parsed["cells"][0]["ops"].as_array().unwrap().len(), 1000);
}

/// `merge` prints plain lines of the summary's width (120 columns) on the terminal, for every
/// bundled folder of rank traces: the Markdown tables, rows up to ~220 characters, are for
/// report.md only.
#[test]
fn merge_prints_plain_lines_of_the_screens_width() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let mut folders = Vec::new();
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
        if d.join("trace-0.json").exists() || d.join("trace-0.json.gz").exists() {
            folders.push(d);
        }
    }
    assert!(folders.len() >= 2, "{folders:?}");
    for folder in &folders {
        let out = gapscope(&["merge", folder.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{folder:?}: {out:?}");
        let screen = String::from_utf8(out.stdout).unwrap();
        assert!(screen.contains("rank 1: "), "{screen}");
        for line in screen.lines() {
            assert!(line.chars().count() <= 120, "{folder:?}: {line}");
            assert!(
                !line.starts_with('|') && !line.starts_with('#'),
                "{folder:?}: {line}"
            );
        }
    }
}
