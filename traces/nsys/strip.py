"""Makes an Nsight Systems SQLite export small enough to commit: keeps the tables gapscope's
importer reads (src/trace/nsys/), drops the rest (the capture's environment variables among
them), keeps the columns it reads (READ), drops the rows of API calls it never reads (UNREAD_CALLS),
two rows of TARGET_INFO_SYSTEM_ENV (driver versions) and the strings still used, then VACUUMs.

  python3 traces/nsys/strip.py report.sqlite traces/nsys/report.sqlite
"""
import shutil
import sqlite3
import sys

KEEP = {
    "StringIds", "META_DATA_EXPORT", "TARGET_INFO_GPU", "TARGET_INFO_SYSTEM_ENV",
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS",
    "CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS",
}
# Columns the importer reads, per table (the others are dropped).
READ = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "mangledName", "graphNodeId"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "bytes", "copyKind", "graphNodeId"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"],
}
# API calls that launch nothing and that the analysis never reads (queries, lookups, event
# creation): their rows go.
UNREAD_CALLS = ("cuGetProcAddress%", "cudaStreamIsCapturing%", "cudaEventQuery%", "cuKernelGetName%",
                "cuKernelGetAttribute%", "cudaEventCreateWithFlags%", "cudaEventDestroy%")
# Columns holding StringIds ids, per table.
STRING_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["demangledName", "shortName", "mangledName"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["nameId"],
    "NVTX_EVENTS": ["textId"],
    "CUDA_GRAPH_NODE_EVENTS": ["nameId"],
    "CUDA_GRAPH_EVENTS": ["nameId"],
}


def main(src, dst):
    shutil.copyfile(src, dst)
    db = sqlite3.connect(dst)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for t in tables:
        if t not in KEEP:
            db.execute(f'DROP TABLE "{t}"')
    for view in [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]:
        db.execute(f'DROP VIEW "{view}"')
    for t, cols in READ.items():
        if t not in tables:
            continue
        for (c,) in [(r[1],) for r in db.execute(f'PRAGMA table_info("{t}")')]:
            if c not in cols:
                db.execute(f'ALTER TABLE "{t}" DROP COLUMN "{c}"')
    for pattern in UNREAD_CALLS:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN "
                   "(SELECT id FROM StringIds WHERE value LIKE ?)", (pattern,))
    db.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name NOT IN ('CudaDriverVersion', 'NvDriverVersion')")
    used = set()
    for t, cols in STRING_COLUMNS.items():
        if t not in tables:
            continue
        have = {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')}
        for c in cols:
            if c in have:
                used.update(r[0] for r in db.execute(f'SELECT DISTINCT "{c}" FROM "{t}"') if r[0] is not None)
    db.execute("CREATE TEMP TABLE used(id INTEGER PRIMARY KEY)")
    db.executemany("INSERT INTO used VALUES (?)", [(i,) for i in used])
    db.execute("DELETE FROM StringIds WHERE id NOT IN (SELECT id FROM used)")
    db.commit()
    db.execute("VACUUM")
    db.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
