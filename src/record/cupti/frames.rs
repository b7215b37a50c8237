//! Which library call a graph node was made in, from the creating thread's return addresses
//! (node creation only: never on the launch hot path).
//!
//! Of the frames in a known library — NCCL, cuDNN, cuBLAS, cuBLASLt, a Triton launcher,
//! libtorch_cuda — the outermost one of each is the call that reached the library: for the
//! vendor libraries the function the program (or torch) called, named by its exported symbol
//! (`cublasLtMatmul`, `pncclAllGather` read as `ncclAllGather`). A frame whose nearest symbol
//! does not cover its address (`dladdr1`'s symbol size) lies in a static function `dladdr`
//! cannot name, and is skipped. When several libraries are on the stack, the one nearest to
//! CUDA in [`Library::PRIORITY`] names the node: a GEMM is `cublasLtMatmul`, not the torch
//! function that called it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, c_void};

/// A library whose functions name graph nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Library {
    Nccl,
    Cudnn,
    Cublas,
    CublasLt,
    Triton,
    TorchCuda,
}

impl Library {
    /// Nearest to the device first: the library that launched wins over the one that called
    /// it (torch calls cuBLAS, cuBLAS calls cuBLASLt: `cublasGemmEx` names the node, since
    /// cuBLASLt's frames under it are cuBLAS's own doing).
    const PRIORITY: [Library; 6] = [
        Library::Nccl,
        Library::Cudnn,
        Library::Cublas,
        Library::CublasLt,
        Library::Triton,
        Library::TorchCuda,
    ];

    /// The library a shared object's path belongs to.
    fn of_path(path: &[u8]) -> Option<Library> {
        let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if file.starts_with(b"libnccl") {
            Some(Library::Nccl)
        } else if file.starts_with(b"libcudnn") {
            Some(Library::Cudnn)
        } else if file.starts_with(b"libcublasLt") {
            Some(Library::CublasLt)
        } else if file.starts_with(b"libcublas") {
            Some(Library::Cublas)
        } else if file.starts_with(b"libtorch_cuda") {
            Some(Library::TorchCuda)
        } else if file.windows(6).any(|w| w == b"triton")
            || path.windows(9).any(|w| w == b"/.triton/")
        {
            // Triton's compiled launchers (`__triton_launcher…so`) in its cache
            // (`~/.triton/cache/…`); libraries Triton ships (its libcupti) are not launchers.
            Some(Library::Triton)
        } else {
            None
        }
    }

    /// The name of a function of this library as the trace shows it; `None` for symbols that
    /// are not API entry points (NCCL's).
    fn function_name(self, symbol: &str) -> Option<String> {
        match self {
            Library::Nccl => {
                let name = symbol.strip_prefix('p').unwrap_or(symbol);
                crate::trace::is_library_call_range(name).then(|| name.to_owned())
            }
            _ => Some(demangled(symbol)),
        }
    }
}

/// A C++ symbol demangled without its parameters and return type (`at::native::addmm_out`),
/// else as it is.
fn demangled(symbol: &str) -> String {
    if !symbol.starts_with("_Z") {
        return symbol.to_owned();
    }
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    cpp_demangle::Symbol::new(symbol.as_bytes())
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| symbol.to_owned())
}

/// What the creating thread's stack shows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct LibraryFrames {
    /// The NCCL API function it is inside.
    pub nccl: Option<String>,
    /// The library function that names the node (see the module doc).
    pub frame: Option<String>,
}

/// Picks from frames given innermost first, each with the library function it lies in.
fn pick<'a>(frames: impl IntoIterator<Item = Option<(Library, &'a str)>>) -> LibraryFrames {
    let mut outermost: HashMap<Library, &str> = HashMap::new();
    for (library, name) in frames.into_iter().flatten() {
        outermost.insert(library, name);
    }
    LibraryFrames {
        nccl: outermost.get(&Library::Nccl).map(|s| s.to_string()),
        frame: Library::PRIORITY
            .iter()
            .find_map(|l| outermost.get(l))
            .map(|s| s.to_string()),
    }
}

thread_local! {
    /// Return address → the library function it lies in (`None`: none known). `dladdr1`
    /// scans a symbol table: each address is looked up once per thread (a capture creates
    /// many nodes from the same few call sites).
    static FRAME_NAMES: RefCell<HashMap<usize, Option<(Library, String)>>> =
        RefCell::new(HashMap::new());
}

/// The library functions this thread is inside now. Empty when unwinding stops early.
pub(crate) fn calling_libraries() -> LibraryFrames {
    let mut frames = [std::ptr::null_mut::<c_void>(); 64];
    // SAFETY: backtrace writes at most `frames.len()` return addresses into the buffer.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as std::ffi::c_int) };
    FRAME_NAMES
        .try_with(|names| {
            let mut names = names.borrow_mut();
            for &address in frames.iter().take(n.max(0) as usize) {
                names
                    .entry(address as usize)
                    .or_insert_with(|| library_function_at(address));
            }
            pick(frames.iter().take(n.max(0) as usize).map(|&a| {
                names
                    .get(&(a as usize))
                    .and_then(|f| f.as_ref())
                    .map(|(l, s)| (*l, s.as_str()))
            }))
        })
        .unwrap_or_default()
}

