//! Any bytes through the Kineto importer, in order on one thread and split over three threads
//! in 64-byte blocks: never a panic, and the same trace (or the same error line) both ways.
#![no_main]

use gapscope::trace::kineto::{ImportOptions, import_kineto_with};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.json");
    let in_order = ImportOptions {
        threads: 1,
        block_bytes: 1 << 20,
        parallel_min_bytes: usize::MAX,
    };
    let split = ImportOptions {
        threads: 3,
        block_bytes: 64,
        parallel_min_bytes: 0,
    };
    match (
        import_kineto_with(data, path, &in_order),
        import_kineto_with(data, path, &split),
    ) {
        (Ok(a), Ok(b)) => assert!(a == b, "the split import gives another trace"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("one way {:?}, the other {:?}", a.is_ok(), b.is_ok()),
    }
});
