#![forbid(unsafe_code)]
//! gapscope command line: parses arguments ([`cli::args`]), dispatches to the command's glue in
//! [`cli`], and maps errors to one line and an exit code (see [`cli`] for the codes).

mod cli;

use clap::{CommandFactory, FromArgMatches};
use cli::args::{Cli, Command};
use cli::{Failure, print_stdout};
use std::process::ExitCode;

fn main() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(e) => return usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // Read by the import and the analysis deep down: refused here, before any work.
    if let Err(e) = gapscope::settings::threads() {
        return fail(Failure::bad_input(e));
    }
    if let Some(line) = gapscope::threads::capped_note() {
        cli::note(&line);
    }
    let given = cli::args::run_sweep_flags_given(&matches);
    match run(cli, &given) {
        Ok(code) => code,
        Err(f) => fail(f),
    }
}

/// The failure's one line, last on stderr, and its exit code.
fn fail(f: Failure) -> ExitCode {
    cli::error(&cli::failure_line(&f.error));
    ExitCode::from(f.code)
}

/// Help and version go to stdout (exit 0; a stdout that cannot be written is an error, exit 1);
/// a usage error is one line on stderr (exit 2).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            match print_stdout(e.render().to_string().trim_end()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(f) => fail(f),
            }
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            cli::error("no command given; try gapscope --help");
            cli::exit::usage()
        }
        _ => {
            cli::error(&format!("{} (see --help)", usage_line(&e.to_string())));
            cli::exit::usage()
        }
    }
}

/// clap's message on one line: its lines up to the usage joined, so what follows a colon (the
/// missing arguments' names) or a tip stays in it.
fn usage_line(text: &str) -> String {
    let mut line = String::new();
    for part in text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        // "tip: to pass '--foo' as a value, use '-- --foo'" misleads more than it helps.
        .filter(|l| !l.is_empty() && !l.starts_with("tip: to pass"))
    {
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    if line.is_empty() {
        "invalid arguments".to_owned()
    } else {
        line
    }
}

fn run(cli: Cli, given: &[String]) -> Result<ExitCode, Failure> {
    // Not for `record` (it waits for its child, which the signal reaches) nor `run` (it
    // installs the handler itself when it analyses the bundled traces).
    // Nor `try`: it passes the signal on to the run under way and writes a partial report.
    if !matches!(
        cli.command,
        Command::Run(_) | Command::Record(_) | Command::Try(_)
    ) {
        cli::remove_temporaries_on_signal();
    }
    match cli.command {
        Command::Analyze {
            traces,
            out,
            perfetto,
            summary,
        } => cli::analyze::command(&traces, &out, perfetto.format(), summary.as_deref()),
        Command::Compare(args) => cli::compare::command(&args),
        Command::Export {
            traces,
            format,
            output,
            origin,
        } => cli::analyze::export(&traces, format, &output, origin.origin_step),
        Command::Run(args) => cli::run::command(args, given),
        Command::CheckKernels { tokens } => {
            gapscope::record::cupti::ensure_cuda_driver()?;
            let summary = gapscope::workload::htdecode::run_correctness_check(&tokens)?;
            print_stdout(&summary)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Record(args) => {
            cli::record::check_settings()?;
            Ok(cli::record::run(&args.into())?)
        }
        Command::Try(args) => cli::trial::command(&args),
        Command::Merge {
            traces,
            output,
            json: cli::args::JsonArg { json },
            clock,
            perfetto,
        } => cli::merge::command(&traces, output.as_deref(), json, clock, perfetto.format()),
        Command::Completions { shell } => cli::shell::completions(shell),
        Command::Man { dir } => cli::shell::man(dir.as_deref()),
        Command::SpillTestChild {
            deliveries,
            records,
        } => Err(gapscope::record::spill::deliver_then_die(deliveries, records)?.into()),
    }
}
