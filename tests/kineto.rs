//! torch.profiler (Kineto) import: hand-made fixtures in the key layout torch 2.x writes,
//! import → analysis, malformed inputs (one error line each, never a panic), the CLI.

use gapscope::analysis::{self, AnalysisOptions, Regime};
use gapscope::trace::{ApiDomain, MarkerKind, Source, Trace};
use gapscope::trace::{ImportError, import_kineto, looks_like_kineto};
use proptest::prelude::*;
use std::path::Path;

const MIXED: &str = "tests/fixtures/kineto/eager_and_graphed.pt.trace.json";
const NO_MARKERS: &str = "tests/fixtures/kineto/graphed_no_markers.json";

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

fn import(bytes: &[u8]) -> Result<Trace, ImportError> {
    import_kineto(bytes, Path::new("t.pt.trace.json"))
}

fn analyze(trace: &Trace) -> analysis::Analysis {
    analysis::analyze(
        std::slice::from_ref(trace),
        &["t.pt.trace.json".to_owned()],
        &AnalysisOptions::default(),
    )
}

/// Runs a command that must succeed; its stdout.
fn succeeds(cmd: &mut std::process::Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The message of an import that must fail: one line naming the file.
fn error_of(bytes: &[u8]) -> String {
    let e = import(bytes).expect_err("the import must fail");
    let line = e.to_string();
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.starts_with("t.pt.trace.json: "),
        "names the file: {line}"
    );
    line
}

#[test]
fn imports_records_metadata_and_time_base() {
    let t = import(&fixture(MIXED)).unwrap();
    assert_eq!(t.metadata.source, Source::Kineto);
    let device = t.metadata.device.as_ref().unwrap();
    assert_eq!(
        (device.name.as_str(), device.compute_capability.as_str()),
        ("NVIDIA H200", "9.0")
    );
    assert_eq!(t.metadata.versions.cuda_runtime.as_deref(), Some("12.4"));
    assert!(t.metadata.notes.iter().any(|n| n.contains("no graph DAG")));
    // 3 eager steps × 3 kernels + 3 replays × (fill + 3 kernels).
    assert_eq!(t.kernels.len(), 21);
    assert_eq!((t.memcpys.len(), t.memsets.len()), (1, 1));
    assert_eq!(t.str(t.memcpys[0].kind), "HtoD");
    assert_eq!(t.memcpys[0].bytes, 4096);
    assert_eq!(t.str(t.memsets[0].kind), "memset");
    // Launches, graph launches, memcpy/memset calls and one sync per step.
    assert_eq!(t.api_calls.len(), 9 + 3 + 2 + 6);
    assert!(t.api_calls.iter().all(|a| a.domain == ApiDomain::Runtime));
    assert!(t.api_calls.iter().all(|a| a.thread == 4242));
    let steps = t
        .markers
        .iter()
        .filter(|m| m.kind == MarkerKind::Step)
        .count();
    assert_eq!(
        steps, 6,
        "ProfilerStep#N user annotations; the GPU copies are skipped"
    );
    assert_eq!(
        t.markers.len(),
        6 + 3,
        "plus the `forward` ranges; cpu_op skipped"
    );
    // µs with fractional ns → ns (baseTimeNanoseconds is not added).
    let first = &t.kernels[0];
    assert_eq!(first.start, 1_008_579);
    assert_eq!(first.end, 1_018_579);
    assert_eq!(
        t.str(first.name),
        "void gemv_kernel<float, 128>(float const*, float const*, float*, int)"
    );
    assert_eq!((first.stream, first.corr, first.graph), (7, 100, 0));
    let graphed: Vec<_> = t.kernels.iter().filter(|k| k.graph == 1).collect();
    assert_eq!(graphed.len(), 12);
    assert_eq!(graphed[1].node, (1 << 32) | 1);
    // Names are interned once.
    let names = t
        .strings
        .iter()
        .filter(|s| s.starts_with("void gemv"))
        .count();
    assert_eq!(names, 1);
    t.validate().unwrap();
}

