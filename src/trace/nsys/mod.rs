//! Nsight Systems SQLite export (`nsys export --type sqlite`) → [`Trace`].
//!
//! Tested on exports of Nsight Systems 2025.3 ([`TESTED_VERSIONS`]: the H200 machine's `nsys`
//! from the Nsight Compute 2025.3.1 folder, which writes product version 2025.3.2.0 and export
//! schema 3.20.3). The schema is checked by table and column names, never by position: a
//! missing table or column is one error naming it, an export of another schema version a note.
//!
//! Mapping (one process: the one with the most device records; others are left out, noted):
//!
//! | nsys table | gapscope record |
//! |---|---|
//! | `CUPTI_ACTIVITY_KIND_KERNEL` | [`Kernel`](crate::trace::Kernel) (`mangledName`, else `demangledName`; `graphNodeId` → node and, in its high 32 bits, the executable graph) |
//! | `CUPTI_ACTIVITY_KIND_MEMCPY`, `…_MEMSET` | [`MemOp`](crate::trace::MemOp) (`copyKind` as CUPTI numbers it) |
//! | `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (`--cuda-graph-trace=graph`) | one [`Kernel`](crate::trace::Kernel) per graph launch, spanning the replay ([`GRAPH_MODE_NOTE`]) |
//! | `CUPTI_ACTIVITY_KIND_RUNTIME` | [`ApiCall`](crate::trace::ApiCall) (runtime and driver; `_v3020`-style suffixes dropped) |
//! | `NVTX_EVENTS` (push/pop and start/end ranges) | [`Marker`](crate::trace::Marker) of kind [`MarkerKind::Range`](crate::trace::MarkerKind::Range) |
//! | `CUDA_GRAPH_NODE_EVENTS` | [`GraphNode`](crate::trace::GraphNode)s, their types and edges inferred (`graph.rs`) |
//! | `TARGET_INFO_GPU`, `TARGET_INFO_SYSTEM_ENV`, `META_DATA_EXPORT` | device, driver and nsys versions |
//!
//! Timestamps are nsys's nanoseconds, one clock for host and device. Threads are the OS thread
//! ids (the low 24 bits of nsys's `globalTid`). `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` is not
//! read: the `*Synchronize` API records say the same to the analysis.
//!
//! A `.nsys-rep` report is exported first by the `nsys` on `PATH` ([`export_report`]).
#![forbid(unsafe_code)]

mod db;
mod graph;

use crate::output::TemporaryFolder;
use crate::trace::{Trace, TraceError};
use std::path::{Path, PathBuf};

/// Nsight Systems versions whose exports were tested: (product version, export schema).
pub const TESTED_VERSIONS: [(&str, &str); 1] = [("2025.3.2.0", "3.20.3")];

/// The note every Nsight Systems import carries (shown in every report).
pub const NSYS_NOTE: &str = "imported from Nsight Systems: graph node types, external flags and \
edges are not in its export; they were inferred from the API call that created each node and the \
order of creation, so a gap's graph cause is probable (\"probably external\"), not certain";

/// The note of an export in graph mode.
pub const GRAPH_MODE_NOTE: &str = "Nsight Systems traced CUDA graphs as whole launches \
(--cuda-graph-trace=graph): each replay is one op spanning the replay, so replay periods are \
measured but no gap inside a replay (no per-node gap, no cause) can be: profile with \
--cuda-graph-trace=node for them";

/// The first bytes of every SQLite 3 database.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Errors importing an Nsight Systems export or report. Each displays as one line naming the
/// file.
#[derive(Debug, thiserror::Error)]
pub enum NsysError {
    #[error("{path}: cannot read the SQLite database: {message}")]
    Sqlite { path: PathBuf, message: String },
    #[error(
        "{path}: an SQLite database, not an Nsight Systems export (no table {missing}); export a report with `nsys export --type sqlite`"
    )]
    NotAnExport { path: PathBuf, missing: String },
    #[error(
        "{path}: an Nsight Systems export without CUDA device activity (no rows in CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, _MEMSET or _GRAPH_TRACE): profile with `nsys profile --trace=cuda,nvtx --cuda-graph-trace=node`"
    )]
    NoCudaActivity { path: PathBuf },
    #[error("{path}: not a usable Nsight Systems export: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error(
        "{path}: an Nsight Systems report, and no `nsys` on PATH to export it: run `nsys export --type sqlite --output {sqlite} {path}` and pass {sqlite}"
    )]
    NoNsys { path: PathBuf, sqlite: PathBuf },
    #[error("{path}: `{command}` failed: {message}")]
    ExportFailed {
        path: PathBuf,
        command: String,
        message: String,
    },
}

