//! Output sets under arbitrary sequences of writes, failures and commits: a committed set holds
//! exactly what was written, a set dropped after a failure leaves the previous files as they
//! were, files of the set not written this time are removed, and no temporary file is ever left.
#![no_main]

use gapscope::report::output_set::OutputSet;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

/// Names from a small alphabet (so sets overlap), some long.
fn name(b: u8) -> String {
    let base = ["report.md", "report.json", "trace.perfetto.json", "step.svg"][(b % 4) as usize];
    if b & 0x80 != 0 {
        format!("{}-{base}", "n".repeat(200))
    } else {
        base.to_owned()
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    // What the folder must hold: name -> content.
    let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for op in data.chunks(4) {
        let [a, b, c, d] = match op {
            [a, b, c, d] => [*a, *b, *c, *d],
            _ => return,
        };
        let Ok(mut set) = OutputSet::create(dir.path()) else {
            panic!("cannot lock a folder nobody else holds");
        };
        let names: Vec<String> = [a, b].iter().map(|&x| name(x)).collect();
        let mut staged: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut failed = false;
        for (i, n) in names.iter().enumerate() {
            let content = vec![c.wrapping_add(i as u8); (d as usize) * 7];
            let fail_here = d % 5 == 0 && i == 1;
            let result = set.add(n, |w| {
                w.write_all(&content[..content.len() / 2])?;
                if fail_here {
                    return Err(std::io::Error::other("disk full"));
                }
                w.write_all(&content[content.len() / 2..])
            });
            if result.is_err() {
                failed = true;
                break;
            }
            staged.insert(n.clone(), content);
        }
        let all: std::collections::BTreeSet<String> = (0..=255u8).map(name).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        if failed || c % 7 == 0 {
            drop(set); // abandoned: nothing changes
        } else {
            set.commit(&all).expect("commit");
            expected.retain(|k, _| staged.contains_key(k));
            expected.extend(staged);
        }
        let mut present: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let e = e.unwrap();
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(!n.ends_with(".tmp"), "temporary left: {n}");
            if n != gapscope::report::output_set::LOCK_FILE {
                present.insert(n, std::fs::read(e.path()).unwrap());
            }
        }
        assert_eq!(present, expected);
    }
});
