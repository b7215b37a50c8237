//! Build script: CUPTI bindings, and the version string naming the commit.
//!
//! `GAPSCOPE_VERSION` (what `gapscope --version` prints) is the crate's version followed by
//! `(commit <hash>)` when the crate is built from its own git checkout (`git rev-parse`, rerun
//! when `HEAD` moves); from a tarball, an sdist or a checkout without git it is the crate's
//! version alone.
//!
//! The CUPTI layer (`src/cupti/sys.rs`) includes `$OUT_DIR/cupti_bindings.rs`. This script
//! writes that file from one of two sources:
//!
//! 1. **Generated** — only with `--features bindgen`, when the CUPTI headers are found
//!    (`cupti.h`, looked for in `$CUPTI_INCLUDE_DIR`, `$CUDA_HOME/include`,
//!    `$CUDA_HOME/extras/CUPTI/include`, `$CUDA_PATH/include`, `$CUDA_PATH/extras/CUPTI/include`,
//!    `/usr/local/cuda/include`, `/usr/local/cuda/extras/CUPTI/include`), `cuda.h` is found
//!    (`$CUDA_INCLUDE_DIR`, then the same folders), and libclang can be loaded (bindgen's
//!    `runtime` feature loads it with `dlopen`; `LIBCLANG_PATH` picks one). Any failure here
//!    (no headers, no libclang, a clang error) prints a `cargo:warning` and falls back to 2.
//! 2. **Committed** — `bindings/cupti_13_0.rs`, generated from the CUDA 13.0 CUPTI headers.
//!    This is the default and needs neither CUDA nor libclang, so CI builds without either.
//!
//! Functions are not linked: bindgen's `dynamic_library_name` mode makes a struct of
//! function pointers that `src/cupti/loader.rs` fills from libcupti with `dlopen` at run time.
//!
//! The script also emits cfgs read by `src/cupti/sys.rs`:
//! * `cupti_kernel = "9" | "10" | "11"`: the newest `CUpti_ActivityKernelN` the bindings hold,
//!   i.e. the record CONCURRENT_KERNEL delivers for that CUPTI version;
//! * `cupti_subscribe_v2`: the bindings declare `cuptiSubscribe_v2` (CUPTI 13.0+);
//! * `cupti_event_device_timestamps`: they declare `cuptiActivityEnableCudaEventDeviceTimestamps`
//!   (CUPTI 13.0+).
//!
//! Regenerate the committed bindings (needs libclang, e.g. `apt install libclang-dev`):
//!
//! ```sh
//! CUPTI_INCLUDE_DIR=/path/to/nvidia/cu13/include \
//! CUDA_INCLUDE_DIR=/path/to/cuda-13.0/include \
//! GAPSCOPE_WRITE_BINDINGS=bindings/cupti_13_0.rs \
//! cargo build --features bindgen
//! ```
//!
//! (`GAPSCOPE_WRITE_BINDINGS` is relative to the crate root; the PyPI wheels
//! `nvidia-cuda-cupti==13.0.85` and `nvidia-cuda-runtime==13.0.96` hold the two include
//! folders.) See `bindings/README.md`.

use std::env;
use std::fs;
#[cfg(feature = "bindgen")]
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

const COMMITTED: &str = "bindings/cupti_13_0.rs";

fn main() {
    for var in [
        "CUPTI_INCLUDE_DIR",
        "CUDA_INCLUDE_DIR",
        "CUDA_HOME",
        "CUDA_PATH",
        "LIBCLANG_PATH",
        "GAPSCOPE_WRITE_BINDINGS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed={COMMITTED}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(cupti_kernel, values(\"9\", \"10\", \"11\"))");
    println!("cargo::rustc-check-cfg=cfg(cupti_subscribe_v2)");
    println!("cargo::rustc-check-cfg=cfg(cupti_event_device_timestamps)");

    let version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let version = match commit() {
        Some(hash) => format!("{version} (commit {hash})"),
        None => version,
    };
    println!("cargo:rustc-env=GAPSCOPE_VERSION={version}");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = out.join("cupti_bindings.rs");

    let (text, origin) = match generate() {
        Some((text, origin)) => (text, origin),
        None => {
            let text = fs::read_to_string(COMMITTED)
                .unwrap_or_else(|e| panic!("cannot read committed bindings {COMMITTED}: {e}"));
            (text, format!("committed {COMMITTED}"))
        }
    };
    fs::write(&target, &text).unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
    println!("cargo:rustc-env=GAPSCOPE_CUPTI_BINDINGS={origin}");

    let kernel = ["11", "10", "9"]
        .into_iter()
        .find(|n| text.contains(&format!("pub struct CUpti_ActivityKernel{n} ")))
        .unwrap_or_else(|| panic!("bindings ({origin}) hold no CUpti_ActivityKernel9/10/11"));
    println!("cargo:rustc-cfg=cupti_kernel=\"{kernel}\"");
    if text.contains("cuptiSubscribe_v2") {
        println!("cargo:rustc-cfg=cupti_subscribe_v2");
    }
    if text.contains("cuptiActivityEnableCudaEventDeviceTimestamps") {
        println!("cargo:rustc-cfg=cupti_event_device_timestamps");
    }
}

