//! Which library call a graph node was made in, from the creating thread's return addresses
//! (node creation only: never on the launch hot path).
//!
//! Of the frames in a known library — NCCL, cuDNN, cuBLAS, cuBLASLt, a Triton launcher,
//! libtorch_cuda, libtorch_python — the outermost one of each is the call that reached the
//! library: for the vendor libraries the function the program (or torch) called, named by its
//! exported symbol (`cublasLtMatmul`, `pncclAllGather` read as `ncclAllGather`). Torch's
//! kernels are mostly launched from local functions that the exported table does not hold
//! (`dladdr` finds a nearest symbol that does not cover the address, or none): those are named
//! from the file's own symbol table ([`super::local_symbols`]), and the frame that names
//! libtorch_cuda is the outermost of the best-named ones ([`Frame::rank`]: torch's kernel
//! layer, `at::native::…`, over the dispatcher's wrappers around it). libtorch_python, torch's
//! Python bindings, is named by its innermost frame instead, the binding that called CUDA. A
//! library whose frames no table names is still named, by its file (`libtorch_cuda`): the node
//! says where it came from and invents no function. When several libraries are on the stack,
//! the one nearest to CUDA in [`Library::PRIORITY`] names the node: a GEMM is
//! `cublasLtMatmul`, not the torch function that called it.
#![forbid(unsafe_code)]

use super::dl;
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;

/// A library whose functions name graph nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Library {
    Nccl,
    Cudnn,
    Cublas,
    CublasLt,
    Triton,
    TorchCuda,
    /// Torch's Python bindings: where inductor's static Triton launcher and
    /// `torch.cuda.Event` live; the last resort, since every torch call from Python passes here.
    TorchPython,
}

impl Library {
    /// Nearest to the device first: the library that launched wins over the one that called
    /// it (torch calls cuBLAS, cuBLAS calls cuBLASLt: `cublasGemmEx` names the node, since
    /// cuBLASLt's frames under it are cuBLAS's own doing).
    const PRIORITY: [Library; 7] = [
        Library::Nccl,
        Library::Cudnn,
        Library::Cublas,
        Library::CublasLt,
        Library::Triton,
        Library::TorchCuda,
        Library::TorchPython,
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
        } else if file.starts_with(b"libtorch_python") {
            Some(Library::TorchPython)
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

    /// The library as a node names it when no frame of it has a function name.
    fn file_name(self) -> &'static str {
        match self {
            Library::Nccl => "libnccl",
            Library::Cudnn => "libcudnn",
            Library::Cublas => "libcublas",
            Library::CublasLt => "libcublasLt",
            Library::Triton => "Triton launcher",
            Library::TorchCuda => "libtorch_cuda",
            Library::TorchPython => "libtorch_python",
        }
    }

    /// Whether the file's own symbol table is worth reading for frames the exported one cannot
    /// name: torch ships its libraries unstripped; the vendor libraries are stripped, NCCL's
    /// local functions are no API, and a Triton launcher's (`_launch`) say nothing.
    fn names_local_functions(self) -> bool {
        matches!(self, Library::TorchCuda | Library::TorchPython)
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

    /// A local function's name as a node shows it: one that does not say where it lives (a
    /// C function, an anonymous namespace's) gets the library's file name before it.
    fn local_function_name(self, symbol: &str) -> String {
        let name = demangled(symbol);
        if name.contains("::") && !name.starts_with("(anonymous namespace)") {
            name
        } else {
            format!("{}: {name}", self.file_name())
        }
    }
}

/// How a frame's function is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Naming {
    /// By no table: the frame only tells its library.
    Unnamed,
    /// From the file's own symbol table: a local function.
    Local,
    /// From the exported (dynamic) symbol table: an API or exported function.
    Exported,
}

/// A return address inside a known library, with the function it lies in when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub library: Library,
    pub naming: Naming,
    /// Empty when unnamed.
    pub name: String,
}

impl Frame {
    /// How well this frame names its library's part in the call, compared in order (higher
    /// wins; among equals the outermost frame): named at all; a plain function over a template
    /// instantiation or a lambda (`at::native::mean_kernel_cuda` over the
    /// `gpu_reduce_kernel<…>` it calls, `wrapper_CUDA_rsqrt` over `gpu_kernel_impl<…>`);
    /// exported over local; torch's kernel layer (`at::native::…`, the code that chose the
    /// kernel) over the dispatcher's wrappers around it (`at::(anonymous
    /// namespace)::wrapper_CUDA_add`).
    fn rank(&self) -> (bool, bool, bool, bool) {
        let named = self.naming != Naming::Unnamed;
        let plain = named && !self.name.contains('<') && !self.name.contains("{lambda");
        (
            named,
            plain,
            self.naming == Naming::Exported,
            self.name.starts_with("at::native::"),
        )
    }

