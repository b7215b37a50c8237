#![forbid(unsafe_code)]
//! `gapscope completions SHELL` and `gapscope man [DIR]`: generated from the clap definition
//! in [`super::args`], so they list exactly the commands and flags this build has.

use super::analyze::note_wrote;
use super::args::Cli;
use super::{Failure, check_output_folder, print_stdout};
use clap::CommandFactory;
use gapscope::output;
use std::path::Path;
use std::process::ExitCode;

/// Prints the completion script of `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gapscope", &mut script);
    print_stdout(String::from_utf8_lossy(&script).trim_end())?;
    Ok(ExitCode::SUCCESS)
}

/// The manual pages: `gapscope.1`, then one per command (`gapscope-analyze.1`, …), each as
/// (file name, roff text).
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let mut cli = Cli::command();
    cli.build();
    let mut pages = vec![("gapscope.1".to_string(), render(cli.clone()))];
    for sub in cli
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        let name = format!("gapscope-{}", sub.get_name());
        let page = sub.clone().name(name.clone()).display_name(name.clone());
        pages.push((format!("{name}.1"), render(page)));
    }
    pages
}

fn render(cmd: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .expect("rendering into memory cannot fail");
    out
}

/// Prints `gapscope.1` on stdout, or writes every page into `dir`, all or none: each page goes
/// to a temporary file in `dir` first, and only when all are complete are they renamed into
/// place; a failure removes the temporaries and the pages this run had already renamed, so
/// `dir` never keeps part of a set (a lone `gapscope.1` on a full file system, as before).
pub fn man(dir: Option<&Path>) -> Result<ExitCode, Failure> {
    let pages = man_pages();
    let Some(dir) = dir else {
        print_stdout(String::from_utf8_lossy(&pages[0].1).trim_end())?;
        return Ok(ExitCode::SUCCESS);
    };
    check_output_folder(dir)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let cannot = |name: &str, e: std::io::Error| {
        anyhow::anyhow!(
            "{}: cannot write: {e}; no manual page written",
            dir.join(name).display()
        )
    };
    // Dropped on a failure, a staged page's temporary is removed.
    let mut staged = Vec::with_capacity(pages.len());
    for (name, text) in &pages {
        let page = output::stage_output(&dir.join(name), |w| w.write_all(text))
            .map_err(|e| cannot(name, e))?;
        staged.push((name, page));
    }
    let mut lock = output::commit_lock();
    let mut renamed: Vec<&String> = Vec::new();
    let mut staged = staged.into_iter();
    while let Some((name, page)) = staged.next() {
        if let Err(e) = lock.keep(page) {
            for (_, rest) in staged {
                lock.discard(rest);
            }
            for done in renamed {
                let _ = std::fs::remove_file(dir.join(done));
            }
            return Err(cannot(name, e).into());
        }
        renamed.push(name);
    }
    drop(lock);
    let names: Vec<String> = pages.iter().map(|(name, _)| name.clone()).collect();
    note_wrote("", dir, &names, None);
    Ok(ExitCode::SUCCESS)
}
