#![forbid(unsafe_code)]
//! The one writer of output sets (`-o DIR`): all of them or none. [`write_analysis_set`]
//! (analyze, run), [`write_comparison_set`] (compare), [`write_trial_set`] and
//! [`write_trial_plan`] (try), and [`write_merge_set`] (merge, and run's per-rank merges)
//! render their files and write them through [`OutputSet`].
//!
//! Every file of the set is written to a temporary file beside its target first; only when all
//! are complete are they renamed into place, and files of the set that this run did not produce
//! (a `step.svg` left by an earlier run) are removed. A lock on `DIR/.gapscope.lock` refuses a
//! second gapscope writing the same folder at the same time, so two runs never mix. Targets
//! that are symlinks are followed; devices and FIFOs are written in place (they cannot be
//! replaced) as soon as they are filled.

pub use super::trial_files::{TRIAL_SET, TRIAL_SVG, trial_files, variant_picture_stem};
use crate::analysis::merge::Merged;
use crate::analysis::trial::TrialReport;
use crate::analysis::{Analysis, Comparison};
use crate::output::{StagedOutput, commit_lock, stage_output};
use crate::trace::{Trace, TraceError};
use std::cell::OnceCell;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Whether the open `file` is the one at `path` now.
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The name of the lock file inside an output folder: there while a set is written, removed
/// (under the lock) when it is done.
pub const LOCK_FILE: &str = ".gapscope.lock";

/// Errors of an output set; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{0}: another gapscope is writing to this folder; wait for it to finish or choose another -o"
    )]
    Busy(PathBuf),
    #[error(transparent)]
    Write(#[from] TraceError),
}

/// A set of outputs being written into one folder.
pub struct OutputSet {
    dir: PathBuf,
    /// Held (locked) until the set is committed or dropped.
    _lock: File,
    /// Each file written so far, with the path errors name.
    staged: Vec<(PathBuf, StagedOutput)>,
    written: Vec<String>,
}

impl Drop for OutputSet {
    /// Removes the lock file while still holding its lock, so that the folder keeps only the
    /// outputs; a writer that opened it meanwhile sees it gone and takes a new one.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(LOCK_FILE));
    }
}

fn write_error(path: &Path, source: std::io::Error) -> OutputError {
    OutputError::Write(TraceError::Write {
        path: path.to_owned(),
        source,
    })
}

