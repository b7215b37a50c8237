#![forbid(unsafe_code)]
//! gapscope command line: parses arguments ([`cli::args`]), dispatches to the command's glue in
//! [`cli`], and maps errors to one line and an exit code (see [`cli`] for the codes).

mod cli;

use clap::Parser;
use cli::args::{Cli, Command};
use cli::{Failure, print_stdout};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(cli) {
        Ok(code) => code,
        Err(f) => {
            // One line: the outermost context and its causes joined (a cause that a message
            // already ends with, as "cannot read: <io error>", is not repeated).
            let mut line = String::new();
            for cause in f.error.chain().map(|e| e.to_string()) {
                if line.ends_with(&cause) {
                    continue;
                }
                if !line.is_empty() {
                    line.push_str(": ");
                }
                line.push_str(&cause);
            }
            eprintln!("gapscope: error: {line}");
            ExitCode::from(f.code)
        }
    }
}

/// Help and version go to stdout (exit 0); a usage error is one line on stderr (exit 2).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(2)
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("gapscope: error: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    // Not for `record` (it waits for its child, which the signal reaches) nor `run` (it
    // installs the handler itself when it analyses the bundled traces).
    if !matches!(cli.command, Command::Run(_) | Command::Record(_)) {
        cli::remove_temporaries_on_signal();
    }
    match cli.command {
        Command::Analyze { traces, out } => cli::analyze::command(&traces, &out),
        Command::Compare(args) => cli::compare::command(&args),
        Command::Export {
            traces,
            format,
            output,
            origin,
        } => cli::analyze::export(&traces, format, &output, origin.origin_step),
        Command::Run(args) => cli::run::command(args),
        Command::CheckKernels { tokens } => {
            gapscope::record::cupti::ensure_cuda_driver()?;
            let summary = gapscope::workload::htdecode::run_correctness_check(&tokens)
                .map_err(|e| anyhow::anyhow!(e))?;
            print_stdout(&summary)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Record(args) => Ok(gapscope::record::launch::run(&args.into())?),
        Command::Merge {
            traces,
            output,
            json,
            clock,
        } => cli::merge::command(&traces, output.as_deref(), json, clock),
        Command::Completions { shell } => cli::shell::completions(shell),
        Command::Man { dir } => cli::shell::man(dir.as_deref()),
    }
}
