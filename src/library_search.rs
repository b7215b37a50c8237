//! Where the CUDA libraries a recording loads (CUPTI, NCCL) are looked for, in order:
//!
//! 1. the library's own variable (`CUPTI_LIB`, `NCCL_LIB`): a file path; when set, nothing else
//!    is tried;
//! 2. the program's Python environment, where pip puts NVIDIA's wheels as torch installs them
//!    (`nvidia-cuda-cupti` → `site-packages/nvidia/cu13/lib/libcupti.so.13`, its CUDA 12 wheel
//!    → `nvidia/cuda_cupti/lib/libcupti.so.12`, `nvidia-nccl-cu13` → `nvidia/nccl/lib/libnccl.so.2`).
//!    The environments, first found first: the command's own interpreter (`python …`, or a
//!    script whose `#!` line names a Python, as `torchrun` does), `$VIRTUAL_ENV`,
//!    `$CONDA_PREFIX`, then `python3` and `python` on `PATH`;
//! 3. the folders of `LD_LIBRARY_PATH`;
//! 4. the CUDA toolkit: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then `/usr/local/cuda-X.Y`
//!    newest first;
//! 5. the library's sonames, for the dynamic loader's own search (ld.so.cache).
//!
//! [`search`] is pure: it reads the variables from an [`Environment`] and the file system
//! through a [`Probe`], so the order is tested without CUDA on fake trees. Nothing is run and
//! nothing is loaded: finding a Python environment costs at most one 256-byte read (a `#!`
//! line) and a few folder listings.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

/// One library and the places it lives in.
#[derive(Debug, Clone, Copy)]
pub struct Library {
    /// Its name in messages ("CUPTI").
    pub name: &'static str,
    /// The variable that names the file explicitly.
    pub variable: &'static str,
    /// File names tried in each folder, preferred first.
    pub sonames: &'static [&'static str],
    /// Folders under a Python environment's `site-packages` where pip's wheels put it.
    pub python_dirs: &'static [&'static str],
    /// Folders under a CUDA toolkit root.
    pub toolkit_dirs: &'static [&'static str],
}

/// libcupti (CUDA 13 first, then 12).
pub const CUPTI: Library = Library {
    name: "CUPTI",
    variable: "CUPTI_LIB",
    sonames: &["libcupti.so.13", "libcupti.so.12", "libcupti.so"],
    python_dirs: &[
        "nvidia/cu13/lib",
        "nvidia/cuda_cupti/lib",
        "nvidia/cu12/lib",
    ],
    toolkit_dirs: &["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64"],
};

/// libnccl.
pub const NCCL: Library = Library {
    name: "NCCL",
    variable: "NCCL_LIB",
    sonames: &["libnccl.so.2", "libnccl.so"],
    python_dirs: &["nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"],
    toolkit_dirs: &["lib64", "targets/x86_64-linux/lib"],
};

/// Variables the search reads.
pub const VARIABLES: [&str; 8] = [
    "CUPTI_LIB",
    "NCCL_LIB",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
];

/// What the search reads besides files: variables, the command about to run, `$HOME`.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub vars: BTreeMap<String, OsString>,
    /// The program that will load the library and its arguments (`gapscope record -- CMD`),
    /// or this process's own executable.
    pub command: Vec<OsString>,
}

impl Environment {
    /// This process's variables, for a run of `command`.
    pub fn current(command: Vec<OsString>) -> Environment {
        let vars = VARIABLES
            .iter()
            .chain(&["HOME"])
            .filter_map(|v| std::env::var_os(v).map(|value| (v.to_string(), value)))
            .collect();
        Environment { vars, command }
    }

    /// A variable's value; unset and empty are the same.
    fn var(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .get(name)
            .map(OsString::as_os_str)
            .filter(|v| !v.is_empty())
    }
}

