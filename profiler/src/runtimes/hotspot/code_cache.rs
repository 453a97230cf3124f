//! The code cache of a JVM: its heaps, and the blob of compiled code holding a pc, found the way
//! `CodeHeap::find_start` finds it (the segment map walked back to the block's first segment)
//! and read from the target with every value checked.
use std::ops::Range;

use super::layout::Layout;
use crate::runtimes::memory::{ReadMemory, USER_END, read_u64};

/// Most heaps taken (HotSpot has three with a segmented code cache, one without).
const MAX_HEAPS: usize = 8;
/// Bytes of segment map read at once, and windows read for one blob: a pc up to `4 × 4 KiB`
/// segments into its blob (2 MiB of code at 128-byte segments) is found.
const SEGMAP_WINDOW: usize = 4096;
const MAX_WINDOWS: usize = 4;
/// A segment map byte marking a free segment.
const FREE_SEGMENT: u8 = 0xff;
/// Largest blob header read (an nmethod's is 352 bytes in JDK 17, 224 in 25).
const MAX_HEADER: usize = 1024;
/// Largest frame of compiled code taken, in words.
const MAX_FRAME_WORDS: i64 = 1 << 16;

/// One heap of the code cache: its committed code and its segment map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heap {
    pub code: Range<u64>,
    /// The segment map: a byte per segment.
    pub segmap: u64,
    pub log2_segment: u32,
}

/// The heaps of a JVM's code cache, read from `CodeCache::_heaps`.
pub(crate) fn read_heaps(layout: &Layout, read: &mut ReadMemory<'_>) -> Option<Vec<Heap>> {
    let array = read_u64(read, layout.heaps)?;
    let mut header = [0u8; 16];
    (array != 0 && read(array, &mut header)).then_some(())?;
    let len = usize::try_from(layout.array_len.get(&header)?).ok()?.min(MAX_HEAPS);
    let data = layout.array_data.get_u64(&header)?;
    let mut heaps = Vec::with_capacity(len);
    for i in 0..len as u64 {
        let heap = read_u64(read, data.checked_add(8 * i)?)?;
        // As much of the heap as holds the fields read.
        let size = [
            layout.heap_log2_segment_size.end(),
            layout.heap_memory + layout.space_high.end(),
            layout.heap_segmap + layout.space_low.end(),
        ];
        let mut object = vec![0u8; size.into_iter().max().unwrap_or(0)];
        if heap == 0 || !read(heap, &mut object) {
            return None;
        }
        let space = |at: usize, field: super::layout::Int| {
            field.get_u64(object.get(at..)?).filter(|&address| address != 0 && address < USER_END)
        };
        let code =
            space(layout.heap_memory, layout.space_low)?..space(layout.heap_memory, layout.space_high)?;
        let segmap = space(layout.heap_segmap, layout.space_low)?;
        let log2_segment = u32::try_from(layout.heap_log2_segment_size.get(&object)?).ok()?;
        if !(4..=16).contains(&log2_segment) || code.is_empty() {
            return None;
        }
        heaps.push(Heap { code, segmap, log2_segment });
    }
    (!heaps.is_empty()).then_some(heaps)
}

/// What a blob is, as its name says (`CodeBlob::_name`, the same in JDK 17 and 25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// A compiled Java method.
    Nmethod,
    /// The wrapper of a native method.
    NativeWrapper,
    /// The template interpreter.
    Interpreter,
    /// Anything else: stubs, adapters, the call stub.
    Stub,
}

impl BlobKind {
    pub fn of_name(name: &str) -> Self {
        match name {
            "nmethod" => Self::Nmethod,
            "native nmethod" => Self::NativeWrapper,
            "Interpreter" => Self::Interpreter,
            _ => Self::Stub,
        }
    }
}

