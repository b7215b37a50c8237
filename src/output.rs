//! Output files written whole or not at all (every output gapscope writes: traces, reports,
//! man pages, a `try` folder's plan): each goes to a temporary file beside its target,
//! renamed into place once complete ([`stage_output`], [`CommitLock::keep`]). One lock guards
//! every temporary and every rename: a signal handler that removes the temporaries
//! ([`exit_removing_temporaries`]) waits for a commit in progress and exits holding it, so a
//! set of renames is never cut in two. Temporaries left by killed processes (SIGKILL) are
//! removed by the next write into their folder.
//!
//! Targets that are not regular files are written in place: devices and FIFOs, and open file
//! descriptors named by path (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`), which a rename
//! could not replace.
//!
//! The same exit stops and removes what a command holds outside its outputs: a child process
//! it waits for ([`run_child`], `nsys export`) is killed with its process group, and a
//! temporary folder ([`TemporaryFolder`]) removed. Folders left by killed processes are
//! removed by the next process that makes one.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Temporary files being written. Holding this lock is holding the commit ([`CommitLock`]).
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static TEMPORARY_COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn temporaries() -> MutexGuard<'static, Vec<PathBuf>> {
    TEMPORARIES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes every temporary file still being written, kills the children waited for
/// ([`run_child`]), removes the temporary folders ([`TemporaryFolder`]) and exits with `code`
/// (from a signal handler). A commit in progress is finished first; none starts after, since
/// the lock is held until the process is gone. The children's lock is held as long, so the
/// thread that waited for a child never reports it killed.
pub fn exit_removing_temporaries(code: i32) -> ! {
    let mut held = temporaries();
    for p in held.drain(..) {
        let _ = std::fs::remove_file(p);
    }
    let mut cleanups = cleanups();
    // The children first: none then writes into a folder being removed.
    kill_process_groups(&cleanups.children);
    for folder in cleanups.folders.drain(..) {
        let _ = std::fs::remove_dir_all(folder);
    }
    std::process::exit(code)
}

/// What a signal exit stops and removes besides the temporary files.
struct Cleanups {
    /// Temporary folders ([`TemporaryFolder`]).
    folders: Vec<PathBuf>,
    /// Children being waited for ([`run_child`]), each the leader of its own process group.
    children: Vec<u32>,
}

static CLEANUPS: Mutex<Cleanups> = Mutex::new(Cleanups {
    folders: Vec::new(),
    children: Vec::new(),
});

fn cleanups() -> MutexGuard<'static, Cleanups> {
    CLEANUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long a signal exit waits for killed children to be gone before removing the folders.