/// The short hash of `HEAD` when the crate root is the top of a git work tree (not a folder
/// inside someone else's repository); asks cargo to rerun when `HEAD` or its branch moves.
fn commit() -> Option<String> {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if fs::canonicalize(&top).ok()? != fs::canonicalize(&root).ok()? {
        return None;
    }
    let hash = git(&["rev-parse", "--short=10", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        // Only files that exist: a missing one would rerun this script on every build.
        if let Some(path) = git(&["rev-parse", "--git-path", &name]).map(|p| root.join(p))
            && path.is_file()
        {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(hash)
}

/// Candidate include folders, most specific first.
#[cfg(feature = "bindgen")]
fn include_candidates(explicit: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = env::var_os(explicit) {
        dirs.push(PathBuf::from(d));
    }
    for var in ["CUPTI_INCLUDE_DIR", "CUDA_INCLUDE_DIR"] {
        if var != explicit
            && let Some(d) = env::var_os(var)
        {
            dirs.push(PathBuf::from(d));
        }
    }
    let roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| env::var_os(v).map(PathBuf::from))
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda")))
        .collect();
    for root in roots {
        dirs.push(root.join("include"));
        dirs.push(root.join("extras/CUPTI/include"));
    }
    dirs
}

#[cfg(feature = "bindgen")]
fn find_header(explicit: &str, header: &str) -> Option<PathBuf> {
    include_candidates(explicit)
        .into_iter()
        .find(|d| d.join(header).is_file())
}

#[cfg(not(feature = "bindgen"))]
fn generate() -> Option<(String, String)> {
    None
}

#[cfg(feature = "bindgen")]
fn generate() -> Option<(String, String)> {
    let Some(cupti_dir) = find_header("CUPTI_INCLUDE_DIR", "cupti.h") else {
        println!(
            "cargo:warning=gapscope: cupti.h not found (set CUPTI_INCLUDE_DIR or CUDA_HOME); using {COMMITTED}"
        );
        return None;
    };
    let Some(cuda_dir) = find_header("CUDA_INCLUDE_DIR", "cuda.h") else {
        println!(
            "cargo:warning=gapscope: cuda.h not found (set CUDA_INCLUDE_DIR or CUDA_HOME); using {COMMITTED}"
        );
        return None;
    };
    for h in ["cupti.h", "cupti_activity.h", "cupti_callbacks.h"] {
        println!("cargo:rerun-if-changed={}", cupti_dir.join(h).display());
    }
    // bindgen panics when libclang cannot be loaded: keep that from failing the build.
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(|| run_bindgen(&cupti_dir, &cuda_dir));
    std::panic::set_hook(previous_hook);
    let text = match result {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => {
            let e = e.replace('\n', " ");
            println!("cargo:warning=gapscope: bindgen failed ({e}); using {COMMITTED}");
            return None;
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            println!(
                "cargo:warning=gapscope: bindgen unusable ({msg}; is libclang installed? LIBCLANG_PATH selects one); using {COMMITTED}"
            );
            return None;
        }
    };
    let version = cupti_api_version(&cupti_dir).unwrap_or_else(|| "unknown".into());
    let header = format!(
        "// Generated by gapscope's build.rs (bindgen {}) from the CUPTI headers, CUPTI_API_VERSION {version}.\n\
         // Regenerate: see the doc comment at the top of build.rs and bindings/README.md.\n\n",
        bindgen_version()
    );
    let text = format!("{header}{text}");
    if let Some(dest) = env::var_os("GAPSCOPE_WRITE_BINDINGS") {
        let dest =
            PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join(dest);
        match fs::write(&dest, &text) {
            Ok(()) => println!(
                "cargo:warning=gapscope: wrote bindings to {}",
                dest.display()
            ),
            Err(e) => println!(
                "cargo:warning=gapscope: cannot write {}: {e}",
                dest.display()
            ),
        }
    }
    Some((
        text,
        format!(
            "generated from {} (CUPTI_API_VERSION {version})",
            cupti_dir.display()
        ),
    ))
}

#[cfg(feature = "bindgen")]
fn bindgen_version() -> &'static str {
    "0.73"
}

#[cfg(feature = "bindgen")]
fn cupti_api_version(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join("cupti_version.h")).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("#define CUPTI_API_VERSION "))
        .map(|v| v.trim().to_string())
}