    fn label(&self) -> &str {
        match self.naming {
            Naming::Unnamed => self.library.file_name(),
            _ => &self.name,
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

/// Picks from frames given innermost first (see the module doc).
fn pick<'a>(frames: impl IntoIterator<Item = Option<&'a Frame>>) -> LibraryFrames {
    let mut best: HashMap<Library, &Frame> = HashMap::new();
    let mut nccl_api: Option<&Frame> = None;
    for frame in frames.into_iter().flatten() {
        let slot = best.entry(frame.library).or_insert(frame);
        // Outermost first among equals: a later (outer) frame of the same rank replaces.
        // Torch's Python bindings are the exception: their outer frames are the interpreter's
        // plumbing (`dynamo_eval_custom_code`, pybind11's dispatcher), so the innermost named
        // frame, the binding that called CUDA, names them.
        let better = match frame.library {
            Library::TorchPython => frame.rank().0 && !slot.rank().0,
            _ => frame.rank() >= slot.rank(),
        };
        if better {
            *slot = frame;
        }
        if frame.library == Library::Nccl && frame.naming == Naming::Exported {
            nccl_api = Some(frame);
        }
    }
    LibraryFrames {
        nccl: nccl_api.map(|f| f.name.clone()),
        frame: Library::PRIORITY
            .iter()
            .find_map(|l| best.get(l))
            .map(|f| f.label().to_owned()),
    }
}

thread_local! {
    /// Return address → the library function it lies in (`None`: none known). `dladdr1`
    /// scans a symbol table: each address is looked up once per thread (a capture creates
    /// many nodes from the same few call sites).
    static FRAME_NAMES: RefCell<HashMap<usize, Option<Frame>>> = RefCell::new(HashMap::new());
}

/// The library functions this thread is inside now. Empty when unwinding stops early.
pub(crate) fn calling_libraries() -> LibraryFrames {
    let frames = dl::return_addresses::<64>();
    FRAME_NAMES
        .try_with(|names| {
            let mut names = names.borrow_mut();
            for &address in &frames {
                names
                    .entry(address)
                    .or_insert_with(|| library_function_at(address));
            }
            pick(frames.iter().map(|a| names.get(a).and_then(Option::as_ref)))
        })
        .unwrap_or_default()
}

/// The frame of a known library at `address`, with the function that holds it when a symbol
/// table names it.
fn library_function_at(address: usize) -> Option<Frame> {
    let info = dl::address_info(address)?;
    let library = Library::of_path(&info.file)?;
    let frame = |naming, name| {
        Some(Frame {
            library,
            naming,
            name,
        })
    };
    if let Some(name) = info.symbol.and_then(|s| library.function_name(&s)) {
        if library == Library::Nccl {
            // The NCCL whose API the program called is the one the trace names.
            super::loaded::nccl_called_from(&info.file);
        }
        return frame(Naming::Exported, name);
    }
    if library.names_local_functions() {
        let offset = address.wrapping_sub(info.base) as u64;
        let file = std::path::Path::new(std::ffi::OsStr::from_bytes(&info.file));
        if let Some(symbol) = super::local_symbols::of_file(file).and_then(|t| t.name_at(offset)) {
            return frame(Naming::Local, library.local_function_name(&symbol));
        }
    }
    frame(Naming::Unnamed, String::new())
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
        assert_eq!(
            of("/venv/torch/lib/libtorch_python.so"),
            Some(Library::TorchPython)
        );
        assert_eq!(of("/venv/torch/lib/libtorch_cpu.so"), None);
        assert_eq!(of("/usr/lib/libcudart.so.13"), None);
        assert_eq!(of("/usr/lib/libcuda.so.1"), None);
    }

    fn exported(library: Library, name: &str) -> Frame {
        Frame {
            library,
            naming: Naming::Exported,
            name: name.into(),
        }
    }

    fn local(library: Library, symbol: &str) -> Frame {
        Frame {
            library,
            naming: Naming::Local,
            name: library.local_function_name(symbol),
        }
    }

    fn unnamed(library: Library) -> Frame {
        Frame {
            library,
            naming: Naming::Unnamed,
            name: String::new(),
        }
    }

    #[test]
    fn the_library_nearest_the_device_names_the_node_by_its_outermost_frame() {
        // Innermost first: cuBLASLt's internals, its entry, then torch's frames.
        let frames = [
            unnamed(Library::CublasLt),
            exported(Library::CublasLt, "cublasLtInternal"),
            exported(Library::CublasLt, "cublasLtMatmul"),
            exported(Library::TorchCuda, "at::cuda::blas::gemm"),
            exported(Library::TorchCuda, "at::native::addmm_out_cuda"),
        ];
        assert_eq!(
            pick([None].into_iter().chain(frames.iter().map(Some))),
            LibraryFrames {
                nccl: None,
                frame: Some("cublasLtMatmul".into())
            }
        );
        let torch_only = [exported(Library::TorchCuda, "at::native::fill_")];
        assert_eq!(
            pick(torch_only.iter().map(Some)).frame.as_deref(),
            Some("at::native::fill_")
        );
        let nccl = [
            unnamed(Library::Nccl),
            exported(Library::Nccl, "ncclGroupEnd"),
            exported(Library::Nccl, "ncclAllGather"),
            unnamed(Library::Nccl),
            exported(Library::TorchCuda, "c10d::ProcessGroupNCCL::allgather"),
        ];
        let picked = pick(nccl.iter().map(Some));
        assert_eq!(picked.nccl.as_deref(), Some("ncclAllGather"));
        assert_eq!(picked.frame.as_deref(), Some("ncclAllGather"));
        assert_eq!(pick([None, None]), LibraryFrames::default());
    }

    #[test]
    fn an_exported_function_outranks_the_local_wrappers_around_it() {
        // torch.add on CUDA, as recorded on an H200 (torch 2.11): the exported kernel
        // function sits between local helpers and the dispatcher's local wrappers.
        let frames = [
            exported(
                Library::TorchCuda,
                "at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16>>",
            ),
            local(
                Library::TorchCuda,
                "_ZZN2at6native10add_kernelERNS_18TensorIteratorBaseERKN3c106ScalarEENKUlvE_clEv",
            ),
            exported(Library::TorchCuda, "at::native::add_kernel"),
            local(
                Library::TorchCuda,
                "_ZN2at12_GLOBAL__N_124wrapper_CUDA_add_out_outERKNS_6TensorES3_RKN3c106ScalarERS1_",
            ),
        ];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("at::native::add_kernel")
        );
    }

