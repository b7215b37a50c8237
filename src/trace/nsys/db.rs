//! Reading the export's tables (see the module doc of [`super`] for the mapping).
#![forbid(unsafe_code)]

use super::graph::{self, Creation};
use super::{GRAPH_MODE_NOTE, NSYS_NOTE, NsysError, TESTED_VERSIONS};
use crate::trace::{
    ApiCall, ApiDomain, DeviceInfo, GraphExec, Kernel, Marker, MarkerKind, MemOp, Metadata, Source,
    StrId, Trace, TraceBuilder,
};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

/// Tables of device records, one of which must have rows.
const DEVICE_TABLES: [&str; 4] = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
];

/// NVTX event types that are ranges: push/pop and start/end (`ENUM_NSYS_EVENT_TYPE`).
const NVTX_RANGE_TYPES: [i64; 2] = [59, 60];

/// The low bits of a `globalTid` that are the OS thread id; the rest is the `globalPid`.
const TID_BITS: i64 = 0xFF_FFFF;

/// An open export, and the strings of its `StringIds` read so far.
struct Export<'p> {
    conn: Connection,
    path: &'p Path,
    strings: Strings,
}

/// The `StringIds` strings the imported tables name, read when first named and then kept: an
/// export may hold far more strings than its records use (every one it ever interned), so
/// they are never all read.
struct Strings {
    /// id → its text (`None`: no such id, or not text).
    read: RefCell<FxHashMap<i64, Option<Rc<str>>>>,
    /// Whether SQLite finds an id by its key (nsys's `id INTEGER PRIMARY KEY`): each string is
    /// then looked up when first named. Without a key every lookup would scan the table, so
    /// the strings the tables name are all read at open, in one scan ([`STRING_COLUMNS`]).
    keyed: bool,
}

/// The columns that hold `StringIds` ids, of the tables imported.
const STRING_COLUMNS: [(&str, &str); 4] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
    ("NVTX_EVENTS", "textId"),
];