/// Minimal stand-in for CUDA's `crt/host_defines.h` (host C only), used when it is absent.
#[cfg(feature = "bindgen")]
const HOST_DEFINES_SHIM: &str = r#"#pragma once
#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(a) __align__(a)
#define __CUDA_ALIGN__(n) __align__(n)
#define __cudart_builtin__
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define CUDART_CB
#define __dv(v)
#define __CUDA_DEPRECATED
"#;

#[cfg(feature = "bindgen")]
fn run_bindgen(cupti_dir: &Path, cuda_dir: &Path) -> Result<String, String> {
    let functions = [
        "cuptiGetVersion",
        "cuptiGetResultString",
        "cuptiGetTimestamp",
        "cuptiGetCallbackName",
        "cuptiSetThreadIdType",
        "cuptiSubscribe",
        "cuptiSubscribe_v2",
        "cuptiUnsubscribe",
        "cuptiEnableDomain",
        "cuptiEnableCallback",
        "cuptiGetGraphNodeId",
        "cuptiGetGraphId",
        "cuptiGetGraphExecId",
        "cuptiActivityEnable",
        "cuptiActivityDisable",
        "cuptiActivityRegisterCallbacks",
        "cuptiActivityFlushAll",
        "cuptiActivityGetNextRecord",
        "cuptiActivityGetNumDroppedRecords",
        "cuptiActivityEnableLatencyTimestamps",
        "cuptiActivityEnableCudaEventDeviceTimestamps",
    ];
    let types = [
        "CUptiResult",
        "CUpti_Activity",
        "CUpti_ActivityKind",
        "CUpti_ActivityKernel(9|10|11)",
        "CUpti_ActivityMemcpy6",
        "CUpti_ActivityMemset4",
        "CUpti_ActivityAPI",
        "CUpti_ActivitySynchronization2",
        "CUpti_ActivityCudaEvent2",
        "CUpti_ActivityMarker2",
        "CUpti_ActivityMemcpyKind",
        "CUpti_ActivitySynchronizationType",
        "CUpti_ActivityThreadIdType",
        "CUpti_ActivityFlag",
        "CUpti_CallbackDomain",
        "CUpti_CallbackIdResource",
        "CUpti_ApiCallbackSite",
        "CUpti_CallbackData",
        "CUpti_ResourceData",
        "CUpti_GraphData",
        "CUpti_SubscriberParams",
        "CUpti_runtime_api_trace_cbid",
        "CUpti_driver_api_trace_cbid",
        "CUgraphNodeType",
        "CUevent_wait_flags",
        "CUevent_record_flags",
        "cudaStreamWaitEvent_v3020_params",
        "cudaStreamWaitEvent_ptsz_v7000_params",
        "cudaEventRecordWithFlags_v11010_params",
        "cudaEventRecordWithFlags_ptsz_v11010_params",
        "cuStreamWaitEvent_params",
        "cuStreamWaitEvent_ptsz_params",
        "cuEventRecordWithFlags_params",
        "cuEventRecordWithFlags_ptsz_params",
    ];
    let vars = [
        "CUPTI_API_VERSION",
        "CUPTI_SUBSCRIBER_NAME_MAX_LEN",
        "CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN",
        "cudaEventWaitExternal",
        "cudaEventRecordExternal",
    ];
    let mut builder = bindgen::Builder::default();
    if !cuda_dir.join("crt/host_defines.h").is_file() {
        // The PyPI runtime wheel ships cuda_runtime_api.h without the compiler's
        // crt/host_defines.h; host-only C parsing needs just these empty qualifiers.
        let shim = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("shim");
        fs::create_dir_all(shim.join("crt")).map_err(|e| e.to_string())?;
        fs::write(shim.join("crt/host_defines.h"), HOST_DEFINES_SHIM).map_err(|e| e.to_string())?;
        builder = builder.clang_arg(format!("-I{}", shim.display()));
    }
    builder = builder
        .header_contents(
            "gapscope_cupti.h",
            "#include <cuda.h>\n#include <cuda_runtime_api.h>\n#include <cupti.h>\n",
        )
        .clang_arg(format!("-I{}", cupti_dir.display()))
        .clang_arg(format!("-I{}", cuda_dir.display()))
        .dynamic_library_name("CuptiLib")
        .dynamic_link_require_all(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(true)
        .generate_comments(false)
        .formatter(bindgen::Formatter::Prettyplease);
    for f in functions {
        builder = builder.allowlist_function(f);
    }
    for t in types {
        builder = builder.allowlist_type(t);
    }
    for v in vars {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder.generate().map_err(|e| e.to_string())?;
    Ok(bindings.to_string())
}
