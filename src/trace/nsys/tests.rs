//! The importer on a synthetic export built here from the schema (the tables and columns of an
//! Nsight Systems 2025.3 export that it reads), and on the real exports of `traces/nsys/`.

use super::*;
use crate::trace::{ApiDomain, MarkerKind, NodeType, Source};
use rusqlite::Connection;
use std::path::Path;

fn real(name: &str) -> Result<Trace, NsysError> {
    read_nsys(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("traces/nsys")
            .join(name),
    )
}

/// The schema of the tables read, as nsys 2025.3.2 writes them (the columns not read left out).
const SCHEMA: &str = "
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER, mangledName INTEGER, graphNodeId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, graphNodeId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT, globalTid INTEGER,
  textId INTEGER);
CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start INTEGER NOT NULL, end INTEGER, eventClass INTEGER, globalTid INTEGER,
  nameId INTEGER, graphNodeId INTEGER NOT NULL, originalGraphNodeId INTEGER);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2025.3.2.0'), ('EXPORT_SCHEMA_VERSION', '3.20.3');
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H200', 0, 9, 0);
";

/// Process 538 (nsys's `globalPid` 538 << 24 on VM 0), its main thread.
const PID: i64 = 538 << 24;
const TID: i64 = PID + 538;

/// A synthetic node-mode export: two eager steps (NVTX `step`), then a graph captured inside
/// an `ncclAllGather` range — kernel, event wait, copy, event record, kernel — instantiated
/// (its nodes cloned into graph 2) and replayed twice.
fn synthetic(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("synthetic.sqlite");
    let db = Connection::open(&path).unwrap();
    db.execute_batch(SCHEMA).unwrap();
    let strings = [
        (1, "_Z4gemmPf"),
        (2, "gemm(float *)"),
        (3, "cudaLaunchKernel_v7000"),
        (4, "cudaStreamWaitEvent_v3020"),
        (5, "cudaMemcpyAsync_v3020"),
        (6, "cudaEventRecordWithFlags_v11010"),
        (7, "cudaGraphInstantiateWithFlags_v11040"),
        (8, "cudaGraphLaunch_v10000"),
        (9, "cuLaunchKernel"),
    ];
    for (id, s) in strings {
        db.execute("INSERT INTO StringIds VALUES (?1, ?2)", (id, s))
            .unwrap();
    }
    let api = |start: i64, end: i64, class: i64, corr: i64, name: i64| {
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
            (start, end, class, TID, corr, name),
        )
        .unwrap();
    };
    let kernel = |start: i64, corr: i64, node: Option<i64>| {
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, 1, 7, ?3, ?4, 2, 2, 1, ?5)",
            (start, start + 1_000, corr, PID, node),
        )
        .unwrap();
    };
    let copy = |start: i64, corr: i64, node: Option<i64>| {
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?1, ?2, 0, 7, ?3, ?4, 4096, 8, ?5)",
            (start, start + 500, corr, PID, node),
        )
        .unwrap();
    };
    let range = |start: i64, end: i64, text: &str| {
        db.execute(
            "INSERT INTO NVTX_EVENTS VALUES (?1, ?2, 59, ?3, ?4, NULL)",
            (start, end, text, TID),
        )
        .unwrap();
    };
    // Eager steps: kernel, copy, kernel, 10 µs apart.
    for step in 0..2i64 {
        let t = 100_000 + step * 50_000;
        range(t, t + 40_000, "step");
        for (i, corr) in [(0, 10 + 3 * step), (1, 11 + 3 * step), (2, 12 + 3 * step)] {
            let at = t + 1_000 + i * 10_000;
            api(at, at + 2_000, 0, corr, if i == 1 { 5 } else { 3 });
            if i == 1 {
                copy(at + 5_000, corr, None);
            } else {
                kernel(at + 5_000, corr, None);
            }
        }
    }
    // Capture inside ncclAllGather: nodes 0..5 of graph 1, each inside its creating call.
    range(300_000, 400_000, "ncclAllGather");
    let creators = [3, 4, 5, 6, 3];
    for (i, name) in creators.into_iter().enumerate() {
        let at = 310_000 + i as i64 * 10_000;
        api(at, at + 1_000, 0, 100 + i as i64, name);
        db.execute(
            "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?1, ?1, 77, ?2, 0, ?3, NULL)",
            (at + 500, TID, (1i64 << 32) | i as i64),
        )
        .unwrap();
    }
    // The kernel launches inside capture go through the driver too (cuBLAS's way).
    api(310_100, 310_900, 1, 200, 9);
    // Instantiation: each clone reported made, then made from its template.
    api(500_000, 510_000, 0, 300, 7);
    for i in 0..5i64 {
        for original in [None, Some((1i64 << 32) | i)] {
            db.execute(
                "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?1, ?1, 77, ?2, 0, ?3, ?4)",
                (501_000 + i * 100, TID, (2i64 << 32) | i, original),
            )
            .unwrap();
        }
    }
    // Two replays: kernel, (wait), copy, (record), kernel.
    for r in 0..2i64 {
        let t = 600_000 + r * 20_000;
        let corr = 400 + r;
        api(t, t + 3_000, 0, corr, 8);
        kernel(t + 4_000, corr, Some(2 << 32));
        copy(t + 7_000, corr, Some((2 << 32) | 2));
        kernel(t + 9_000, corr, Some((2 << 32) | 4));
    }
    path
}

