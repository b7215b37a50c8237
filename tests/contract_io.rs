//! The CLI's input and commit contract (issue 27): an output set is committed whole or not at
//! all even under signals; temporaries of killed runs are removed; input is bounded however it
//! is wrapped (gzip, a pipe, a plain file); pipes are read once; special outputs are written in
//! place; names are capped in outputs.

mod common;
use common::{bin, fails_in_one_line, gapscope, stderr, temporaries, write};
use gapscope::trace;
use gapscope::trace::synthetic;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SET: [&str; 4] = [
    "report.md",
    "report.json",
    "trace.perfetto-trace",
    "step.svg",
];

/// What identifies one file of a set cheaply: its size and its first and last KiB.
type Print = Option<(u64, Vec<u8>, Vec<u8>)>;

fn print(path: &Path) -> Print {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = vec![0; len.min(1024) as usize];
    f.read_exact(&mut head).ok()?;
    f.seek(SeekFrom::Start(len.saturating_sub(1024))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    Some((len, head, tail))
}

fn prints(dir: &Path) -> Vec<Print> {
    SET.iter().map(|f| print(&dir.join(f))).collect()
}

fn copy_set(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for f in SET {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

// Row 1: SIGINT/SIGTERM while `analyze -o DIR` commits over an older set leaves the old set or
// the new one, never a mix. The run is watched: once the last file of the new set is being
// written (its temporary appears), the signal follows after a delay that differs from round to
// round (0 to 3 ms), so the signals fall before, during and after the renames. The signal is
// sent by a shell started beforehand, so it leaves within a fraction of a millisecond.
#[cfg(unix)]
#[test]
fn a_signal_during_the_commit_leaves_the_old_set_or_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut old_trace = synthetic::emu_experiment(700);
    // Other durations, so that every file of the old set differs from the new one's.
    for k in &mut old_trace.kernels {
        k.end += 100;
    }
    let old_input = write(dir.path(), "old.json", &old_trace);
    let new_input = write(dir.path(), "new.json", &synthetic::emu_experiment(800));
    let analyze_into = |input: &str, out: &Path| {
        bin()
            .args(["analyze", input, "-o", out.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let old_set = dir.path().join("old-set");
    let new_set = dir.path().join("new-set");
    assert!(analyze_into(&old_input, &old_set).wait().unwrap().success());
    assert!(analyze_into(&new_input, &new_set).wait().unwrap().success());
    let (old, new) = (prints(&old_set), prints(&new_set));
    for (name, (o, n)) in SET.iter().zip(old.iter().zip(&new)) {
        assert!(o.is_some() && o != n, "{name} is the same in both sets");
    }
    let out = dir.path().join("out");
    let mut outcomes = [0; 2];
    for round in 0..24 {
        copy_set(&old_set, &out);
        let signal = if round % 2 == 0 { "TERM" } else { "INT" };
        let delay = Duration::from_micros((round * 7919 % 25) as u64 * 125);
        let mut child = analyze_into(&new_input, &out);
        let mut killer = Command::new("sh")
            .args(["-c", &format!("read go; kill -{signal} {}", child.id())])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        // The fourth temporary is step.svg's, the last file before the commit.
        let watch = Instant::now();
        while temporaries(&out).len() < SET.len()
            && child.try_wait().unwrap().is_none()
            && watch.elapsed() < Duration::from_secs(60)
        {
            std::hint::spin_loop();
        }
        std::thread::sleep(delay);
        let _ = writeln!(killer.stdin.take().unwrap(), "go");
        let status = child.wait().unwrap();
        let _ = killer.wait();
        assert!(
            matches!(status.code(), Some(0 | 130 | 143)),
            "SIG{signal} after {delay:?}: {status:?}"
        );
        let now = prints(&out);
        let files: Vec<&str> = SET
            .iter()
            .zip(now.iter().zip(old.iter().zip(&new)))
            .map(|(name, (now, (o, n)))| match () {
                _ if now == o => "old",
                _ if now == n => "new",
                _ => name,
            })
            .collect();
        let wholly = |which: &str| files.iter().all(|f| *f == which);
        assert!(
            wholly("old") || wholly("new"),
            "SIG{signal} {delay:?} after the last file began (exit {:?}) split the set: {files:?}",
            status.code()
        );
        assert!(
            temporaries(&out).is_empty(),
            "SIG{signal}: temporaries left"
        );
        outcomes[usize::from(wholly("new"))] += 1;
    }
    // Both outcomes were seen: the signals fell on both sides of the commit.
    println!(
        "old set kept {} times, new set {} times",
        outcomes[0], outcomes[1]
    );
}

// Temporaries of a run killed by SIGKILL (no handler runs) are removed by the next run writing
// into that folder; those of live processes are kept.
#[cfg(target_os = "linux")]
#[test]
fn temporaries_of_killed_runs_are_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let big = write(dir.path(), "big.json", &synthetic::emu_experiment(800));
    let small = write(dir.path(), "small.json", &synthetic::emu_experiment(5));
    let out = dir.path().join("out");
    let mut child = bin()
        .args(["analyze", &big, "-o", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watch = Instant::now();
    while temporaries(&out).len() < 3 && watch.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = temporaries(&out);
    assert!(
        !left.is_empty(),
        "SIGKILL came too late to leave temporaries"
    );
    assert!(
        left.iter()
            .all(|n| n.contains(&format!("-{}-", child.id()))),
        "{left:?}"
    );
    // One of a live process (this test's) stays.
    let live = out.join(format!(".gapscope-{}-0.tmp", std::process::id()));
    std::fs::write(&live, "being written").unwrap();
    let next = gapscope(&["analyze", &small, "-o", out.to_str().unwrap()]);
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert_eq!(
        temporaries(&out),
        [live.file_name().unwrap().to_str().unwrap()]
    );
    // `export` into that folder removes them too.
    std::fs::remove_file(&live).unwrap();
    let dead = out.join(format!(".gapscope-{}-3.tmp", child.id()));
    std::fs::write(&dead, "left by a killed run").unwrap();
    let export = out.join("r.json");
    let next = gapscope(&[
        "export",
        &small,
        "--format",
        "json",
        "-o",
        export.to_str().unwrap(),
    ]);
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert!(temporaries(&out).is_empty(), "{:?}", temporaries(&out));
}

/// `gapscope ARGS` reading `/dev/stdin` from a pipe fed with `chunks` (until gapscope stops
/// reading).
fn through_a_pipe(args: &[&str], chunks: impl Iterator<Item = Vec<u8>> + Send + 'static) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for chunk in chunks {
            if stdin.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// `head`, then `n` MiB of `fill`, then `tail`, as pieces.
fn mib_of(
    head: &[u8],
    fill: u8,
    n: usize,
    tail: &[u8],
) -> impl Iterator<Item = Vec<u8>> + Send + 'static {
    let (head, tail) = (head.to_vec(), tail.to_vec());
    std::iter::once(head)
        .chain((0..n).map(move |_| vec![fill; 1 << 20]))
        .chain(std::iter::once(tail))
}

/// gzip data of `head`, `members` × 1 MiB of `fill`: one member each (compressed once).
fn gzip_bomb(head: &[u8], fill: &[u8], members: usize) -> Vec<u8> {
    let gz = |bytes: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    };
    let mib: Vec<u8> = fill.iter().copied().cycle().take(1 << 20).collect();
    let one = gz(&mib);
    let mut out = gz(head);
    for _ in 0..members {
        out.extend_from_slice(&one);
    }
    out
}

// Rows 2 and 3: input that starts like a trace but is zeros, spaces or one huge string is
// refused early, in one line naming the limit, whether gzip-compressed, piped or a plain
// (sparse) file; the Kineto shape is refused for what it is, not as a gapscope trace.
#[test]
fn gzip_bombs_are_refused_early_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // (file, its first bytes, the MiB repeated, how many, what the error says)
    type Bomb = (
        &'static str,
        &'static [u8],
        &'static [u8],
        usize,
        &'static str,
    );
    let cases: [Bomb; 4] = [
        ("zeros.json.gz", b"", b"\0", 4096, "NUL byte at byte 0"),
        (
            "brace-zeros.json.gz",
            b"{",
            b"\0",
            1024,
            "NUL byte at byte 1",
        ),
        (
            "spaces.json.gz",
            b"{\"schema_version\":1,",
            b" ",
            1024,
            "limit of 128.0 MiB",
        ),
        (
            "records.json.gz",
            b"{\"schema_version\":1,\"kernels\":[",
            b"[1,2],",
            1024,
            "250 times",
        ),
    ];
    for (name, head, fill, members, says) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, gzip_bomb(head, fill, members)).unwrap();
        let t0 = Instant::now();
        let line = fails_in_one_line(&gapscope(&["analyze", p.to_str().unwrap()]), 2);
        assert!(line.contains(says), "{name}: {line}");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{name}: {:?}",
            t0.elapsed()
        );
    }
}

#[cfg(unix)]
#[test]
fn plain_input_that_starts_like_a_trace_is_refused_early_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // `{` and 8 GiB of zeros, sparse (no disk used).
    let sparse = dir.path().join("sparse.json");
    std::fs::write(&sparse, "{").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&sparse)
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    let t0 = Instant::now();
    let line = fails_in_one_line(&gapscope(&["analyze", sparse.to_str().unwrap()]), 2);
    assert!(line.contains("NUL byte at byte 1"), "{line}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    // Through a pipe (no disk used): 1 GiB of spaces, or one 1 GiB string, in the gapscope
    // shape and in two Kineto shapes (the string before or after the Kineto keys).
    let shapes: [(&[u8], u8); 4] = [
        (b"{\"schema_version\":1,", b' '),
        (b"{\"schema_version\":1,\"big\":\"", b'x'),
        (b"{\"big\":\"", b'x'),
        (b"{\"schemaVersion\":1,\"traceEvents\":[],\"big\":\"", b'x'),
    ];
    for (head, fill) in shapes {
        let out = through_a_pipe(&["analyze", "/dev/stdin"], mib_of(head, fill, 1024, b"\"}"));
        let line = fails_in_one_line(&out, 2);
        let shape = String::from_utf8_lossy(head);
        assert!(line.contains("limit of 128.0 MiB"), "{shape}: {line}");
        assert!(!line.contains("schema_version"), "{shape}: {line}");
    }
}