/// Whether the first bytes of a file are an SQLite database's.
pub fn looks_like_sqlite(head: &[u8]) -> bool {
    head.starts_with(SQLITE_MAGIC)
}

/// Whether `path` names an Nsight Systems report (`.nsys-rep`, or `.qdrep` of older versions).
pub fn is_report_file(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "nsys-rep" || e == "qdrep")
}

/// Imports an Nsight Systems SQLite export, gzip-compressed or not (`.sqlite.gz`: decompressed
/// to a temporary file first, within [`MAX_GZIP_RATIO`]).
pub fn read_nsys(path: &Path) -> Result<Trace, NsysError> {
    if !is_gzip_file(path) {
        return db::import(path, path);
    }
    let dir = TemporaryFolder::new("nsys").map_err(|e| sqlite_io(path, e))?;
    let file = dir.path().join("export.sqlite");
    gunzip(path, &file)?;
    db::import(&file, path)
}

/// How many times its own size a gzip-compressed export may expand.
pub const MAX_GZIP_RATIO: u64 = 250;

fn sqlite_io(path: &Path, e: std::io::Error) -> NsysError {
    NsysError::Sqlite {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn gunzip(path: &Path, to: &Path) -> Result<(), NsysError> {
    use std::io::Read;
    let io = |e| sqlite_io(path, e);
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let limit = size.max(1 << 20).saturating_mul(MAX_GZIP_RATIO);
    let mut out = std::fs::File::create(to).map_err(io)?;
    let mut gz = flate2::read::MultiGzDecoder::new(file).take(limit + 1);
    let n = std::io::copy(&mut gz, &mut out).map_err(io)?;
    if n > limit {
        return Err(NsysError::Malformed {
            path: path.to_owned(),
            message: format!(
                "the gzip data expands more than {MAX_GZIP_RATIO} times its size: refused"
            ),
        });
    }
    Ok(())
}

/// Exports a `.nsys-rep` report with the `nsys` on `PATH` ([`export_report`]) into a
/// temporary folder and imports it; returns the trace and the export command (for the note
/// that says so). Errors name the report. The folder is removed, and a running `nsys` killed,
/// on every way out, a signal's included ([`crate::output::exit_removing_temporaries`]).
pub fn read_report(path: &Path) -> Result<(Trace, String), NsysError> {
    let dir = TemporaryFolder::new("nsys").map_err(|e| sqlite_io(path, e))?;
    let sqlite = dir.path().join("report.sqlite");
    let command = export_report(path, &sqlite)?;
    Ok((db::import(&sqlite, path)?, command))
}

/// The `nsys` binary on `PATH`, if any.
pub fn nsys_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("nsys"))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Exports a `.nsys-rep` report to `sqlite` with the `nsys` on `PATH` (`nsys export --type
/// sqlite`), and returns the command; without an `nsys`, [`NsysError::NoNsys`] names the
/// command to run.
pub fn export_report(path: &Path, sqlite: &Path) -> Result<String, NsysError> {
    let Some(nsys) = nsys_on_path() else {
        return Err(NsysError::NoNsys {
            path: path.to_owned(),
            sqlite: path.with_extension("sqlite"),
        });
    };
    let command = format!(
        "{} export --type sqlite --output {} {}",
        nsys.display(),
        sqlite.display(),
        path.display()
    );
    let failed = |message: String| NsysError::ExportFailed {
        path: path.to_owned(),
        command: command.clone(),
        message,
    };
    let output = crate::output::run_child(
        std::process::Command::new(&nsys)
            .args(["export", "--type", "sqlite", "--force-overwrite", "true"])
            .arg("--output")
            .arg(sqlite)
            .arg(path)
            .stdin(std::process::Stdio::null()),
    )
    .map_err(|e| failed(e.to_string()))?;
    if !output.status.success() || !sqlite.is_file() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(failed(format!(
            "{} ({})",
            last.unwrap_or("no SQLite file written"),
            output.status
        )));
    }
    Ok(command)
}

/// Whether the file at `path` is an SQLite database, gzip-compressed or not (a regular file
/// only: a pipe's bytes are left unread for the JSON readers).
pub fn is_sqlite_file(path: &Path) -> bool {
    use std::io::Read;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; 16];
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    if is_gzip_file(path) {
        let mut gz = flate2::read::GzDecoder::new(file);
        return gz.read_exact(&mut head).is_ok() && looks_like_sqlite(&head);
    }
    (&file).read_exact(&mut head).is_ok() && looks_like_sqlite(&head)
}

/// Whether the file at `path` starts with the gzip magic bytes.
fn is_gzip_file(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == [0x1f, 0x8b])
}

impl From<NsysError> for TraceError {
    fn from(e: NsysError) -> TraceError {
        TraceError::Nsys(Box::new(e))
    }
}

#[cfg(test)]
mod tests;
