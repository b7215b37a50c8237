//! FFI leaf: compiling a CUDA source with NVRTC into a CUBIN (`sm_XY`) or PTX (`compute_XY`).

use cudarc::nvrtc::{Ptx, result as nv, sys as nvsys};
use std::ffi::CString;

/// An NVRTC program, destroyed on drop.
struct Program(nvsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program and destroyed once, here.
        let _ = unsafe { nv::destroy_program(self.0) };
    }
}

/// NUL-terminated C text out of NVRTC's buffers.
fn c_text(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why [`compile`] failed: typed for the workload's error. Each displays as the one-line
/// message of the failing step, or for a failed compile the message, a newline and NVRTC's log.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{name} contains a NUL byte")]
    NulInSource { name: String },
    #[error("{name:?} contains a NUL byte")]
    NulInName { name: String },
    /// An NVRTC call other than the compile itself.
    #[error("{step} ({arch}): {error:?}")]
    Step {
        step: &'static str,
        arch: String,
        error: nv::NvrtcError,
    },
    #[error("compile ({arch}, options {options:?}): {error:?}\n{log}")]
    Compile {
        arch: String,
        options: Vec<String>,
        error: nv::NvrtcError,
        log: String,
    },
}

/// Compiles `source` (named `name` in messages) for `arch`.
pub fn compile(source: &str, name: &str, arch: &str) -> Result<Ptx, CompileError> {
    let err = |step: &'static str, error: nv::NvrtcError| CompileError::Step {
        step,
        arch: arch.to_owned(),
        error,
    };
    let src = CString::new(source).map_err(|_| CompileError::NulInSource {
        name: name.to_owned(),
    })?;
    let cname = CString::new(name).map_err(|_| CompileError::NulInName {
        name: name.to_owned(),
    })?;
    let prog = Program(nv::create_program(&src, Some(&cname)).map_err(|e| err("create", e))?);
    let options = [format!("--gpu-architecture={arch}")];
    // SAFETY: `prog` is a live program; `src` and `cname` outlive it.
    if let Err(e) = unsafe { nv::compile_program(prog.0, &options) } {
        // SAFETY: `prog` is live.
        let log = unsafe { nv::get_program_log(prog.0) }
            .map(|l| c_text(&l))
            .unwrap_or_default();
        return Err(CompileError::Compile {
            arch: arch.to_owned(),
            options: options.to_vec(),
            error: e,
            log,
        });
    }
    if arch.starts_with("sm_") {
        let mut size = 0usize;
        // SAFETY: `prog` compiled; an out-pointer to a local.
        unsafe { nvsys::nvrtcGetCUBINSize(prog.0, &mut size) }
            .result()
            .map_err(|e| err("nvrtcGetCUBINSize", e))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `prog` compiled; the buffer holds the `size` bytes NVRTC reported.
        unsafe { nvsys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| err("nvrtcGetCUBIN", e))?;
        Ok(Ptx::from_binary(cubin))
    } else {
        // SAFETY: `prog` compiled.
        let ptx = unsafe { nv::get_ptx(prog.0) }.map_err(|e| err("nvrtcGetPTX", e))?;
        Ok(Ptx::from_src(c_text(&ptx)))
    }
}
