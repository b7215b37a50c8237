//! The native frames of the thread a fatal signal hit (`GAPSCOPE_SIGNAL_BACKTRACE=1`), written
//! from the signal handler without allocating.

use std::ffi::c_int;

/// Writes the native frames of the current thread to stderr, with its thread id, the
/// interrupted instruction and the library holding it: what `GAPSCOPE_SIGNAL_BACKTRACE=1`
/// prints on a fatal signal, to tell which library crashed (the frames stop where the
/// unwinder cannot go on; the instruction does not).
#[cfg(target_env = "gnu")]
pub fn print_backtrace(sig: c_int, info: *mut libc::siginfo_t, context: *mut std::ffi::c_void) {
    unsafe extern "C" {
        fn backtrace(buffer: *mut *mut std::ffi::c_void, size: c_int) -> c_int;
        fn backtrace_symbols_fd(buffer: *const *mut std::ffi::c_void, size: c_int, fd: c_int);
    }
    let mut frames = [std::ptr::null_mut(); 48];
    let mut line = [0u8; 512];
    let text = {
        use std::io::Write;
        let mut w = &mut line[..];
        let pc = interrupted_pc(context);
        // SAFETY: gettid has no preconditions; `info` is the kernel's siginfo for this
        // signal (null-checked); dladdr only reads the loader's tables and fills `dl`.
        unsafe {
            let fault = if info.is_null() {
                0
            } else {
                (*info).si_addr() as usize
            };
            let _ = write!(
                w,
                "gapscope: signal {sig} on thread {}, at pc {pc:#x}, fault address {fault:#x}",
                libc::gettid()
            );
            let mut dl: libc::Dl_info = std::mem::zeroed();
            if pc != 0 && libc::dladdr(pc as *const std::ffi::c_void, &mut dl) != 0 {
                let name = |p: *const std::ffi::c_char| {
                    if p.is_null() {
                        &b"?"[..]
                    } else {
                        std::ffi::CStr::from_ptr(p).to_bytes()
                    }
                };
                let _ = w.write_all(b" in ");
                let _ = w.write_all(name(dl.dli_fname));
                let _ = write!(w, "+{:#x} (", pc - dl.dli_fbase as usize);
                let _ = w.write_all(name(dl.dli_sname));
                let _ = w.write_all(b")");
            } else {
                let _ = w.write_all(b" in no loaded object");
            }
            let _ = writeln!(w, ":");
        }
        512 - w.len()
    };
    // SAFETY: writes `text` bytes of a live buffer to fd 2; `backtrace` fills at most
    // `frames.len()` entries of a live array, and `backtrace_symbols_fd` reads as many as it
    // returned (glibc; neither allocates once libgcc is loaded, as it is by Rust's unwinder).
    unsafe {
        libc::write(2, line.as_ptr().cast(), text);
        let n = backtrace(frames.as_mut_ptr(), frames.len() as c_int);
        backtrace_symbols_fd(frames.as_ptr(), n, 2);
    }
}

#[cfg(not(target_env = "gnu"))]
pub fn print_backtrace(_sig: c_int, _info: *mut libc::siginfo_t, _context: *mut std::ffi::c_void) {}

/// The instruction the signal interrupted, from its `ucontext_t` (0 when unknown).
#[cfg(target_env = "gnu")]
fn interrupted_pc(context: *mut std::ffi::c_void) -> usize {
    if context.is_null() {
        return 0;
    }
    let uc = context as *const libc::ucontext_t;
    // SAFETY: with SA_SIGINFO the kernel passes the interrupted thread's ucontext_t.
    #[cfg(target_arch = "x86_64")]
    return unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    return unsafe { (*uc).uc_mcontext.pc as usize };
}
