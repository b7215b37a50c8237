#![forbid(unsafe_code)]
//! `gapscope try`: runs the program as given (BASE) and once per variant in interleaved
//! rounds, each run as `gapscope record -o DIR/runs/<round>-<k>-<label> -- CMD` of this same
//! executable (so torchrun and multi-rank commands are recorded as `record` records them), with
//! the variant's settings added to its environment; then reads the traces, has
//! [`gapscope::analysis::trial::judge`] decide, and prints and writes what it decided.
//! `try --from DIR` does the second half only, from `DIR/try-plan.json`.
//!
//! SIGINT, SIGTERM and SIGHUP stop the try after the run under way (a terminal's Ctrl-C reaches
//! that run's processes itself; a signal sent to gapscope alone is passed on to the run), and
//! the report then covers the rounds every variant finished, saying it is partial.

use super::analyze::note_wrote;
use super::args::TryArgs;
use super::inputs::{analyze, load_with_steps};
use super::{Failure, bad_input, check_output_folder, failure_line, note, print_stdout};
use gapscope::analysis::trial::{
    self, BASE_LABEL, EnvSetting, PLAN_VERSION, Plan, RunFigures, RunRecord, RunResult, Variant,
};
use gapscope::report;
use gapscope::report::output_set::TRIAL_PLAN;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The try folder when `-o` is not given.
const DEFAULT_DIR: &str = "gapscope-try";

/// Longest last stderr line kept for a run (a traceback's last line fits).
const MAX_LINE_CHARS: usize = 300;

pub fn command(a: &TryArgs) -> Result<ExitCode, Failure> {
    match &a.from {
        Some(dir) => from(dir, a),
        None => run(a),
    }
}

/// `NAME=VALUE`, NAME a shell variable name; `flag` names the option in the error.
fn setting(text: &str, flag: &str) -> Result<EnvSetting, String> {
    let valid = |name: &str| {
        name.chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
    };
    match text.split_once('=') {
        Some((name, value)) if valid(name) => Ok(EnvSetting {
            name: name.to_owned(),
            value: value.to_owned(),
        }),
        _ => Err(format!(
            "{flag} {text:?}: expected NAME=VALUE with NAME of letters, digits and _ (e.g. NCCL_GRAPH_MIXING_SUPPORT=0)"
        )),
    }
}

/// BASE, then a variant per `--env` (labelled by its setting) and per `--variant` (LABEL=
/// 'NAME=VALUE …'), each label once.
fn variants(env: &[String], grouped: &[String]) -> Result<Vec<Variant>, String> {
    let mut out = vec![Variant {
        label: BASE_LABEL.to_owned(),
        settings: Vec::new(),
    }];
    for text in env {
        out.push(Variant {
            label: text.clone(),
            settings: vec![setting(text, "--env")?],
        });
    }
    for text in grouped {
        let bad = || {
            format!(
                "--variant {text:?}: expected LABEL='NAME=VALUE NAME2=VALUE2' (a label, then one or more settings)"
            )
        };
        let (label, rest) = text.split_once('=').ok_or_else(bad)?;
        let settings = rest
            .split_whitespace()
            .map(|s| setting(s, "--variant"))
            .collect::<Result<Vec<_>, _>>()?;
        if label.trim().is_empty() || settings.is_empty() {
            return Err(bad());
        }
        out.push(Variant {
            label: label.to_owned(),
            settings,
        });
    }
    for (i, v) in out.iter().enumerate() {
        if out[..i].iter().any(|w| w.label == v.label) {
            return Err(format!(
                "variant label {:?} given twice ({BASE_LABEL} is the program as given): give each variant its own label",
                v.label
            ));
        }
    }
    if out.len() == 1 {
        return Err(
            "nothing to try: give one or more --env NAME=VALUE or --variant LABEL='NAME=VALUE ...'"
                .to_owned(),
        );
    }
    Ok(out)
}