/// The file system as the search sees it.
pub trait Probe {
    fn is_file(&self, path: &Path) -> bool;
    fn is_dir(&self, path: &Path) -> bool;
    /// Names of the entries of a folder (empty when it cannot be read).
    fn list_dir(&self, path: &Path) -> Vec<OsString>;
    /// The first bytes of a file, up to `len`.
    fn read_start(&self, path: &Path, len: usize) -> Option<Vec<u8>>;
    /// `sys.prefix` as the interpreter `python` reports it: asked only of wrapper scripts
    /// (pyenv's shims), whose own folder says nothing.
    fn ask_python_prefix(&self, python: &Path) -> Option<PathBuf>;
}

/// The real file system, optionally seen from under a folder (`root`): a test lays a fake
/// `/usr/local/cuda` there and the search reports the paths as if it were `/`.
#[derive(Debug, Clone, Default)]
pub struct FileSystem {
    pub root: Option<PathBuf>,
}

impl FileSystem {
    fn real(&self, path: &Path) -> PathBuf {
        match &self.root {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_owned(),
        }
    }
}

impl Probe for FileSystem {
    fn is_file(&self, path: &Path) -> bool {
        self.real(path).is_file()
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.real(path).is_dir()
    }
    fn list_dir(&self, path: &Path) -> Vec<OsString> {
        let Ok(entries) = std::fs::read_dir(self.real(path)) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect()
    }
    fn read_start(&self, path: &Path, len: usize) -> Option<Vec<u8>> {
        use std::io::Read;
        let mut start = Vec::with_capacity(len);
        std::fs::File::open(self.real(path))
            .ok()?
            .take(len as u64)
            .read_to_end(&mut start)
            .ok()?;
        Some(start)
    }
    fn ask_python_prefix(&self, python: &Path) -> Option<PathBuf> {
        if self.root.is_some() {
            return None;
        }
        run_for_output(
            std::process::Command::new(python).args(["-c", "import sys; print(sys.prefix)"]),
            std::time::Duration::from_secs(5),
        )
        .map(|out| PathBuf::from(out.trim_end()))
        .filter(|p| p.is_absolute())
    }
}

/// A command's stdout when it succeeds within `limit` (killed and `None` otherwise).
fn run_for_output(cmd: &mut std::process::Command, limit: std::time::Duration) -> Option<String> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

/// How a Python environment was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonVia {
    /// The command is this interpreter, or a script whose `#!` line names it.
    Command(PathBuf),
    VirtualEnv,
    CondaPrefix,
    /// `python3` or `python` on `PATH`.
    Path(PathBuf),
}

/// Where a library was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Named by the library's variable.
    Variable(&'static str),
    /// A Python environment (its prefix).
    Python {
        prefix: PathBuf,
        via: PythonVia,
    },
    LdLibraryPath,
    /// A CUDA toolkit, named by a variable (`CUDA_HOME`) or at a standard place (`None`).
    Toolkit(Option<&'static str>),
    /// The dynamic loader's own search, by soname.
    SystemLoader,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Variable(v) => write!(f, "${v}"),
            Origin::Python { prefix, via } => {
                write!(f, "the Python environment {} of ", prefix.display())?;
                match via {
                    PythonVia::Command(p) => write!(f, "the command's interpreter {}", p.display()),
                    PythonVia::VirtualEnv => write!(f, "$VIRTUAL_ENV"),
                    PythonVia::CondaPrefix => write!(f, "$CONDA_PREFIX"),
                    PythonVia::Path(p) => write!(f, "{} on PATH", p.display()),
                }
            }
            Origin::LdLibraryPath => write!(f, "LD_LIBRARY_PATH"),
            Origin::Toolkit(Some(v)) => write!(f, "${v}"),
            Origin::Toolkit(None) => write!(f, "the CUDA toolkit"),
            Origin::SystemLoader => write!(f, "the system's library search path"),
        }
    }
}

/// A file found, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub origin: Origin,
}

/// The outcome of [`search`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Files that exist, in the order to try them, then the bare sonames for the dynamic
    /// loader's own search ([`Origin::SystemLoader`]). With the variable set: only its file,
    /// whether or not it exists, so that the loader says what is wrong with it.
    pub candidates: Vec<Candidate>,
    /// Every folder looked in, in order, for messages.
    pub searched: Vec<PathBuf>,
    /// The library's variable is set: nothing else may be tried.
    pub explicit: bool,
}

