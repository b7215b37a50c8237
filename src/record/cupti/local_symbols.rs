//! Names of functions that `dladdr` cannot give: the local (static, hidden, anonymous-namespace)
//! functions of a shared object, read from its ELF `.symtab` when the file keeps one.
//!
//! `dladdr` sees only the dynamic symbol table, the exported API. PyTorch's wheels ship
//! `libtorch_cuda.so` and `libtorch_python.so` with their full symbol tables, and most of the
//! functions that launch torch's kernels (`at::native::(anonymous namespace)::launch_clamp_scalar`,
//! the dispatcher's `wrapper_CUDA_*`, inductor's static Triton launcher) are local: without this
//! table a node they create names no function. Vendor libraries (cuBLAS, NCCL) are stripped
//! and need none of it.
//!
//! A table is read once per file and process, at the first node created under a frame the
//! dynamic table cannot name (graph capture, never the launch hot path): the file's section
//! headers, its program headers and its `.symtab` (megabytes for libtorch_cuda), not its
//! string table, whose names are read one at a time when a frame asks.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

const SHT_SYMTAB: u32 = 2;
const PT_LOAD: u32 = 1;
const STT_FUNC: u8 = 2;
/// The longest symbol name read (C++ template instantiations run to a few kB).
const MAX_NAME: usize = 64 * 1024;

/// One file's local function symbols, by address.
pub(crate) struct LocalSymbols {
    file: File,
    /// (start, end, name offset in the string table), start = the symbol's value less the
    /// first loaded segment's address, i.e. the offset from the object's load base.
    functions: Vec<(u64, u64, u32)>,
    strings_at: u64,
    strings_len: u64,
}

impl LocalSymbols {
    /// The function symbols of the ELF64 little-endian file at `path`; `None` when it has no
    /// `.symtab` (a stripped file) or is not such a file.
    pub(crate) fn read(path: &Path) -> Option<LocalSymbols> {
        let file = File::open(path).ok()?;
        let header = read_at(&file, 0, 64)?;
        if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
            return None;
        }
        let (ph_at, sh_at) = (u64_at(&header, 0x20), u64_at(&header, 0x28));
        let (ph_size, ph_count) = (u16_at(&header, 0x36), u16_at(&header, 0x38));
        let (sh_size, sh_count) = (u16_at(&header, 0x3a), u16_at(&header, 0x3c));
        if sh_size < 0x40 || (ph_count > 0 && ph_size < 0x38) {
            return None;
        }
        let programs = read_at(&file, ph_at, ph_size * ph_count)?;
        let base = programs
            .chunks_exact(ph_size.max(1))
            .find(|p| u32_at(p, 0) == PT_LOAD)
            .map_or(0, |p| u64_at(p, 0x10) & !(u64_at(p, 0x30).max(1) - 1));
        let sections = read_at(&file, sh_at, sh_size * sh_count)?;
        let sections: Vec<&[u8]> = sections.chunks_exact(sh_size).collect();
        let symtab = sections.iter().find(|s| u32_at(s, 4) == SHT_SYMTAB)?;
        let strtab = sections.get(u32_at(symtab, 0x28) as usize)?;
        let entry = (u64_at(symtab, 0x38) as usize).max(24);
        let table = read_at(&file, u64_at(symtab, 0x18), u64_at(symtab, 0x20) as usize)?;
        let mut functions: Vec<(u64, u64, u32)> = table
            .chunks_exact(entry)
            .filter(|s| s[4] & 0xf == STT_FUNC && u16_at(s, 6) != 0 && u64_at(s, 16) > 0)
            .filter_map(|s| {
                let start = u64_at(s, 8).checked_sub(base)?;
                Some((start, start + u64_at(s, 16), u32_at(s, 0)))
            })
            .collect();
        functions.sort_unstable();
        Some(LocalSymbols {
            file,
            functions,
            strings_at: u64_at(strtab, 0x18),
            strings_len: u64_at(strtab, 0x20),
        })
    }

    /// The raw (mangled) name of the function holding `offset` from the load base; a return
    /// address may sit just past a function's last call, so its end counts.
    pub(crate) fn name_at(&self, offset: u64) -> Option<String> {
        let i = self.functions.partition_point(|f| f.0 <= offset);
        // Nested or aliased symbols: the nearest start at or below wins when it covers.
        let &(_, end, name) = self.functions[..i].last()?;
        if offset > end || u64::from(name) >= self.strings_len {
            return None;
        }
        let mut out = Vec::new();
        let mut at = self.strings_at + u64::from(name);
        while out.len() < MAX_NAME {
            let chunk = read_at(&self.file, at, 256).or_else(|| read_at(&self.file, at, 1))?;
            match chunk.iter().position(|&b| b == 0) {
                Some(n) => {
                    out.extend_from_slice(&chunk[..n]);
                    return (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned());
                }
                None => out.extend_from_slice(&chunk),
            }
            at += chunk.len() as u64;
        }
        None
    }
}