/// `RTLD_DL_SYMENT` of glibc's `dlfcn.h`: `dladdr1` returns the symbol's ELF entry.
const RTLD_DL_SYMENT: std::ffi::c_int = 1;

/// The known library function whose code holds `address`.
fn library_function_at(address: *mut c_void) -> Option<(Library, String)> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut symbol_entry: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only looks `address` up in the loader's tables; it fills `info` with
    // pointers to NUL-terminated strings that live as long as the library stays loaded and,
    // with RTLD_DL_SYMENT, `symbol_entry` with a pointer to the symbol's ELF entry (or null).
    let found =
        unsafe { libc::dladdr1(address, &mut info, &mut symbol_entry, RTLD_DL_SYMENT) } != 0;
    if !found || info.dli_fname.is_null() || info.dli_sname.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated (dladdr's contract).
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    let library = Library::of_path(path.to_bytes())?;
    if !symbol_entry.is_null() {
        // SAFETY: with RTLD_DL_SYMENT on a 64-bit glibc, a non-null entry is an Elf64_Sym of
        // the library's loaded symbol table.
        let size = unsafe { (*(symbol_entry as *const libc::Elf64_Sym)).st_size };
        let offset = (address as usize).wrapping_sub(info.dli_saddr as usize) as u64;
        // A return address may sit just past a function's last call: allow its end.
        if size > 0 && offset > size {
            return None;
        }
    }
    // SAFETY: as above.
    let symbol = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
    let name = library.function_name(&symbol)?;
    if library == Library::Nccl {
        // The NCCL whose API the program called is the one the trace names.
        super::loaded::nccl_called_from(path);
    }
    Some((library, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_are_told_by_their_file_names() {
        let of = |p: &str| Library::of_path(p.as_bytes());
        assert_eq!(of("/usr/lib/libnccl.so.2"), Some(Library::Nccl));
        assert_eq!(
            of("/venv/nvidia/cublas/lib/libcublasLt.so.13"),
            Some(Library::CublasLt)
        );
        assert_eq!(of("/x/libcublas.so.13"), Some(Library::Cublas));
        assert_eq!(
            of("/x/libcudnn_engines_precompiled.so.9"),
            Some(Library::Cudnn)
        );
        assert_eq!(
            of("/venv/torch/lib/libtorch_cuda.so"),
            Some(Library::TorchCuda)
        );
        assert_eq!(
            of("/root/.triton/cache/ab12/cuda_utils.cpython-312.so"),
            Some(Library::Triton)
        );
        assert_eq!(
            of("/tmp/cache/3f/__triton_launcher.cpython-312-x86_64-linux-gnu.so"),
            Some(Library::Triton)
        );
        assert_eq!(
            of("/venv/triton/backends/nvidia/lib/cupti/libcupti.so.13"),
            None,
            "a library Triton ships is not a launcher"
        );
        assert_eq!(of("/usr/lib/libcudart.so.13"), None);
        assert_eq!(of("/usr/lib/libcuda.so.1"), None);
    }

    #[test]
    fn the_library_nearest_the_device_names_the_node_by_its_outermost_frame() {
        // Innermost first: cuBLASLt's internals, its entry, then torch's frames.
        let frames = [
            None,
            Some((Library::CublasLt, "cublasLtInternal")),
            Some((Library::CublasLt, "cublasLtMatmul")),
            Some((Library::TorchCuda, "at::cuda::blas::gemm")),
            Some((Library::TorchCuda, "at::native::addmm_out_cuda")),
            None,
        ];
        assert_eq!(
            pick(frames),
            LibraryFrames {
                nccl: None,
                frame: Some("cublasLtMatmul".into())
            }
        );
        let torch_only = [Some((Library::TorchCuda, "at::native::fill_"))];
        assert_eq!(pick(torch_only).frame.as_deref(), Some("at::native::fill_"));
        let nccl = [
            Some((Library::Nccl, "ncclGroupEnd")),
            Some((Library::Nccl, "ncclAllGather")),
            Some((Library::TorchCuda, "c10d::ProcessGroupNCCL::allgather")),
        ];
        let picked = pick(nccl);
        assert_eq!(picked.nccl.as_deref(), Some("ncclAllGather"));
        assert_eq!(picked.frame.as_deref(), Some("ncclAllGather"));
        assert_eq!(pick([None, None]), LibraryFrames::default());
    }

    #[test]
    fn symbols_read_as_api_names() {
        assert_eq!(
            Library::Nccl.function_name("pncclAllGather").as_deref(),
            Some("ncclAllGather")
        );
        assert_eq!(Library::Nccl.function_name("initTransportsRank"), None);
        assert_eq!(
            Library::CublasLt.function_name("cublasLtMatmul").as_deref(),
            Some("cublasLtMatmul")
        );
        assert_eq!(
            Library::TorchCuda
                .function_name("_ZN2at6native13reduce_kernelILi128ELi4EEEvv")
                .as_deref(),
            Some("at::native::reduce_kernel<128, 4>")
        );
    }

    #[test]
    fn a_frame_of_this_test_binary_is_in_no_known_library() {
        // Only the walk itself runs here (no CUDA library is loaded): nothing is named.
        assert_eq!(calling_libraries(), LibraryFrames::default());
    }
}