#[test]
fn a_synthetic_export_imports_records_ranges_and_an_inferred_dag() {
    let dir = tempfile::tempdir().unwrap();
    let t = read_nsys(&synthetic(dir.path())).unwrap();
    assert_eq!(t.metadata.source, Source::Nsys);
    assert!(t.metadata.notes.iter().any(|n| n == NSYS_NOTE));
    assert_eq!(
        t.metadata.device.as_ref().unwrap().compute_capability,
        "9.0"
    );
    assert_eq!(t.metadata.workload["nsys_version"], "2025.3.2.0");
    assert_eq!((t.kernels.len(), t.memcpys.len()), (8, 4));
    assert_eq!(
        t.str(t.kernels[0].name),
        "gemm(float*)",
        "mangled, demangled"
    );
    assert_eq!(t.str(t.memcpys[0].kind), "DtoD");
    let replayed = t.kernels.iter().find(|k| k.node != 0).unwrap();
    assert_eq!((replayed.graph, replayed.node), (2, 2 << 32));
    let call = &t.api_calls[0];
    assert_eq!((t.str(call.name), call.thread), ("cudaLaunchKernel", 538));
    assert!(t.api_calls.iter().any(|a| a.domain == ApiDomain::Driver));
    assert_eq!(t.markers.len(), 3);
    assert!(t.markers.iter().all(|m| m.kind == MarkerKind::Range));

    let dag = &t.graph;
    assert!(dag.inferred);
    assert_eq!(dag.nodes.len(), 10, "a clone reported twice is one node");
    let node = |id: u64| dag.nodes.iter().find(|n| n.id == id).unwrap();
    let types: Vec<NodeType> = (0..5).map(|i| node((1 << 32) | i).node_type).collect();
    assert_eq!(
        types,
        [
            NodeType::Kernel,
            NodeType::EventWait,
            NodeType::Memcpy,
            NodeType::EventRecord,
            NodeType::Kernel
        ]
    );
    let wait = node((2 << 32) | 1);
    assert_eq!(
        wait.node_type,
        NodeType::EventWait,
        "a clone takes its template's type"
    );
    assert!(wait.external);
    assert_eq!(wait.cloned_from, Some((1 << 32) | 1));
    assert_eq!(t.str(wait.created_by.unwrap()), "cudaStreamWaitEvent");
    assert_eq!(t.str(wait.library_call.unwrap()), "ncclAllGather");
    assert!(!node(1 << 32).external);
    assert_eq!(
        t.str(node(1 << 32).created_by.unwrap()),
        "cudaLaunchKernel",
        "the runtime call, not the driver call inside it"
    );
    // The chain of capture, in the template and in its clones.
    for g in [1u64, 2] {
        for i in 0..4u64 {
            let e = crate::trace::GraphEdge {
                from: (g << 32) | i,
                to: (g << 32) | (i + 1),
            };
            assert!(dag.edges.contains(&e), "{e:?}");
        }
    }
    assert_eq!(dag.edges.len(), 8);
    assert_eq!(dag.execs, [crate::trace::GraphExec { id: 2, template: 1 }]);
}

