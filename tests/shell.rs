//! What users expect of a CLI: `--version` naming the commit, shell completions, manual pages.

use std::path::Path;
use std::process::{Command, Output};

fn gapscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gapscope"))
        .args(args)
        .output()
        .expect("run gapscope")
}

fn stdout(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Built from this git checkout, `--version` names its commit; without git (a tarball), the
/// crate's version alone.
#[test]
fn version_names_the_commit_it_was_built_from() {
    let got = stdout(&gapscope(&["--version"]));
    let root = env!("CARGO_MANIFEST_DIR");
    let head = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let version = env!("CARGO_PKG_VERSION");
    match head {
        Some(hash) => assert_eq!(got.trim(), format!("gapscope {version} (commit {hash})")),
        None => assert_eq!(got.trim(), format!("gapscope {version}")),
    }
}

/// The bash script is valid bash, and completing `gapscope rec` / `gapscope record --st`
/// offers `record` / `--step-range`.
#[test]
fn bash_completion_completes_commands_and_flags() {
    let script = stdout(&gapscope(&["completions", "bash"]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gapscope.bash");
    std::fs::write(&file, &script).unwrap();
    let complete = |words: &str| -> String {
        let line = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _gapscope gapscope \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let out = Command::new("bash")
            .args(["-c", &line])
            .output()
            .expect("bash");
        stdout(&out)
    };
    assert_eq!(complete("gapscope rec").trim(), "record");
    assert!(
        complete("gapscope record --st")
            .lines()
            .any(|l| l == "--step-range"),
        "{}",
        complete("gapscope record --st")
    );
}

#[test]
fn zsh_and_fish_scripts_name_every_command() {
    let zsh = stdout(&gapscope(&["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef gapscope"), "{zsh}");
    let fish = stdout(&gapscope(&["completions", "fish"]));
    for command in [
        "analyze", "compare", "export", "run", "record", "merge", "man",
    ] {
        assert!(zsh.contains(&format!("'{command}:")), "zsh lacks {command}");
        assert!(
            fish.contains(&format!("-a \"{command}\"")),
            "fish lacks {command}"
        );
    }
}

#[test]
fn an_unknown_shell_is_one_usage_error() {
    let out = gapscope(&["completions", "cmd.exe"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("gapscope: error: "), "{err}");
}

/// `gapscope man` prints gapscope(1); `gapscope man DIR` writes it and one page per command,
/// each naming its own flags.
#[test]
fn man_pages_cover_every_command() {
    let page = stdout(&gapscope(&["man"]));
    assert!(page.contains(".TH gapscope 1"), "{page}");
    assert!(page.contains("record"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    let out = gapscope(&["man", man1.to_str().unwrap()]);
    stdout(&out);
    let mut names: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "gapscope-analyze.1",
            "gapscope-check-kernels.1",
            "gapscope-compare.1",
            "gapscope-completions.1",
            "gapscope-export.1",
            "gapscope-man.1",
            "gapscope-merge.1",
            "gapscope-record.1",
            "gapscope-run.1",
            "gapscope-try.1",
            "gapscope.1"
        ]
    );
    let try_page = std::fs::read_to_string(man1.join("gapscope-try.1")).unwrap();
    assert!(try_page.contains("expect\\-fix"), "{try_page}");
    let record = std::fs::read_to_string(man1.join("gapscope-record.1")).unwrap();
    assert!(record.contains(".TH gapscope-record 1"), "{record}");
    assert!(record.contains("step\\-range"), "{record}");
    assert!(!Path::new(&man1).join("gapscope-help.1").exists());
}

/// `gapscope man DIR` writes every page or none: a page that cannot be written (here a folder
/// in its place) leaves `DIR` as it was — no earlier page, no temporary — with one error line.
#[test]
fn man_dir_writes_every_page_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    std::fs::create_dir_all(man1.join("gapscope-try.1")).unwrap();
    let out = gapscope(&["man", man1.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("gapscope: error: ")
            && err.contains("gapscope-try.1: cannot write: ")
            && err.contains("no manual page written"),
        "{err}"
    );
    let left: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["gapscope-try.1"], "only what was there before");
}
