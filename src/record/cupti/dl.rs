//! The dynamic loader and the call stack, asked (libc's `dl_iterate_phdr`, `dladdr1`,
//! `backtrace`, `dlopen(RTLD_NOLOAD)`): the FFI leaf under `loaded` (which CUDA libraries are
//! mapped, at which versions) and `frames` (which library function a node was made in).
//! Everything it returns is owned: a library may be unloaded after the question.

use std::ffi::{CStr, c_int, c_void};

/// The paths of the objects the dynamic loader has mapped, in load order (the program
/// itself and the vDSO, which have no path, left out).
pub(crate) fn loaded_objects() -> Vec<String> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut Vec<String>` passed below, alive for the whole walk;
        // `info` is the loader's entry, valid during this call; its name is null or
        // NUL-terminated.
        let (names, info) = unsafe { (&mut *(data as *mut Vec<String>), &*info) };
        if !info.dlpi_name.is_null() {
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
            if !name.is_empty() {
                names.push(name.into_owned());
            }
        }
        0
    }
    let mut names: Vec<String> = Vec::new();
    // SAFETY: `each` matches dl_iterate_phdr's callback type and only reads `info` and
    // writes into `names`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut names as *mut Vec<String> as *mut c_void) };
    names
}

/// The address of the function `name` that a definition at `ours` stands in for: the next
/// definition after this library (`RTLD_NEXT`, as the linker would bind it without us), or,
/// where it was loaded privately (`RTLD_LOCAL`, out of `RTLD_NEXT`'s reach), the first mapped
/// object that exports it. The objects are never unloaded: a handle taken stays open.
pub(crate) fn definition_beside(name: &CStr, ours: usize) -> Option<usize> {
    // SAFETY: dlsym only looks the name up in the loader's tables.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if next != 0 && next != ours {
        return Some(next);
    }
    loaded_objects().into_iter().find_map(|path| {
        let mapped = Mapped::open(&path)?;
        // SAFETY: only the symbol's address is read; nothing is called here.
        let found = unsafe { mapped.0.get::<*mut c_void>(name.to_bytes_with_nul()) }
            .ok()
            .map(|symbol| *symbol as usize)
            .filter(|&found| found != 0 && found != ours);
        // The function found must stay mapped as long as it may be called.
        std::mem::forget(mapped);
        found
    })
}

/// The return addresses of this thread's stack, innermost first (at most `N`).
pub(crate) fn return_addresses<const N: usize>() -> Vec<usize> {
    let mut frames = [std::ptr::null_mut::<c_void>(); N];
    let room = c_int::try_from(N).unwrap_or(c_int::MAX);
    // SAFETY: backtrace writes at most `room` return addresses into the buffer.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), room) };
    frames
        .iter()
        .take(usize::try_from(n).unwrap_or(0))
        .map(|&a| a as usize)
        .collect()
}

/// What the loader knows of an address: the object that holds it and the exported symbol
/// nearest below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddressInfo {
    /// The object's path, as the loader has it.
    pub file: Vec<u8>,
    /// Where the object is loaded.
    pub base: usize,
    /// The exported symbol whose function covers the address (its size allows it, or the
    /// loader gives no size).
    pub symbol: Option<String>,
}

/// `RTLD_DL_SYMENT` of glibc's `dlfcn.h`: `dladdr1` returns the symbol's ELF entry.
const RTLD_DL_SYMENT: c_int = 1;

/// Asks the loader about `address` (`dladdr1`); `None` when no object holds it.
pub(crate) fn address_info(address: usize) -> Option<AddressInfo> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut symbol_entry: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only looks `address` up in the loader's tables; it fills `info` with
    // pointers to NUL-terminated strings that live as long as the library stays loaded (we
    // copy them before returning) and, with RTLD_DL_SYMENT, `symbol_entry` with a pointer to
    // the symbol's ELF entry (or null).
    let found = unsafe {
        libc::dladdr1(
            address as *const c_void,
            &mut info,
            &mut symbol_entry,
            RTLD_DL_SYMENT,
        )
    } != 0;
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated (dladdr's contract).
    let file = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_bytes()
        .to_vec();
    let mut symbol = None;
    if !info.dli_sname.is_null() {
        let covers = symbol_entry.is_null() || {
            // SAFETY: with RTLD_DL_SYMENT on a 64-bit glibc, a non-null entry is an Elf64_Sym
            // of the library's loaded symbol table.
            let size = unsafe { (*(symbol_entry as *const libc::Elf64_Sym)).st_size };
            let offset = address.wrapping_sub(info.dli_saddr as usize) as u64;
            // A return address may sit just past a function's last call: allow its end.
            size == 0 || offset <= size
        };
        if covers {
            // SAFETY: as above.
            symbol = Some(
                unsafe { CStr::from_ptr(info.dli_sname) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    Some(AddressInfo {
        file,
        base: info.dli_fbase as usize,
        symbol,
    })
}

/// A handle on a library already mapped (`RTLD_NOLOAD`: nothing is loaded, no initialiser
/// runs), to ask it its version. Each question uses the C signature of the library's header
/// and needs no handle or context of the library.
pub(crate) struct Mapped(libloading::os::unix::Library);

/// `libraryPropertyType`'s values (CUDA's `library_types.h`).
const MAJOR_VERSION: c_int = 0;
const MINOR_VERSION: c_int = 1;
const PATCH_LEVEL: c_int = 2;

impl Mapped {
    /// The copy mapped as `loaded_as`; `None` when none is.
    pub fn open(loaded_as: &str) -> Option<Mapped> {
        use libloading::os::unix::{Library, RTLD_LAZY};
        // SAFETY: RTLD_NOLOAD returns a handle on an object already mapped (its initialisers
        // ran when it was loaded) or fails; no code of the library runs here.
        unsafe { Library::open(Some(loaded_as), RTLD_LAZY | libc::RTLD_NOLOAD) }
            .ok()
            .map(Mapped)
    }

    /// `int f(int *value)` returning 0 on success.
    fn int_out(&self, symbol: &[u8]) -> Option<c_int> {
        type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
        // SAFETY: callers name functions of this signature only.
        let f = unsafe { self.0.get::<IntOut>(symbol) }.ok()?;
        let mut value: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        (unsafe { f(&mut value) } == 0).then_some(value)
    }

    /// `ncclGetVersion`'s code.
    pub fn nccl_version(&self) -> Option<c_int> {
        self.int_out(b"ncclGetVersion\0")
    }

    /// `cudaRuntimeGetVersion`'s code. It may initialise the runtime's state: never from a
    /// callback where the runtime may be mid-call.
    pub fn cudart_version(&self) -> Option<c_int> {
        self.int_out(b"cudaRuntimeGetVersion\0")
    }

    /// "major.minor.patch" from `cublasGetProperty` (`lt`: `cublasLtGetProperty`).
    pub fn cublas_version(&self, lt: bool) -> Option<String> {
        type Property = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
        let symbol: &[u8] = if lt {
            b"cublasLtGetProperty\0"
        } else {
            b"cublasGetProperty\0"
        };
        // SAFETY: both have the `Property` signature (cublas_api.h, cublasLt.h).
        let f = unsafe { self.0.get::<Property>(symbol) }.ok()?;
        let part = |which: c_int| {
            let mut value: c_int = 0;
            // SAFETY: writes one int through a valid pointer.
            (unsafe { f(which, &mut value) } == 0).then_some(value)
        };
        Some(format!(
            "{}.{}.{}",
            part(MAJOR_VERSION)?,
            part(MINOR_VERSION)?,
            part(PATCH_LEVEL)?
        ))
    }

    /// `cudnnGetVersion`'s code.
    pub fn cudnn_version(&self) -> Option<usize> {
        type SizeOut = unsafe extern "C" fn() -> usize;
        // SAFETY: `size_t cudnnGetVersion(void)`.
        let f = unsafe { self.0.get::<SizeOut>(b"cudnnGetVersion\0") }.ok()?;
        // SAFETY: takes nothing, returns a number.
        Some(unsafe { f() })
    }
}

#[cfg(test)]
pub(crate) mod testing {
    /// Loads a library a test built (one without initialisers) and keeps it mapped while the
    /// result lives.
    pub fn load_plain_library(path: &std::path::Path) -> libloading::Library {
        // SAFETY: the test's libraries have no initialisers.
        unsafe { libloading::Library::new(path) }.expect("the test library loads")
    }
}