impl Search {
    /// The places looked in, as one line for an error message.
    pub fn searched_line(&self, library: &Library) -> String {
        if self.explicit {
            return format!("${}", library.variable);
        }
        let mut parts = vec![format!("${} (unset)", library.variable)];
        parts.extend(self.searched.iter().map(|d| d.display().to_string()));
        parts.push("the system's library search path".into());
        parts.join(", ")
    }
}

/// The places to look for `library`, in order (see the module documentation).
pub fn search(library: &Library, env: &Environment, fs: &dyn Probe) -> Search {
    if let Some(path) = env.var(library.variable) {
        return Search {
            candidates: vec![Candidate {
                path: PathBuf::from(path),
                origin: Origin::Variable(library.variable),
            }],
            searched: Vec::new(),
            explicit: true,
        };
    }
    let mut folders: Vec<(PathBuf, Origin)> = Vec::new();
    for (prefix, via) in python_environments(env, fs) {
        for site in site_packages(&prefix, env, fs) {
            for dir in library.python_dirs {
                let origin = Origin::Python {
                    prefix: prefix.clone(),
                    via: via.clone(),
                };
                folders.push((site.join(dir), origin));
            }
        }
    }
    if let Some(list) = env.var("LD_LIBRARY_PATH") {
        for dir in std::env::split_paths(list).filter(|d| d.is_absolute()) {
            folders.push((dir, Origin::LdLibraryPath));
        }
    }
    for (root, variable) in toolkit_roots(env, fs) {
        for dir in library.toolkit_dirs {
            folders.push((root.join(dir), Origin::Toolkit(variable)));
        }
    }
    let mut searched: Vec<PathBuf> = Vec::new();
    let mut candidates = Vec::new();
    for (dir, origin) in folders {
        if searched.contains(&dir) {
            continue;
        }
        searched.push(dir.clone());
        for name in library.sonames {
            let path = dir.join(name);
            if fs.is_file(&path) {
                candidates.push(Candidate {
                    path,
                    origin: origin.clone(),
                });
            }
        }
    }
    candidates.extend(library.sonames.iter().map(|name| Candidate {
        path: PathBuf::from(name),
        origin: Origin::SystemLoader,
    }));
    Search {
        candidates,
        searched,
        explicit: false,
    }
}

/// Python environments that the command may run in, first found first, each once: (prefix,
/// how it was found).
pub fn python_environments(env: &Environment, fs: &dyn Probe) -> Vec<(PathBuf, PythonVia)> {
    let mut found: Vec<(PathBuf, PythonVia)> = Vec::new();
    let mut add = |prefix: Option<PathBuf>, via: PythonVia| {
        if let Some(prefix) = prefix
            && !found.iter().any(|(p, _)| *p == prefix)
        {
            found.push((prefix, via));
        }
    };
    if let Some(interpreter) = env
        .command
        .first()
        .and_then(|program| command_interpreter(program, env, fs))
    {
        add(
            interpreter_prefix(&interpreter, fs),
            PythonVia::Command(interpreter),
        );
    }
    let dir_var = |name: &str| env.var(name).map(PathBuf::from).filter(|d| fs.is_dir(d));
    add(dir_var("VIRTUAL_ENV"), PythonVia::VirtualEnv);
    add(dir_var("CONDA_PREFIX"), PythonVia::CondaPrefix);
    for name in ["python3", "python"] {
        if let Some(p) = on_path(OsStr::new(name), env, fs) {
            add(interpreter_prefix(&p, fs), PythonVia::Path(p));
        }
    }
    found
}

/// Whether a file name is a Python interpreter's (`python`, `python3`, `python3.12`).
fn is_python_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.strip_prefix("python")
        .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The interpreter that runs `program`: the program itself when it is a Python, else the
