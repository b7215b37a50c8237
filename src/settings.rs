//! Every `GAPSCOPE_*` environment variable: its name, what it does, and the one rule it is read
//! by ([`Setting::read`]: trimmed, empty is unset; [`Setting::parse`]: a value refused is one
//! [`BadSetting`] line; [`Setting::read_os`] for paths and presence only). The table of
//! variables in docs/environment.md is checked against [`Setting::ALL`].
#![forbid(unsafe_code)]

use std::ffi::OsString;

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The user, to change what gapscope does.
    User,
    /// The user, to measure or work around the recorder (each one is noted in the trace).
    Diagnostic,
    /// `gapscope record` or `gapscope run`, for the processes it starts (a user may set it when
    /// loading the injection library by hand).
    Child,
    /// gapscope's own tests and development.
    Developer,
}

macro_rules! settings {
    ($($variant:ident = $name:literal, $audience:ident, $doc:literal;)+) => {
        /// A `GAPSCOPE_*` environment variable.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Setting {
            $(#[doc = $doc] $variant,)+
        }

        impl Setting {
            /// Every variable, in docs/environment.md's order.
            pub const ALL: &'static [Setting] = &[$(Setting::$variant,)+];

            /// The variable's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Setting::$variant => $name,)+
                }
            }

            /// What it does, in one sentence.
            pub const fn doc(self) -> &'static str {
                match self {
                    $(Setting::$variant => $doc,)+
                }
            }

            /// Who sets it.
            pub const fn audience(self) -> Audience {
                match self {
                    $(Setting::$variant => Audience::$audience,)+
                }
            }
        }
    };
}

