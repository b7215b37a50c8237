//! Rank processes for `gapscope run` on real NCCL.
//!
//! NCCL runs one rank per process, and before 2.29 it reads `NCCL_GRAPH_MIXING_SUPPORT` once
//! per process: a sweep over several graph usage modes on such an NCCL needs one set of rank
//! processes per mode. From 2.29 the mode is a field of each communicator's config
//! (`ncclConfig_t.graphUsageMode`), so one set runs every mode. `gapscope run` starts the sets
//! itself — the same binary, one process per GPU, the ranks meeting through a unique-id file —
//! and collects one trace per rank. A rank that fails or runs past the timeout stops its set
//! and the run, with one line naming it.
#![forbid(unsafe_code)]

use crate::workload::collective::nccl::{ID_FILE_ENV, ModeRoute, NcclVersion};
use crate::workload::collective::{GraphUsageMode, WorkloadError};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process sets a sweep over `modes` needs on this NCCL: one per mode when the mode travels
/// through the environment (read once per process), else one for all.
pub fn mode_sets(version: NcclVersion, modes: &[u8]) -> Vec<Vec<u8>> {
    let per_process = modes.iter().any(|&m| {
        GraphUsageMode::from_u8(m)
            .is_some_and(|mode| matches!(ModeRoute::select(version, mode), ModeRoute::MixingEnv(_)))
    });
    if per_process {
        modes.iter().map(|&m| vec![m]).collect()
    } else {
        vec![modes.to_vec()]
    }
}

/// One rank process to start.
#[derive(Debug, Clone)]
pub struct RankLaunch {
    pub rank: usize,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Its stdout and stderr go here.
    pub log: PathBuf,
}

impl RankLaunch {
    /// The launch of rank `rank` of `world`, on GPU `rank`, meeting the others through
    /// `id_file`.
    pub fn new(
        program: &Path,
        args: Vec<String>,
        rank: usize,
        world: usize,
        id_file: &Path,
        log: PathBuf,
    ) -> RankLaunch {
        RankLaunch {
            rank,
            program: program.to_owned(),
            args,
            env: vec![
                ("RANK".into(), rank.to_string()),
                ("WORLD_SIZE".into(), world.to_string()),
                ("LOCAL_RANK".into(), rank.to_string()),
                (ID_FILE_ENV.into(), id_file.display().to_string()),
            ],
            log,
        }
    }
}

/// The last non-empty line of a log (what a failing rank said last), at most 300 characters.
fn last_line(log: &Path) -> String {
    let Ok(f) = std::fs::File::open(log) else {
        return "no output".into();
    };
    let line = BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .last()
        .unwrap_or_else(|| "no output".into());
    line.chars().take(300).collect()
}

fn stop(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
    }
    for (_, c) in children.iter_mut() {
        let _ = c.wait();
    }
}