#[test]
fn the_analysis_calls_the_synthetic_wait_probably_external() {
    let dir = tempfile::tempdir().unwrap();
    let t = read_nsys(&synthetic(dir.path())).unwrap();
    let a = crate::analysis::analyze(
        std::slice::from_ref(&t),
        &["synthetic".into()],
        &Default::default(),
    );
    let labels: Vec<String> = a
        .cells
        .iter()
        .flat_map(|c| &c.idle_by_cause)
        .map(|c| c.example.clone())
        .collect();
    let wait = labels
        .iter()
        .find(|l| l.starts_with("probably external"))
        .unwrap_or_else(|| panic!("{labels:?}"));
    assert!(
        wait.contains("created by cudaStreamWaitEvent inside ncclAllGather"),
        "{wait}"
    );
    assert!(wait.contains("probably NCCL graph usage mode 2"), "{wait}");
}

#[test]
fn a_gzip_compressed_export_reads_as_the_plain_one() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let plain = synthetic(dir.path());
    let gz = dir.path().join("synthetic.sqlite.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    assert!(is_sqlite_file(&gz) && is_sqlite_file(&plain));
    assert_eq!(read_nsys(&gz).unwrap(), read_nsys(&plain).unwrap());
}

#[test]
fn other_databases_and_bad_rows_are_one_error_each() {
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str, sql: &str| {
        let p = dir.path().join(name);
        Connection::open(&p).unwrap().execute_batch(sql).unwrap();
        p
    };
    let other = open("other.sqlite", "CREATE TABLE t (a INTEGER);");
    let e = read_nsys(&other).unwrap_err();
    assert!(matches!(e, NsysError::NotAnExport { .. }), "{e}");
    assert!(e.to_string().contains("no table StringIds"), "{e}");

    let empty = open("empty.sqlite", SCHEMA);
    let e = read_nsys(&empty).unwrap_err().to_string();
    assert!(e.contains("without CUDA device activity"), "{e}");

    let no_column = open(
        "no-column.sqlite",
        "CREATE TABLE StringIds (id INTEGER, value TEXT);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2);",
    );
    let e = read_nsys(&no_column).unwrap_err().to_string();
    assert!(
        e.contains("table CUPTI_ACTIVITY_KIND_KERNEL has no column deviceId"),
        "{e}"
    );

    let bad = open("bad.sqlite", SCHEMA);
    let db = Connection::open(&bad).unwrap();
    for row in [
        "('x', 2, 0, 1, 7, 1, NULL, 1, 1, 1, NULL)",
        "(-5, 2, 0, 1, 7, 1, NULL, 1, 1, 1, NULL)",
        "(5, 2, 0, 1, 7, 1, NULL, 1, 1, 1, NULL)",
        "(1, 2, 0, 1, 99999999999, 1, NULL, 1, 1, 1, NULL)",
    ] {
        db.execute_batch(&format!(
            "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES {row};"
        ))
        .unwrap();
        let e = read_nsys(&bad).unwrap_err();
        assert!(matches!(e, NsysError::Malformed { .. }), "{row}: {e}");
        assert_eq!(e.to_string().lines().count(), 1);
    }

    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, b"SQLite format 3\0 and then garbage, not a database").unwrap();
    let e = read_nsys(&junk).unwrap_err();
    assert!(matches!(e, NsysError::Sqlite { .. }), "{e}");
}

#[test]
fn a_report_without_nsys_names_the_export_command() {
    let e = NsysError::NoNsys {
        path: "run.nsys-rep".into(),
        sqlite: "run.sqlite".into(),
    };
    assert_eq!(
        e.to_string(),
        "run.nsys-rep: an Nsight Systems report, and no `nsys` on PATH to export it: run \
         `nsys export --type sqlite --output run.sqlite run.nsys-rep` and pass run.sqlite"
    );
    assert!(is_report_file(Path::new("a/run.nsys-rep")));
    assert!(!is_report_file(Path::new("run.sqlite")));
}