settings! {
    InjectionLib = "GAPSCOPE_INJECTION_LIB", User,
        "Path of the injection library `libgapscope.so` that `record` loads into the program (default: next to the executable, then where the wheel installs it).";
    TraceBudget = "GAPSCOPE_TRACE_BUDGET", User,
        "Launches traced per executable graph and steps traced before the recorder samples (`record --trace-budget`; 0 traces everything).";
    StepRange = "GAPSCOPE_STEP_RANGE", Child,
        "Name of the NVTX range that marks one step (`record --step-range`).";
    Out = "GAPSCOPE_OUT", Child,
        "Folder the injection library writes `trace-<rank>.json` into (`record -o`).";
    Spill = "GAPSCOPE_SPILL", Child,
        "`1`: the injection library hands completed buffers to `record` as they complete, so a killed process still leaves a trace.";
    HostSamples = "GAPSCOPE_HOST_SAMPLES", User,
        "Which host stacks `record` samples: `python` (default), `native` (not built) or `off` (`record --host-samples`).";
    TracingFlag = "GAPSCOPE_TRACING_FLAG", Child,
        "`1`: the injection library keeps `.gapscope-tracing-<pid>` in the trace folder saying whether it is tracing, so that `record` samples host stacks only while it is.";
    Threads = "GAPSCOPE_THREADS", User,
        "Worker threads for imports and analysis (default: the cores available, at most 8; capped at the cores).";
    SignalBacktrace = "GAPSCOPE_SIGNAL_BACKTRACE", User,
        "`1`: a fatal signal in the recorded program prints the native frames of the interrupted instruction.";
    CuptiApi = "GAPSCOPE_CUPTI_API", Diagnostic,
        "`all`: record every runtime and driver API call, not only launches, copies, synchronisations, event and graph calls.";
    CuptiSync = "GAPSCOPE_CUPTI_SYNC", Diagnostic,
        "`1`: record CUPTI's SYNCHRONIZATION activity (default: synchronisations are read from the API records).";
    CuptiCallbacks = "GAPSCOPE_CUPTI_CALLBACKS", Diagnostic,
        "Which API callbacks the recorder enables: `all`, `graph-building` (default), `graph-building-with-launches` or `off`.";
    CuptiBufferKib = "GAPSCOPE_CUPTI_BUFFER_KIB", Diagnostic,
        "Size of each CUPTI activity buffer, in KiB.";
    CuptiSkip = "GAPSCOPE_CUPTI_SKIP", Diagnostic,
        "Activity kinds left off, comma-separated (e.g. `DRIVER,RUNTIME`).";
    CuptiApiOnly = "GAPSCOPE_CUPTI_API_ONLY", Diagnostic,
        "Record only the API calls whose names hold one of these comma-separated parts (e.g. `Launch,EventRecord`).";
    CuptiPerThreadBuffers = "GAPSCOPE_CUPTI_PER_THREAD_BUFFERS", Diagnostic,
        "`0` or `1`: CUPTI's per-thread activity buffers.";
    CuptiHostPinned = "GAPSCOPE_CUPTI_HOST_PINNED", Diagnostic,
        "`0` or `1`: device records in pinned host memory (default 1, so records survive a sticky CUDA error).";
    CuptiNodeFrames = "GAPSCOPE_CUPTI_NODE_FRAMES", Diagnostic,
        "`0`: graph nodes are made without reading the creating thread's frames (native, for their library function; Python, for the program's code that made them).";
    CuptiApiFrom = "GAPSCOPE_CUPTI_API_FROM", Diagnostic,
        "`callbacks`: the API calls kept are recorded from their enter and exit callbacks instead of the RUNTIME and DRIVER kinds.";
    CuptiGraphTrace = "GAPSCOPE_CUPTI_GRAPH_TRACE", Diagnostic,
        "`1`: graph-level activity records too.";
    CuptiAttr = "GAPSCOPE_CUPTI_ATTR", Diagnostic,
        "`size_t` activity attributes set before any kind is enabled, as `ATTR=VALUE,…` (e.g. `0=67108864`).";
    CuptiFlushPeriodMs = "GAPSCOPE_CUPTI_FLUSH_PERIOD_MS", Diagnostic,
        "`cuptiActivityFlushPeriod(N)`: the period of CUPTI's own flush of full buffers, in ms.";
    BudgetPauseFilter = "GAPSCOPE_BUDGET_PAUSE_FILTER", Diagnostic,
        "`0`: a trace budget's pause leaves the per-call API record filter on.";
    BudgetMeasure = "GAPSCOPE_BUDGET_MEASURE", Diagnostic,
        "`0`: a trace budget's pause records nothing, with no measured launches or steps (no untraced periods).";
    BudgetLaunchWrapper = "GAPSCOPE_BUDGET_LAUNCH_WRAPPER", Diagnostic,
        "`1` (a build with the `launch-wrapper` feature): a trace budget decides on graph launches in the preloaded library's `cudaGraphLaunch`, their CUPTI callbacks off between sampled windows.";
    BudgetPace = "GAPSCOPE_BUDGET_PACE", Diagnostic,
        "`1`: programs with no steps or graph launches to count are sampled by time, not traced whole.";
    Timings = "GAPSCOPE_TIMINGS", Developer,
        "Set: each command prints how long its stages took.";
    DumpReports = "GAPSCOPE_DUMP_REPORTS", Developer,
        "Set: report fixture tests write what they rendered.";
    DumpPtx = "GAPSCOPE_DUMP_PTX", Developer,
        "A folder: `gapscope run` writes the HT-decode step's compiled PTX there.";
    NcclIdFile = "GAPSCOPE_NCCL_ID_FILE", Child,
        "File through which `gapscope run`'s rank 0 hands NCCL's unique id to the other ranks.";
    NcclIdTimeoutS = "GAPSCOPE_NCCL_ID_TIMEOUT_S", User,
        "Seconds a rank of `gapscope run` waits for NCCL's unique id.";
    NcclIdMaxAgeS = "GAPSCOPE_NCCL_ID_MAX_AGE_S", User,
        "Age in seconds beyond which a left-over NCCL id file is not trusted.";
}

impl Setting {
    /// Its value, trimmed, when set, Unicode and not empty.
    pub fn read(self) -> Option<String> {
        trimmed(&std::env::var(self.name()).ok()?)
    }

    /// Its value as the system holds it, when set: for a path, or only whether it is set.
    pub fn read_os(self) -> Option<OsString> {
        std::env::var_os(self.name())
    }

