//! What the injected process is told by its environment: where traces go, who it is (rank,
//! world size, command line) and the recorder's settings. Read once, at initialisation.

use super::messages::say;
use crate::record::cupti::{ApiCallbacks, RecorderConfig, TraceBudget};
use crate::record::step_range::StepRange;
use crate::settings::{BadSetting, Setting, kept};
use std::path::PathBuf;

/// Rank variables, first set (and numeric) wins: torchrun/torch.distributed, torchrun's local
/// rank, Open MPI, Slurm.
pub const RANK_VARS: [&str; 4] = ["RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"];
/// World-size variables, first set (and numeric) wins.
pub const WORLD_VARS: [&str; 3] = ["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"];

/// Settings of the injected process, read from its environment at initialisation.
#[derive(Debug, Clone)]
pub(super) struct Config {
    /// Absolute, so a later `chdir` of the program does not move it.
    pub(super) out: PathBuf,
    pub(super) command: String,
    pub(super) rank_name: String,
    pub(super) rank: u32,
    pub(super) world: u32,
    /// Only this process writes the trace (not children forked after CUDA initialised).
    pub(super) pid: u32,
}

/// File-name rank of this process: the first of [`RANK_VARS`] holding a non-negative integer,
/// else `pid<pid>`. `get` reads an environment variable.
pub fn rank_name(get: impl Fn(&str) -> Option<String>, pid: u32) -> String {
    numeric_var(&get, &RANK_VARS).map_or_else(|| format!("pid{pid}"), |r| r.to_string())
}

/// World size: the first of [`WORLD_VARS`] holding a positive integer, else 1.
pub fn world_size(get: impl Fn(&str) -> Option<String>) -> u32 {
    numeric_var(&get, &WORLD_VARS)
        .filter(|&w| w > 0)
        .unwrap_or(1)
}

fn numeric_var(get: &impl Fn(&str) -> Option<String>, vars: &[&str]) -> Option<u32> {
    vars.iter()
        .find_map(|v| get(v).and_then(|s| s.trim().parse::<u32>().ok()))
}

/// Another program's variable (the launchers' rank variables), when set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

