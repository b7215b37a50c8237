//! How many threads work split over cores gets (`GAPSCOPE_THREADS`, the cores available).
#![forbid(unsafe_code)]

use crate::settings;

/// Threads for work split over cores (the Kineto import, step attribution): see
/// [`thread_count`]. (The command line refuses a `GAPSCOPE_THREADS` that is no positive number
/// first: [`crate::settings::threads`].)
pub fn worker_threads() -> usize {
    thread_count(settings::threads().ok().flatten(), available_cores())
}

/// The threads for `asked` threads (`GAPSCOPE_THREADS`) on a machine of `cores`: what was asked,
/// at most the cores (a thread more only waits for a core, and each split of the work spawns
/// them anew: `GAPSCOPE_THREADS=1000000` made 17,801 threads for a 100-rank merge, 3× slower);
/// when none was asked, the cores, at most 8.
pub fn thread_count(asked: Option<usize>, cores: usize) -> usize {
    let cores = cores.max(1);
    match asked {
        Some(asked) => asked.clamp(1, cores),
        None => cores.min(8),
    }
}

/// The cores this process may run on (1 when unknown).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// One line when `GAPSCOPE_THREADS` asks for more threads than [`worker_threads`] gives.
pub fn capped_note() -> Option<String> {
    let asked = settings::threads().ok().flatten()?;
    let used = worker_threads();
    (asked > used).then(|| {
        format!("{}={asked}: using {used} threads, one per core available (more would only wait for a core)", settings::Setting::Threads)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_count_is_what_was_asked_at_most_the_cores() {
        assert_eq!(thread_count(Some(1_000_000), 16), 16);
        assert_eq!(thread_count(Some(3), 2), 2);
        assert_eq!(thread_count(Some(4), 16), 4);
        // Asked for nothing: the cores, at most 8.
        assert_eq!(thread_count(None, 64), 8);
        assert_eq!(thread_count(None, 2), 2);
        // Never none, even on a machine that says it has no core.
        assert_eq!(thread_count(Some(5), 0), 1);
        assert_eq!(thread_count(None, 0), 1);
    }
}