/// A column read: its name, and whether a missing one is an error (else it reads NULL).
type Col = (&'static str, bool);

/// The columns every device record starts with, read by [`DeviceFields::of`].
const DEVICE_COLS: [Col; 6] = [
    ("start", true),
    ("end", true),
    ("deviceId", true),
    ("streamId", true),
    ("correlationId", true),
    ("globalPid", false),
];

/// [`DEVICE_COLS`] of a row, then `more`.
fn device_cols(more: &[Col]) -> Vec<Col> {
    [&DEVICE_COLS[..], more].concat()
}

/// The fields of [`DEVICE_COLS`].
struct DeviceFields {
    start: u64,
    end: u64,
    device: u32,
    stream: u32,
    corr: u32,
}

impl DeviceFields {
    fn of(r: &Row) -> Result<DeviceFields, CellError> {
        Ok(DeviceFields {
            start: uint(r, 0, "start")?,
            end: uint(r, 1, "end")?,
            device: uint32(r, 2, "deviceId")?,
            stream: uint32(r, 3, "streamId")?,
            corr: uint32(r, 4, "correlationId")?,
        })
    }

    /// A kernel record (a kernel, or graph mode's whole replay) of these fields.
    fn kernel(&self, name: StrId, graph: u32, node: u64) -> Kernel {
        Kernel {
            start: self.start,
            end: self.end,
            device: self.device,
            stream: self.stream,
            corr: self.corr,
            name,
            graph,
            node,
        }
    }
}

impl<'p> Export<'p> {
    /// Opens `file`, named `path` in errors.
    fn open(file: &Path, path: &'p Path) -> Result<Export<'p>, NsysError> {
        let conn = Connection::open_with_flags(
            file,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sqlite_error(path, &e))?;
        let mut export = Export {
            conn,
            path,
            strings: Strings {
                read: RefCell::default(),
                keyed: true,
            },
        };
        let Some(have) = export.columns("StringIds")? else {
            return Err(NsysError::NotAnExport {
                path: path.to_owned(),
                missing: "StringIds".into(),
            });
        };
        export.require("StringIds", &have, &[("id", true), ("value", true)])?;
        export.strings.keyed = export.strings_keyed()?;
        if !export.strings.keyed {
            export.read_named_strings()?;
        }
        Ok(export)
    }

    /// Whether SQLite looks a `StringIds` id up by a key rather than by a scan.
    fn strings_keyed(&self) -> Result<bool, NsysError> {
        let plan = self.texts(
            "EXPLAIN QUERY PLAN SELECT value FROM StringIds WHERE id = 1",
            3,
        )?;
        Ok(plan.iter().any(|step| step.starts_with("SEARCH")))
    }

    /// Column `i`, text, of every row of the query `sql`.
    fn texts(&self, sql: &str, i: usize) -> Result<Vec<String>, NsysError> {
        let err = |e: rusqlite::Error| sqlite_error(self.path, &e);
        let mut stmt = self.conn.prepare(sql).map_err(err)?;
        stmt.query_map([], |r| r.get::<_, String>(i))
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)
    }

    /// Reads, in one scan of `StringIds`, the strings that the tables' [`STRING_COLUMNS`] name
    /// (an export whose `StringIds` has no key).
    fn read_named_strings(&self) -> Result<(), NsysError> {
        let mut named = Vec::new();
        for (table, column) in STRING_COLUMNS {
            if self
                .columns(table)?
                .is_some_and(|have| have.iter().any(|h| h == column))
            {
                named.push(format!("SELECT \"{column}\" FROM \"{table}\""));
            }
        }
        if named.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "SELECT id, value FROM StringIds WHERE id IN ({})",
            named.join(" UNION ")
        );
        let err = |e: rusqlite::Error| sqlite_error(self.path, &e);
        let mut stmt = self.conn.prepare(&sql).map_err(err)?;
        let mut rows = stmt.query([]).map_err(err)?;
        let mut read = self.strings.read.borrow_mut();
        while let Some(r) = rows.next().map_err(err)? {
            let row = (int(r, 0, "id"), text(r, 1));
            let (id, value) = match row {
                (Ok(Some(id)), Ok(value)) => (id, value),
                (Err(m), _) | (_, Err(m)) => {
                    return Err(self.malformed(format!("StringIds: {m}")));
                }
                (Ok(None), _) => continue,
            };
            // A later row of an id replaces an earlier one, as a keyed lookup finds the last.
            if let Some(v) = value {
                read.insert(id, Some(Rc::from(v)));
            }
        }
        Ok(())
    }

    fn malformed(&self, message: String) -> NsysError {
        NsysError::Malformed {
            path: self.path.to_owned(),
            message,
        }
    }

    /// The columns of `table`; `None` when the export has no such table.
    fn columns(&self, table: &str) -> Result<Option<Vec<String>>, NsysError> {
        let err = |e: rusqlite::Error| sqlite_error(self.path, &e);
        let exists: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .map_err(err)?;
        if exists == 0 {
            return Ok(None);
        }
        self.texts(&format!("PRAGMA table_info(\"{table}\")"), 1)
            .map(Some)
    }

    /// Calls `f` on each row of `table` with `cols` in that order (a missing optional column
    /// reads NULL); `false` when the table is missing. An error of `f` names the table and row.
    fn rows(
        &self,
        table: &str,
        cols: &[Col],
        mut f: impl FnMut(&Row) -> Result<(), CellError>,
    ) -> Result<bool, NsysError> {
        let Some(have) = self.columns(table)? else {
            return Ok(false);
        };
        let select = self.require(table, &have, cols)?;
        let err = |e: rusqlite::Error| sqlite_error(self.path, &e);
        let sql = format!("SELECT {} FROM \"{table}\"", select.join(", "));
        let mut stmt = self.conn.prepare(&sql).map_err(err)?;
        let mut rows = stmt.query([]).map_err(err)?;
        let mut n = 0u64;
        while let Some(row) = rows.next().map_err(err)? {
            f(row).map_err(|m| self.malformed(format!("{table}, row {n}: {m}")))?;
            n += 1;
        }
        Ok(true)
    }

    /// What to select of `table` (columns `have`) for `cols`: each column quoted, a missing
    /// optional one as NULL; a missing required one is an error naming it.
    fn require(
        &self,
        table: &str,
        have: &[String],
        cols: &[Col],
    ) -> Result<Vec<String>, NsysError> {
        let mut select = Vec::with_capacity(cols.len());
        for &(name, required) in cols {
            if have.iter().any(|h| h == name) {
                select.push(format!("\"{name}\""));
            } else if required {
                return Err(self.malformed(format!(
                    "table {table} has no column {name} (exports of Nsight Systems {} were tested)",
                    tested()
                )));
            } else {
                select.push("NULL".into());
            }
        }
        Ok(select)
    }

    /// The string of a `StringIds` id, read from the export when first asked for.
    fn string(&self, id: Option<i64>) -> Result<Option<Rc<str>>, CellError> {
        let Some(id) = id else {
            return Ok(None);
        };
        if let Some(known) = self.strings.read.borrow().get(&id) {
            return Ok(known.clone());
        }
        if !self.strings.keyed {
            // Every string the tables name was read at open.
            return Ok(None);
        }
        let err = CellError::StringIds;
        let mut stmt = self
            .conn
            .prepare_cached("SELECT value FROM StringIds WHERE id = ?1")
            .map_err(err)?;
        let mut rows = stmt.query([id]).map_err(err)?;
        let mut value = None;
        while let Some(r) = rows.next().map_err(err)? {
            if let Some(v) = text(r, 0)? {
                value = Some(Rc::from(v));
            }
        }
        self.strings.read.borrow_mut().insert(id, value.clone());
        Ok(value)
    }

    /// How many strings were read from `StringIds`.
    fn strings_read(&self) -> usize {
        self.strings.read.borrow().values().flatten().count()
    }

    /// `name → value` of a two-column table of metadata (`META_DATA_EXPORT`,
    /// `TARGET_INFO_SYSTEM_ENV`), empty when it is missing.
    fn key_values(&self, table: &str) -> Result<FxHashMap<String, String>, NsysError> {
        let mut map = FxHashMap::default();
        self.rows(table, &[("name", true), ("value", true)], |r| {
            if let (Some(k), Some(v)) = (text(r, 0)?, text(r, 1)?) {
                map.entry(k).or_insert(v);
            }
            Ok(())
        })?;
        Ok(map)
    }
}