/// A run's folder name: `<round>-<k>-<label>`, the label's characters other than letters,
/// digits and `._=-` replaced by `_` (the index keeps two labels apart).
fn folder_name(round: usize, k: usize, label: &str) -> String {
    let safe: String = label
        .chars()
        .take(60)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("runs/{round}-{k}-{safe}")
}

/// The line that says why a run failed: the last the program wrote on stderr; when it wrote
/// none, the recorder's last error or warning, else its last line.
fn last_line(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let own = |l: &&&str| l.starts_with("gapscope: ");
    let line = lines
        .iter()
        .rev()
        .find(|l| !own(l))
        .or_else(|| {
            lines.iter().rev().find(|l| {
                l.starts_with("gapscope: error: ") || l.starts_with("gapscope: warning: ")
            })
        })
        .or(lines.last())?;
    // The recorder's own lines without their prefix: "no trace: no trace written: …".
    let line = ["gapscope: note: ", "gapscope: "]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        .unwrap_or(line);
    let line = gapscope::messages::printable(line);
    Some(if line.chars().count() > MAX_LINE_CHARS {
        line.chars().take(MAX_LINE_CHARS - 1).collect::<String>() + "…"
    } else {
        line.into_owned()
    })
}

/// Signals to stop the try: the first one's number (0: none) and the run under way (0: none),
/// to which a signal sent to gapscope alone is passed on.
struct Stop {
    signal: Arc<AtomicI32>,
    child: Arc<AtomicU32>,
}

impl Stop {
    fn install() -> Stop {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let stop = Stop {
            signal: Arc::new(AtomicI32::new(0)),
            child: Arc::new(AtomicU32::new(0)),
        };
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            let (signal, child) = (stop.signal.clone(), stop.child.clone());
            std::thread::spawn(move || {
                for sig in signals.forever() {
                    let _ = signal.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                    let pid = child.load(Ordering::SeqCst);
                    // A terminal's Ctrl-C or hang-up reached the run's processes already.
                    let reached = sig != SIGTERM && super::record::in_terminal_foreground();
                    if let (false, Ok(pid), Ok(s)) = (
                        pid == 0 || reached,
                        i32::try_from(pid),
                        nix::sys::signal::Signal::try_from(sig),
                    ) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), s);
                    }
                }
            });
        }
        stop
    }

    fn signal(&self) -> Option<i32> {
        Some(self.signal.load(Ordering::SeqCst)).filter(|&s| s != 0)
    }
}

/// The `trace-*.json` files of `dir`, by name, sorted.
fn trace_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("trace-") && n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// One run: `gapscope record -o DIR/<folder> -- CMD` with `v`'s settings, its stdout and stderr
/// into `stdout.log` and `stderr.log` of its folder.
fn run_once(
    exe: &Path,
    dir: &Path,
    folder: String,
    (round, v): (usize, &Variant),
    command: &[OsString],
    stop: &Stop,
) -> RunRecord {
    let out = dir.join(&folder);
    let started = std::time::Instant::now();
    let mut record = RunRecord {
        round,
        variant: v.label.clone(),
        folder,
        exit_code: None,
        last_stderr: None,
        seconds: 0.0,
        traces: Vec::new(),
        interrupted: false,
    };
    let logs = std::fs::create_dir_all(&out).and_then(|()| {
        Ok((
            std::fs::File::create(out.join("stdout.log"))?,
            std::fs::File::create(out.join("stderr.log"))?,
        ))
    });
    let spawned = logs.and_then(|(stdout, stderr)| {
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("record")
            .arg("-o")
            .arg(&out)
            .arg("--")
            .args(command)
            .stdout(stdout)
            .stderr(stderr);
        for s in &v.settings {
            cmd.env(&s.name, &s.value);
        }
        cmd.spawn()
    });
    match spawned {
        Ok(mut child) => {
            stop.child.store(child.id(), Ordering::SeqCst);
            let status = child.wait();
            stop.child.store(0, Ordering::SeqCst);
            record.exit_code = status.ok().map(|s| {
                s.code()
                    .unwrap_or_else(|| i32::from(super::exit::program_code(s)))
            });
            let stderr = std::fs::read(out.join("stderr.log")).unwrap_or_default();
            // Paths into the try folder kept relative to it, as the run folders are: the
            // plan reads the same wherever the folder goes.
            let names: Vec<String> = std::iter::once(dir.display().to_string())
                .chain(std::fs::canonicalize(dir).map(|d| d.display().to_string()))
                .collect();
            record.last_stderr = last_line(&String::from_utf8_lossy(&stderr))
                .map(|line| trial::relative_to_folder(&line, &names));
        }
        Err(e) => record.last_stderr = Some(format!("{}: {e}", record.folder)),
    }
    record.seconds = started.elapsed().as_secs_f64();
    record.traces = trace_names(&out);
    record.interrupted = stop.signal().is_some();
    record
}

