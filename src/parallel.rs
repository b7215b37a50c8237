//! Work split over threads, results in order (the Kineto import, step attribution, causes).
#![forbid(unsafe_code)]

/// `items` mapped through `f` on up to [`crate::threads::worker_threads`] threads, in order: the result is the
/// one a plain `map` gives. Threads take chunks in turn, so uneven items balance out.
pub fn parallel_map<T: Send, U: Send>(items: Vec<T>, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    parallel_map_on(crate::threads::worker_threads(), items, f)
}

/// [`parallel_map`] on up to `threads` threads.
pub fn parallel_map_on<T: Send, U: Send>(
    threads: usize,
    items: Vec<T>,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads * 4);
    let mut chunks = Vec::new();
    let mut items = items.into_iter();
    loop {
        let part: Vec<T> = items.by_ref().take(chunk).collect();
        if part.is_empty() {
            break;
        }
        chunks.push(part);
    }
    let queue = std::sync::Mutex::new(chunks.into_iter().enumerate());
    let work = || {
        let mut done = Vec::new();
        while let Some((k, part)) = queue.lock().ok().and_then(|mut q| q.next()) {
            done.push((k, part.into_iter().map(&f).collect::<Vec<U>>()));
        }
        done
    };
    let mut results = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_unstable_by_key(|(k, _)| *k);
    results.into_iter().flat_map(|(_, part)| part).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_the_order_of_a_plain_map() {
        for len in [0, 1, 2, 7, 100, 1001] {
            let items: Vec<u64> = (0..len).collect();
            let want: Vec<u64> = items.iter().map(|x| x * x + 1).collect();
            for threads in [1, 2, 3, 8, 64] {
                assert_eq!(
                    parallel_map_on(threads, items.clone(), |x| x * x + 1),
                    want,
                    "{len} items on {threads} threads"
                );
            }
        }
    }
}