/// The process's tables by file path, each read at most once (`None`: the file has none).
pub(crate) fn of_file(path: &Path) -> Option<Arc<LocalSymbols>> {
    static TABLES: OnceLock<Mutex<HashMap<PathBuf, Option<Arc<LocalSymbols>>>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    let mut tables = tables.lock().unwrap_or_else(|e| e.into_inner());
    tables
        .entry(path.to_owned())
        .or_insert_with(|| LocalSymbols::read(path).map(Arc::new))
        .clone()
}

/// `len` bytes at `at`; `None` past the file's end (a damaged header asks for more).
fn read_at(file: &File, at: u64, len: usize) -> Option<Vec<u8>> {
    let size = file.metadata().ok()?.len();
    if at.checked_add(len as u64)? > size {
        return None;
    }
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, at).ok()?;
    Some(buf)
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A minimal ELF64 file: one PT_LOAD at `base`, a `.symtab` of `symbols` (name, value,
    /// size, type) and its string table.
    fn elf(base: u64, symbols: &[(&str, u64, u64, u8)]) -> tempfile::NamedTempFile {
        let mut strings = vec![0u8];
        let mut table = vec![0u8; 24]; // the null symbol
        for (name, value, size, kind) in symbols {
            let at = strings.len() as u32;
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            table.extend_from_slice(&at.to_le_bytes());
            table.push(*kind); // st_info: local binding, this type
            table.push(0);
            table.extend_from_slice(&1u16.to_le_bytes()); // defined in section 1
            table.extend_from_slice(&value.to_le_bytes());
            table.extend_from_slice(&size.to_le_bytes());
        }
        let (ph_at, table_at) = (64u64, 64 + 56);
        let strings_at = table_at + table.len() as u64;
        let sh_at = strings_at + strings.len() as u64;
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[0x20..0x28].copy_from_slice(&ph_at.to_le_bytes());
        f[0x28..0x30].copy_from_slice(&sh_at.to_le_bytes());
        f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        f[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&PT_LOAD.to_le_bytes());
        ph[0x10..0x18].copy_from_slice(&base.to_le_bytes());
        ph[0x30..0x38].copy_from_slice(&0x1000u64.to_le_bytes());
        f.extend_from_slice(&ph);
        f.extend_from_slice(&table);
        f.extend_from_slice(&strings);
        let section = |kind: u32, at: u64, len: u64, link: u32, entry: u64| {
            let mut s = vec![0u8; 64];
            s[4..8].copy_from_slice(&kind.to_le_bytes());
            s[0x18..0x20].copy_from_slice(&at.to_le_bytes());
            s[0x20..0x28].copy_from_slice(&len.to_le_bytes());
            s[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
            s[0x38..0x40].copy_from_slice(&entry.to_le_bytes());
            s
        };
        f.extend(section(0, 0, 0, 0, 0));
        f.extend(section(SHT_SYMTAB, table_at, table.len() as u64, 2, 24));
        f.extend(section(3, strings_at, strings.len() as u64, 0, 0));
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(&f).expect("write");
        file
    }

    #[test]
    fn a_local_function_is_named_by_the_address_it_covers() {
        let launch = "_ZN2at6native12_GLOBAL__N_119launch_clamp_scalarEv";
        let file = elf(
            0,
            &[
                (launch, 0x1000, 0x80, STT_FUNC),
                ("a_data_object", 0x2000, 0x100, 1),
                ("wrapper", 0x3000, 0x40, STT_FUNC),
            ],
        );
        let symbols = LocalSymbols::read(file.path()).expect("a symbol table");
        assert_eq!(symbols.name_at(0x1000).as_deref(), Some(launch));
        assert_eq!(symbols.name_at(0x1080).as_deref(), Some(launch), "its end");
        assert_eq!(symbols.name_at(0x1081), None, "past its end: not named");
        assert_eq!(
            symbols.name_at(0x2010),
            None,
            "data symbols are no functions"
        );
        assert_eq!(symbols.name_at(0x3020).as_deref(), Some("wrapper"));
        assert_eq!(symbols.name_at(0x10), None, "below every function");
    }

    #[test]
    fn addresses_count_from_the_first_loaded_segment() {
        let file = elf(0x40_0000, &[("main_loop", 0x40_1000, 0x20, STT_FUNC)]);
        let symbols = LocalSymbols::read(file.path()).expect("a symbol table");
        assert_eq!(symbols.name_at(0x1010).as_deref(), Some("main_loop"));
    }

    #[test]
    fn a_file_without_a_symbol_table_has_none() {
        let mut stripped = tempfile::NamedTempFile::new().expect("temp file");
        stripped.write_all(b"\x7fELF not really").expect("write");
        assert!(LocalSymbols::read(stripped.path()).is_none());
        assert!(LocalSymbols::read(Path::new("/nonexistent/libtorch_cuda.so")).is_none());
    }
}
