//! The `auto` call graph: DWARF first, then the kernel's frame-pointer chain where DWARF
//! could not go on (the snapshot ended, or code without CFI), provided the two agree.
use super::{UnwindEnd, Unwound};

/// How a user stack was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackSource {
    /// DWARF unwinding alone, ending as said.
    Dwarf(UnwindEnd),
    /// DWARF unwinding, completed with the frame-pointer chain.
    DwarfThenFramePointers,
}

/// How `dwarf` continues in the frame-pointer chain `fp` (innermost first, `fp[0]` = ip) when
/// DWARF stopped early: the frames to append, empty when it did not stop early or the walks do
/// not agree. The chain is only trusted from a frame both walks found: the DWARF stack's last
/// frame must appear in `fp`. Recursion repeats addresses, so the position where the most
/// trailing frames of both agree wins (the earliest among equals).
pub(crate) fn complete<'a>(dwarf: &Unwound, fp: &'a [u64]) -> (&'a [u64], StackSource) {
    let stopped_early = matches!(dwarf.end, UnwindEnd::SnapshotEnd | UnwindEnd::MissingCfi(_));
    let Some(&last) = dwarf.frames.last().filter(|_| stopped_early) else {
        return (&[], StackSource::Dwarf(dwarf.end));
    };
    let agreement =
        |j: usize| dwarf.frames.iter().rev().zip(fp[..=j].iter().rev()).take_while(|(d, f)| d == f).count();
    let best = (0..fp.len())
        .filter(|&j| fp[j] == last && j + 1 < fp.len())
        .max_by_key(|&j| (agreement(j), std::cmp::Reverse(j)));
    match best {
        Some(j) => (&fp[j + 1..], StackSource::DwarfThenFramePointers),
        None => (&[], StackSource::Dwarf(dwarf.end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unwound(frames: &[u64], end: UnwindEnd) -> Unwound {
        Unwound { frames: frames.to_vec(), locations: vec![], end }
    }

    /// The whole stack: the DWARF frames and their continuation.
    fn completed(dwarf: Unwound, fp: &[u64]) -> (Vec<u64>, StackSource) {
        let (tail, source) = complete(&dwarf, fp);
        ([&dwarf.frames[..], tail].concat(), source)
    }

    #[test]
    fn complete_dwarf_stack_is_kept() {
        let (frames, source) = completed(unwound(&[1, 2, 3], UnwindEnd::Bottom), &[1, 9, 9]);
        assert_eq!((frames, source), (vec![1, 2, 3], StackSource::Dwarf(UnwindEnd::Bottom)));
    }

    #[test]
    fn truncated_stack_continues_where_both_agree() {
        // The leaf has no frame: the FP chain skips its caller (2) but agrees from 3 on.
        let (frames, source) = completed(unwound(&[1, 2, 3], UnwindEnd::SnapshotEnd), &[1, 3, 4, 5]);
        assert_eq!((frames, source), (vec![1, 2, 3, 4, 5], StackSource::DwarfThenFramePointers));
    }

    #[test]
    fn no_agreement_means_truncated() {
        let (frames, source) = completed(unwound(&[1, 2, 3], UnwindEnd::SnapshotEnd), &[1, 7, 8]);
        assert_eq!((frames, source), (vec![1, 2, 3], StackSource::Dwarf(UnwindEnd::SnapshotEnd)));
    }

    #[test]
    fn recursion_aligns_on_the_longest_agreement() {
        // DWARF got ip and three recursive frames; the chain has six, then main and _start.
        let dwarf = unwound(&[10, 20, 20, 20], UnwindEnd::SnapshotEnd);
        let fp = [10, 20, 20, 20, 20, 20, 20, 30, 40];
        let (frames, _) = completed(dwarf, &fp);
        assert_eq!(frames, [10, 20, 20, 20, 20, 20, 20, 30, 40]);
    }

    #[test]
    fn missing_cfi_continues_too() {
        let dwarf = unwound(&[1], UnwindEnd::MissingCfi(None));
        let (frames, source) = completed(dwarf, &[1, 2, 3]);
        assert_eq!((frames, source), (vec![1, 2, 3], StackSource::DwarfThenFramePointers));
    }

    #[test]
    fn lost_stacks_are_not_completed() {
        let (frames, source) = completed(unwound(&[1, 2], UnwindEnd::Lost), &[1, 2, 3]);
        assert_eq!((frames, source), (vec![1, 2], StackSource::Dwarf(UnwindEnd::Lost)));
    }
}
