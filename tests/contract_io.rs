//! The CLI's input and commit contract (issue 27): an output set is committed whole or not at
//! all even under signals; temporaries of killed runs are removed; input is bounded however it
//! is wrapped (gzip, a pipe, a plain file); pipes are read once; special outputs are written in
//! place; names are capped in outputs.

use gapscope::trace;
use gapscope::trace::synthetic;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
}

fn gapscope(args: &[&str]) -> Output {
    bin().args(args).output().expect("run gapscope")
}

fn write(dir: &Path, name: &str, t: &trace::Trace) -> String {
    let p = dir.join(name);
    trace::write_trace(&p, t).unwrap();
    p.display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

const SET: [&str; 4] = [
    "report.md",
    "report.json",
    "trace.perfetto.json",
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
    eprintln!(
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
