//! The CUDA libraries the recorded process loaded (NCCL, cuBLAS, cuBLASLt, the CUDA runtime,
//! cuDNN), each with its file and the version it reports itself.
//!
//! **The walk.** `dl_iterate_phdr` lists the objects the dynamic loader has mapped, with the
//! path each was loaded from: exactly the libraries code can call, with no text to parse.
//! `/proc/self/maps` would also list data files mapped from the same folders, needs a parser
//! and a procfs; it is not used. Either way the walk is not async-signal-safe (it takes the
//! loader's lock; so do `dlopen` and `dlsym`): the recorder walks at context creation and at
//! each graph instantiation ([`LoadedSnapshot::refresh`]), and a trace written from a signal
//! handler uses the last snapshot; a trace written at exit walks afresh.
//!
//! **The versions.** Each library found is opened again with `RTLD_NOLOAD` (never loads
//! anything; a handle on the copy already mapped, released after use) and asked: NCCL's
//! `ncclGetVersion`, cuBLAS's and cuBLASLt's `…GetProperty`, cuDNN's `cudnnGetVersion`, and
//! the runtime's `cudaRuntimeGetVersion`. The last is a CUDA API call CUPTI would see, so it
//! is made only after recording stopped ([`Queries::WithRuntime`]); before, and whenever a
//! library does not answer, the version comes from the file name (`libnccl.so.2.28.9`).
#![forbid(unsafe_code)]

use super::dl::{Mapped, loaded_objects};
use crate::trace::{CudaLibrary, LoadedLibrary, Versions};
use std::ffi::c_int;
use std::sync::OnceLock;

/// The CUDA library a shared object's file name belongs to. Only the main library of each:
/// cuDNN's sub-libraries (`libcudnn_graph.so.9`) and NCCL's plugins (`libnccl-net.so`) share
/// its version or have none of their own.
fn library_of_file(file: &str) -> Option<CudaLibrary> {
    let (stem, rest) = file.split_once(".so")?;
    if !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    Some(match stem {
        "libnccl" => CudaLibrary::Nccl,
        "libcublas" => CudaLibrary::Cublas,
        "libcublasLt" => CudaLibrary::CublasLt,
        "libcudart" => CudaLibrary::Cudart,
        "libcudnn" => CudaLibrary::Cudnn,
        _ => return None,
    })
}

/// The version a file name carries after `.so.` (`libnccl.so.2.28.9`: "2.28.9";
/// `libcudart.so.13`: "13"); `None` for a bare `.so` or a suffix that is not numbers.
fn version_of_file(file: &str) -> Option<String> {
    let (_, suffix) = file.split_once(".so.")?;
    let numeric = !suffix.is_empty()
        && suffix
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
    numeric.then(|| suffix.to_owned())
}