/// The progress line of a finished run.
fn progress(r: &RunRecord, rounds: usize) -> String {
    let how = if r.interrupted {
        "stopped".to_owned()
    } else {
        match r.failure() {
            Some(why) => format!("failed, {why}"),
            None => format!("exit code 0, {} trace(s)", r.traces.len()),
        }
    };
    format!(
        "round {}/{rounds}, {}: {how} ({:.1} s)",
        r.round, r.variant, r.seconds
    )
}

fn run(a: &TryArgs) -> Result<ExitCode, Failure> {
    let (dir, mut plan) = plan_of(a)?;
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find gapscope's own executable: {e}"))?;
    let stop = Stop::install();
    // Written once to make the folder, then again saying where it is.
    report::output_set::write_trial_plan(&dir, &plan)?;
    plan.recorded_in = std::fs::canonicalize(&dir)
        .ok()
        .map(|d| d.display().to_string());
    report::output_set::write_trial_plan(&dir, &plan)?;
    note(&format!(
        "{} round(s) of BASE and {} variant(s), each run recorded into {}",
        a.rounds,
        plan.variants.len() - 1,
        dir.join("runs").display()
    ));
    run_rounds((&exe, &a.command), &dir, &mut plan, &stop)?;
    // A signal after the last run stops nothing: the report is whole.
    let stopped = stop.signal();
    if let Some(sig) = stopped {
        let round = plan.runs.last().map_or(1, |r| r.round);
        let name = nix::sys::signal::Signal::try_from(sig)
            .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_owned());
        plan.interrupted = Some(format!(
            "stopped by {name} in round {round} of {}",
            a.rounds
        ));
        report::output_set::write_trial_plan(&dir, &plan)?;
    }
    let finished = finish(&dir, &plan, a.expect_fix.as_deref(), Some(&dir), false);
    match stopped {
        // Stopped by a signal: the exit says so, as a shell's would, whatever the rounds that
        // ran gave (a failing BASE's error is said, not made the exit).
        Some(sig) => {
            if let Err(f) = finished {
                note(&format!("{:#}", f.error));
            }
            Ok(ExitCode::from(super::exit::of_signal(sig)))
        }
        None => finished,
    }
}

/// The settings each run's `gapscope record` reads from its environment (this process's, and
/// a variant's on top), checked as `record` checks them: a value it refuses would fail every
/// run of that variant after the whole try had run.
fn check_record_settings(variants: &[Variant]) -> Result<(), Failure> {
    use clap::ValueEnum as _;
    let budget = gapscope::settings::Setting::TraceBudget.name();
    let samples = gapscope::record::host_sampler::HOST_SAMPLES_VAR;
    for v in variants {
        let value = |name: &str| {
            v.settings
                .iter()
                .rev()
                .find(|s| s.name == name)
                .map(|s| s.value.clone())
                .or_else(|| std::env::var(name).ok())
        };
        let refused = |name: &str, value: &str, why: String| {
            bad_input(format!("{}: {name}={value}: {why}", v.label))
        };
        if let Some(b) = value(budget) {
            gapscope::record::cupti::TraceBudget::parse_limit(&b)
                .map_err(|e| refused(budget, &b, e.to_string()))?;
        }
        if let Some(h) = value(samples) {
            super::args::HostSamplesArg::from_str(&h, false)
                .map_err(|_| refused(samples, &h, "expected off, python or native".to_owned()))?;
        }
        // The recorder's own (`GAPSCOPE_CUPTI_*`…), which `record` refuses before its program.
        let get = |s: gapscope::settings::Setting| value(s.name());
        if let Some(e) = gapscope::record::inject::environment::refused_settings(&get)
            .into_iter()
            .next()
        {
            return Err(bad_input(format!("{}: {e}", v.label)));
        }
    }
    Ok(())
}