/// A trace handed over by `how`, analysed with `--json`: the report's cells (the rest names
/// the input).
fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

fn analyze_json(how: &str, file: &Path) -> serde_json::Value {
    let f = file.to_str().unwrap();
    let out = match how {
        "path" => gapscope(&["analyze", f, "--json"]),
        "process substitution" => {
            let exe = env!("CARGO_BIN_EXE_gapscope");
            Command::new("bash")
                .args(["-c", &format!("'{exe}' analyze <(cat '{f}') --json")])
                .output()
                .unwrap()
        }
        "stdin" => {
            let bytes = std::fs::read(file).unwrap();
            through_a_pipe(&["analyze", "/dev/stdin", "--json"], std::iter::once(bytes))
        }
        "fifo" => {
            let fifo = file.with_extension("fifo");
            let _ = std::fs::remove_file(&fifo);
            mkfifo(&fifo);
            let (from, to) = (file.to_owned(), fifo.clone());
            let feeder = std::thread::spawn(move || {
                let _ = std::fs::write(&to, std::fs::read(from).unwrap());
            });
            let out = gapscope(&["analyze", fifo.to_str().unwrap(), "--json"]);
            feeder.join().unwrap();
            out
        }
        other => panic!("{other}"),
    };
    assert_eq!(out.status.code(), Some(0), "{how} {f}: {}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["cells"].clone()
}

// Row 4: a trace through a pipe is read once, as a file is: gapscope JSON, Kineto JSON and both
// gzip-compressed, by `<(…)`, `/dev/stdin` and a FIFO.
#[cfg(unix)]
#[test]
fn pipes_are_read_once_like_files() {
    let dir = tempfile::tempdir().unwrap();
    let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces");
    let gapscope_trace = dir.path().join("emu.json");
    trace::write_trace(&gapscope_trace, &synthetic::emu_experiment(30)).unwrap();
    let gzipped = dir.path().join("emu.json.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&std::fs::read(&gapscope_trace).unwrap())
        .unwrap();
    std::fs::write(&gzipped, e.finish().unwrap()).unwrap();
    let files = [
        gapscope_trace.clone(),
        gzipped,
        traces.join("torch-step-kineto-h200.json"),
        traces.join("torch-step-kineto-h200.json.gz"),
    ];
    for file in &files {
        let expected = analyze_json("path", file);
        assert!(!expected.as_array().unwrap().is_empty());
        for how in ["process substitution", "stdin", "fifo"] {
            // The FIFO is made beside the file: copy the bundled ones here.
            let file = if file.starts_with(&traces) {
                let copy = dir.path().join(file.file_name().unwrap());
                std::fs::copy(file, &copy).unwrap();
                copy
            } else {
                file.clone()
            };
            assert!(
                analyze_json(how, &file) == expected,
                "{how} {}: another report",
                file.display()
            );
        }
    }
}

// Row 10: `export -o /dev/stdout` (and `/proc/self/fd/1`) into a pipe or a file writes in
// place; a regular file is still replaced whole.
#[cfg(target_os = "linux")]
#[test]
fn export_to_stdout_writes_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.json", &synthetic::emu_experiment(5));
    let file = dir.path().join("r.json");
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "json",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let expected = std::fs::read(&file).unwrap();
    for target in ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"] {
        // Into a pipe.
        let out = gapscope(&["export", &p, "--format", "json", "-o", target]);
        assert_eq!(out.status.code(), Some(0), "{target}: {}", stderr(&out));
        assert!(out.stdout == expected, "{target} into a pipe");
        // Into a file the shell opened (`> f`).
        let redirected = dir.path().join("redirected.json");
        let status = bin()
            .args(["export", &p, "--format", "json", "-o", target])
            .stdout(std::fs::File::create(&redirected).unwrap())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "{target} into a file");
        assert!(
            std::fs::read(&redirected).unwrap() == expected,
            "{target} into a file"
        );
    }
    // A regular file is replaced (a new inode), not written through.
    use std::os::unix::fs::MetadataExt;
    let before = std::fs::metadata(&file).unwrap().ino();
    let out = gapscope(&[
        "export",
        &p,
        "--format",
        "json",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_ne!(std::fs::metadata(&file).unwrap().ino(), before);
    assert!(temporaries(dir.path()).is_empty());
}

// `export` takes folders as `analyze` does (a folder once used as `-o` included: its outputs
// are not traces), and makes a missing output folder as `analyze -o` does.
#[test]
fn export_takes_folders_and_makes_its_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    write(&traces, "a.json", &synthetic::emu_experiment(5));
    let t = traces.to_str().unwrap();
    // The folder also holds an output set.
    let out = gapscope(&["analyze", t, "-o", t]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let nested = dir.path().join("new/deeper/r.md");
    let out = gapscope(&[
        "export",
        t,
        "--format",
        "markdown",
        "-o",
        nested.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let again = gapscope(&["analyze", t, "--full"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let md = std::fs::read_to_string(&nested).unwrap();
    assert!(md.starts_with('#'), "{md}");
    assert!(String::from_utf8_lossy(&again.stdout).contains(md.lines().next().unwrap()));
}

// A trace where one kernel name is 8 MiB long and used by hundreds of kernels: every output
// holds it cut to the cap (4 KiB, with its length and a hash), the cut noted once per input,
// and the outputs stay small (uncapped, the Perfetto trace alone was 10.7 GB).
#[test]
fn huge_names_are_capped_in_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = synthetic::emu_experiment(40);
    let id = t.kernels[0].name;
    let uses = t.kernels.iter().filter(|k| k.name == id).count();
    assert!(uses >= 300, "{uses}");
    t.strings[id as usize] = format!("huge_kernel_{}", "x".repeat(8 << 20));
    let p = write(dir.path(), "huge.json", &t);
    let bounded = |path: &Path| {
        let len = std::fs::metadata(path).unwrap().len();
        assert!(len < 16 << 20, "{}: {len} bytes", path.display());
    };
    let out = dir.path().join("out");
    let run = gapscope(&["analyze", &p, "-o", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    for f in SET {
        bounded(&out.join(f));
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert_eq!(md.matches("are cut to 4 KiB").count(), 1, "{md}");
    let json = std::fs::read_to_string(out.join("report.json")).unwrap();
    assert!(json.contains(&format!("{}…[{} bytes, #", "x".repeat(100), (8 << 20) + 12)));
    let merged = dir.path().join("merged");
    let run = gapscope(&["merge", &p, "-o", merged.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    for f in ["report.md", "report.json", "trace.perfetto-trace"] {
        bounded(&merged.join(f));
    }
    let exported = dir.path().join("r.json");
    let run = gapscope(&[
        "export",
        &p,
        "--format",
        "json",
        "-o",
        exported.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    bounded(&exported);
}

/// A FIFO that no process writes is refused with one line once the wait for a writer is over,
/// not waited on for ever.
#[cfg(unix)]
#[test]
fn a_fifo_nobody_writes_is_refused_after_the_wait_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.json");
    mkfifo(&fifo);
    let began = Instant::now();
    let mut child = bin()
        .args(["analyze", fifo.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let limit = gapscope::trace::input::FIFO_WRITER_WAIT + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > limit {
            let _ = child.kill();
            panic!("still waiting on a FIFO nobody writes after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let line = fails_in_one_line(&out, 2);
    assert!(line.contains("trace.json"), "{line}");
}