fn sqlite_error(path: &Path, e: &rusqlite::Error) -> NsysError {
    NsysError::Sqlite {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn tested() -> String {
    TESTED_VERSIONS
        .iter()
        .map(|(v, schema)| format!("{v} (export schema {schema})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a row's cell cannot be read; `what` names its column. Displays after the table and row
/// ([`Export::rows`]).
#[derive(Debug, thiserror::Error)]
enum CellError {
    #[error(transparent)]
    Read(#[from] rusqlite::Error),
    /// A string asked for by its id (read on demand).
    #[error("StringIds: {0}")]
    StringIds(rusqlite::Error),
    #[error("{what} is not an integer")]
    NotAnInteger { what: &'static str },
    #[error("{what} is NULL")]
    Null { what: &'static str },
    #[error("{what} {value} is negative")]
    Negative { what: &'static str, value: i64 },
    #[error("{what} {value} does not fit 32 bits")]
    Over32Bits { what: &'static str, value: u64 },
}

/// An integer cell (`None` for NULL); text or a blob is an error naming the column.
fn int(r: &Row, i: usize, what: &'static str) -> Result<Option<i64>, CellError> {
    match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(v) => Ok(Some(v)),
        _ => Err(CellError::NotAnInteger { what }),
    }
}

/// A text cell (`None` for NULL or another type).
fn text(r: &Row, i: usize) -> Result<Option<String>, CellError> {
    Ok(match r.get_ref(i)? {
        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
        _ => None,
    })
}

/// A non-negative integer that must be there.
fn uint(r: &Row, i: usize, what: &'static str) -> Result<u64, CellError> {
    let v = int(r, i, what)?.ok_or(CellError::Null { what })?;
    u64::try_from(v).map_err(|_| CellError::Negative { what, value: v })
}

/// A non-negative integer of 32 bits that must be there.
fn uint32(r: &Row, i: usize, what: &'static str) -> Result<u32, CellError> {
    let v = uint(r, i, what)?;
    u32::try_from(v).map_err(|_| CellError::Over32Bits { what, value: v })
}

/// A graph node id (NULL or absent: 0, outside graphs).
fn node_id(r: &Row, i: usize) -> Result<u64, CellError> {
    Ok(int(r, i, "graphNodeId")?.map_or(0, |v| v as u64))
}

/// The OS thread id of a `globalTid`.
fn thread_of(global_tid: i64) -> u32 {
    (global_tid & TID_BITS) as u32
}

/// `cudaLaunchKernel` from nsys's `cudaLaunchKernel_v7000`: API names as CUPTI's callbacks name
/// them, so the analysis's matching of API names applies.
pub(super) fn api_name(raw: &str) -> &str {
    match raw.rsplit_once("_v") {
        Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => raw,
    }
}

/// The process whose device records are imported, by its `globalPid`: the one with the most
/// (`None`: the tables have no `globalPid`), and how many other processes had some.
fn choose_process(e: &Export) -> Result<(Option<i64>, usize), NsysError> {
    let mut counts: FxHashMap<i64, u64> = FxHashMap::default();
    for table in DEVICE_TABLES {
        e.rows(table, &DEVICE_COLS[5..], |r| {
            if let Some(pid) = int(r, 0, "globalPid")? {
                *counts.entry(pid).or_default() += 1;
            }
            Ok(())
        })?;
    }
    let best = counts
        .iter()
        .max_by_key(|&(&pid, &n)| (n, std::cmp::Reverse(pid)))
        .map(|(&pid, _)| pid);
    Ok((best, counts.len().saturating_sub(1)))
}

/// Reads the export `file` into a trace; errors name it `path`.
pub(super) fn import(file: &Path, path: &Path) -> Result<Trace, NsysError> {
    import_counting_strings(file, path).map(|(trace, _)| trace)
}

/// [`import`], and how many strings of `StringIds` it read (the tests check that the strings
/// no imported record names are not read).
pub(super) fn import_counting_strings(
    file: &Path,
    path: &Path,
) -> Result<(Trace, usize), NsysError> {
    let e = Export::open(file, path)?;
    let (pid, other_processes) = choose_process(&e)?;
    let in_process = |global_pid: Option<i64>| pid.is_none() || global_pid == pid;
    let in_thread_process = |global_tid: Option<i64>| {
        pid.is_none() || global_tid.is_some_and(|t| Some(t & !TID_BITS) == pid)
    };
    let mut b = TraceBuilder::new(Metadata::default());
    let mut ids: FxHashMap<i64, StrId> = FxHashMap::default();
    let mut name_of = |b: &mut TraceBuilder, id: Option<i64>, fallback: &str| {
        let Some(id) = id else {
            return Ok(b.intern(fallback));
        };
        if let Some(&name) = ids.get(&id) {
            return Ok(name);
        }
        let name = b.intern(e.string(Some(id))?.as_deref().unwrap_or(fallback));
        ids.insert(id, name);
        Ok(name)
    };
    read_kernels(&e, &mut b, &in_process, &mut name_of)?;
    read_mem_ops(&e, &mut b, &in_process)?;
    let graph_mode = read_graph_launches(&e, &mut b, &in_process)?;
    if b.trace.kernels.is_empty() && b.trace.memcpys.is_empty() && b.trace.memsets.is_empty() {
        return Err(NsysError::NoCudaActivity {
            path: path.to_owned(),
        });
    }
    read_api_calls(&e, &mut b, &in_thread_process)?;
    let unended = read_ranges(&e, &mut b, &in_thread_process)?;
    let creations = read_creations(&e, &in_thread_process)?;
    let mut trace = b.finish();
    graph::infer(&mut trace, creations);
    trace.metadata = metadata(&e, &trace, unended)?;
    if graph_mode {
        trace.metadata.notes.push(GRAPH_MODE_NOTE.to_owned());
    }
    if other_processes > 0 {
        trace.metadata.notes.push(format!(
            "the export holds device work of {} more process(es); imported the one with the most \
             (globalPid {}): export one process, or analyse them apart",
            other_processes,
            pid.unwrap_or(0)
        ));
    }
    trace.demangle_kernel_names();
    trace.cap_long_names();
    trace.sort_records();
    trace.validate().map_err(|m| e.malformed(m.to_string()))?;
    let read = e.strings_read();
    Ok((trace, read))
}

type NameOf<'a> = dyn FnMut(&mut TraceBuilder, Option<i64>, &str) -> Result<StrId, CellError> + 'a;

fn read_kernels(
    e: &Export,
    b: &mut TraceBuilder,
    in_process: &dyn Fn(Option<i64>) -> bool,
    name_of: &mut NameOf,
) -> Result<(), NsysError> {
    let cols = device_cols(&[
        ("mangledName", false),
        ("demangledName", false),
        ("graphNodeId", false),
    ]);
    e.rows("CUPTI_ACTIVITY_KIND_KERNEL", &cols, |r| {
        if !in_process(int(r, 5, "globalPid")?) {
            return Ok(());
        }
        // The mangled name when there is one (demangled as recordings are), so kernels align
        // by name with `gapscope record`'s and torch.profiler's.
        let mangled = int(r, 6, "mangledName")?;
        let name = match e.string(mangled)? {
            Some(m) if m.starts_with("_Z") => mangled,
            _ => int(r, 7, "demangledName")?.or(mangled),
        };
        let node = node_id(r, 8)?;
        let name = name_of(b, name, "(unnamed kernel)")?;
        let d = DeviceFields::of(r)?;
        b.trace
            .kernels
            .push(d.kernel(name, (node >> 32) as u32, node));
        Ok(())
    })?;
    Ok(())
}

fn read_mem_ops(
    e: &Export,
    b: &mut TraceBuilder,
    in_process: &dyn Fn(Option<i64>) -> bool,
) -> Result<(), NsysError> {
    for (table, memset) in [
        ("CUPTI_ACTIVITY_KIND_MEMCPY", false),
        ("CUPTI_ACTIVITY_KIND_MEMSET", true),
    ] {
        let cols = device_cols(&[
            ("bytes", false),
            ("copyKind", !memset),
            ("graphNodeId", false),
        ]);
        e.rows(table, &cols, |r| {
            if !in_process(int(r, 5, "globalPid")?) {
                return Ok(());
            }
            let kind = if memset {
                "memset"
            } else {
                let k = int(r, 7, "copyKind")?.unwrap_or(0);
                crate::trace::memcpy_kind_name(u32::try_from(k).unwrap_or(u32::MAX))
            };
            let node = node_id(r, 8)?;
            let d = DeviceFields::of(r)?;
            let op = MemOp {
                start: d.start,
                end: d.end,
                device: d.device,
                stream: d.stream,
                corr: d.corr,
                bytes: int(r, 6, "bytes")?.map_or(0, |v| v.max(0) as u64),
                kind: b.intern(kind),
                graph: (node >> 32) as u32,
                node,
            };
            if memset {
                b.trace.memsets.push(op);
            } else {
                b.trace.memcpys.push(op);
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Graph mode's one record per launch, as one op spanning the replay; whether there were any.
fn read_graph_launches(
    e: &Export,
    b: &mut TraceBuilder,
    in_process: &dyn Fn(Option<i64>) -> bool,
) -> Result<bool, NsysError> {
    let cols = device_cols(&[("graphId", true), ("graphExecId", true)]);
    let mut any = false;
    e.rows("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", &cols, |r| {
        if !in_process(int(r, 5, "globalPid")?) {
            return Ok(());
        }
        let (template, exec) = (uint32(r, 6, "graphId")?, uint32(r, 7, "graphExecId")?);
        let name = b.intern(&format!("CUDA graph {template} (whole replay)"));
        let d = DeviceFields::of(r)?;
        b.trace.kernels.push(d.kernel(name, exec, 0));
        b.trace.graph.execs.push(GraphExec { id: exec, template });
        any = true;
        Ok(())
    })?;
    Ok(any)
}

fn read_api_calls(
    e: &Export,
    b: &mut TraceBuilder,
    in_process: &dyn Fn(Option<i64>) -> bool,
) -> Result<(), NsysError> {
    let cols: [Col; 6] = [
        ("start", true),
        ("end", true),
        ("eventClass", false),
        ("globalTid", true),
        ("correlationId", true),
        ("nameId", true),
    ];
    let mut names: FxHashMap<i64, StrId> = FxHashMap::default();
    e.rows("CUPTI_ACTIVITY_KIND_RUNTIME", &cols, |r| {
        let tid = int(r, 3, "globalTid")?;
        if !in_process(tid) {
            return Ok(());
        }
        let name_id = int(r, 5, "nameId")?.unwrap_or(-1);
        let name = match names.get(&name_id) {
            Some(&name) => name,
            None => {
                let raw = e.string(Some(name_id))?;
                let name = b.intern(api_name(raw.as_deref().unwrap_or("(unnamed API call)")));
                names.insert(name_id, name);
                name
            }
        };
        b.trace.api_calls.push(ApiCall {
            start: uint(r, 0, "start")?,
            end: uint(r, 1, "end")?,
            // nsys's event classes: 0 the runtime, 1 the driver (`ENUM_NSYS_EVENT_CLASS`).
            domain: if int(r, 2, "eventClass")? == Some(1) {
                ApiDomain::Driver
            } else {
                ApiDomain::Runtime
            },
            corr: uint32(r, 4, "correlationId")?,
            thread: thread_of(tid.unwrap_or(0)),
            name,
        });
        Ok(())
    })?;
    Ok(())
}

/// NVTX ranges as plain range markers; returns how many never ended.
fn read_ranges(
    e: &Export,
    b: &mut TraceBuilder,
    in_process: &dyn Fn(Option<i64>) -> bool,
) -> Result<u64, NsysError> {
    let cols: [Col; 6] = [
        ("start", true),
        ("end", true),
        ("eventType", true),
        ("text", false),
        ("textId", false),
        ("globalTid", true),
    ];
    let mut unended = 0;
    e.rows("NVTX_EVENTS", &cols, |r| {
        let tid = int(r, 5, "globalTid")?;
        if !in_process(tid) || !NVTX_RANGE_TYPES.contains(&int(r, 2, "eventType")?.unwrap_or(0)) {
            return Ok(());
        }
        let Some(end) = int(r, 1, "end")? else {
            unended += 1;
            return Ok(());
        };
        let name = match text(r, 3)? {
            Some(t) => t,
            None => match e.string(int(r, 4, "textId")?)? {
                Some(t) => t.to_string(),
                None => return Ok(()),
            },
        };
        let end = u64::try_from(end).map_err(|_| CellError::Negative {
            what: "end",
            value: end,
        })?;
        let name = b.intern(&name);
        b.trace.markers.push(Marker {
            start: uint(r, 0, "start")?,
            end,
            name,
            kind: MarkerKind::Range,
            thread: thread_of(tid.unwrap_or(0)),
            cell: None,
        });
        Ok(())
    })?;
    Ok(unended)
}

fn read_creations(
    e: &Export,
    in_process: &dyn Fn(Option<i64>) -> bool,
) -> Result<Vec<Creation>, NsysError> {
    let cols: [Col; 4] = [
        ("start", true),
        ("globalTid", true),
        ("graphNodeId", true),
        ("originalGraphNodeId", false),
    ];
    let mut creations = Vec::new();
    e.rows("CUDA_GRAPH_NODE_EVENTS", &cols, |r| {
        let tid = int(r, 1, "globalTid")?;
        if !in_process(tid) {
            return Ok(());
        }
        creations.push(Creation {
            at: uint(r, 0, "start")?,
            thread: thread_of(tid.unwrap_or(0)),
            id: uint(r, 2, "graphNodeId")?,
            original: int(r, 3, "originalGraphNodeId")?.map(|v| v as u64),
        });
        Ok(())
    })?;
    Ok(creations)
}

/// Device, versions, notes.
fn metadata(e: &Export, trace: &Trace, unended: u64) -> Result<Metadata, NsysError> {
    let export = e.key_values("META_DATA_EXPORT")?;
    let env = e.key_values("TARGET_INFO_SYSTEM_ENV")?;
    let version = export.get("EXPORT_PRODUCT_VERSION").cloned();
    let schema = export.get("EXPORT_SCHEMA_VERSION").cloned();
    let mut md = Metadata {
        tool: format!(
            "gapscope {} (Nsight Systems import)",
            env!("CARGO_PKG_VERSION")
        ),
        source: Source::Nsys,
        world: 1,
        unended_ranges: unended,
        notes: vec![NSYS_NOTE.to_owned()],
        ..Metadata::default()
    };
    let major = |v: &str| v.split('.').next().map(str::to_owned);
    let known_schema = TESTED_VERSIONS
        .iter()
        .any(|(_, s)| schema.as_deref().is_some_and(|x| major(x) == major(s)));
    if !known_schema {
        md.notes.push(format!(
            "Nsight Systems export schema {} was not tested (tested: {}): tables read by name, \
             check the figures",
            schema.as_deref().unwrap_or("(not stated)"),
            tested()
        ));
    }
    for (key, value) in [("nsys_version", &version), ("nsys_export_schema", &schema)] {
        if let Some(v) = value {
            md.workload.insert(key.to_owned(), v.clone().into());
        }
    }
    // 13000 → "13.0", as CUDA numbers its versions.
    md.versions.driver = env
        .get("CudaDriverVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    let device = trace.first_device();
    let cols: [Col; 4] = [
        ("name", false),
        ("cuDevice", false),
        ("computeMajor", false),
        ("computeMinor", false),
    ];
    let mut devices = Vec::new();
    e.rows("TARGET_INFO_GPU", &cols, |r| {
        let index = int(r, 1, "cuDevice")?.and_then(|v| u32::try_from(v).ok());
        let capability = match (int(r, 2, "computeMajor")?, int(r, 3, "computeMinor")?) {
            (Some(a), Some(b)) => format!("{a}.{b}"),
            _ => String::new(),
        };
        if let Some(name) = text(r, 0)? {
            devices.push(DeviceInfo {
                name,
                index: index.unwrap_or(0),
                compute_capability: capability,
            });
        }
        Ok(())
    })?;
    md.device = devices
        .iter()
        .find(|d| d.index == device)
        .or(devices.first())
        .cloned();
    Ok(md)
}