/// The try folder and the plan `a` asks for, refused (exit 2) before anything runs when the
/// arguments are wrong or the folder holds an earlier try.
fn plan_of(a: &TryArgs) -> Result<(PathBuf, Plan), Failure> {
    let variants = variants(&a.env, &a.variant).map_err(bad_input)?;
    check_record_settings(&variants)?;
    check_expect_fix(a.expect_fix.as_deref(), &variants)?;
    if let Some(why) = gapscope::analysis::trial::bad_rounds(a.rounds) {
        return Err(bad_input(format!("--rounds {why}")));
    }
    let dir = a
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    check_output_folder(&dir)?;
    if dir.join(TRIAL_PLAN).exists() || dir.join("runs").exists() {
        return Err(bad_input(format!(
            "{}: holds an earlier try; render it with --from, or choose another -o",
            dir.display()
        )));
    }
    let plan = Plan {
        gapscope_try: PLAN_VERSION,
        command: a
            .command
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect(),
        rounds: a.rounds,
        variants,
        runs: Vec::new(),
        interrupted: None,
        recorded_in: None,
    };
    Ok((dir, plan))
}

/// Runs BASE and every variant once a round, in turn, until the rounds are done or a signal
/// came; the plan is rewritten after each run. `command`: gapscope's own executable and the
/// program's command line.
fn run_rounds(
    (exe, command): (&Path, &[OsString]),
    dir: &Path,
    plan: &mut Plan,
    stop: &Stop,
) -> Result<(), Failure> {
    for round in 1..=plan.rounds {
        for k in 0..plan.variants.len() {
            if stop.signal().is_some() {
                return Ok(());
            }
            let v = &plan.variants[k];
            let folder = folder_name(round, k, &v.label);
            let r = run_once(exe, dir, folder, (round, v), command, stop);
            note(&progress(&r, plan.rounds));
            plan.runs.push(r);
            report::output_set::write_trial_plan(dir, plan)?;
        }
    }
    Ok(())
}

/// `--expect-fix LABEL` names a variant other than BASE.
fn check_expect_fix(label: Option<&str>, variants: &[Variant]) -> Result<(), Failure> {
    match label {
        Some(l) if l == BASE_LABEL || !variants.iter().any(|v| v.label == l) => {
            let labels: Vec<&str> = variants.iter().skip(1).map(|v| v.label.as_str()).collect();
            Err(bad_input(format!(
                "--expect-fix {l}: no variant is labelled so (the variants: {})",
                labels.join(", ")
            )))
        }
        _ => Ok(()),
    }
}

/// `try --from DIR`: the plan of DIR judged again.
fn from(dir: &Path, a: &TryArgs) -> Result<ExitCode, Failure> {
    let path = dir.join(TRIAL_PLAN);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bad_input(format!(
            "{}: not a gapscope try folder (cannot read {TRIAL_PLAN}: {e})",
            dir.display()
        ))
    })?;
    let mut plan: Plan = serde_json::from_str(&text)
        .map_err(|e| bad_input(format!("{}: not a gapscope try plan: {e}", path.display())))?;
    if plan.gapscope_try != PLAN_VERSION {
        return Err(bad_input(format!(
            "{}: a try plan of version {}, this gapscope reads version {PLAN_VERSION}",
            path.display(),
            plan.gapscope_try
        )));
    }
    if let Some(why) = plan.problem() {
        return Err(bad_input(format!(
            "{}: not a try plan this gapscope can judge: {why}",
            path.display()
        )));
    }
    check_expect_fix(a.expect_fix.as_deref(), &plan.variants)?;
    if let Some(out) = &a.output {
        check_output_folder(out)?;
    }
    let elsewhere = recorded_elsewhere(&plan, dir);
    plan.stderr_relative();
    finish(
        dir,
        &plan,
        a.expect_fix.as_deref(),
        a.output.as_deref(),
        elsewhere,
    )
}