impl OutputSet {
    /// Creates `dir` if needed and takes its lock.
    pub fn create(dir: &Path) -> Result<OutputSet, OutputError> {
        std::fs::create_dir_all(dir).map_err(|e| write_error(dir, e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = loop {
            let lock = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .map_err(|e| write_error(&lock_path, e))?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(OutputError::Busy(dir.to_owned()));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(write_error(&lock_path, e)),
            }
            // The holder before removes the file when done (no lock file is left behind): a
            // lock taken on a file already removed is no lock, so take the one at the path.
            if same_file(&lock, &lock_path) {
                break lock;
            }
        };
        Ok(OutputSet {
            dir: dir.to_owned(),
            _lock: lock,
            staged: Vec::new(),
            written: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `name` of the set through `fill` (to a temporary file until [`Self::commit`]).
    pub fn add(
        &mut self,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), OutputError> {
        let path = self.dir.join(name);
        let staged = stage_output(&path, fill).map_err(|e| write_error(&path, e))?;
        self.staged.push((path, staged));
        self.written.push(name.to_owned());
        Ok(())
    }

    /// Writes `name` of the set with `text` as its content.
    pub fn add_text(&mut self, name: &str, text: &str) -> Result<(), OutputError> {
        self.add(name, |w| w.write_all(text.as_bytes()))
    }

    /// Renames every file into place and removes the files named in `set` that were not
    /// written this time (regular files only), all under the commit lock, so a signal waits
    /// for the whole set ([`crate::output::exit_removing_temporaries`]). Returns the names
    /// written.
    pub fn commit(mut self, set: &[&str]) -> Result<Vec<String>, OutputError> {
        let staged = std::mem::take(&mut self.staged);
        let mut lock = commit_lock();
        let mut result = Ok(());
        for (path, staged) in staged {
            if result.is_ok() {
                result = lock.keep(staged).map_err(|e| write_error(&path, e));
            } else {
                lock.discard(staged);
            }
        }
        for name in set {
            if result.is_err() || self.written.iter().any(|w| w == name) {
                continue;
            }
            let stale = self.dir.join(name);
            if std::fs::symlink_metadata(&stale).is_ok_and(|m| m.is_file()) {
                result = std::fs::remove_file(&stale).map_err(|e| write_error(&stale, e));
            }
        }
        drop(lock);
        result.map(|()| std::mem::take(&mut self.written))
    }
}

/// The files of an analysis set (`analyze -o`, `run`); `step.svg` only with an eager/graphed
/// pair to draw, the Perfetto trace in one encoding (a stale one is removed).
pub const ANALYSIS_SET: [&str; 5] = [
    "report.md",
    "report.json",
    "trace.perfetto-trace",
    "trace.perfetto.json",
    "step.svg",
];

/// The files of a comparison set (`compare -o`); the Perfetto trace and the picture only where
/// a compared cell has steps on both sides ([`comparison_files`]).
pub const COMPARISON_SET: [&str; 4] = [
    "compare.md",
    "compare.json",
    super::perfetto::COMPARISON_FILE,
    COMPARISON_SVG,
];

/// The picture of a comparison's headline pair.
pub const COMPARISON_SVG: &str = "compare.svg";

/// The files `compare -o` writes for `c`, in the order written.
pub fn comparison_files(c: &Comparison) -> Vec<&'static str> {
    let pictured = crate::analysis::compare::headline_picture(c).is_some();
    COMPARISON_SET
        .into_iter()
        .filter(|name| pictured || name.ends_with(".md") || name.ends_with(".json"))
        .collect()
}

/// The files of a rank-merge set (`merge -o`, `run`'s `merged/` folders).
pub const MERGE_SET: [&str; 4] = [
    "report.md",
    "report.json",
    "trace.perfetto-trace",
    "trace.perfetto.json",
];

/// A report's Markdown and JSON, each rendered on first use and then kept: an output set and
/// stdout share them.
pub struct Rendered<'a, T> {
    pub value: &'a T,
    render_markdown: fn(&T) -> String,
    render_json: fn(&T) -> String,
    markdown: OnceCell<String>,
    json: OnceCell<String>,
}

impl<'a, T> Rendered<'a, T> {
    fn new(value: &'a T, render_markdown: fn(&T) -> String, render_json: fn(&T) -> String) -> Self {
        Rendered {
            value,
            render_markdown,
            render_json,
            markdown: OnceCell::new(),
            json: OnceCell::new(),
        }
    }

    pub fn markdown(&self) -> &str {
        self.markdown
            .get_or_init(|| (self.render_markdown)(self.value))
    }

    pub fn json(&self) -> &str {
        self.json.get_or_init(|| (self.render_json)(self.value))
    }

    /// Whether the JSON has been rendered (and is kept).
    pub fn has_json(&self) -> bool {
        self.json.get().is_some()
    }
}

/// `report.md` and `report.json` of an analysis.
pub fn analysis_reports(analysis: &Analysis) -> Rendered<'_, Analysis> {
    Rendered::new(
        analysis,
        super::markdown::analysis_markdown,
        super::json::analysis_json,
    )
}

/// `compare.md` and `compare.json` of a comparison; with `pictured`, compare.md shows
/// `compare.svg` (written beside it).
pub fn comparison_reports(comparison: &Comparison, pictured: bool) -> Rendered<'_, Comparison> {
    Rendered::new(
        comparison,
        if pictured {
            super::markdown::comparison_markdown_pictured
        } else {
            super::markdown::comparison_markdown
        },
        super::json::comparison_json,
    )
}