/// Python its `#!` line names (directly, or through `/usr/bin/env python3`).
fn command_interpreter(program: &OsStr, env: &Environment, fs: &dyn Probe) -> Option<PathBuf> {
    let path = if Path::new(program).components().count() > 1 {
        Some(PathBuf::from(program)).filter(|p| fs.is_file(p))
    } else {
        on_path(program, env, fs)
    }?;
    if path.file_name().is_some_and(is_python_name) {
        return Some(path);
    }
    let start = fs.read_start(&path, 256)?;
    let line = start.strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line);
    let line = line.lines().next()?;
    let mut words = line.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(is_python_name) {
        return Some(first);
    }
    if first.file_name() == Some(OsStr::new("env")) {
        let name = words.find(|w| !w.starts_with('-'))?;
        if is_python_name(OsStr::new(name)) {
            return on_path(OsStr::new(name), env, fs);
        }
    }
    None
}

/// `name` found in the folders of `PATH`.
fn on_path(name: &OsStr, env: &Environment, fs: &dyn Probe) -> Option<PathBuf> {
    std::env::split_paths(env.var("PATH")?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| fs.is_file(p))
}

/// `/x/bin/python3` → `/x`; a wrapper script (a `#!` file, as pyenv's shims are) is asked.
fn interpreter_prefix(interpreter: &Path, fs: &dyn Probe) -> Option<PathBuf> {
    if fs
        .read_start(interpreter, 2)
        .is_some_and(|start| start == b"#!")
    {
        return fs.ask_python_prefix(interpreter);
    }
    let bin = interpreter.parent()?;
    (bin.file_name()? == "bin")
        .then(|| bin.parent().map(Path::to_owned))
        .flatten()
}

/// `site-packages` (and Debian's `dist-packages`) folders of a prefix, in Python's order: the
/// user's own (`~/.local`) first, except in a virtual environment, which does not read it.
fn site_packages(prefix: &Path, env: &Environment, fs: &dyn Probe) -> Vec<PathBuf> {
    let versioned = |base: &Path| -> Vec<PathBuf> {
        let mut names: Vec<String> = fs
            .list_dir(base)
            .into_iter()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n.starts_with("python3"))
            .collect();
        names.sort_by_key(|n| std::cmp::Reverse(version_key(n)));
        let mut out = Vec::new();
        for n in names {
            for leaf in ["site-packages", "dist-packages"] {
                let dir = base.join(&n).join(leaf);
                if fs.is_dir(&dir) {
                    out.push(dir);
                }
            }
        }
        out
    };
    let mut dirs = Vec::new();
    let venv = fs.is_file(&prefix.join("pyvenv.cfg"));
    if !venv && let Some(home) = env.var("HOME") {
        dirs.extend(versioned(&Path::new(home).join(".local/lib")));
    }
    dirs.extend(versioned(&prefix.join("lib")));
    if prefix == Path::new("/usr") {
        // Debian's pip installs into /usr/local/lib/python3.X/dist-packages.
        dirs.extend(versioned(Path::new("/usr/local/lib")));
    }
    // Each site folder's `.pth` files add folders right after it, as Python's `site` does: an
    // environment that reaches another's packages (torch's) through a `.pth` finds its wheels.
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let added = pth_folders(&dir, fs);
        for d in std::iter::once(dir).chain(added) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// The folders that the `.pth` files of `site` put on `sys.path`, in the files' name order:
/// one path a line (relative to `site` unless absolute), `#` comments and `import` lines
/// skipped, folders that do not exist left out — Python's `site` module's rules.
fn pth_folders(site: &Path, fs: &dyn Probe) -> Vec<PathBuf> {
    let mut names: Vec<OsString> = fs
        .list_dir(site)
        .into_iter()
        .filter(|n| Path::new(n).extension().is_some_and(|e| e == "pth"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let Some(text) = fs.read_start(&site.join(&name), 64 * 1024) else {
            continue;
        };
        for line in String::from_utf8_lossy(&text).lines() {
            let line = line.trim_end();
            if line.is_empty()
                || line.starts_with('#')
                || line.starts_with("import ")
                || line.starts_with("import\t")
            {
                continue;
            }
            let dir = site.join(line);
            if fs.is_dir(&dir) && !out.contains(&dir) {
                out.push(dir);
            }
        }
    }
    out
}

/// `python3.12` → [3, 12]; `cuda-12.8` → [12, 8]: numbers compared as numbers.
fn version_key(name: &str) -> Vec<u32> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
}