/// A blob's header, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blob {
    pub address: u64,
    pub name: u64,
    pub code: Range<u64>,
    /// Where its frame is complete: before, the innermost frame may be half built.
    pub frame_complete: u64,
    /// Its frame's size in bytes, return address and saved frame pointer included.
    pub frame_size: u64,
    /// For nmethods: the method and the compile id.
    pub method: u64,
    pub compile_id: u32,
    /// For nmethods: where its deoptimization handlers are (0: not known), and where a frame
    /// being deoptimized keeps its original pc, from its stack pointer.
    pub deopt_handlers: [u64; 2],
    pub orig_pc_offset: Option<u64>,
}

/// The blob of `heaps` holding `pc`, read through `read`.
pub(crate) fn find_blob(layout: &Layout, heaps: &[Heap], pc: u64, read: &mut ReadMemory<'_>) -> Option<Blob> {
    let heap = heaps.iter().find(|heap| heap.code.contains(&pc))?;
    let segment = first_segment(heap, (pc - heap.code.start) >> heap.log2_segment, read)?;
    let block = heap.code.start + (segment << heap.log2_segment);
    read_blob(layout, heap, block, pc, read)
}

/// The first segment of the block holding `segment`: the segment map walked back (each byte
/// says how far, 0 at a block's first segment), a window of it read at a time, at most
/// [`MAX_WINDOWS`].
fn first_segment(heap: &Heap, mut segment: u64, read: &mut ReadMemory<'_>) -> Option<u64> {
    let mut window = [0u8; SEGMAP_WINDOW];
    for _ in 0..MAX_WINDOWS {
        let start = segment.saturating_sub(SEGMAP_WINDOW as u64 - 1);
        let len = (segment - start + 1) as usize;
        if !read(heap.segmap.checked_add(start)?, &mut window[..len]) {
            return None;
        }
        while segment >= start {
            match window[(segment - start) as usize] {
                FREE_SEGMENT => return None,
                0 => return Some(segment),
                hop => segment = segment.checked_sub(u64::from(hop))?,
            }
        }
    }
    None
}

fn read_blob(layout: &Layout, heap: &Heap, block: u64, pc: u64, read: &mut ReadMemory<'_>) -> Option<Blob> {
    let address = block + layout.block_size;
    // As much of an nmethod's header as the walk reads, not past the heap's committed code.
    let wanted = (layout.block_size as usize + layout.nmethod_header).min(MAX_HEADER) as u64;
    let mut header = vec![0u8; wanted.min(heap.code.end - block) as usize];
    if header.len() <= layout.block_size as usize
        || !read(block, &mut header)
        || layout.block_used.get(&header)? == 0
    {
        return None;
    }
    header.drain(..layout.block_size as usize);
    let size = layout.blob_size.get_u64(&header)?;
    if address.checked_add(size).is_none_or(|end| end > heap.code.end || pc >= end) {
        return None;
    }
    let code = layout.blob.code(address, &header)?;
    if code.start < address || code.end > address + size || !code.contains(&pc) {
        return None;
    }
    let frame_words = layout.blob_frame_size.get(&header)?;
    let frame_complete = layout.blob_frame_complete.get(&header)?;
    if !(0..MAX_FRAME_WORDS).contains(&frame_words) {
        return None;
    }
    let (deopt_handlers, orig_pc_offset) = match layout.deopt {
        Some(deopt) => {
            let base = if deopt.from_blob { address } else { 0 };
            let handler =
                |int: super::layout::Int| int.get_u64(&header).map_or(0, |at| base.wrapping_add(at));
            (deopt.handlers.map(handler), deopt.orig_pc_offset.get_u64(&header))
        }
        None => ([0; 2], None),
    };
    Some(Blob {
        address,
        name: layout.blob_name.get_u64(&header)?,
        frame_complete: code.start.saturating_add_signed(frame_complete.max(0)),
        code,
        frame_size: 8 * frame_words as u64,
        method: layout.nmethod_method.get_u64(&header).unwrap_or(0),
        compile_id: layout.nmethod_compile_id.get(&header).unwrap_or(0) as u32,
        deopt_handlers,
        orig_pc_offset,
    })
}