/// `try.md` and `try.json` of a try; with `pictured`, try.md shows the pictures written
/// beside it ([`trial_files`]).
pub fn trial_reports(report: &TrialReport, pictured: bool) -> Rendered<'_, TrialReport> {
    Rendered::new(
        report,
        if pictured {
            super::trial::trial_markdown_pictured
        } else {
            super::trial::trial_markdown
        },
        super::json::trial_json,
    )
}

/// `report.md` and `report.json` of a rank merge.
pub fn merge_reports(merged: &Merged) -> Rendered<'_, Merged> {
    Rendered::new(
        merged,
        super::merge::merge_markdown,
        super::merge::merge_json,
    )
}

/// Writes file `name` of the analysis set ([`ANALYSIS_SET`]) into `w`: the one place that
/// knows how each is made, for `analyze -o` and `export`. `origin_step`: the step put at one
/// origin in the Perfetto trace, and the step drawn (else the one the analysis chose). `step.svg` needs an
/// eager/graphed pair ([`super::svg::worst_pair`]).
pub fn write_analysis_file(
    name: &str,
    w: &mut dyn Write,
    traces: &[Trace],
    reports: &Rendered<'_, Analysis>,
    origin_step: Option<usize>,
) -> std::io::Result<()> {
    let analysis = reports.value;
    match name {
        "report.md" => w.write_all(reports.markdown().as_bytes()),
        "report.json" => w.write_all(reports.json().as_bytes()),
        "trace.perfetto-trace" | "trace.perfetto.json" => {
            let opts = super::perfetto::PerfettoOptions { origin_step };
            let format = super::PerfettoFormat::of_file(name).expect("a Perfetto file name");
            super::perfetto::write_trace(w, format, traces, analysis, &opts)
        }
        "step.svg" => {
            let (pair, typical) = super::svg::worst_pair(analysis).ok_or_else(|| {
                std::io::Error::other("no eager/graphed pair in the input: nothing to draw")
            })?;
            let step = origin_step.unwrap_or(typical);
            w.write_all(super::svg::step_svg(traces, analysis, pair, step).as_bytes())
        }
        other => Err(std::io::Error::other(format!(
            "{other} is not a file of the analysis set"
        ))),
    }
}

/// Writes the analysis set into `dir`: the Markdown and JSON reports, the Perfetto trace in
/// `perfetto` and, when the analysis has an eager/graphed pair, `step.svg` (see
/// [`write_analysis_file`]). Returns the names written.
pub fn write_analysis_set(
    dir: &Path,
    traces: &[Trace],
    reports: &Rendered<'_, Analysis>,
    origin_step: Option<usize>,
    perfetto: super::PerfettoFormat,
) -> Result<Vec<String>, OutputError> {
    let mut set = OutputSet::create(dir)?;
    let with_svg = super::svg::worst_pair(reports.value).is_some();
    for name in ANALYSIS_SET {
        let other_encoding = super::PerfettoFormat::of_file(name).is_some_and(|f| f != perfetto);
        if (name == "step.svg" && !with_svg) || other_encoding {
            continue;
        }
        set.add(name, |w| {
            write_analysis_file(name, w, traces, reports, origin_step)
        })?;
    }
    set.commit(&ANALYSIS_SET)
}

/// Writes the comparison set ([`comparison_files`]) into `dir`: `traces` are BASE's and
/// HEAD's. Returns the names written.
pub fn write_comparison_set(
    dir: &Path,
    reports: &Rendered<'_, Comparison>,
    traces: [&[Trace]; 2],
) -> Result<Vec<String>, OutputError> {
    let c = reports.value;
    let mut set = OutputSet::create(dir)?;
    for name in comparison_files(c) {
        set.add(name, |w| write_comparison_file(name, w, c, reports, traces))?;
    }
    set.commit(&COMPARISON_SET)
}