/// Whether `plan`'s runs were recorded in a folder other than `dir` (moved, or copied from
/// another machine); unknown (a plan that names no folder) is not.
fn recorded_elsewhere(plan: &Plan, dir: &Path) -> bool {
    plan.recorded_in().is_some_and(|recorded| {
        std::fs::canonicalize(dir).map_or(true, |here| here != Path::new(&recorded))
    })
}

/// What each run of `plan` gives: its cells' figures, or why none.
fn results(dir: &Path, plan: &Plan) -> Vec<RunResult> {
    let rounds = plan.complete_rounds();
    plan.runs
        .iter()
        .map(|r| {
            if !rounds.contains(&r.round) {
                return RunResult::Failed("in a round not finished".to_owned());
            }
            if let Some(why) = r.failure() {
                return RunResult::Failed(why);
            }
            let folder = dir.join(&r.folder);
            let paths: Vec<PathBuf> = r.traces.iter().map(|t| folder.join(t)).collect();
            match load_with_steps(&paths, None) {
                Ok((traces, names)) => {
                    RunResult::Figures(RunFigures::of(&analyze(&traces, &names)))
                }
                Err(f) => {
                    RunResult::Failed(format!("cannot read its trace: {}", failure_line(&f.error)))
                }
            }
        })
        .collect()
}

/// The traces of `variant`'s run in `round`, read again (the verdict kept only figures).
fn round_traces(
    dir: &Path,
    plan: &Plan,
    variant: &str,
    round: usize,
) -> Option<(Vec<gapscope::trace::Trace>, Vec<String>)> {
    let run = plan
        .runs
        .iter()
        .find(|r| r.variant == variant && r.round == round)?;
    let folder = dir.join(&run.folder);
    let paths: Vec<PathBuf> = run.traces.iter().map(|t| folder.join(t)).collect();
    load_with_steps(&paths, None).ok()
}

/// Each judged variant ([`trial::pictured`]) drawn against BASE in the round
/// [`trial::picture_round`] chose.
fn pictures(
    dir: &Path,
    plan: &Plan,
    results: &[RunResult],
    report: &trial::TrialReport,
) -> Vec<report::output_set::TrialPicture> {
    report
        .variants
        .iter()
        .filter(|v| trial::pictured(v))
        .filter_map(|v| {
            let round = trial::picture_round(plan, results, &v.label)?;
            let (base_traces, base_names) = round_traces(dir, plan, trial::BASE_LABEL, round)?;
            let (head_traces, head_names) = round_traces(dir, plan, &v.label, round)?;
            let (base, head) = (
                analyze(&base_traces, &base_names),
                analyze(&head_traces, &head_names),
            );
            // No threshold judges anything here: the verdicts are try's own.
            let comparison = gapscope::analysis::compare::compare(base, head, 1.0);
            let headline = trial::picture_cell(v)
                .and_then(|cell| comparison.cells.iter().position(|m| m.base_label == cell))
                .and_then(|i| gapscope::analysis::compare::pair_picture(&comparison, i))
                .or_else(|| gapscope::analysis::compare::headline_picture(&comparison));
            Some(report::output_set::TrialPicture {
                variant: v.label.clone(),
                comparison,
                traces: [base_traces, head_traces],
                headline,
                verdict: trial::picture_verdict(v, round),
            })
        })
        .collect()
}