#[test]
fn eager_and_graphed_steps_analyse_into_paired_cells_with_gaps() {
    let t = import(&fixture(MIXED)).unwrap();
    assert_eq!(t.metadata.cells.len(), 2);
    let a = analyze(&t);
    assert_eq!(a.cells.len(), 2);
    let eager = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Eager))
        .expect("an eager cell");
    let graphed = a
        .cells
        .iter()
        .find(|c| c.observed.regime == Some(Regime::Graphed))
        .expect("a graphed cell");
    assert_eq!(eager.steps.len(), 3);
    assert_eq!(graphed.steps.len(), 3);
    assert!(eager.mismatches.is_empty(), "{:?}", eager.mismatches);
    assert!(graphed.mismatches.is_empty(), "{:?}", graphed.mismatches);
    for step in eager.steps.iter().chain(&graphed.steps) {
        assert!(!step.gaps.is_empty(), "every step has idle gaps");
        assert_eq!(step.busy + step.idle, step.end - step.window_start);
        let gaps: u64 = step.gaps.iter().map(|g| g.end - g.start).sum();
        assert_eq!(gaps, step.idle);
    }
    // Eager steps: the 3 kernels (+ memcpy, memset in the first); replays: fill + 3 kernels.
    assert_eq!(eager.steps[1].ops.len(), 3);
    assert_eq!(graphed.steps[1].ops.len(), 4);
    // Steady graphed step: 1 µs between the replay's kernels (the GPU gaps).
    let inner: Vec<u64> = graphed.steps[2]
        .gaps
        .iter()
        .map(|g| g.end - g.start)
        .filter(|&d| d < 10_000)
        .collect();
    assert_eq!(inner, vec![1000, 1000, 1000]);
    // One trace with both regimes: the analysis pairs them (fill kernel tolerated).
    assert_eq!(a.regime_pairs.len(), 1);
}

#[test]
fn without_step_markers_each_graph_replay_is_a_step() {
    let t = import(&fixture(NO_MARKERS)).unwrap();
    assert!(t.markers.is_empty());
    assert_eq!(t.kernels.len(), 12);
    assert_eq!(t.metadata.device, None);
    let a = analyze(&t);
    assert_eq!(a.cells.len(), 1);
    assert_eq!(a.cells[0].observed.regime, Some(Regime::Graphed));
    assert_eq!(a.cells[0].steps.len(), 3);
    assert_eq!(t.kernels[0].start, 1_312_123);
}

#[test]
fn graph_launches_without_graph_ids_are_replays() {
    // torch 2.x on CUDA 13 writes no "graph id": the kernels of a cudaGraphLaunch are still a
    // replay (joined by correlation id).
    let good = String::from_utf8(fixture(MIXED)).unwrap();
    let no_ids = good
        .replace("\"graph id\": 1,", "")
        .replace("\"graph node id\"", "\"node\"");
    let t = import(no_ids.as_bytes()).unwrap();
    let graphed: Vec<_> = t.kernels.iter().filter(|k| k.graph != 0).collect();
    assert_eq!(graphed.len(), 12);
    assert!(
        graphed
            .iter()
            .all(|k| k.graph == gapscope::trace::kineto::UNNAMED_GRAPH)
    );
    let a = analyze(&t);
    assert_eq!(a.cells.len(), 2);
    assert_eq!(a.regime_pairs.len(), 1);
}

#[test]
fn accepts_variants_torch_writes() {
    // String tids, older capitalised categories, graph ids with underscores, integer times,
    // unknown keys and phases.
    let doc = r#"{"traceEvents":[
      {"ph":"X","cat":"Kernel","name":"k","pid":0,"tid":"stream 7","ts":10,"dur":2,
       "args":{"device":0,"stream":7,"correlation":5,"graph_id":3,"graph_node_id":12,"grid":[1,1,1]}},
      {"ph":"X","cat":"Runtime","name":"cudaGraphLaunch","pid":1,"tid":"main thread","ts":8,"dur":1.5,
       "args":{"correlation":5,"cbid":311}},
      {"ph":"X","cat":"cuda_driver","name":"cuLaunchKernel","pid":1,"tid":-3,"ts":8.5,"dur":0.25,
       "args":{"correlation":6}},
      {"ph":"C","name":"counter","pid":1,"ts":9,"args":{"v":1}},
      {"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":20}
    ]}"#;
    let t = import(doc.as_bytes()).unwrap();
    assert_eq!(t.kernels.len(), 1);
    assert_eq!((t.kernels[0].graph, t.kernels[0].node), (3, 12));
    assert_eq!((t.kernels[0].start, t.kernels[0].end), (10_000, 12_000));
    assert_eq!(t.api_calls.len(), 2);
    assert_eq!(t.api_calls[0].end, 9_500);
    assert_eq!(t.api_calls[1].domain, ApiDomain::Driver);
    assert_ne!(t.api_calls[0].thread, 0);
    assert_eq!(analyze(&t).cells[0].steps.len(), 1);
}