/// The names of BASE and HEAD in a comparison's pictures.
const COMPARISON_SIDES: [&str; 2] = ["BASE", "HEAD"];

/// Writes file `name` of the comparison set into `w`.
fn write_comparison_file(
    name: &str,
    w: &mut dyn Write,
    c: &Comparison,
    reports: &Rendered<'_, Comparison>,
    traces: [&[Trace]; 2],
) -> std::io::Result<()> {
    use crate::analysis::compare::{headline_picture, pair_pictures};
    match name {
        "compare.md" => w.write_all(reports.markdown().as_bytes()),
        "compare.json" => w.write_all(reports.json().as_bytes()),
        super::perfetto::COMPARISON_FILE => super::perfetto::write_comparison_trace(
            w,
            c,
            traces,
            COMPARISON_SIDES,
            &pair_pictures(c),
        ),
        COMPARISON_SVG => {
            let picture = headline_picture(c).ok_or_else(|| {
                std::io::Error::other("no compared cell with steps on both sides")
            })?;
            let svg = super::svg::comparison_svg(traces, c, &picture, COMPARISON_SIDES, None);
            w.write_all(svg.as_bytes())
        }
        other => Err(std::io::Error::other(format!(
            "{other} is not a file of the comparison set"
        ))),
    }
}

/// One judged variant of a try drawn against BASE: one round of each, compared as `compare`
/// compares ([`crate::analysis::trial::picture_round`]).
pub struct TrialPicture {
    pub variant: String,
    pub comparison: Comparison,
    /// BASE's and the variant's traces of that round.
    pub traces: [Vec<Trace>; 2],
    /// The pair the SVG draws ([`crate::analysis::trial::picture_cell`]).
    pub headline: Option<crate::analysis::compare::PairPicture>,
    /// Try's verdict on that cell, in words (the picture's one round judges nothing).
    pub verdict: String,
}

/// Writes `try.md`, `try.json`, `try.svg` and each of `pictures` (`try-VARIANT.svg`,
/// `try-VARIANT.perfetto-trace`) into `dir`; pictures of variants an earlier run drew are
/// removed. Returns the names written.
pub fn write_trial_set(
    dir: &Path,
    reports: &Rendered<'_, TrialReport>,
    pictures: &[TrialPicture],
) -> Result<Vec<String>, OutputError> {
    let mut set = OutputSet::create(dir)?;
    set.add_text(TRIAL_SET[0], reports.markdown())?;
    set.add_text(TRIAL_SET[1], reports.json())?;
    set.add_text(TRIAL_SVG, &super::svg::trial_rounds_svg(reports.value))?;
    for p in pictures {
        let stem = variant_picture_stem(&p.variant);
        let sides = [crate::analysis::trial::BASE_LABEL, p.variant.as_str()];
        let traces = [p.traces[0].as_slice(), p.traces[1].as_slice()];
        if let Some(headline) = &p.headline {
            let svg = super::svg::comparison_svg(
                traces,
                &p.comparison,
                headline,
                sides,
                Some(&p.verdict),
            );
            set.add_text(&format!("{stem}.svg"), &svg)?;
        }
        let pictures = crate::analysis::compare::pair_pictures(&p.comparison);
        set.add(&format!("{stem}.perfetto-trace"), |w| {
            super::perfetto::write_comparison_trace(w, &p.comparison, traces, sides, &pictures)
        })?;
    }
    // Every variant picture in the folder belongs to the set: those not drawn now go.
    let mut names: Vec<String> = vec![TRIAL_SVG.to_owned()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        names.extend(entries.filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let picture = name.ends_with(".svg") || name.ends_with(".perfetto-trace");
            (name.starts_with("try-") && picture).then_some(name)
        }));
    }
    let mut set_names: Vec<&str> = TRIAL_SET.to_vec();
    set_names.extend(names.iter().map(String::as_str));
    set.commit(&set_names)
}