/// The command line of this process (from `/proc/self/cmdline`, else `std::env::args`).
fn command_line() -> String {
    if let Ok(bytes) = std::fs::read("/proc/self/cmdline") {
        let args: Vec<String> = bytes
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.is_empty() {
            return args.join(" ");
        }
    }
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Config {
    pub(super) fn from_env() -> Config {
        let pid = std::process::id();
        let out = PathBuf::from(Setting::Out.read().unwrap_or_else(|| ".".into()));
        let out = if out.is_absolute() {
            out
        } else {
            std::env::current_dir().map_or(out.clone(), |cwd| cwd.join(&out))
        };
        Config {
            out,
            command: command_line(),
            rank_name: rank_name(var, pid),
            rank: numeric_var(&var, &RANK_VARS).unwrap_or(0),
            world: world_size(var),
            pid,
        }
    }
}

/// The recorder's settings from the environment; a value it cannot use is said in one line
/// and the default taken.
pub(super) fn recorder_config(step_range: StepRange) -> RecorderConfig {
    let (config, refused) = read_recorder_config(&Setting::environment_value, step_range);
    for e in refused {
        say(&format!("{e}; using the default"));
    }
    config
}

/// The recorder's settings from `get` ([`Setting::parse_from`]'s rule), with the values
/// refused (each left at its default).
fn read_recorder_config(
    get: &dyn Fn(Setting) -> Option<String>,
    step_range: StepRange,
) -> (RecorderConfig, Vec<BadSetting>) {
    let mut refused = Vec::new();
    let all_api_calls = kept(
        Setting::CuptiApi.parse_from(get, "`all` (or unset)", |t| (t == "all").then_some(true)),
        &mut refused,
    );
    let sync_records = kept(Setting::CuptiSync.switch_from(get), &mut refused);
    let api_callbacks = kept(
        Setting::CuptiCallbacks.parse_from(
            get,
            "`all`, `graph-building`, `graph-building-with-launches` or `off`",
            |t| <ApiCallbacks as clap::ValueEnum>::from_str(t, false).ok(),
        ),
        &mut refused,
    );
    // Diagnostics: host activity buffer size in KiB (default 8 MiB).
    let buffer_kib = kept(
        Setting::CuptiBufferKib.parse_from(get, "a positive number of KiB", |t| {
            t.parse::<usize>().ok().filter(|&kib| kib > 0)
        }),
        &mut refused,
    );
    let limit = kept(
        Setting::TraceBudget.parse_from(get, TraceBudget::EXPECTED, |t| {
            TraceBudget::parse_limit(t).ok()
        }),
        &mut refused,
    );
    let default = RecorderConfig::default();
    let config = RecorderConfig {
        all_api_calls: all_api_calls.unwrap_or(false),
        sync_records: sync_records.unwrap_or(false),
        api_callbacks: api_callbacks.unwrap_or(default.api_callbacks),
        buffer_bytes: buffer_kib.map_or(default.buffer_bytes, |kib| kib * 1024),
        trace_budget: TraceBudget {
            limit: limit.unwrap_or(TraceBudget::DEFAULT_LIMIT),
        },
        step_range,
        ..default
    };
    (config, refused)
}

/// A switch of the injected process (`0` or `1`, default off); a value it cannot use is said
/// in one line and the default taken.
pub(super) fn switch(setting: Setting) -> bool {
    let mut refused = Vec::new();
    let on = kept(
        setting.switch_from(&Setting::environment_value),
        &mut refused,
    );
    for e in refused {
        say(&format!("{e}; using the default"));
    }
    on == Some(true)
}

/// The switches the injected process reads besides the recorder's settings.
pub(super) const SWITCHES: [Setting; 3] = [
    Setting::Spill,
    Setting::TracingFlag,
    Setting::SignalBacktrace,
];

/// The values of the `GAPSCOPE_*` settings the injection library reads that it would refuse
/// (say, and take the default): `gapscope record` refuses them before the program runs.
pub fn refused_settings(get: &dyn Fn(Setting) -> Option<String>) -> Vec<BadSetting> {
    let (_, mut refused) = read_recorder_config(get, StepRange::default());
    refused.extend(crate::record::cupti::refused_diagnostics(get));
    refused.extend(SWITCHES.iter().filter_map(|s| s.switch_from(get).err()));
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// Each value refused is one line, and the recorder takes that setting's default.
    #[test]
    fn recorder_settings_refused_keep_their_defaults() {
        let get = |s: Setting| {
            Some(
                match s {
                    Setting::CuptiApi => "all",
                    Setting::CuptiSync => "yes",
                    Setting::CuptiCallbacks => "launches",
                    Setting::CuptiBufferKib => " 64 ",
                    Setting::TraceBudget => "-1",
                    _ => return None,
                }
                .to_owned(),
            )
        };
        let (config, refused) = read_recorder_config(&get, StepRange::default());
        assert_eq!(
            refused.iter().map(BadSetting::parts).collect::<Vec<_>>(),
            [
                (Setting::CuptiSync, "yes", "`0` or `1`"),
                (
                    Setting::CuptiCallbacks,
                    "launches",
                    "`all`, `graph-building`, `graph-building-with-launches` or `off`"
                ),
                (Setting::TraceBudget, "-1", TraceBudget::EXPECTED),
            ]
        );
        let default = RecorderConfig::default();
        assert!(config.all_api_calls && !config.sync_records);
        assert_eq!(config.api_callbacks, default.api_callbacks);
        assert_eq!(config.buffer_bytes, 64 * 1024);
        assert_eq!(config.trace_budget.limit, TraceBudget::DEFAULT_LIMIT);
        assert_eq!(refused_settings(&get).len(), 3);
        assert_eq!(refused_settings(&|_| None), []);
    }

    #[test]
    fn rank_comes_from_the_first_numeric_rank_variable() {
        assert_eq!(rank_name(vars(&[("RANK", "3")]), 42), "3");
        assert_eq!(
            rank_name(vars(&[("LOCAL_RANK", "1"), ("SLURM_PROCID", "9")]), 42),
            "1"
        );
        assert_eq!(
            rank_name(vars(&[("RANK", "0"), ("LOCAL_RANK", "5")]), 42),
            "0"
        );
        assert_eq!(rank_name(vars(&[("OMPI_COMM_WORLD_RANK", "7")]), 42), "7");
        assert_eq!(rank_name(vars(&[("SLURM_PROCID", " 12 ")]), 42), "12");
        // Not a number: skipped.
        assert_eq!(
            rank_name(vars(&[("RANK", "x"), ("SLURM_PROCID", "2")]), 42),
            "2"
        );
        assert_eq!(rank_name(vars(&[]), 4242), "pid4242");
        assert_eq!(rank_name(vars(&[("RANK", "-1")]), 7), "pid7");
    }

    #[test]
    fn world_size_defaults_to_one() {
        assert_eq!(world_size(vars(&[])), 1);
        assert_eq!(world_size(vars(&[("WORLD_SIZE", "8")])), 8);
        assert_eq!(world_size(vars(&[("OMPI_COMM_WORLD_SIZE", "4")])), 4);
        assert_eq!(world_size(vars(&[("SLURM_NTASKS", "16")])), 16);
        assert_eq!(world_size(vars(&[("WORLD_SIZE", "0")])), 1);
    }
}
