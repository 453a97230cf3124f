//! Sets of ranges (addresses, or file offsets) that a runtime asks about at every native frame:
//! the eval loop's code, a binary's text. What a target's file or mappings describe of them has
//! no bound of its own, so a set keeps at most a given number, sorted and merged, and a lookup
//! is a binary search.
use std::ops::Range;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    ranges: Box<[Range<u64>]>,
}

impl Ranges {
    /// The first `max` non-empty ranges of `ranges` (callers give what matters most first),
    /// sorted, overlapping and adjacent ones merged.
    pub fn new(ranges: impl IntoIterator<Item = Range<u64>>, max: usize) -> Self {
        let mut kept: Vec<Range<u64>> =
            ranges.into_iter().filter(|range| !range.is_empty()).take(max).collect();
        kept.sort_unstable_by_key(|range| range.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(kept.len());
        for range in kept {
            match merged.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => merged.push(range),
            }
        }
        Self { ranges: merged.into_boxed_slice() }
    }

    pub fn contains(&self, at: u64) -> bool {
        let after = self.ranges.partition_point(|range| range.start <= at);
        after.checked_sub(1).is_some_and(|index| at < self.ranges[index].end)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Range<u64>> {
        self.ranges.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_merged_and_found_by_search() {
        let ranges = Ranges::new([30..40, 10..20, 15..25, 25..26, 50..50, 60..70], 16);
        assert_eq!(ranges.iter().cloned().collect::<Vec<_>>(), [10..26, 30..40, 60..70]);
        let inside: Vec<u64> = (0..80).filter(|&at| ranges.contains(at)).collect();
        let expected: Vec<u64> = (10..26).chain(30..40).chain(60..70).collect();
        assert_eq!(inside, expected);
    }

    #[test]
    fn only_the_first_given_are_kept() {
        let many = (0..100_000u64).map(|i| (i * 10)..(i * 10 + 5));
        let ranges = Ranges::new(std::iter::once(5_000_000..5_000_100).chain(many), 4);
        assert_eq!(ranges.iter().cloned().collect::<Vec<_>>(), [0..5, 10..15, 20..25, 5_000_000..5_000_100]);
        assert!(ranges.contains(5_000_050) && !ranges.contains(35));
    }
}