    #[test]
    fn a_kernel_launched_from_local_functions_is_named_by_torchs_kernel_layer() {
        // x.relu_() on CUDA (torch 2.11): every libtorch_cuda frame is local, the
        // outermost a dispatcher wrapper; the kernel layer's outermost function names it.
        let frames = [
            local(
                Library::TorchCuda,
                "_ZN2at6native12_GLOBAL__N_119launch_clamp_scalarERNS_18TensorIteratorBaseEN3c106ScalarES5_NS0_6detail11ClampLimitsE",
            ),
            local(
                Library::TorchCuda,
                "_ZN2at6native12_GLOBAL__N_128clamp_min_scalar_kernel_implERNS_18TensorIteratorBaseEN3c106ScalarE",
            ),
            local(
                Library::TorchCuda,
                "_ZN2at12_GLOBAL__N_123wrapper_CUDA_clamp_min_ERNS_6TensorERKN3c106ScalarE",
            ),
        ];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl")
        );
        // torch.mean (torch 2.11): the local kernel function over the exported template
        // it calls; x.rsqrt(): the op's wrapper over a template helper (the kernel function
        // was a tail call, gone from the stack).
        let mean = [
            exported(
                Library::TorchCuda,
                "at::native::gpu_reduce_kernel<float, float, 4, 4, at::native::MeanOps<float, float, float, float>, double>",
            ),
            local(
                Library::TorchCuda,
                "_ZN2at6native16mean_kernel_cudaERNS_14TensorIteratorE",
            ),
        ];
        assert_eq!(
            pick(mean.iter().map(Some)).frame.as_deref(),
            Some("at::native::mean_kernel_cuda")
        );
        let rsqrt = [
            Frame {
                library: Library::TorchCuda,
                naming: Naming::Local,
                name: "at::native::gpu_kernel_impl<__nv_hdl_wrapper_t<false, true, false>>".into(),
            },
            local(
                Library::TorchCuda,
                "_ZN2at12_GLOBAL__N_118wrapper_CUDA_rsqrtERKNS_6TensorE",
            ),
        ];
        assert_eq!(
            pick(rsqrt.iter().map(Some)).frame.as_deref(),
            Some("at::(anonymous namespace)::wrapper_CUDA_rsqrt")
        );
        // Only the dispatcher's wrapper: the outermost local function, as it is.
        let wrapper_only = [local(
            Library::TorchCuda,
            "_ZN2at12_GLOBAL__N_118wrapper_CUDA_rsqrtERKNS_6TensorE",
        )];
        assert_eq!(
            pick(wrapper_only.iter().map(Some)).frame.as_deref(),
            Some("at::(anonymous namespace)::wrapper_CUDA_rsqrt")
        );
    }

    #[test]
    fn a_frame_no_table_names_still_names_its_library() {
        // A stripped libtorch_cuda, or a frame whose nearest exported symbol does not cover
        // it: the node names the library, never the symbol that does not hold the address.
        let frames = [unnamed(Library::TorchCuda), unnamed(Library::TorchCuda)];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("libtorch_cuda")
        );
        // An unnamed frame of a nearer library still wins over torch's named ones.
        let frames = [
            unnamed(Library::Cublas),
            exported(
                Library::TorchCuda,
                "at::native::structured_mm_out_cuda::impl",
            ),
        ];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("libcublas")
        );
        assert_eq!(
            pick([unnamed(Library::Triton)].iter().map(Some))
                .frame
                .as_deref(),
            Some("Triton launcher")
        );
    }

    #[test]
    fn inductors_static_triton_launcher_names_its_library() {
        // Triton kernels of torch.compile (torch 2.11, static CUDA launcher): local functions
        // of libtorch_python in an anonymous namespace, under dynamo's exported frame hook.
        let frames = [
            local(
                Library::TorchPython,
                "_ZN12_GLOBAL__N_112launchKernelEP10CUfunc_stjjjjjPPvP11CUstream_st",
            ),
            local(
                Library::TorchPython,
                "_ZN12_GLOBAL__N_113launch_kernelEP7_objectS1_",
            ),
        ];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("libtorch_python: (anonymous namespace)::launchKernel"),
            "the binding nearest CUDA, not dynamo's frame evaluation around it"
        );
        let under_dynamo = [
            unnamed(Library::TorchPython),
            local(
                Library::TorchPython,
                "_ZN12_GLOBAL__N_112launchKernelEP10CUfunc_stjjjjjPPvP11CUstream_st",
            ),
            exported(Library::TorchPython, "dynamo_eval_custom_code"),
        ];
        assert_eq!(
            pick(under_dynamo.iter().map(Some)).frame.as_deref(),
            Some("libtorch_python: (anonymous namespace)::launchKernel")
        );
        assert_eq!(
            Library::TorchPython.local_function_name("_Z16THCPEvent_recordP7_objectS0_"),
            "libtorch_python: THCPEvent_record"
        );
        // torch's Python bindings come last: a libtorch_cuda frame names a torch op.
        let frames = [
            exported(Library::TorchCuda, "at::native::mul_kernel_cuda"),
            local(
                Library::TorchPython,
                "_ZN5torch8autograd16THPVariable_mul_EP7_objectS2_S2_",
            ),
        ];
        assert_eq!(
            pick(frames.iter().map(Some)).frame.as_deref(),
            Some("at::native::mul_kernel_cuda")
        );
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

    /// A local function of this test binary, for the symbol-table lookup below.
    #[inline(never)]
    fn a_local_function_of_this_binary() -> usize {
        std::hint::black_box(a_local_function_of_this_binary as fn() -> usize as usize)
    }

    #[test]
    fn a_local_function_is_found_in_the_files_own_symbol_table() {
        // The way `library_function_at` names a frame dladdr cannot: this binary's address,
        // less its load base, looked up in its own .symtab (test binaries keep theirs).
        let address = a_local_function_of_this_binary();
        let info = dl::address_info(address).expect("the loader knows this binary");
        let exe = std::env::current_exe().expect("the test binary");
        let table = super::super::local_symbols::of_file(&exe).expect("a symbol table");
        let symbol = table
            .name_at((address - info.base) as u64 + 1)
            .expect("the function is named");
        assert!(
            demangled(&symbol).contains("a_local_function_of_this_binary"),
            "{symbol}"
        );
    }

    #[test]
    fn a_frame_of_this_test_binary_is_in_no_known_library() {
        // Only the walk itself runs here (no CUDA library is loaded): nothing is named.
        assert_eq!(calling_libraries(), LibraryFrames::default());
    }
}