/// The name of a try folder's plan: what was asked and every run so far.
pub const TRIAL_PLAN: &str = "try-plan.json";

/// Writes `DIR/try-plan.json` (all or nothing, as every output): after each run of a try, so
/// that a try stopped at any point leaves the runs it finished described.
pub fn write_trial_plan(
    dir: &Path,
    plan: &crate::analysis::trial::Plan,
) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(plan).unwrap_or_default() + "\n";
    let mut set = OutputSet::create(dir)?;
    set.add_text(TRIAL_PLAN, &text)?;
    set.commit(&[]).map(|_| ())
}

/// Writes the rank-merge report (`report.md`, `report.json`) and, with `perfetto` (every rank
/// given as a trace), the merged Perfetto trace in that format into `dir`. Returns the names
/// written.
pub fn write_merge_set(
    dir: &Path,
    reports: &Rendered<'_, Merged>,
    perfetto: Option<super::PerfettoFormat>,
) -> Result<Vec<String>, OutputError> {
    let mut set = OutputSet::create(dir)?;
    set.add_text("report.md", reports.markdown())?;
    set.add_text("report.json", reports.json())?;
    if let Some(perfetto) = perfetto {
        set.add(perfetto.file_name(), |w| {
            super::merge::write_merge_trace(reports.value, perfetto, w)
        })?;
    }
    set.commit(&MERGE_SET)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(text: &'static str) -> impl FnOnce(&mut dyn Write) -> std::io::Result<()> {
        move |w| w.write_all(text.as_bytes())
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn a_set_replaces_the_old_one_and_removes_what_it_no_longer_makes() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = OutputSet::create(dir.path()).unwrap();
        first.add("a.md", fill("old a")).unwrap();
        first.add("b.svg", fill("old b")).unwrap();
        first.commit(&["a.md", "b.svg"]).unwrap();
        let mut second = OutputSet::create(dir.path()).unwrap();
        second.add("a.md", fill("new a")).unwrap();
        // Nothing written until the commit.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.md")).unwrap(),
            "old a"
        );
        second.commit(&["a.md", "b.svg"]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.md")).unwrap(),
            "new a"
        );
        assert!(!dir.path().join("b.svg").exists(), "stale output removed");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failing_file_leaves_the_old_set_whole_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = OutputSet::create(dir.path()).unwrap();
        first.add("a.md", fill("old a")).unwrap();
        first.commit(&["a.md"]).unwrap();
        let mut second = OutputSet::create(dir.path()).unwrap();
        second.add("a.md", fill("new a")).unwrap();
        let failed = second.add("b.json", |_| Err(std::io::Error::other("disk full")));
        assert!(failed.unwrap_err().to_string().contains("disk full"));
        drop(second);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.md")).unwrap(),
            "old a"
        );
        assert!(!dir.path().join("b.json").exists());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_second_writer_is_refused_while_the_first_holds_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let _first = OutputSet::create(dir.path()).unwrap();
        let err = OutputSet::create(dir.path()).err().expect("refused");
        assert!(matches!(err, OutputError::Busy(_)), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_and_special_files_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.md");
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link.md")).unwrap();
        std::os::unix::fs::symlink("/dev/null", dir.path().join("null.json")).unwrap();
        let mut set = OutputSet::create(dir.path()).unwrap();
        set.add("link.md", fill("new")).unwrap();
        set.add("null.json", fill("discarded")).unwrap();
        set.commit(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        assert!(
            std::fs::symlink_metadata(dir.path().join("link.md"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            std::fs::metadata("/dev/null")
                .map(|m| !m.is_file())
                .unwrap_or(true),
            "/dev/null is still a device"
        );
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn temporary_names_stay_short_for_long_targets() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("{}.md", "x".repeat(250));
        let mut set = OutputSet::create(dir.path()).unwrap();
        set.add(&name, fill("ok")).unwrap();
        set.commit(&[]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(&name)).unwrap(),
            "ok"
        );
    }
}