/// Starts every rank of a set and waits for all of them. When one exits unsuccessfully, or
/// `timeout` passes, the others are stopped (a rank waiting on a dead peer would otherwise
/// wait for ever) and the error names the rank and the last line it printed.
pub fn run_set(launches: &[RankLaunch], timeout: Duration, set: &str) -> Result<(), WorkloadError> {
    let mut children: Vec<(usize, Child)> = Vec::with_capacity(launches.len());
    for l in launches {
        let log = std::fs::File::create(&l.log).map_err(|e| WorkloadError::Io {
            path: l.log.display().to_string(),
            detail: e.to_string(),
        })?;
        let err = log.try_clone().map_err(|e| WorkloadError::Io {
            path: l.log.display().to_string(),
            detail: e.to_string(),
        })?;
        let spawned = Command::new(&l.program)
            .args(&l.args)
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn();
        match spawned {
            Ok(c) => children.push((l.rank, c)),
            Err(e) => {
                stop(&mut children);
                return Err(WorkloadError::Config(format!(
                    "{set}: cannot start rank {}: {e}",
                    l.rank
                )));
            }
        }
    }
    let started = Instant::now();
    let mut running = children;
    let mut finished = Vec::new();
    while !running.is_empty() {
        let mut i = 0;
        while i < running.len() {
            match running[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (rank, _) = running.remove(i);
                    if !status.success() {
                        stop(&mut running);
                        let log = &launches
                            .iter()
                            .find(|l| l.rank == rank)
                            .expect("launched")
                            .log;
                        let how = status.code().map_or_else(
                            || "was killed by a signal".to_owned(),
                            |c| format!("exited with {c}"),
                        );
                        return Err(WorkloadError::Config(format!(
                            "{set}: rank {rank} {how}: {} (log: {})",
                            last_line(log),
                            log.display()
                        )));
                    }
                    finished.push(rank);
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let rank = running[i].0;
                    stop(&mut running);
                    return Err(WorkloadError::Config(format!(
                        "{set}: cannot wait for rank {rank}: {e}"
                    )));
                }
            }
        }
        if !running.is_empty() && started.elapsed() > timeout {
            let waiting: Vec<String> = running.iter().map(|(r, _)| r.to_string()).collect();
            stop(&mut running);
            return Err(WorkloadError::Config(format!(
                "{set}: rank(s) {} still running after {} s (ranks {} finished); stopped. Raise --rank-timeout if the sweep needs longer",
                waiting.join(", "),
                timeout.as_secs(),
                if finished.is_empty() {
                    "none".to_owned()
                } else {
                    finished
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_get_their_own_processes_only_where_nccl_reads_them_from_the_environment() {
        let old = NcclVersion::new(2, 28, 3);
        let new = NcclVersion::new(2, 29, 0);
        assert_eq!(mode_sets(old, &[0, 1, 2]), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(mode_sets(new, &[0, 1, 2]), vec![vec![0, 1, 2]]);
        assert_eq!(
            mode_sets(NcclVersion::new(2, 32, 3), &[2, 1]),
            vec![vec![2, 1]]
        );
        assert_eq!(mode_sets(old, &[2]), vec![vec![2]]);
    }

    fn shell(dir: &Path, rank: usize, script: &str) -> RankLaunch {
        RankLaunch::new(
            Path::new("sh"),
            vec!["-c".into(), script.into()],
            rank,
            2,
            &dir.join("id"),
            dir.join(format!("rank{rank}.log")),
        )
    }

    #[test]
    fn a_set_succeeds_when_every_rank_does_and_ranks_see_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/${}\" > \"{}/out-$RANK\"",
            ID_FILE_ENV,
            dir.path().display()
        );
        let set = [shell(dir.path(), 0, &script), shell(dir.path(), 1, &script)];
        run_set(&set, Duration::from_secs(30), "modes 1").unwrap();
        let id = dir.path().join("id").display().to_string();
        for r in 0..2 {
            let got = std::fs::read_to_string(dir.path().join(format!("out-{r}"))).unwrap();
            assert_eq!(got.trim(), format!("{r}/2/{r}/{id}"));
        }
    }

    #[test]
    fn a_failing_rank_stops_the_others_and_is_named_with_its_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let set = [
            // A rank that would wait for ever on its dead peer.
            shell(dir.path(), 0, "sleep 60"),
            shell(
                dir.path(),
                1,
                "echo starting; echo 'NCCL error: unhandled system error' >&2; exit 3",
            ),
        ];
        let t0 = Instant::now();
        let err = run_set(&set, Duration::from_secs(60), "modes 2")
            .unwrap_err()
            .to_string();
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the sleeping rank was stopped"
        );
        assert!(
            err.contains("modes 2: rank 1 exited with 3: NCCL error: unhandled system error"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn a_set_past_its_timeout_is_stopped_and_says_which_ranks_were_left() {
        let dir = tempfile::tempdir().unwrap();
        let set = [
            shell(dir.path(), 0, "true"),
            shell(dir.path(), 1, "sleep 60"),
        ];
        let err = run_set(&set, Duration::from_millis(300), "modes 0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rank(s) 1 still running after 0 s (ranks 0 finished)"),
            "{err}"
        );
    }
}
