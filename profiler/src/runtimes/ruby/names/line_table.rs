//! The lines of an instruction sequence's instructions (docs/ruby-layouts.md §4.2): the line of
//! each `insns_info` entry, and Ruby's succinct index of the positions where entries start,
//! copied out of the target so that any program counter of the sequence is placed without
//! reading it again. Copies are bounded: a sequence with more entries or instructions than
//! this copies puts all of them on its first line.
use anyhow::{Context as _, Result};

use super::objects::{Heap, i32_at, u32_at, u64_at};
use crate::runtimes::ruby::layout::{BODY_ISEQ_ENCODED, BODY_ISEQ_SIZE, INSN_INFO_BYTES};

/// Most `insns_info` entries copied.
pub(super) const MAX_ENTRIES: u32 = 1 << 16;
/// Most instructions (words) of a sequence whose index is copied: 160 KiB of index.
pub(super) const MAX_WORDS: u32 = 1 << 20;

/// `IMMEDIATE_TABLE_SIZE`: positions below it are indexed by 7-bit counts, 9 to a word.
const IMMEDIATE_POSITIONS: u64 = 54;
const IMMEDIATE_WORDS: usize = 6;
/// Positions from [`IMMEDIATE_POSITIONS`] on are in blocks of 512 (`succ_dict_block`: `rank`
/// padded to a word, `small_block_ranks`, `bits[8]`).
const BLOCK_POSITIONS: u64 = 512;
const BLOCK_WORDS: usize = 10;

/// Where an instruction sequence's instructions are, and their lines.
#[derive(Debug)]
pub(super) struct LineTable {
    /// `iseq_encoded`, and `iseq_size` in words.
    encoded: u64,
    words: u32,
    lines: Lines,
}

#[derive(Debug)]
enum Lines {
    /// No entries: no instruction has a line.
    None,
    /// One entry: every instruction is on its line.
    One(i32),
    /// Each entry's line, and the succinct index of where they start (as words).
    Indexed { lines: Box<[i32]>, index: Box<[u64]> },
    /// Too many to copy: every instruction is on the sequence's first line.
    NotCopied,
}

impl LineTable {
    /// The lines of the instruction sequence whose body starts with `body`.
    pub(super) fn read(heap: &mut Heap<'_>, body: &[u8]) -> Result<Self> {
        let layout = &heap.layout.body;
        let encoded = u64_at(body, BODY_ISEQ_ENCODED);
        let words = u32_at(body, BODY_ISEQ_SIZE);
        let entries = u32_at(body, layout.insns_info_size);
        let entries_at = u64_at(body, layout.insns_info);
        let index_at = u64_at(body, layout.succ_index_table);
        let lines = match entries {
            0 => Lines::None,
            1 => Lines::One(i32::from_le_bytes(heap.array(entries_at).context("its line")?)),
            _ if entries > MAX_ENTRIES || words > MAX_WORDS => Lines::NotCopied,
            _ => Lines::Indexed {
                lines: read_lines(heap, entries_at, entries).context("its lines")?,
                index: read_index(heap, index_at, words).context("the index of its lines")?,
            },
        };
        Ok(Self { encoded, words, lines })
    }

    /// The line of the instruction at `pc` (a frame's `cfp->pc`), for a sequence starting on
    /// `first_line`; `None` when `pc` is not in the sequence or its instruction has no line.
    pub(super) fn line(&self, pc: u64, first_line: u32) -> Option<u32> {
        let position = self.position(pc)?;
        let line = match &self.lines {
            Lines::None => return None,
            Lines::NotCopied => return Some(first_line),
            Lines::One(line) => *line,
            Lines::Indexed { lines, index } => {
                let entry = entries_started(index, position)?.checked_sub(1)?;
                *lines.get(usize::try_from(entry).ok()?)?
            }
        };
        // Ruby's line 0 is none.
        u32::try_from(line).ok().filter(|&line| line > 0)
    }

    /// The position (in words) of the instruction a frame at `pc` runs: the VM keeps `pc` past
    /// it, so one before unless at the start.
    fn position(&self, pc: u64) -> Option<u64> {
        let position = pc.checked_sub(self.encoded)? / 8;
        let position = position.saturating_sub(1);
        (position < u64::from(self.words)).then_some(position)
    }

    /// About the bytes it holds, besides itself.
    pub(super) fn size(&self) -> usize {
        match &self.lines {
            Lines::Indexed { lines, index } => 4 * lines.len() + 8 * index.len(),
            _ => 0,
        }
    }
}

/// The `line_no` of the `entries` entries at `at`.
fn read_lines(heap: &mut Heap<'_>, at: u64, entries: u32) -> Result<Box<[i32]>> {
    let bytes = heap.bytes(at, entries as usize * INSN_INFO_BYTES as usize)?;
    Ok(bytes.as_chunks::<{ INSN_INFO_BYTES as usize }>().0.iter().map(|entry| i32_at(entry, 0)).collect())
}

/// The succinct index at `at` of a sequence of `words` instructions, as Ruby allocates it
/// (`succ_index_table_create`): only the words of counts its positions need below
/// [`IMMEDIATE_POSITIONS`], all of them and the blocks its positions need from there.
fn read_index(heap: &mut Heap<'_>, at: u64, words: u32) -> Result<Box<[u64]>> {
    let words = u64::from(words);
    let index_words = if words < IMMEDIATE_POSITIONS {
        words.div_ceil(9) as usize
    } else {
        IMMEDIATE_WORDS + (words - IMMEDIATE_POSITIONS).div_ceil(BLOCK_POSITIONS) as usize * BLOCK_WORDS
    };
    let bytes = heap.bytes(at, 8 * index_words)?;
    Ok(bytes.as_chunks::<8>().0.iter().map(|word| u64::from_le_bytes(*word)).collect())
}

/// How many entries start at `position` or before (`succ_index_lookup`); `None` past the index.
fn entries_started(index: &[u64], position: u64) -> Option<u64> {
    if position < IMMEDIATE_POSITIONS {
        let counts = index.get((position / 9) as usize)?;
        return Some((counts >> (7 * (position % 9))) & 0x7f);
    }
    let position = position - IMMEDIATE_POSITIONS;
    let start = IMMEDIATE_WORDS + usize::try_from(position / BLOCK_POSITIONS).ok()? * BLOCK_WORDS;
    let block = index.get(start..start + BLOCK_WORDS)?;
    let (rank, small_block_ranks, bits) = (block[0] & 0xffff_ffff, block[1], &block[2..]);
    let bit = position % BLOCK_POSITIONS;
    let small_block = (bit / 64) as usize;
    let before_small_block = match small_block {
        0 => 0,
        _ => (small_block_ranks >> (9 * (small_block - 1))) & 0x1ff,
    };
    let in_small_block = (bits[small_block] << (63 - bit % 64)).count_ones();
    Some(rank + before_small_block + u64::from(in_small_block))
}