#[test]
fn malformed_inputs_give_one_error_line() {
    let good = String::from_utf8(fixture(MIXED)).unwrap();
    // Cut short anywhere.
    for cut in [0, 1, 10, good.len() / 3, good.len() / 2, good.len() - 3] {
        let line = error_of(&good.as_bytes()[..cut]);
        assert!(
            line.contains("ends early") || line.contains("EOF"),
            "cut at {cut}: {line}"
        );
    }
    let cases: Vec<(String, &str)> = vec![
        // Wrong types.
        (
            good.replacen("\"ts\": 1008.579", "\"ts\": \"1008.579\"", 1),
            "\"ts\"",
        ),
        (
            good.replacen("\"dur\": 10.0", "\"dur\": -10.0", 1),
            "\"dur\"",
        ),
        (
            good.replacen("\"cat\": \"kernel\"", "\"cat\": 7", 1),
            "\"cat\"",
        ),
        (
            good.replacen(
                "\"name\": \"void gemv",
                "\"name\": [\"void gemv\"], \"x\": \"",
                1,
            ),
            "\"name\"",
        ),
        (
            good.replacen("\"traceEvents\": [", "\"traceEvents\": {\"a\": [", 1),
            "\"traceEvents\"",
        ),
        (
            good.replacen("\"traceEvents\": [\n  {", "\"traceEvents\": [\n  7, {", 1),
            "event object",
        ),
        // Missing fields.
        (good.replacen("\"ts\": 1008.579,", "", 1), "without \"ts\""),
        (good.replacen("\"dur\": 10.0,", "", 1), "without \"dur\""),
        (
            good.replacen("\"correlation\": 100", "\"correlation\": \"c\"", 1),
            "correlation",
        ),
        (good.replacen("\"stream\": 7,", "", 1), "stream"),
        (
            good.replacen("\"traceEvents\"", "\"events\"", 1),
            "no \"traceEvents\"",
        ),
        // Out of range.
        (
            good.replacen("\"ts\": 1008.579", "\"ts\": 1e300", 1),
            "\"ts\"",
        ),
        (
            good.replacen("\"correlation\": 100", "\"correlation\": 99999999999", 1),
            "32 bits",
        ),
        // Not a Kineto trace at all.
        ("[1, 2, 3]".to_owned(), "traceEvents"),
        ("not json".to_owned(), "expected"),
        ("{\"traceEvents\": []}".to_owned(), "no GPU activity"),
        (format!("{good} trailing"), "trailing"),
    ];
    for (doc, expect) in cases {
        let line = error_of(doc.as_bytes());
        assert!(line.contains(expect), "expected {expect:?} in: {line}");
    }
    // Errors inside traceEvents name the event.
    let line = error_of(good.replacen("\"ts\": 1008.579,", "", 1).as_bytes());
    assert!(line.contains("traceEvents["), "{line}");
    // gzip: said so.
    let line = error_of(&[0x1f, 0x8b, 8, 0, 0, 0]);
    assert!(line.contains("gzip"), "{line}");
}

/// Hands out its bytes a few at a time: every state of the streaming split crosses a read.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn split_reads_escapes_and_the_unsplit_path_give_the_same_trace() {
    let good = String::from_utf8(fixture(MIXED)).unwrap();
    // Names with escaped quotes and backslashes, and brackets and commas inside strings.
    let tricky = good.replace(
        "route_topk_kernel",
        r#"route \"topk\" [a, b] {c}, \\ \u00e9"#,
    );
    let whole = import(tricky.as_bytes()).unwrap();
    assert!(
        whole
            .strings
            .iter()
            .any(|s| s == "route \"topk\" [a, b] {c}, \\ é")
    );
    for step in [1, 2, 3, 7, 64, 4099] {
        let t = import_kineto(
            Trickle {
                bytes: tricky.as_bytes(),
                step,
            },
            Path::new("t.json"),
        )
        .unwrap();
        assert_eq!(t, whole, "reads of {step} bytes");
    }
    // An escaped key is not split off: serde reads the array whole; same records.
    let escaped = tricky.replacen("\"traceEvents\"", r#""trace\u0045vents""#, 1);
    assert_eq!(import(escaped.as_bytes()).unwrap(), whole);
}