/// CUDA toolkit roots, in order: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then
/// `/usr/local/cuda-X.Y` newest first.
fn toolkit_roots(env: &Environment, fs: &dyn Probe) -> Vec<(PathBuf, Option<&'static str>)> {
    let mut roots = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = env.var(var) {
            roots.push((PathBuf::from(d), Some(var)));
        }
    }
    roots.push((PathBuf::from("/usr/local/cuda"), None));
    let mut versioned: Vec<String> = fs
        .list_dir(Path::new("/usr/local"))
        .into_iter()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cuda-"))
        .collect();
    versioned.sort_by_key(|n| std::cmp::Reverse(version_key(n)));
    roots.extend(
        versioned
            .into_iter()
            .map(|n| (Path::new("/usr/local").join(n), None)),
    );
    roots
}

/// The path of the first mapped file whose name contains `needle`, from `/proc/self/maps`
/// text: the file the dynamic loader picked for a soname.
pub fn mapped_path(maps: &str, needle: &str) -> Option<String> {
    maps.lines().find_map(|l| {
        let path = l.split_whitespace().nth(5)?;
        let name = Path::new(path).file_name()?.to_str()?;
        name.contains(needle).then(|| path.to_string())
    })
}

/// The note a command prints for the library it uses (`version`: as the library reports it).
pub fn using_note(library: &Library, path: &str, version: &str, origin: &Origin) -> String {
    format!(
        "gapscope: note: using {} from {path} ({version}; found through {origin})",
        library.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake tree under a temporary folder: `files` are created empty (paths as if from `/`).
    fn tree(files: &[&str]) -> (tempfile::TempDir, FileSystem) {
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            let p = dir.path().join(f.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"").unwrap();
        }
        let fs = FileSystem {
            root: Some(dir.path().to_owned()),
        };
        (dir, fs)
    }

    fn env(vars: &[(&str, &str)], command: &[&str]) -> Environment {
        Environment {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), OsString::from(v)))
                .collect(),
            command: command.iter().map(OsString::from).collect(),
        }
    }

    /// The files found (without the sonames left to the dynamic loader).
    fn found(s: &Search) -> Vec<(String, Origin)> {
        s.candidates
            .iter()
            .filter(|c| c.origin != Origin::SystemLoader)
            .map(|c| (c.path.display().to_string(), c.origin.clone()))
            .collect()
    }

    const VENV_CUPTI: &str = "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13";
    const TOOLKIT_CUPTI: &str = "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13";

    #[test]
    fn the_variable_wins_and_nothing_else_is_tried() {
        let (_d, fs) = tree(&["/venv/pyvenv.cfg", "/venv/bin/python", VENV_CUPTI]);
        let e = env(
            &[
                ("CUPTI_LIB", "/nonexistent/libcupti.so"),
                ("VIRTUAL_ENV", "/venv"),
            ],
            &["python"],
        );
        let s = search(&CUPTI, &e, &fs);
        assert!(s.explicit);
        assert_eq!(
            found(&s),
            [(
                "/nonexistent/libcupti.so".into(),
                Origin::Variable("CUPTI_LIB")
            )]
        );
        assert_eq!(s.searched_line(&CUPTI), "$CUPTI_LIB");
    }

    #[test]
    fn the_python_environment_comes_before_ld_library_path_and_the_toolkit() {
        let (_d, fs) = tree(&[
            "/venv/pyvenv.cfg",
            "/venv/bin/python",
            VENV_CUPTI,
            "/opt/libs/libcupti.so.12",
            TOOLKIT_CUPTI,
        ]);
        let e = env(
            &[
                ("VIRTUAL_ENV", "/venv"),
                ("LD_LIBRARY_PATH", "/opt/libs:relative"),
            ],
            &["sh"],
        );
        let s = search(&CUPTI, &e, &fs);
        assert_eq!(
            found(&s),
            [
                (
                    VENV_CUPTI.into(),
                    Origin::Python {
                        prefix: "/venv".into(),
                        via: PythonVia::VirtualEnv
                    }
                ),
                ("/opt/libs/libcupti.so.12".into(), Origin::LdLibraryPath),
                (TOOLKIT_CUPTI.into(), Origin::Toolkit(None)),
            ]
        );
        // A relative LD_LIBRARY_PATH entry is not searched.
        assert!(
            !s.searched.iter().any(|d| d.is_relative()),
            "{:?}",
            s.searched
        );
    }

    #[test]
    fn the_commands_own_interpreter_comes_first() {
        // `gapscope record -- /env2/bin/python train.py` with another venv active.
        let other = "/env2/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12";
        let (_d, fs) = tree(&[
            "/venv/pyvenv.cfg",
            "/venv/bin/python",
            VENV_CUPTI,
            "/env2/pyvenv.cfg",
            "/env2/bin/python",
            other,
        ]);
        let e = env(
            &[("VIRTUAL_ENV", "/venv")],
            &["/env2/bin/python", "train.py"],
        );
        let got = found(&search(&CUPTI, &e, &fs));
        assert_eq!(got[0].0, other);
        assert_eq!(
            got[0].1,
            Origin::Python {
                prefix: "/env2".into(),
                via: PythonVia::Command("/env2/bin/python".into())
            }
        );
        assert_eq!(got[1].0, VENV_CUPTI);
    }

    #[test]
    fn a_script_is_followed_to_the_python_of_its_hash_bang_line() {
        let (dir, fs) = tree(&[
            "/env/pyvenv.cfg",
            "/env/bin/python3.12",
            "/env/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "/usr/bin/env",
        ]);
        std::fs::write(
            dir.path().join("env/bin/torchrun"),
            "#!/env/bin/python3.12\nimport sys\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("env/bin/launcher"),
            "#!/usr/bin/env -S python3.12 -u\n",
        )
        .unwrap();
        for command in ["torchrun", "launcher"] {
            let e = env(
                &[("PATH", "/env/bin:/usr/bin")],
                &[command, "--nproc-per-node=2"],
            );
            let got = found(&search(&NCCL, &e, &fs));
            assert_eq!(
                got.first().map(|g| g.0.as_str()),
                Some("/env/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"),
                "{command}"
            );
            assert!(
                matches!(&got[0].1, Origin::Python { via: PythonVia::Command(p), .. } if p == Path::new("/env/bin/python3.12")),
                "{command}: {got:?}"
            );
        }
    }

    #[test]
    fn python_on_path_and_conda_are_searched_and_a_system_python_reads_the_user_site() {
        let user = "/home/u/.local/lib/python3.11/site-packages/nvidia/cu13/lib/libcupti.so.13";
        let conda = "/conda/lib/python3.10/site-packages/nvidia/cu13/lib/libcupti.so.13";
        let (_d, fs) = tree(&[
            "/usr/bin/python3",
            user,
            "/usr/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
            "/usr/local/lib/python3.11/dist-packages/nvidia/cu12/lib/libcupti.so.12",
            "/conda/bin/python",
            conda,
        ]);
        let e = env(
            &[
                ("PATH", "/usr/bin"),
                ("HOME", "/home/u"),
                ("CONDA_PREFIX", "/conda"),
            ],
            &["./a.out"],
        );
        let got: Vec<String> = found(&search(&CUPTI, &e, &fs))
            .into_iter()
            .map(|g| g.0)
            .collect();
        // Conda's Python, like the system's, reads the user's site-packages first.
        assert_eq!(
            got,
            [
                user,
                conda,
                "/usr/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
                "/usr/local/lib/python3.11/dist-packages/nvidia/cu12/lib/libcupti.so.12",
            ]
        );
    }

    #[test]
    fn toolkits_follow_cuda_home_then_the_newest_versioned_folder() {
        let (_d, fs) = tree(&[
            "/opt/cuda/extras/CUPTI/lib64/libcupti.so.12",
            "/usr/local/cuda-12.8/extras/CUPTI/lib64/libcupti.so.12",
            "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13",
            "/usr/local/cuda-9.2/extras/CUPTI/lib64/libcupti.so",
        ]);
        let e = env(&[("CUDA_HOME", "/opt/cuda")], &[]);
        let got = found(&search(&CUPTI, &e, &fs));
        assert_eq!(
            got,
            [
                (
                    "/opt/cuda/extras/CUPTI/lib64/libcupti.so.12".into(),
                    Origin::Toolkit(Some("CUDA_HOME"))
                ),
                (
                    "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13".into(),
                    Origin::Toolkit(None)
                ),
                (
                    "/usr/local/cuda-12.8/extras/CUPTI/lib64/libcupti.so.12".into(),
                    Origin::Toolkit(None)
                ),
                (
                    "/usr/local/cuda-9.2/extras/CUPTI/lib64/libcupti.so".into(),
                    Origin::Toolkit(None)
                ),
            ]
        );
    }

    #[test]
    fn nothing_found_names_every_place_in_one_line() {
        let (_d, fs) = tree(&["/venv/pyvenv.cfg", "/venv/bin/python"]);
        let e = env(
            &[("VIRTUAL_ENV", "/venv"), ("LD_LIBRARY_PATH", "/opt/libs")],
            &[],
        );
        let s = search(&CUPTI, &e, &fs);
        // Only the sonames, for the dynamic loader, are left.
        let left: Vec<_> = s
            .candidates
            .iter()
            .map(|c| (c.path.to_str().unwrap(), &c.origin))
            .collect();
        assert_eq!(
            left,
            [
                ("libcupti.so.13", &Origin::SystemLoader),
                ("libcupti.so.12", &Origin::SystemLoader),
                ("libcupti.so", &Origin::SystemLoader)
            ]
        );
        let line = s.searched_line(&CUPTI);
        assert!(!line.contains('\n'));
        // No site-packages folder exists, so the venv adds no folder; the rest in order.
        let want = [
            "$CUPTI_LIB (unset)",
            "/opt/libs",
            "/usr/local/cuda/extras/CUPTI/lib64",
            "the system's library search path",
        ];
        let mut at = 0;
        for w in want {
            let i = line[at..]
                .find(w)
                .unwrap_or_else(|| panic!("{w} in {line}"));
            at += i + w.len();
        }
    }

    #[test]
    fn a_venv_that_reaches_torchs_packages_through_a_pth_file_finds_their_cupti() {
        let torch_cupti =
            "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13";
        let (d, fs) = tree(&[
            "/venv/pyvenv.cfg",
            "/venv/bin/python",
            "/venv/lib/python3.12/site-packages/x.py",
            torch_cupti,
        ]);
        let site = d.path().join("venv/lib/python3.12/site-packages");
        std::fs::write(
            site.join("torch.pth"),
            "# torch's environment\nimport sys\n/opt/torch/.venv/lib/python3.12/site-packages\n\n/no/such/folder\n",
        )
        .unwrap();
        let e = env(&[("VIRTUAL_ENV", "/venv")], &[]);
        let s = search(&CUPTI, &e, &fs);
        let files = found(&s);
        assert_eq!(files[0].0, torch_cupti, "{files:?}");
        // The environment's own folders are searched first, the .pth's after them.
        assert_eq!(
            s.searched[0],
            Path::new("/venv/lib/python3.12/site-packages/nvidia/cu13/lib")
        );
        assert!(!s.searched_line(&CUPTI).contains("/no/such/folder"));
    }

    #[test]
    fn the_environment_sees_a_python_whose_site_packages_exists() {
        let (_d, fs) = tree(&[
            "/venv/pyvenv.cfg",
            "/venv/bin/python",
            "/venv/lib/python3.12/site-packages/x.py",
        ]);
        let e = env(&[("VIRTUAL_ENV", "/venv")], &[]);
        let s = search(&CUPTI, &e, &fs);
        assert_eq!(
            s.searched[0],
            Path::new("/venv/lib/python3.12/site-packages/nvidia/cu13/lib")
        );
        assert!(
            s.searched_line(&CUPTI)
                .contains("/venv/lib/python3.12/site-packages/nvidia/cuda_cupti/lib")
        );
    }

    /// The fake tree, with a wrapper script that says its Python lives in `/pyenv/versions/3.12`.
    struct WithShim(FileSystem);
    impl Probe for WithShim {
        fn is_file(&self, p: &Path) -> bool {
            self.0.is_file(p)
        }
        fn is_dir(&self, p: &Path) -> bool {
            self.0.is_dir(p)
        }
        fn list_dir(&self, p: &Path) -> Vec<OsString> {
            self.0.list_dir(p)
        }
        fn read_start(&self, p: &Path, len: usize) -> Option<Vec<u8>> {
            self.0.read_start(p, len)
        }
        fn ask_python_prefix(&self, python: &Path) -> Option<PathBuf> {
            (python == Path::new("/pyenv/shims/python")).then(|| "/pyenv/versions/3.12".into())
        }
    }

    #[test]
    fn a_wrapper_script_named_python_is_asked_for_its_prefix() {
        let lib =
            "/pyenv/versions/3.12/lib/python3.12/site-packages/nvidia/cu13/lib/libcupti.so.13";
        let (dir, fs) = tree(&["/pyenv/versions/3.12/bin/python3.12", lib]);
        std::fs::create_dir_all(dir.path().join("pyenv/shims")).unwrap();
        std::fs::write(
            dir.path().join("pyenv/shims/python"),
            "#!/usr/bin/env bash\nexec pyenv exec python \"$@\"\n",
        )
        .unwrap();
        let e = env(&[("PATH", "/pyenv/shims")], &["python", "train.py"]);
        let got = found(&search(&CUPTI, &e, &WithShim(fs)));
        assert_eq!(
            got,
            [(
                lib.into(),
                Origin::Python {
                    prefix: "/pyenv/versions/3.12".into(),
                    via: PythonVia::Command("/pyenv/shims/python".into())
                }
            )]
        );
    }

    #[test]
    fn a_python_is_asked_for_its_prefix_with_a_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let shim = dir.path().join("python");
        std::fs::write(&shim, "#!/bin/sh\necho /some/prefix\n").unwrap();
        let slow = dir.path().join("slow");
        std::fs::write(&slow, "#!/bin/sh\nexec sleep 30\n").unwrap();
        for f in [&shim, &slow] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let fs = FileSystem::default();
        assert_eq!(
            fs.ask_python_prefix(&shim),
            Some(PathBuf::from("/some/prefix"))
        );
        let out = run_for_output(
            std::process::Command::new(&slow).arg("-c"),
            std::time::Duration::from_millis(100),
        );
        assert_eq!(out, None);
    }

    #[test]
    fn interpreter_names() {
        for yes in ["python", "python3", "python3.12"] {
            assert!(is_python_name(OsStr::new(yes)), "{yes}");
        }
        for no in ["pythonw-x", "ipython", "python3-config", "torchrun"] {
            assert!(!is_python_name(OsStr::new(no)), "{no}");
        }
    }

    #[test]
    fn the_note_names_the_file_and_the_place() {
        let origin = Origin::Python {
            prefix: "/venv".into(),
            via: PythonVia::Command("/venv/bin/python".into()),
        };
        assert_eq!(
            using_note(&CUPTI, VENV_CUPTI, "API version 130001", &origin),
            format!(
                "gapscope: note: using CUPTI from {VENV_CUPTI} (API version 130001; found through the Python environment /venv of the command's interpreter /venv/bin/python)"
            )
        );
    }

    #[test]
    fn mapped_path_finds_the_library() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n7f02-7f03 r-xp 0 08:01 2 /opt/nccl/lib/libnccl.so.2.29.7\n";
        assert_eq!(
            mapped_path(maps, "libnccl").as_deref(),
            Some("/opt/nccl/lib/libnccl.so.2.29.7")
        );
        assert_eq!(mapped_path(maps, "libcupti"), None);
    }
}