/// Judges `plan`'s runs (traces under `dir`), prints the screen, writes `try.md` and `try.json`
/// into `out`; the exit code of the verdict. `elsewhere`: the runs were recorded in another
/// folder or on another machine ([`recorded_elsewhere`]).
fn finish(
    dir: &Path,
    plan: &Plan,
    expect_fix: Option<&str>,
    out: Option<&Path>,
    elsewhere: bool,
) -> Result<ExitCode, Failure> {
    let results = results(dir, plan);
    let mut report = trial::judge(plan, &results, expect_fix);
    report.recorded_elsewhere = elsewhere;
    let rendered = report::output_set::trial_reports(&report, out.is_some());
    let path = out.map(|d| d.join("try.md").display().to_string());
    print_stdout(&report::summary::fit_screen(&report::trial::trial_summary(
        &report,
        path.as_deref(),
    )))?;
    if let Some(out) = out {
        let pictures = pictures(dir, plan, &results, &report);
        let written = report::output_set::write_trial_set(out, &rendered, &pictures)?;
        note_wrote("", out, &written, None);
    }
    if !report.rounds_judged.is_empty() && report.base_failures.len() == report.rounds_judged.len()
    {
        return Err(Failure::runtime(anyhow::anyhow!(report.headline.clone())));
    }
    Ok(super::exit::of_expected_fix(
        report.expect_fix.as_ref().map(|e| e.met),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn variants_are_base_then_each_env_then_each_group() {
        let v = variants(
            &strings(&["NCCL_A=0", "B_1=x=y"]),
            &strings(&["both=NCCL_A=0  B_1=1"]),
        )
        .unwrap();
        let labels: Vec<&str> = v.iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["BASE", "NCCL_A=0", "B_1=x=y", "both"]);
        assert_eq!(v[2].settings[0].value, "x=y");
        assert_eq!(v[3].describe(), "NCCL_A=0 B_1=1");
    }

    #[test]
    fn bad_variants_are_refused_in_one_line() {
        for (env, grouped, says) in [
            (vec!["NOVALUE"], vec![], "expected NAME=VALUE"),
            (vec!["1X=0"], vec![], "expected NAME=VALUE"),
            (vec!["=0"], vec![], "expected NAME=VALUE"),
            (vec![], vec!["label"], "expected LABEL="),
            (vec![], vec!["label="], "expected LABEL="),
            (vec![], vec!["=A=1"], "expected LABEL="),
            (vec!["A=1", "A=1"], vec![], "given twice"),
            (vec![], vec!["one=A=1", "one=B=2"], "given twice"),
            (vec![], vec!["BASE=A=1"], "given twice"),
            (vec![], vec![], "nothing to try"),
        ] {
            let err = variants(&strings(&env), &strings(&grouped)).unwrap_err();
            assert!(err.contains(says), "{env:?} {grouped:?}: {err}");
            assert!(!err.contains('\n'));
        }
    }

    #[test]
    fn the_last_line_is_the_programs_else_the_recorders_error() {
        let program = "Traceback:\n  x\nRuntimeError: boom\ngapscope: note: no trace written\ngapscope: note: python3 exited with status 1; gapscope exits with its status\n";
        assert_eq!(last_line(program).unwrap(), "RuntimeError: boom");
        let recorder = "gapscope: error: injection library libgapscope.so not found\n";
        assert_eq!(
            last_line(recorder).unwrap(),
            "error: injection library libgapscope.so not found"
        );
        let quiet = "gapscope: note: no CUDA driver here\ngapscope: note: no trace written: the program did not initialise CUDA\n\n";
        assert_eq!(
            last_line(quiet).unwrap(),
            "no trace written: the program did not initialise CUDA"
        );
        assert_eq!(last_line(""), None);
        assert!(last_line(&"x".repeat(1000)).unwrap().chars().count() <= MAX_LINE_CHARS);
    }

    #[test]
    fn run_folders_are_safe_names() {
        assert_eq!(folder_name(2, 1, "A=1"), "runs/2-1-A=1");
        assert_eq!(folder_name(1, 3, "a b/c"), "runs/1-3-a_b_c");
    }
}