#[test]
fn api_names_lose_nsys_version_suffixes() {
    for (raw, name) in [
        ("cudaLaunchKernel_v7000", "cudaLaunchKernel"),
        ("cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernel_ptsz"),
        ("cuGetProcAddress_v2", "cuGetProcAddress"),
        ("cuLaunchKernelEx", "cuLaunchKernelEx"),
        ("cuda_v", "cuda_v"),
    ] {
        assert_eq!(db::api_name(raw), name);
    }
}

#[test]
fn the_node_mode_export_has_the_serial_event_graphs() {
    let t = real("serial-event-node.sqlite").unwrap();
    assert_eq!(t.metadata.device.as_ref().unwrap().name, "NVIDIA H200");
    assert_eq!(t.metadata.versions.driver.as_deref(), Some("13.0"));
    let external: Vec<(u64, NodeType)> = t
        .graph
        .nodes
        .iter()
        .filter(|n| n.external)
        .map(|n| (n.id, n.node_type))
        .collect();
    // Mode 2's template (graph 4) and its executable graph (5): wait and record nodes.
    assert_eq!(
        external,
        [
            (0x4_0000_0001, NodeType::EventWait),
            (0x4_0000_0003, NodeType::EventRecord),
            (0x5_0000_0001, NodeType::EventWait),
            (0x5_0000_0003, NodeType::EventRecord),
        ]
    );
    let replays = t.kernels.iter().filter(|k| k.graph == 5).count();
    assert_eq!(replays, 120, "60 replays of two kernels");
}

#[test]
fn the_graph_mode_export_has_one_op_per_launch_and_says_what_it_cannot_show() {
    let t = real("serial-event-graph.sqlite").unwrap();
    assert!(t.metadata.notes.iter().any(|n| n == GRAPH_MODE_NOTE));
    let launches: Vec<_> = t.kernels.iter().filter(|k| k.graph != 0).collect();
    assert_eq!(launches.len(), 120);
    assert!(launches.iter().all(|k| k.node == 0));
    assert!(t.graph.nodes.is_empty());
}

#[test]
fn the_runner_under_nsys_left_no_cuda_activity() {
    // `gapscope run` under nsys: CUPTI allows one subscriber, nsys held it, the runner
    // stopped; the export has no device records.
    let e = real("ht-decode-node.sqlite").unwrap_err();
    assert!(matches!(e, NsysError::NoCudaActivity { .. }), "{e}");
}

/// `StringIds` padded with `rows` strings no record names, each 5,000 characters (an export
/// of 200,000 such rows once took 999 MB resident: every string was read at open).
fn pad_strings(export: &Path, rows: i64) {
    let mut db = Connection::open(export).unwrap();
    let tx = db.transaction().unwrap();
    let padding = "p".repeat(5_000);
    for id in 0..rows {
        tx.execute(
            "INSERT INTO StringIds VALUES (?1, ?2)",
            (1_000 + id, &padding),
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

/// The same export with `StringIds` keyless (`id INTEGER`, no primary key, no index), so an
/// id is found only by a scan.
fn unkey_strings(export: &Path) {
    Connection::open(export)
        .unwrap()
        .execute_batch(
            "CREATE TABLE keyless (id INTEGER, value TEXT NOT NULL);
             INSERT INTO keyless SELECT id, value FROM StringIds;
             DROP TABLE StringIds;
             ALTER TABLE keyless RENAME TO StringIds;",
        )
        .unwrap();
}

#[test]
fn only_the_strings_the_records_name_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let plain = synthetic(dir.path());
    let (expected, used) = db::import_counting_strings(&plain, &plain).unwrap();
    // The mangled kernel name (its demangled one is not needed) and the 7 API names.
    assert_eq!(used, 8);
    let padded = dir.path().join("padded.sqlite");
    std::fs::copy(&plain, &padded).unwrap();
    pad_strings(&padded, 2_000);
    let (trace, read) = db::import_counting_strings(&padded, &padded).unwrap();
    assert_eq!(trace, expected);
    assert_eq!(read, used, "of {} strings", used + 2_000);
    // Without a key on the ids, one scan reads every string a column names: the kernel's
    // demangled name too, none of the padding.
    unkey_strings(&padded);
    let (trace, read) = db::import_counting_strings(&padded, &padded).unwrap();
    assert_eq!(trace, expected);
    assert_eq!(read, used + 1);
}