#[test]
fn stray_commas_and_empty_arrays() {
    let k = r#"{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"stream":7,"correlation":1}}"#;
    for doc in [
        format!(r#"{{"traceEvents":[,{k}]}}"#),
        format!(r#"{{"traceEvents":[{k},]}}"#),
        format!(r#"{{"traceEvents":[{k},,{k}]}}"#),
    ] {
        let line = error_of(doc.as_bytes());
        assert!(line.contains("stray comma"), "{line}");
    }
    let ok = format!(r#"{{"traceEvents":[ {k} , {k} ], "x": [[], {{}}]}}"#);
    assert_eq!(import(ok.as_bytes()).unwrap().kernels.len(), 2);
    let line = error_of(br#"{"traceEvents":[ ]}"#);
    assert!(line.contains("no GPU activity"), "{line}");
}

#[test]
fn sniffing_tells_kineto_from_gapscope_traces() {
    assert!(looks_like_kineto(&fixture(MIXED)[..4096]));
    assert!(looks_like_kineto(&fixture(NO_MARKERS)));
    let ours = serde_json::to_vec(&gapscope::trace::synthetic::emu_experiment(2)).unwrap();
    assert!(!looks_like_kineto(&ours));
}

#[test]
fn cli_analyses_kineto_files_and_exits_2_on_bad_ones() {
    let bin = env!("CARGO_BIN_EXE_gapscope");
    let dir = tempfile::tempdir().unwrap();
    let stdout = succeeds(
        std::process::Command::new(bin)
            .args(["analyze", MIXED, "--json"])
            .current_dir(env!("CARGO_MANIFEST_DIR")),
    );
    let report: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert!(report.is_object());

    let bad = dir.path().join("cut.pt.trace.json");
    std::fs::write(&bad, &fixture(MIXED)[..5000]).unwrap();
    let out = std::process::Command::new(bin)
        .args(["analyze", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cut.pt.trace.json"), "{stderr}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Fixture bytes flipped, cut short or spliced: an error or a trace that analyses.
    #[test]
    fn mutated_fixtures_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        which in any::<bool>(),
    ) {
        let mut bytes = fixture(if which { MIXED } else { NO_MARKERS });
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = if byte % 2 == 0 {
                b"0123456789-,:{}[]\"e."[usize::from(byte) % 20]
            } else {
                byte
            };
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let trickled = import_kineto(Trickle { bytes: &bytes, step: 1 + cut.index(97) }, Path::new("t.json"));
        match import(&bytes) {
            Ok(t) => {
                prop_assert_eq!(trickled.as_ref().ok(), Some(&t));
                t.validate().unwrap();
                let _ = analyze(&t);
            }
            Err(e) => {
                prop_assert!(!e.to_string().contains('\n'));
                prop_assert!(trickled.is_err());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = import(&bytes);
    }
}

/// A generated trace with names that force escapes, names seen first late in the file, and
/// `args` holding arrays of objects (`},{` inside an event: a wrong guess of where a thread
/// may start).
fn varied_trace(kernels: u64) -> String {
    let mut bytes = Vec::new();
    gapscope::trace::synthetic::kineto::write_kineto(&mut bytes, kernels, 17, "varied").unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i % 97 == 0 && line.contains("\"cat\":\"kernel\"") {
            out.push_str(&line.replacen(
                "\"name\":\"",
                &format!("\"name\":\"late \\\"{i}\\\" é\\u00e9 "),
                1,
            ));
        } else if i % 89 == 0 && line.contains("\"cat\":\"cuda_runtime\"") {
            out.push_str(&line.replacen(
                "\"args\":{",
                "\"args\":{\"x\":[{\"a\":1},\n {\"b\":[{}, {}]}],",
                1,
            ));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// `doc` imported by one thread, the reference the split imports are compared with.
fn import_on_one_thread(doc: &str, path: &Path) -> gapscope::trace::Trace {
    use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
    let opts = ImportOptions {
        threads: 1,
        ..ImportOptions::default()
    };
    import_kineto_with(doc.as_bytes(), path, &opts).unwrap()
}

#[test]
fn any_split_of_the_work_gives_the_same_trace() {
    use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
    let doc = varied_trace(6_000);
    let path = Path::new("t.json");
    let one = import_on_one_thread(&doc, path);
    assert_eq!(one.kernels.len(), 6_000);
    assert!(one.strings.iter().any(|s| s.starts_with("late \"")));
    // 64-byte blocks are shorter than any event: each is read on and parsed again.
    for (threads, block_bytes) in [
        (1, 64),
        (2, 64),
        (2, 1 << 12),
        (2, 1 << 16),
        (3, 1 << 20),
        (7, 99_999),
        (8, 8 << 20),
    ] {
        let opts = ImportOptions {
            threads,
            block_bytes,
            parallel_min_bytes: 0,
        };
        let split = import_kineto_with(doc.as_bytes(), path, &opts).unwrap();
        assert!(split == one, "{threads} threads, {block_bytes}-byte blocks");
    }
    // An error far into the file: the same message (same event index, same offset) either way.
    let at = doc.match_indices("\"dur\":").nth(4_000).unwrap().0;
    let broken = format!("{}\"dur\":-{}", &doc[..at], &doc[at + 6..]);
    let message = |opts: &ImportOptions| {
        import_kineto_with(broken.as_bytes(), path, opts)
            .unwrap_err()
            .to_string()
    };
    let sequential = message(&ImportOptions {
        threads: 1,
        ..ImportOptions::default()
    });
    assert!(sequential.contains("\"dur\""), "{sequential}");
    for threads in [2, 5] {
        let parallel = message(&ImportOptions {
            threads,
            block_bytes: 1 << 16,
            parallel_min_bytes: 0,
        });
        assert_eq!(parallel, sequential);
    }
}

/// The next block is read while the threads parse one, and put after the unfinished tail
/// of that one: also when that tail is longer than the room kept for it (an event of 400 KB
/// 700 KB into a 1 MiB block) and when the next block holds the end of the array.
#[test]
fn reading_ahead_while_parsing_gives_the_same_trace() {
    use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
    let doc = varied_trace(3_000);
    let long_name = "k".repeat(400_000);
    let kernel = "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"";
    let cut = 700_000 + doc[700_000..].find(kernel).unwrap();
    let head = kernel.len();
    let doc = format!("{}{long_name}{}", &doc[..cut + head], &doc[cut + head..]);
    let path = Path::new("t.json");
    let one = import_on_one_thread(&doc, path);
    assert!(one.strings.iter().any(|s| s.starts_with("kkkkkkkk")));
    for block_bytes in [1 << 17, 300_000, 1 << 20] {
        let opts = ImportOptions {
            threads: 2,
            block_bytes,
            parallel_min_bytes: 0,
        };
        let split = import_kineto_with(doc.as_bytes(), path, &opts).unwrap();
        assert!(split == one, "{block_bytes}-byte blocks");
    }
}

#[test]
fn the_cli_report_is_the_same_on_one_thread_and_on_several() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rank-0.json");
    std::fs::write(&file, varied_trace(20_000)).unwrap();
    let report = |threads: &str| {
        succeeds(
            std::process::Command::new(env!("CARGO_BIN_EXE_gapscope"))
                .args(["analyze", file.to_str().unwrap(), "--json"])
                .env("GAPSCOPE_THREADS", threads),
        )
    };
    let one = report("1");
    assert!(one.len() > 1000);
    for threads in ["2", "3", "8"] {
        assert!(report(threads) == one, "{threads} threads");
    }
}

#[test]
fn gzip_files_are_read_as_they_stream() {
    use std::io::Write;
    let plain = fixture(MIXED);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    assert!(looks_like_kineto(&gz));
    assert_eq!(import(&gz).unwrap(), import(&plain).unwrap());
    // Cut short, damaged, or compressed twice: one line that says so.
    for bad in [&gz[..gz.len() / 2], &gz[..12]] {
        let line = error_of(bad);
        assert!(line.contains("gzip"), "{line}");
    }
    let mut damaged = gz.clone();
    damaged[20..40].fill(0xff);
    assert!(error_of(&damaged).contains("gzip"));
    let mut twice = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    twice.write_all(&gz).unwrap();
    assert!(error_of(&twice.finish().unwrap()).contains("twice"));
    // The CLI reads a .json.gz file, and finds one in a folder.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rank-0.pt.trace.json.gz");
    std::fs::write(&file, &gz).unwrap();
    let analyze = |target: &Path| {
        succeeds(
            std::process::Command::new(env!("CARGO_BIN_EXE_gapscope")).args([
                "analyze",
                target.to_str().unwrap(),
                "--json",
            ]),
        )
    };
    let from_file: serde_json::Value = serde_json::from_slice(&analyze(&file)).unwrap();
    assert_eq!(from_file["cells"].as_array().unwrap().len(), 2);
    let from_dir: serde_json::Value = serde_json::from_slice(&analyze(dir.path())).unwrap();
    assert_eq!(from_dir["cells"], from_file["cells"]);
}

/// An event the import does not use, longer than a block, is stepped over as it is read:
/// strings with escaped quotes and brackets inside them, nested arrays and objects. The trace
/// is the one read with blocks larger than the whole file; a bracket out of place in such an
/// event is still an error.
#[test]
fn long_unused_events_are_stepped_over_as_they_are_read() {
    use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
    let filler = "a\\\"]}[{ ".repeat(2_000);
    let ignored = format!(
        r#"{{"ph": "s", "cat": "ac2g", "name": "{filler}", "args": {{"x": [1, {{"y": ["{filler}"]}}], "z": "}}"}}}}"#
    );
    let kernel = r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {"device": 0, "stream": 7, "correlation": 1}}"#;
    let doc = format!(r#"{{"traceEvents": [{ignored}, {kernel}, {ignored}]}}"#);
    let path = Path::new("long.json");
    let read = |block_bytes: usize| {
        import_kineto_with(
            doc.as_bytes(),
            path,
            &ImportOptions {
                block_bytes,
                threads: 1,
                parallel_min_bytes: usize::MAX,
            },
        )
    };
    let whole = read(1 << 24).unwrap();
    assert_eq!(whole.kernels.len(), 1);
    for block in [16, 64, 1000, 4096] {
        assert!(read(block).unwrap() == whole, "{block}-byte blocks");
    }
    let broken = doc.replacen(r#""z": "}""#, r#""z": ]"#, 1);
    let err = import_kineto_with(
        broken.as_bytes(),
        path,
        &ImportOptions {
            block_bytes: 64,
            threads: 1,
            parallel_min_bytes: usize::MAX,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("mismatched bracket"), "{err}");
}

/// The generator's two layouts hold the same events: torch's own (over several lines, with
/// `blocks per SM` and `warps per SM`) imports to the trace the compact one does, record for
/// record.
#[test]
fn the_generators_torch_layout_imports_as_its_compact_one() {
    use gapscope::trace::synthetic::kineto::{Layout, write_kineto_as};
    let write = |layout| {
        let mut bytes = Vec::new();
        write_kineto_as(&mut bytes, 3_000, 7, "layouts", layout).unwrap();
        String::from_utf8(bytes).unwrap()
    };
    let (compact, torch) = (write(Layout::Compact), write(Layout::Torch));
    assert!(
        torch.len() > compact.len() * 4 / 3,
        "torch's layout is the longer"
    );
    assert!(torch.contains("\"cat\": \"kernel\"") && torch.contains("\"blocks per SM\": "));
    let path = Path::new("t.json");
    let (a, b) = (
        import_on_one_thread(&compact, path),
        import_on_one_thread(&torch, path),
    );
    assert_eq!(a.kernels.len(), 3_000);
    assert_eq!(a.strings, b.strings);
    assert_eq!(a.kernels, b.kernels);
    assert_eq!(a.api_calls, b.api_calls);
    assert_eq!(a.markers, b.markers);
}
