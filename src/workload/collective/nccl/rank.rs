//! This process's place among the NCCL ranks ([`RankInfo`], from launcher variables) and the
//! unique-id file through which ranks meet.
#![forbid(unsafe_code)]

use super::ffi::{NcclLib, NcclUniqueId};
use crate::settings::Setting;
use crate::workload::collective::WorkloadError;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Environment variable naming the unique-id file for multi-process runs.
pub const ID_FILE_ENV: &str = Setting::NcclIdFile.name();
/// Seconds ranks other than 0 wait for the unique-id file (default 120).
pub const ID_TIMEOUT_ENV: &str = Setting::NcclIdTimeoutS.name();
/// A unique-id file older than this many seconds before this process looked for it is stale
/// (default 120).
pub const ID_MAX_AGE_ENV: &str = Setting::NcclIdMaxAgeS.name();
const ID_MAGIC: &[u8; 8] = b"GSNCCLID";

/// This process's place among the ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: usize,
    pub world: usize,
    /// Rank within the node (device to use), when the launcher says.
    pub local_rank: Option<usize>,
    /// Where it came from: "torchrun", "openmpi", "slurm", "pmi" or "default".
    pub source: &'static str,
}

impl RankInfo {
    pub fn single() -> RankInfo {
        RankInfo {
            rank: 0,
            world: 1,
            local_rank: Some(0),
            source: "default",
        }
    }
}

/// Detects rank and world size from launcher variables, read through `get` (testable).
pub fn detect_rank(get: &dyn Fn(&str) -> Option<String>) -> Result<RankInfo, WorkloadError> {
    const SOURCES: &[(&str, &str, &str, &str)] = &[
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        (
            "openmpi",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ),
        ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ];
    let parse = |name: &str, v: String| -> Result<usize, WorkloadError> {
        v.trim().parse::<usize>().map_err(|_| {
            WorkloadError::Config(format!("{name}={v:?} is not a non-negative integer"))
        })
    };
    for &(source, rk, wk, lk) in SOURCES {
        let (Some(r), Some(w)) = (get(rk), get(wk)) else {
            continue;
        };
        let rank = parse(rk, r)?;
        let world = parse(wk, w)?;
        if world == 0 || rank >= world {
            return Err(WorkloadError::Config(format!(
                "{rk}={rank} is not below {wk}={world}"
            )));
        }
        let local_rank = match get(lk) {
            Some(v) => Some(parse(lk, v)?),
            None => None,
        };
        return Ok(RankInfo {
            rank,
            world,
            local_rank,
            source,
        });
    }
    Ok(RankInfo::single())
}

/// [`detect_rank`] on the process environment.
pub fn detect_rank_from_env() -> Result<RankInfo, WorkloadError> {
    detect_rank(&|k| std::env::var(k).ok())
}

fn io_err(path: &Path, e: impl fmt::Display) -> WorkloadError {
    WorkloadError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

/// Rank 0: writes `id` to `path` atomically (temporary file, fsync, rename).
pub fn write_id_file(path: &Path, id: &NcclUniqueId) -> Result<(), WorkloadError> {
    let tmp = PathBuf::from(format!("{}.tmp.{}", path.display(), std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    f.write_all(ID_MAGIC).map_err(|e| io_err(&tmp, e))?;
    f.write_all(&id.internal).map_err(|e| io_err(&tmp, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

/// Reads a complete id file no older than `not_before`; `None` while absent, partial or stale.
pub fn read_id_file(path: &Path, not_before: SystemTime) -> Option<NcclUniqueId> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.modified().ok()? < not_before {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes.len() != ID_MAGIC.len() + 128 || &bytes[..ID_MAGIC.len()] != ID_MAGIC {
        return None;
    }
    let mut id = NcclUniqueId { internal: [0; 128] };
    id.internal.copy_from_slice(&bytes[ID_MAGIC.len()..]);
    Some(id)
}

fn env_secs(setting: Setting, default: u64) -> Result<u64, WorkloadError> {
    setting
        .parse("a number of seconds", |t| t.parse().ok())
        .map(|secs| secs.unwrap_or(default))
        .map_err(|e| WorkloadError::Config(e.to_string()))
}

/// Shares the unique id through `path`: rank 0 creates and writes it, the others poll.
pub fn exchange_unique_id(
    lib: &NcclLib,
    path: &Path,
    rank: usize,
) -> Result<NcclUniqueId, WorkloadError> {
    if rank == 0 {
        let _ = std::fs::remove_file(path);
        let id = lib.unique_id()?;
        write_id_file(path, &id)?;
        return Ok(id);
    }
    let timeout = Duration::from_secs(env_secs(Setting::NcclIdTimeoutS, 120)?);
    let max_age = Duration::from_secs(env_secs(Setting::NcclIdMaxAgeS, 120)?);
    let not_before = SystemTime::now()
        .checked_sub(max_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let t0 = Instant::now();
    loop {
        if let Some(id) = read_id_file(path, not_before) {
            return Ok(id);
        }
        if t0.elapsed() > timeout {
            return Err(WorkloadError::Io {
                path: path.display().to_string(),
                detail: format!(
                    "rank {rank}: no fresh NCCL unique id after {} s (is rank 0 running, and does {ID_FILE_ENV} name the same path on a shared filesystem?)",
                    timeout.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn rank_detection() {
        assert_eq!(detect_rank(&env(&[])).unwrap(), RankInfo::single());
        let r = detect_rank(&env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
        ]))
        .unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (3, 8, Some(3), "torchrun")
        );
        let r = detect_rank(&env(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "5"),
        ]))
        .unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (5, 16, Some(5), "openmpi")
        );
        let r = detect_rank(&env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")])).unwrap();
        assert_eq!(
            (r.rank, r.world, r.local_rank, r.source),
            (1, 2, None, "slurm")
        );
        // torchrun wins over slurm when both are present.
        let r = detect_rank(&env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
        ]))
        .unwrap();
        assert_eq!(r.source, "torchrun");
        // RANK without WORLD_SIZE is ignored.
        assert_eq!(
            detect_rank(&env(&[("RANK", "1")])).unwrap(),
            RankInfo::single()
        );
        assert!(detect_rank(&env(&[("RANK", "8"), ("WORLD_SIZE", "8")])).is_err());
        assert!(detect_rank(&env(&[("RANK", "x"), ("WORLD_SIZE", "8")])).is_err());
        assert!(detect_rank(&env(&[("RANK", "0"), ("WORLD_SIZE", "0")])).is_err());
    }

    #[test]
    fn id_file_roundtrip_and_staleness() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id");
        let mut id = NcclUniqueId { internal: [0; 128] };
        for (i, b) in id.internal.iter_mut().enumerate() {
            *b = i as u8;
        }
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        assert_eq!(read_id_file(&path, long_ago), None);
        write_id_file(&path, &id).unwrap();
        assert_eq!(read_id_file(&path, long_ago), Some(id));
        // A file older than `not_before` is stale.
        let future = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(read_id_file(&path, future), None);
        // A truncated file is not read.
        std::fs::write(&path, b"GSNCCLID123").unwrap();
        assert_eq!(read_id_file(&path, long_ago), None);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
