//! The kernel thread id of a Python thread that py-spy names only by its pthread id.
//!
//! CPython 3.11+ keeps each thread's kernel id (`native_thread_id`), which py-spy reads. 3.9
//! and 3.10 keep only `pthread_self()`, and py-spy turns that into a kernel id only by stopping
//! the process (a register read under ptrace), which `record` never does: without this, every
//! sample of such a program would name a thread no CUPTI record names. `pthread_self()` is the
//! address of the C library's descriptor of the thread, which keeps its kernel id (glibc's
//! `struct pthread` has it 0x2d0 bytes in on x86-64; musl's near its start). The offset is found
//! once per process, as the first place at which every Python thread's descriptor holds a
//! different id of one of the process's threads (`/proc/PID/task`); each sample then reads 4
//! bytes of the descriptor, without pausing the program.
#![forbid(unsafe_code)]

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;
use std::collections::BTreeSet;
use std::io::IoSliceMut;
use std::sync::OnceLock;

/// Bytes of a thread descriptor searched for its kernel id.
const DESCRIPTOR_SPAN: usize = 0x800;

/// glibc's x86-64 `struct pthread`'s `tid`, tried first: with a lone Python thread, an earlier
/// field that happens to hold its id must not be taken for it.
const GLIBC_X86_64_TID: usize = 0x2d0;

/// Where one process's thread descriptors keep the kernel thread id, once found.
#[derive(Debug, Default)]
pub(crate) struct KernelIdOffset(OnceLock<usize>);

impl KernelIdOffset {
    /// Fills the missing OS thread id of each of `traces` (the stacks of process `pid`'s
    /// Python threads, read together) from its thread's descriptor; a trace whose id cannot
    /// be read keeps `None`.
    pub(crate) fn fill(&self, pid: u32, traces: &mut [py_spy::StackTrace]) {
        if traces.iter().all(|t| t.os_thread_id.is_some()) {
            return;
        }
        let offset = match self.0.get() {
            Some(&offset) => offset,
            None => {
                let descriptors: Vec<Vec<u8>> = traces
                    .iter()
                    .filter_map(|t| read(pid, t.thread_id as usize, DESCRIPTOR_SPAN))
                    .collect();
                if descriptors.len() < traces.len() {
                    return;
                }
                let Some(offset) = find_offset(&descriptors, &tasks(pid)) else {
                    return;
                };
                *self.0.get_or_init(|| offset)
            }
        };
        for t in traces.iter_mut().filter(|t| t.os_thread_id.is_none()) {
            // A pthread id read while its thread changed may be anything: no overflow.
            let Some(at) = (t.thread_id as usize).checked_add(offset) else {
                continue;
            };
            t.os_thread_id = read(pid, at, 4)
                .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
                .map(i32::from_ne_bytes)
                .and_then(|id| u64::try_from(id).ok())
                .filter(|&id| id > 0);
        }
    }
}

/// The first 4-byte-aligned offset at which every descriptor holds a different id of
/// `tasks`: with one thread, its id; with several, the field that tells them apart.
/// glibc's on x86-64 first ([`GLIBC_X86_64_TID`]).
fn find_offset(descriptors: &[Vec<u8>], tasks: &BTreeSet<u32>) -> Option<usize> {
    let span = descriptors.iter().map(Vec::len).min()?;
    let holds_ids = |offset: usize| {
        let mut seen = BTreeSet::new();
        offset + 4 <= span
            && descriptors.iter().all(|d| {
                let id =
                    u32::from_ne_bytes([d[offset], d[offset + 1], d[offset + 2], d[offset + 3]]);
                tasks.contains(&id) && seen.insert(id)
            })
    };
    std::iter::once(GLIBC_X86_64_TID)
        .filter(|_| cfg!(all(target_arch = "x86_64", target_env = "gnu")))
        .chain((0..span).step_by(4))
        .find(|&offset| holds_ids(offset))
}

/// `len` bytes of process `pid`'s memory at `addr`, `None` when they cannot all be read (the
/// kernel refuses a range that wraps).
fn read(pid: u32, addr: usize, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let remote = [RemoteIoVec { base: addr, len }];
    let pid = Pid::from_raw(i32::try_from(pid).ok()?);
    let got = process_vm_readv(pid, &mut [IoSliceMut::new(&mut buf)], &remote).ok()?;
    (got == len).then_some(buf)
}