const KILLED_CHILDREN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Kills the process groups led by `children` (SIGKILL: a hung child may ignore anything
/// else) and waits, at most [`KILLED_CHILDREN_WAIT`], until no process of them is left.
fn kill_process_groups(children: &[u32]) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let groups: Vec<Pid> = children
        .iter()
        .filter_map(|&pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
        .collect();
    for &group in &groups {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let deadline = std::time::Instant::now() + KILLED_CHILDREN_WAIT;
    while groups.iter().any(|&g| killpg(g, None).is_ok()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs `command` to its end and collects its output, as [`std::process::Command::output`]
/// does, in a process group of its own that a signal exit kills
/// ([`exit_removing_temporaries`]): a child that hangs is not left running when gapscope is
/// stopped.
pub fn run_child(command: &mut std::process::Command) -> std::io::Result<std::process::Output> {
    use std::os::unix::process::CommandExt;
    command
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = {
        // Spawned and registered under the lock: a signal sees the child or none of it.
        let mut held = cleanups();
        let child = command.spawn()?;
        held.children.push(child.id());
        child
    };
    let id = child.id();
    let output = child.wait_with_output();
    // A signal exit holds the lock until the process is gone: this waits for it then.
    cleanups().children.retain(|&c| c != id);
    output
}

/// A temporary folder, `gapscope-<purpose>-<pid>-<n>` in the system's temporary folder (only
/// this user may enter it), removed when dropped and by a signal exit
/// ([`exit_removing_temporaries`]). Making the first of a purpose removes the folders of that
/// purpose whose process is gone (killed by SIGKILL, which no handler sees).
pub struct TemporaryFolder(PathBuf);

impl TemporaryFolder {
    pub fn new(purpose: &str) -> std::io::Result<TemporaryFolder> {
        use std::os::unix::fs::DirBuilderExt;
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let root = std::env::temp_dir();
        let mut held = cleanups();
        remove_stale_folders(&root, purpose, &held.folders);
        loop {
            let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = root.join(folder_name(purpose, std::process::id(), n));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    held.folders.push(path.clone());
                    return Ok(TemporaryFolder(path));
                }
                // Another user's folder of that name (ours of a dead process were removed).
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TemporaryFolder {
    fn drop(&mut self) {
        let mut held = cleanups();
        let _ = std::fs::remove_dir_all(&self.0);
        held.folders.retain(|f| f != &self.0);
    }
}

/// `gapscope-<purpose>-<pid>-<n>`.
fn folder_name(purpose: &str, pid: u32, n: u64) -> String {
    format!("gapscope-{purpose}-{pid}-{n}")
}

/// The process id in a folder's name of `purpose` ([`folder_name`]).
fn folder_pid(name: &str, purpose: &str) -> Option<u32> {
    let rest = name.strip_prefix("gapscope-")?.strip_prefix(purpose)?;
    let (pid, n) = rest.strip_prefix('-')?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes, once per purpose and process, this user's folders of `purpose` in `root` whose
/// process is gone (`ours`: this process's own folders, kept; one with our pid not among them
/// is a dead process's whose pid we reuse). Called with the lock held.
fn remove_stale_folders(root: &Path, purpose: &str, ours: &[PathBuf]) {
    use std::os::unix::fs::MetadataExt;
    static CLEANED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut cleaned = CLEANED.lock().unwrap_or_else(PoisonError::into_inner);
    if cleaned.iter().any(|p| p == purpose) {
        return;
    }
    cleaned.push(purpose.to_owned());
    // The owner of /proc/self is this process's user; without /proc nothing is known dead.
    let (Ok(me), Ok(entries)) = (std::fs::metadata("/proc/self"), std::fs::read_dir(root)) else {
        return;
    };
    let pid = std::process::id();
    for entry in entries.flatten() {
        let Some(owner) = entry
            .file_name()
            .to_str()
            .and_then(|n| folder_pid(n, purpose))
        else {
            continue;
        };
        let path = entry.path();
        // A folder, not a link to one; this user's.
        let mine =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me.uid());
        let gone = owner == pid || process_alive(owner) == Some(false);
        if mine && gone && !ours.contains(&path) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The commit: while it is held, temporaries are neither created nor removed by anyone else,
/// and a signal waits ([`exit_removing_temporaries`]).
pub struct CommitLock(MutexGuard<'static, Vec<PathBuf>>);

/// Takes the commit lock (waits for another thread's commit).
pub fn commit_lock() -> CommitLock {
    CommitLock(temporaries())
}

impl CommitLock {
    /// Puts a staged file in place (renames its temporary over the target). A failure removes
    /// the temporary.
    pub fn keep(&mut self, staged: StagedOutput) -> std::io::Result<()> {
        let Some((mut tmp, target)) = staged.0 else {
            return Ok(());
        };
        let path = std::mem::take(&mut tmp.path);
        let renamed = std::fs::rename(&path, &target);
        if renamed.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        self.0.retain(|p| p != &path);
        renamed
    }

    /// Drops a staged file without putting it in place (its temporary is removed).
    pub fn discard(&mut self, staged: StagedOutput) {
        if let Some((mut tmp, _)) = staged.0 {
            let path = std::mem::take(&mut tmp.path);
            let _ = std::fs::remove_file(&path);
            self.0.retain(|p| p != &path);
        }
    }
}

/// The name of a temporary: `.gapscope-<pid>-<n>.tmp`, short whatever the target's (so it
/// never exceeds a file-name limit), with the writer's process id (so a later run can tell
/// that its writer is gone).
fn temporary_name(pid: u32, n: u64) -> String {
    format!(".gapscope-{pid}-{n}.tmp")
}

/// The writer's process id in a temporary's name.
fn temporary_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".gapscope-")?.strip_suffix(".tmp")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether process `pid` is alive, or `None` when this system cannot say (no `/proc`).
pub(crate) fn process_alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(Path::new("/proc").join(pid.to_string()).exists())
}

/// Removes, once per folder and process, the temporaries in `dir` whose writer is gone (killed
/// by SIGKILL, which no handler sees). Called with the lock held (`ours`: this process's own
/// temporaries, kept; one with our pid not among them is a dead process's whose pid we reuse).
fn remove_stale_temporaries(dir: &Path, ours: &[PathBuf]) {
    static CLEANED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut cleaned = CLEANED.lock().unwrap_or_else(PoisonError::into_inner);
    if cleaned.iter().any(|d| d == dir) {
        return;
    }
    cleaned.push(dir.to_owned());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temporary_pid) else {
            continue;
        };
        let path = entry.path();
        let dead = pid == me || process_alive(pid) == Some(false);
        let plain_file = entry.file_type().is_ok_and(|t| t.is_file());
        if dead && plain_file && !ours.contains(&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// A temporary file beside its target, registered for [`exit_removing_temporaries`] until
/// [`CommitLock::keep`] renames it or it is dropped (and removed).
struct Temporary {
    path: PathBuf,
    file: Option<File>,
}

impl Temporary {
    /// Creates the file (under the lock, so a signal cannot come between its creation and its
    /// registration).
    fn beside(target: &Path) -> std::io::Result<Temporary> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let mut held = temporaries();
        remove_stale_temporaries(&dir, &held);
        let n = TEMPORARY_COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(temporary_name(std::process::id(), n));
        let file = File::create(&path)?;
        held.push(path.clone());
        Ok(Temporary {
            path,
            file: Some(file),
        })
    }

    /// Writes the file through `fill` and syncs it.
    fn fill(
        &mut self,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let file = self
            .file
            .take()
            .ok_or_else(|| std::io::Error::other("filled twice"))?;
        let mut w = BufWriter::new(file);
        fill(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        // Empty once kept or discarded: nothing to remove.
        if self.path.as_os_str().is_empty() {
            return;
        }
        self.file = None;
        let mut held = temporaries();
        let _ = std::fs::remove_file(&self.path);
        held.retain(|p| p != &self.path);
    }
}

/// Where writing to a path goes.
enum Target {
    /// A regular file (or none yet): replaced by a rename.
    Replace(PathBuf),
    /// A device or FIFO: opened and written as it is.
    Special(PathBuf),
    /// This process's standard output, named by path.
    Stdout,
    /// Another open file descriptor named by path (`/proc/self/fd/N`): reopened, appending,
    /// so a file the shell opened with `>>` is appended to and one opened with `>` filled.
    Descriptor(PathBuf),
}

/// `/dev/fd/N`, `/dev/stdout` or `/proc/<pid>/fd/N`: the number N, and whether it is this
/// process's.
fn descriptor(path: &Path) -> Option<(u32, bool)> {
    let fd: u32 = path.file_name()?.to_str()?.parse().ok()?;
    let dir = path.parent()?;
    if dir == Path::new("/dev/fd") {
        return Some((fd, true));
    }
    let proc_dir = dir.strip_prefix("/proc").ok()?;
    let mut parts = proc_dir.iter();
    let (who, fd_dir) = (parts.next()?, parts.next()?);
    if fd_dir != "fd" || parts.next().is_some() {
        return None;
    }
    let mine = who == "self" || who.to_str() == Some(&std::process::id().to_string());
    Some((fd, mine))
}

/// Follows symlinks (each relative to its own folder) to where the output goes.
fn resolve_output(path: &Path) -> std::io::Result<Target> {
    let mut target = path.to_owned();
    for _ in 0..40 {
        if let Some((fd, mine)) = descriptor(&target) {
            return Ok(match (fd, mine) {
                (1, true) => Target::Stdout,
                _ => Target::Descriptor(target),
            });
        }
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = std::fs::read_link(&target)?;
                target = match target.parent() {
                    Some(dir) if next.is_relative() => dir.join(next),
                    _ => next,
                };
            }
            Ok(m) if m.is_dir() => {
                return Err(std::io::Error::other("is a folder"));
            }
            Ok(m) if m.is_file() => return Ok(Target::Replace(target)),
            Ok(_) => return Ok(Target::Special(target)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Target::Replace(target));
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// A file written through `fill` but not yet in place ([`stage_output`]): a temporary file
/// beside its target, renamed by [`CommitLock::keep`]; or nothing left to do, when the target
/// was written in place.
pub struct StagedOutput(Option<(Temporary, PathBuf)>);

/// Fills `w` and flushes it.
fn fill_through(
    w: impl Write,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut w = BufWriter::new(w);
    fill(&mut w)?;
    w.flush()
}

/// Writes `path`'s content through `fill`: a symlink is followed, a device, FIFO or open file
/// descriptor is written in place, anything else goes to a temporary file (in the target's
/// folder, made if missing) until [`CommitLock::keep`].
pub fn stage_output(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<StagedOutput> {
    let open = |p: &Path, append: bool| {
        std::fs::OpenOptions::new()
            .write(true)
            .append(append)
            .open(p)
    };
    match resolve_output(path)? {
        Target::Replace(target) => {
            // A missing folder is made, as `-o DIR` makes its folder.
            if let Some(dir) = target.parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir)?;
            }
            let mut tmp = Temporary::beside(&target)?;
            tmp.fill(fill)?;
            return Ok(StagedOutput(Some((tmp, target))));
        }
        Target::Special(target) => fill_through(open(&target, false)?, fill)?,
        Target::Descriptor(target) => fill_through(open(&target, true)?, fill)?,
        Target::Stdout => match fill_through(std::io::stdout().lock(), fill) {
            // A reader that stopped early (`| head`) ends the output quietly, as on stdout.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other?,
        },
    }
    Ok(StagedOutput(None))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, then a rename, so a
/// failure never leaves a half-written output.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_atomically_with(path, |w| w.write_all(bytes))
}

/// Like [`write_atomically`], streaming through `fill`. A symlink is followed; a device, FIFO
/// or open file descriptor is written in place.
pub fn write_atomically_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    stage_output(path, fill)
        .and_then(|staged| commit_lock().keep(staged))
        .map_err(|source| WriteError {
            path: path.to_owned(),
            source,
        })
}

/// A file that could not be written (whole).
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot write: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_carry_the_writer() {
        assert_eq!(temporary_pid(&temporary_name(4321, 7)), Some(4321));
        for other in [
            ".gapscope.lock",
            ".gapscope-x-1.tmp",
            ".gapscope-12.tmp",
            "a.tmp",
        ] {
            assert_eq!(temporary_pid(other), None, "{other}");
        }
    }

    #[test]
    fn folder_names_carry_their_process() {
        assert_eq!(
            folder_pid(&folder_name("nsys", 4321, 0), "nsys"),
            Some(4321)
        );
        for other in [
            "gapscope-nsys-12",
            "gapscope-nsys-x-1",
            "gapscope-nsysx-1-2",
            "gapscope-other-1-2",
        ] {
            assert_eq!(folder_pid(other, "nsys"), None, "{other}");
        }
    }

    #[test]
    fn descriptors_are_recognised_by_path() {
        assert_eq!(descriptor(Path::new("/dev/fd/1")), Some((1, true)));
        assert_eq!(descriptor(Path::new("/proc/self/fd/3")), Some((3, true)));
        let other = format!("/proc/{}/fd/1", std::process::id() + 1);
        assert_eq!(descriptor(Path::new(&other)), Some((1, false)));
        for not in [
            "/dev/stdout",
            "/proc/self/fdinfo/1",
            "/tmp/fd/1",
            "/proc/self/fd",
        ] {
            assert_eq!(descriptor(Path::new(not)), None, "{not}");
        }
    }
}