/// `ncclGetVersion`'s code as NCCL's `NCCL_VERSION` macro builds it: from 2.9 on
/// `major*10000 + minor*100 + patch`, before `major*1000 + minor*100 + patch`.
fn nccl_version(code: c_int) -> String {
    let c = code.max(0);
    let (major, rest) = if c >= 10000 {
        (c / 10000, c % 10000)
    } else {
        (c / 1000, c % 1000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// `cudaRuntimeGetVersion`'s code: `1000*major + 10*minor` (12080: "12.8").
fn cudart_version(code: c_int) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// `cudnnGetVersion`'s code: from 9 on `major*10000 + minor*100 + patch`, before
/// `major*1000 + minor*100 + patch` (8902: "8.9.2").
fn cudnn_version(code: usize) -> String {
    let (major, rest) = if code >= 90000 {
        (code / 10000, code % 10000)
    } else {
        (code / 1000, code % 1000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

/// Which of several loaded NCCLs is the program's: the one whose functions its graph nodes
/// were made in (`called`, a path as loaded), else the first loaded.
fn program_nccl<'a>(
    libraries: &'a [FoundLibrary],
    called: Option<&str>,
) -> Option<&'a FoundLibrary> {
    let mut nccls = libraries
        .iter()
        .filter(|l| l.found.library == CudaLibrary::Nccl);
    let first = nccls.clone().next();
    called
        .and_then(|c| nccls.find(|l| l.loaded_as == c || l.found.path == c))
        .or(first)
}

/// A library of the walk: its path as the loader holds it, and what the trace says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FoundLibrary {
    loaded_as: String,
    found: LoadedLibrary,
}

/// Whether versions may be asked of the CUDA runtime (a CUDA API call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queries {
    /// Recording: the runtime's version comes from its file name.
    WithoutRuntime,
    /// Recording has stopped: `cudaRuntimeGetVersion` too.
    WithRuntime,
}

/// The CUDA libraries loaded, as last walked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LoadedSnapshot {
    /// The matching objects' paths as loaded, in load order: a walk that finds the same
    /// ones asks no library again.
    names: Vec<String>,
    libraries: Vec<FoundLibrary>,
}

impl LoadedSnapshot {
    /// Walks the loaded objects; asks the libraries for their versions when the CUDA ones
    /// changed since the last walk (or `queries` can now ask more). Never call it from a
    /// signal handler.
    pub fn refresh(&mut self, queries: Queries) {
        let names: Vec<String> = loaded_objects()
            .into_iter()
            .filter(|name| library_of_file(file_name(name)).is_some())
            .collect();
        if names == self.names && queries == Queries::WithoutRuntime {
            return;
        }
        self.libraries = names
            .iter()
            .filter_map(|name| {
                let library = library_of_file(file_name(name))?;
                let path = std::fs::canonicalize(name)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| name.clone());
                let version = asked_version(library, name, queries).or_else(|| {
                    version_of_file(file_name(&path)).or(version_of_file(file_name(name)))
                });
                Some(FoundLibrary {
                    loaded_as: name.clone(),
                    found: LoadedLibrary {
                        library,
                        version,
                        path,
                    },
                })
            })
            .collect();
        self.names = names;
    }

    /// Puts the libraries into `versions`, and fills `nccl`, `nccl_library` and
    /// `cuda_runtime` from them where they are empty (the program's NCCL: see
    /// [`program_nccl`]).
    pub fn fill(&self, versions: &mut Versions) {
        versions.loaded = self.libraries.iter().map(|l| l.found.clone()).collect();
        if versions.nccl.is_none()
            && let Some(nccl) = program_nccl(&self.libraries, called_nccl())
        {
            versions.nccl = nccl.found.version.clone();
            versions
                .nccl_library
                .get_or_insert_with(|| nccl.found.path.clone());
        }
        if versions.cuda_runtime.is_none() {
            versions.cuda_runtime = self
                .libraries
                .iter()
                .find(|l| l.found.library == CudaLibrary::Cudart)
                .and_then(|l| l.found.version.clone());
        }
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The path (as loaded) of the NCCL a graph node's creating stack was in, first seen.
static CALLED_NCCL: OnceLock<String> = OnceLock::new();

/// Notes that the program called into the NCCL loaded as `path` (from a stack walk).
pub(crate) fn nccl_called_from(path: &[u8]) {
    if CALLED_NCCL.get().is_none() {
        let _ = CALLED_NCCL.set(String::from_utf8_lossy(path).into_owned());
    }
}

fn called_nccl() -> Option<&'static str> {
    CALLED_NCCL.get().map(String::as_str)
}

/// The version the library loaded as `loaded_as` reports, asked through a handle on the
/// copy already mapped (`RTLD_NOLOAD`: nothing is loaded).
fn asked_version(library: CudaLibrary, loaded_as: &str, queries: Queries) -> Option<String> {
    let mapped = Mapped::open(loaded_as)?;
    match library {
        CudaLibrary::Nccl => mapped.nccl_version().map(nccl_version),
        CudaLibrary::Cublas => mapped.cublas_version(false),
        CudaLibrary::CublasLt => mapped.cublas_version(true),
        CudaLibrary::Cudart => match queries {
            Queries::WithRuntime => mapped.cudart_version().map(cudart_version),
            Queries::WithoutRuntime => None,
        },
        CudaLibrary::Cudnn => mapped.cudnn_version().map(cudnn_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_tell_the_library_and_its_version() {
        assert_eq!(library_of_file("libnccl.so.2"), Some(CudaLibrary::Nccl));
        assert_eq!(library_of_file("libnccl.so"), Some(CudaLibrary::Nccl));
        assert_eq!(library_of_file("libnccl-net.so"), None);
        assert_eq!(
            library_of_file("libcublas.so.13"),
            Some(CudaLibrary::Cublas)
        );
        assert_eq!(
            library_of_file("libcublasLt.so.13.1.0.3"),
            Some(CudaLibrary::CublasLt)
        );
        assert_eq!(
            library_of_file("libcudart.so.12"),
            Some(CudaLibrary::Cudart)
        );
        assert_eq!(library_of_file("libcudnn.so.9"), Some(CudaLibrary::Cudnn));
        assert_eq!(library_of_file("libcudnn_graph.so.9"), None);
        assert_eq!(library_of_file("libcuda.so.1"), None);
        assert_eq!(library_of_file("libcupti.so.13"), None);
        assert_eq!(library_of_file("libnccl"), None);
        assert_eq!(library_of_file("libnccl.solo"), None);

        assert_eq!(
            version_of_file("libnccl.so.2.28.9").as_deref(),
            Some("2.28.9")
        );
        assert_eq!(version_of_file("libcudart.so.13").as_deref(), Some("13"));
        assert_eq!(version_of_file("libnccl.so"), None);
        assert_eq!(version_of_file("libnccl.so."), None);
        assert_eq!(version_of_file("libnccl.so.2.x"), None);
        assert_eq!(version_of_file("libnccl.so.2..9"), None);
    }

    #[test]
    fn version_codes_decode_as_the_libraries_build_them() {
        assert_eq!(nccl_version(22809), "2.28.9");
        assert_eq!(nccl_version(21903), "2.19.3");
        assert_eq!(nccl_version(2804), "2.8.4", "before 2.9: major*1000");
        assert_eq!(cudart_version(13000), "13.0");
        assert_eq!(cudart_version(12080), "12.8");
        assert_eq!(cudnn_version(91000), "9.10.0");
        assert_eq!(cudnn_version(8902), "8.9.2");
    }

    fn nccl(loaded_as: &str, path: &str, version: &str) -> FoundLibrary {
        FoundLibrary {
            loaded_as: loaded_as.into(),
            found: LoadedLibrary {
                library: CudaLibrary::Nccl,
                version: Some(version.into()),
                path: path.into(),
            },
        }
    }

    #[test]
    fn the_called_nccl_is_the_programs_else_the_first_loaded() {
        let cudart = FoundLibrary {
            loaded_as: "/x/libcudart.so.13".into(),
            found: LoadedLibrary {
                library: CudaLibrary::Cudart,
                version: Some("13.0".into()),
                path: "/x/libcudart.so.13".into(),
            },
        };
        let system = nccl(
            "/usr/lib/libnccl.so.2",
            "/usr/lib/libnccl.so.2.27.3",
            "2.27.3",
        );
        let torch = nccl(
            "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2",
            "2.28.9",
        );
        let libs = [cudart.clone(), system.clone(), torch.clone()];
        assert_eq!(program_nccl(&libs, None), Some(&system));
        assert_eq!(program_nccl(&libs, Some(&torch.loaded_as)), Some(&torch));
        // Called from the resolved path of the system copy.
        assert_eq!(
            program_nccl(&libs, Some("/usr/lib/libnccl.so.2.27.3")),
            Some(&system)
        );
        // A called copy not in the list (unloaded since): the first.
        assert_eq!(
            program_nccl(&libs, Some("/gone/libnccl.so.2")),
            Some(&system)
        );
        assert_eq!(program_nccl(&[cudart], None), None);
    }

    #[test]
    fn filling_keeps_what_the_caller_knew_and_adds_what_was_loaded() {
        let snapshot = LoadedSnapshot {
            names: vec![],
            libraries: vec![nccl("/n/libnccl.so.2", "/n/libnccl.so.2.28.9", "2.28.9")],
        };
        let mut empty = Versions::default();
        snapshot.fill(&mut empty);
        assert_eq!(empty.nccl.as_deref(), Some("2.28.9"));
        assert_eq!(empty.nccl_library.as_deref(), Some("/n/libnccl.so.2.28.9"));
        assert_eq!(empty.cuda_runtime, None);
        assert_eq!(empty.loaded.len(), 1);
        let mut known = Versions {
            nccl: Some("2.29.1".into()),
            nccl_library: Some("/own/libnccl.so".into()),
            ..Versions::default()
        };
        snapshot.fill(&mut known);
        assert_eq!(known.nccl.as_deref(), Some("2.29.1"));
        assert_eq!(known.nccl_library.as_deref(), Some("/own/libnccl.so"));
        assert_eq!(known.loaded, empty.loaded);
    }

    /// The walk itself, in this test process (no GPU, no CUDA library): it lists libc, with
    /// a path that exists.
    #[test]
    fn the_walk_lists_the_libraries_this_process_loaded() {
        let objects = loaded_objects();
        let libc = objects
            .iter()
            .find(|name| file_name(name).starts_with("libc.so"))
            .unwrap_or_else(|| panic!("no libc among {objects:?}"));
        assert!(std::path::Path::new(libc).exists(), "{libc}");
        // Whatever CUDA libraries this process holds (none without a GPU; other tests may
        // load some where there is one) are listed by their own files.
        let mut snapshot = LoadedSnapshot::default();
        snapshot.refresh(Queries::WithRuntime);
        for l in &snapshot.libraries {
            assert_eq!(
                library_of_file(file_name(&l.loaded_as)),
                Some(l.found.library)
            );
            assert!(std::path::Path::new(&l.found.path).exists(), "{l:?}");
        }
        // A library that is not loaded is never loaded to be asked.
        let absent = "/nonexistent/libnccl.so.2";
        assert_eq!(
            asked_version(CudaLibrary::Nccl, absent, Queries::WithRuntime),
            None
        );
    }

    /// Fake NCCL, cuBLAS and CUDA runtime libraries, compiled here and loaded into this
    /// process, are found by the walk and asked their versions (which differ from their file
    /// names', so the answer shows where it came from).
    #[test]
    fn loaded_libraries_are_asked_their_versions() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("fake.c");
        std::fs::write(
            &source,
            "int ncclGetVersion(int *v) { *v = 22903; return 0; }\n\
             int cublasGetProperty(int t, int *v) { *v = t == 0 ? 13 : t == 1 ? 1 : 4; return 0; }\n\
             int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }\n",
        )
        .unwrap();
        let mut handles = Vec::new();
        for (file, link) in [
            ("libnccl.so.2.28.9", "libnccl.so.2"),
            ("libcublas.so.13.0.0", "libcublas.so.13"),
            ("libcudart.so.13", "libcudart.so.13"),
        ] {
            let built = dir.path().join(file);
            let status = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&built)
                .arg(&source)
                .status()
                .expect("cc (the linker Rust builds with) runs");
            assert!(status.success(), "cc failed to build {file}");
            let loaded_as = dir.path().join(link);
            if link != file {
                std::os::unix::fs::symlink(&built, &loaded_as).unwrap();
            }
            handles.push(super::super::dl::testing::load_plain_library(&loaded_as));
        }
        let mine = |snapshot: &LoadedSnapshot| -> Vec<LoadedLibrary> {
            snapshot
                .libraries
                .iter()
                .filter(|l| l.loaded_as.starts_with(dir.path().to_str().unwrap()))
                .map(|l| l.found.clone())
                .collect()
        };
        let canonical = |file: &str| {
            std::fs::canonicalize(dir.path().join(file))
                .unwrap()
                .display()
                .to_string()
        };
        let found = |library, version: &str, file: &str| LoadedLibrary {
            library,
            version: Some(version.into()),
            path: canonical(file),
        };
        let mut snapshot = LoadedSnapshot::default();
        snapshot.refresh(Queries::WithoutRuntime);
        assert_eq!(
            mine(&snapshot),
            [
                found(CudaLibrary::Nccl, "2.29.3", "libnccl.so.2.28.9"),
                found(CudaLibrary::Cublas, "13.1.4", "libcublas.so.13.0.0"),
                // Not asked while recording: its file name's.
                found(CudaLibrary::Cudart, "13", "libcudart.so.13"),
            ]
        );
        snapshot.refresh(Queries::WithRuntime);
        assert_eq!(
            mine(&snapshot)[2],
            found(CudaLibrary::Cudart, "12.8", "libcudart.so.13")
        );
        drop(handles);
    }
}
