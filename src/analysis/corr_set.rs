//! Sets of correlation ids. CUPTI and Kineto number launches from a counter, so the ids of a
//! trace are dense: a bitmap over their span then answers with one load where a hash set of a
//! million ids misses the cache on almost every lookup. Ids spread wider fall back to a hash
//! set; the answers are the same either way.
#![forbid(unsafe_code)]

use rustc_hash::FxHashSet;

/// Correlation ids, dense (a bitmap from `first`) or sparse (hashed).
pub(crate) enum CorrSet {
    Dense { first: u32, bits: Vec<u64> },
    Sparse(FxHashSet<u32>),
}

impl CorrSet {
    /// An empty set sized for `ids` (the ids it will hold or be asked about; read once here).
    pub(crate) fn for_ids(ids: impl Iterator<Item = u32>) -> CorrSet {
        let (mut first, mut last, mut count) = (u32::MAX, 0, 0usize);
        for id in ids {
            first = first.min(id);
            last = last.max(id);
            count += 1;
        }
        // The same rule as the dense launch index ([`super::timeline::LaunchIndex`]).
        if count == 0 || (last - first) as usize >= 4 * count + 1024 {
            return CorrSet::Sparse(FxHashSet::default());
        }
        let span = (last - first) as usize + 1;
        CorrSet::Dense {
            first,
            bits: vec![0; span.div_ceil(64)],
        }
    }

    /// The set of `ids`.
    pub(crate) fn of(ids: impl Iterator<Item = u32> + Clone) -> CorrSet {
        let mut set = CorrSet::for_ids(ids.clone());
        for id in ids {
            set.insert(id);
        }
        set
    }

    /// Adds `id`: `true` when it was not in the set.
    pub(crate) fn insert(&mut self, id: u32) -> bool {
        match self {
            CorrSet::Dense { first, bits } => match Self::slot(*first, bits, id) {
                Some((word, bit)) => {
                    let new = bits[word] & bit == 0;
                    bits[word] |= bit;
                    new
                }
                // Outside the span it was sized for: kept aside, hashed.
                None => self.spill().insert(id),
            },
            CorrSet::Sparse(set) => set.insert(id),
        }
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        match self {
            CorrSet::Dense { first, bits } => {
                Self::slot(*first, bits, id).is_some_and(|(word, bit)| bits[word] & bit != 0)
            }
            CorrSet::Sparse(set) => set.contains(&id),
        }
    }

    /// The word and bit of `id` in a dense set, when it lies in its span.
    fn slot(first: u32, bits: &[u64], id: u32) -> Option<(usize, u64)> {
        let at = id.checked_sub(first)? as usize;
        (at / 64 < bits.len()).then(|| (at / 64, 1u64 << (at % 64)))
    }

    /// Turns a dense set into a sparse one with the same ids.
    fn spill(&mut self) -> &mut FxHashSet<u32> {
        if let CorrSet::Dense { first, bits } = self {
            let mut set = FxHashSet::default();
            for (w, &word) in bits.iter().enumerate() {
                for b in (0..64).filter(|b| word >> b & 1 == 1) {
                    set.insert(*first + (w * 64 + b) as u32);
                }
            }
            *self = CorrSet::Sparse(set);
        }
        match self {
            CorrSet::Sparse(set) => set,
            CorrSet::Dense { .. } => unreachable!("spilled above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kinds give a hash set's answers, for dense and spread ids, inside and outside the
    /// span a set was sized for.
    #[test]
    fn answers_as_a_hash_set() {
        let dense: Vec<u32> = (100..5000).filter(|i| i % 3 != 0).collect();
        let spread: Vec<u32> = (0..2000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        for ids in [dense, spread, vec![], vec![7, 7, 7], vec![0, u32::MAX]] {
            let mut set = CorrSet::of(ids.iter().copied());
            let want: FxHashSet<u32> = ids.iter().copied().collect();
            for probe in (0..6000).chain([u32::MAX, u32::MAX - 1]) {
                assert_eq!(set.contains(probe), want.contains(&probe), "{probe}");
            }
            let mut more = want.clone();
            for extra in [0, 99, 5000, 1 << 30, u32::MAX] {
                assert_eq!(set.insert(extra), more.insert(extra), "{extra}");
                assert!(set.contains(extra));
            }
            assert!(ids.iter().all(|&i| set.contains(i)));
        }
        assert!(matches!(CorrSet::of(100..5000u32), CorrSet::Dense { .. }));
    }
}