    /// Its value turned into a `T` by `parse`, read as [`Setting::read`] reads (`Ok(None)` when
    /// unset or empty); a value `parse` refuses, or one that is not Unicode, is a
    /// [`BadSetting`] naming the variable, the value and what was `expected`.
    pub fn parse<T>(
        self,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, BadSetting> {
        self.parse_from(&Setting::environment_value, expected, parse)
    }

    /// [`Setting::parse`] of the value `get` gives the variable: the environment's
    /// ([`Setting::environment_value`]) or, in a test, its own.
    pub fn parse_from<T>(
        self,
        get: &dyn Fn(Setting) -> Option<String>,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, BadSetting> {
        self.parse_value(get(self).as_deref(), expected, parse)
    }

    /// A switch, `0` (off) or `1` (on), by [`Setting::parse_from`]'s rule.
    pub fn switch_from(
        self,
        get: &dyn Fn(Setting) -> Option<String>,
    ) -> Result<Option<bool>, BadSetting> {
        self.parse_from(get, "`0` or `1`", |t| match t {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
    }

    /// The variable's value in the environment as [`Setting::parse`] reads it: untrimmed, made
    /// Unicode lossily; `None` when unset.
    pub fn environment_value(self) -> Option<String> {
        self.read_os().map(|v| v.to_string_lossy().into_owned())
    }

    /// [`Setting::parse`] of the variable's value `value`.
    fn parse_value<T>(
        self,
        value: Option<&str>,
        expected: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, BadSetting> {
        let Some(text) = value.and_then(trimmed) else {
            return Ok(None);
        };
        match parse(&text) {
            Some(value) => Ok(Some(value)),
            None => Err(BadSetting {
                setting: self,
                text,
                expected,
            }),
        }
    }
}

/// A variable's text trimmed; `None` when nothing is left.
fn trimmed(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A value [`Setting::parse`] refuses: one line, `NAME="VALUE": expected WHAT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}={text:?}: expected {expected}")]
pub struct BadSetting {
    pub setting: Setting,
    /// The value, trimmed.
    pub text: String,
    pub expected: &'static str,
}

impl BadSetting {
    /// The variable, its value and what was expected.
    pub fn parts(&self) -> (Setting, &str, &'static str) {
        (self.setting, &self.text, self.expected)
    }
}

/// A value read by [`Setting::parse_from`], or `None` (its default) with the refusal added to
/// `refused`: for a reader that says every value it refuses and goes on (the injection
/// library never stops the program).
pub fn kept<T>(read: Result<Option<T>, BadSetting>, refused: &mut Vec<BadSetting>) -> Option<T> {
    read.unwrap_or_else(|e| {
        refused.push(e);
        None
    })
}

/// `GAPSCOPE_THREADS`: the positive count of threads it names (`None`: unset); the command line
/// refuses anything else (`0`, `-1`, `abc`) before any work.
pub fn threads() -> Result<Option<usize>, BadSetting> {
    Setting::Threads.parse(
        "a positive number of threads (or unset it for the cores available, at most 8)",
        |t| t.parse::<usize>().ok().filter(|&n| n > 0),
    )
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One rule for every variable: trimmed, empty is unset, a refused value is one line.
    #[test]
    fn values_are_trimmed_and_a_refused_one_is_one_line() {
        let number = |value: Option<&str>| {
            Setting::Threads.parse_value(value, "a number", |t| t.parse::<u32>().ok())
        };
        assert_eq!(number(Some(" 12 \n")), Ok(Some(12)));
        assert_eq!(number(Some("   ")), Ok(None), "empty is unset");
        assert_eq!(number(None), Ok(None));
        assert_eq!(
            number(Some(" 1x ")).unwrap_err().to_string(),
            "GAPSCOPE_THREADS=\"1x\": expected a number"
        );
        assert_eq!(trimmed(" name ").as_deref(), Some("name"));
    }

    #[test]
    fn names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = Setting::ALL.iter().map(|s| s.name()).collect();
        assert!(names.iter().all(|n| n.starts_with("GAPSCOPE_")));
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a variable named twice");
    }

    /// No file of the library names a variable outside this table: every name is read here.
    #[test]
    fn no_source_file_names_a_variable_itself() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut offenders = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("src is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("settings.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                for (i, line) in text.lines().enumerate() {
                    // `env!` names build.rs's variables, set at compile time.
                    if line.contains("\"GAPSCOPE_") && !line.contains("env!(\"GAPSCOPE_") {
                        offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "name these through settings::Setting:\n{}",
            offenders.join("\n")
        );
    }

    /// The table of docs/environment.md (linked from the README) lists every variable a user may
    /// set, with its sentence.
    #[test]
    fn the_readme_lists_every_variable_a_user_sets() {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/environment.md"),
        )
        .expect("docs/environment.md");
        for s in Setting::ALL {
            if s.audience() == Audience::Developer {
                continue;
            }
            let row = format!("| `{}` | {} |", s.name(), s.doc());
            assert!(
                readme.contains(&row),
                "docs/environment.md lacks the row {row}"
            );
        }
    }
}