/// The kernel ids of process `pid`'s threads.
fn tasks(pid: u32) -> BTreeSet<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(fields: &[(usize, u32)]) -> Vec<u8> {
        let mut d = vec![0xAB; 0x40];
        for &(at, id) in fields {
            d[at..at + 4].copy_from_slice(&id.to_ne_bytes());
        }
        d
    }

    #[test]
    fn the_offset_is_the_first_field_holding_a_different_thread_id_in_each_descriptor() {
        let tasks = BTreeSet::from([100, 101, 102]);
        // Offset 0x08 holds the process id in both (not different), 0x10 their own ids.
        let two = [
            descriptor(&[(0x08, 100), (0x10, 101)]),
            descriptor(&[(0x08, 100), (0x10, 102)]),
        ];
        assert_eq!(find_offset(&two, &tasks), Some(0x10));
        // One thread: the first field holding one of the process's ids.
        assert_eq!(find_offset(&two[..1], &tasks), Some(0x08));
        // glibc's field first, where it holds the ids.
        let mut glibc = vec![0u8; DESCRIPTOR_SPAN];
        glibc[0x08..0x0c].copy_from_slice(&100u32.to_ne_bytes());
        glibc[GLIBC_X86_64_TID..GLIBC_X86_64_TID + 4].copy_from_slice(&100u32.to_ne_bytes());
        let expected = if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
            GLIBC_X86_64_TID
        } else {
            0x08
        };
        assert_eq!(find_offset(&[glibc], &tasks), Some(expected));
        // Ids of another process's threads are no match.
        assert_eq!(find_offset(&two, &BTreeSet::from([7, 8])), None);
        assert_eq!(find_offset(&[], &tasks), None);
    }

    /// A torn read's pthread id (anything, up to the top of the address space) gives no id
    /// and no overflow.
    #[test]
    fn a_pthread_id_at_the_top_of_the_address_space_gives_none() {
        let offset = KernelIdOffset::default();
        offset.0.set(GLIBC_X86_64_TID).unwrap();
        let mut traces = [py_spy::StackTrace {
            pid: 0,
            thread_id: u64::MAX,
            thread_name: None,
            os_thread_id: None,
            active: true,
            owns_gil: false,
            frames: Vec::new(),
            process_info: None,
        }];
        offset.fill(std::process::id(), &mut traces);
        assert_eq!(traces[0].os_thread_id, None);
    }

    /// A real `python3` with a second thread: the ids filled from the descriptors, with
    /// py-spy's own taken away, are py-spy's (CPython 3.11+ keeps them; for 3.9 and 3.10 see
    /// `record::host_sampler`'s test of a 3.10 process).
    #[test]
    fn fills_the_kernel_ids_py_spy_reads_on_a_recent_python() {
        let program = "import threading, time\n\
                       threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n\
                       print('ready', flush=True)\n\
                       time.sleep(30)\n";
        let mut child = crate::record::python_when_ready(program);
        let pid = child.id();
        let config = crate::record::host_sampler::py_spy_config();
        let read =
            py_spy::PythonSpy::new(pid as i32, &config).and_then(|mut spy| spy.get_stack_traces());
        let filled = read.map(|traces| {
            let native: Vec<Option<u64>> = traces.iter().map(|t| t.os_thread_id).collect();
            let mut stripped = traces;
            for t in &mut stripped {
                t.os_thread_id = None;
            }
            KernelIdOffset::default().fill(pid, &mut stripped);
            let filled: Vec<Option<u64>> = stripped.iter().map(|t| t.os_thread_id).collect();
            (native, filled)
        });
        let _ = child.kill();
        let _ = child.wait();
        let (native, filled) = filled.expect("py-spy reads a python3 child");
        assert_eq!(native.len(), 2, "two Python threads: {native:?}");
        assert!(native.iter().all(Option::is_some), "{native:?}");
        assert_eq!(filled, native);
        assert!(native.contains(&Some(u64::from(pid))), "the main thread");
    }
}
