//! Raw recordings (`.prof`): a recording saved to be rendered again later, without root.
//!
//! Layout, version 1:
//!
//! ```text
//! bytes 0..8    magic "PROFILER"
//! bytes 8..12   format version, u32 little-endian (1)
//! bytes 12..    gzip stream of one protobuf message `RawRecording` (fields below)
//! ```
//!
//! The message is protobuf so that other tools can read it from the field list: meta (target,
//! frequency, start time, duration, call graph, lost samples, unwind summary, stack copy size,
//! what weights count, the allocator totals of a leak recording), modules (path, build id), a string table, locations (module index + 1 or
//! 0, file offset or address, symbol names as string indexes, symbol kinds, and source files,
//! lines, columns and languages where known), stacks (location
//! indexes, innermost first), command names, and the samples as packed columns (time delta from
//! the previous sample in ns, pid, tid, command index, stack index, weight (left out when every
//! weight is 1), thread state (left out when every sample was on the CPU) and label set (left out
//! when no sample has labels)), and the label sets (keys and values as string indexes). Every
//! index is checked when reading: a corrupt file is an error, never a panic.
use std::{
    cell::Cell,
    io::{Read, Write},
};

use anyhow::{Context as _, Result, bail, ensure};
use flate2::{Compression, read::GzDecoder, write::GzEncoder};
use indexmap::IndexSet;
use prost::Message;

use super::{
    AllocationTotals, LabelSet, Location, Meta, ModuleInfo, Recording, Sample, SourceLine, Symbol,
    SymbolKind, Tgid, ThreadState, Tid, UnwindSummary, Weight, intern, printable_owned,
};

pub const MAGIC: &[u8; 8] = b"PROFILER";
pub const VERSION: u32 = 1;
/// The memory reading a recording may take: this much, plus [`MAX_EXPANSION`] times the file's
/// size. Recordings written here take about 3 to 20 times their size once read; a crafted one
/// could ask for thousands of times (columns that compress to nothing, a long name referred to
/// by a million locations), and is refused before anything of that size is built.
const FREE_MEMORY: u64 = 16 << 20;
const MAX_EXPANSION: u64 = 64;
/// The uncompressed payload may take this fraction of that budget: decoding it can take 8
/// times its size (a one-byte varint becomes a `u64`).
const PAYLOAD_SHARE: u64 = 4;
/// Bytes inflated at a time, the budget checked between.
const INFLATE_CHUNK: usize = 64 << 10;

#[derive(Clone, PartialEq, Message)]
struct RawRecording {
    #[prost(message, optional, tag = "1")]
    meta: Option<RawMeta>,
    #[prost(message, repeated, tag = "2")]
    modules: Vec<RawModule>,
    #[prost(string, repeated, tag = "3")]
    strings: Vec<String>,
    #[prost(message, repeated, tag = "4")]
    locations: Vec<RawLocation>,
    #[prost(message, repeated, tag = "5")]
    stacks: Vec<RawStack>,
    #[prost(string, repeated, tag = "6")]
    comms: Vec<String>,
    #[prost(uint64, repeated, tag = "7")]
    sample_time_deltas_ns: Vec<u64>,
    #[prost(uint32, repeated, tag = "8")]
    sample_pids: Vec<u32>,
    #[prost(uint32, repeated, tag = "9")]
    sample_tids: Vec<u32>,
    #[prost(uint32, repeated, tag = "10")]
    sample_comms: Vec<u32>,
    #[prost(uint32, repeated, tag = "11")]
    sample_stacks: Vec<u32>,
    /// Empty when every sample weighs 1.
    #[prost(uint64, repeated, tag = "12")]
    sample_weights: Vec<u64>,
    /// 0 on the CPU, 1 sleeping (S), 2 uninterruptible (D), 3 waiting for a CPU (R); empty when
    /// every sample was on the CPU.
    #[prost(uint32, repeated, tag = "13")]
    sample_states: Vec<u32>,
    #[prost(message, repeated, tag = "14")]
    label_sets: Vec<RawLabelSet>,
    /// Index into `label_sets` + 1 (0: no labels); empty when no sample has labels.
    #[prost(uint32, repeated, tag = "15")]
    sample_labels: Vec<u32>,
}

#[derive(Clone, PartialEq, Message)]
struct RawMeta {
    #[prost(string, tag = "1")]
    target: String,
    #[prost(uint64, tag = "2")]
    frequency_hz: u64,
    #[prost(uint64, tag = "3")]
    start_unix_ns: u64,
    #[prost(uint64, tag = "4")]
    duration_ns: u64,
    #[prost(string, tag = "5")]
    call_graph: String,
    #[prost(uint64, tag = "6")]
    lost_samples: u64,
    /// complete, completed with frame pointers, truncated, missing CFI, lost.
    #[prost(uint64, repeated, tag = "7")]
    unwind: Vec<u64>,
    #[prost(uint32, tag = "8")]
    stack_copy_kib: u32,
    /// 0 samples, 1 bytes, 2 nanoseconds off the CPU, 3 nanoseconds of wall time.
    #[prost(uint32, tag = "9")]
    weight: u32,
    #[prost(message, optional, tag = "10")]
    allocations: Option<RawAllocationTotals>,
}

#[derive(Clone, PartialEq, Message)]
struct RawAllocationTotals {
    #[prost(uint64, tag = "1")]
    calls: u64,
    #[prost(uint64, tag = "2")]
    frees: u64,
    #[prost(uint64, tag = "3")]
    failed: u64,
    #[prost(uint64, tag = "4")]
    peak_bytes: u64,
    #[prost(uint64, tag = "5")]
    not_followed: u64,
    #[prost(uint32, tag = "6")]
    sample_every: u32,
    #[prost(uint64, optional, tag = "7")]
    min_age_ns: Option<u64>,
}

impl From<AllocationTotals> for RawAllocationTotals {
    fn from(totals: AllocationTotals) -> Self {
        let AllocationTotals { calls, frees, failed, peak_bytes, not_followed, sample_every, min_age_ns } =
            totals;
        Self { calls, frees, failed, peak_bytes, not_followed, sample_every, min_age_ns }
    }
}

impl From<RawAllocationTotals> for AllocationTotals {
    fn from(raw: RawAllocationTotals) -> Self {
        let RawAllocationTotals { calls, frees, failed, peak_bytes, not_followed, sample_every, min_age_ns } =
            raw;
        Self { calls, frees, failed, peak_bytes, not_followed, sample_every, min_age_ns }
    }
}

#[derive(Clone, PartialEq, Message)]
struct RawModule {
    #[prost(string, tag = "1")]
    path: String,
    #[prost(bytes = "vec", tag = "2")]
    build_id: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RawLocation {
    /// Module index + 1; 0 for none.
    #[prost(uint32, tag = "1")]
    module: u32,
    #[prost(uint64, tag = "2")]
    address: u64,
    #[prost(uint32, repeated, tag = "3")]
    symbol_names: Vec<u32>,
    /// 0 function, 1 inlined, 2 kernel, 3 JIT.
    #[prost(uint32, repeated, tag = "4")]
    symbol_kinds: Vec<u32>,
    /// Each symbol's source file, as a string index + 1 (0: unknown); empty when none is known.
    #[prost(uint32, repeated, tag = "5")]
    symbol_files: Vec<u32>,
    /// Each symbol's source line (0: unknown); empty when none is known.
    #[prost(uint32, repeated, tag = "6")]
    symbol_lines: Vec<u32>,
    /// Each symbol's source column (0: unknown); empty when none is known.
    #[prost(uint32, repeated, tag = "7")]
    symbol_columns: Vec<u32>,
    /// Each symbol's language, as a string index + 1 (0: none); empty when none has one.
    #[prost(uint32, repeated, tag = "8")]
    symbol_languages: Vec<u32>,
}

#[derive(Clone, PartialEq, Message)]
struct RawStack {
    #[prost(uint32, repeated, tag = "1")]
    locations: Vec<u32>,
}

/// Labels, as string indexes, sorted by key.
#[derive(Clone, PartialEq, Message)]
struct RawLabelSet {
    #[prost(uint32, repeated, tag = "1")]
    keys: Vec<u32>,
    #[prost(uint32, repeated, tag = "2")]
    values: Vec<u32>,
}

pub fn write(recording: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&encode(recording).encode_to_vec())?;
    gzip.finish()?;
    Ok(())
}

pub fn read(input: &mut dyn Read) -> Result<Recording> {
    let mut header = [0u8; 12];
    input.read_exact(&mut header).map_err(|_| anyhow::anyhow!("not a profiler recording (too short)"))?;
    ensure!(&header[..8] == MAGIC, "not a profiler recording");
    let version = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
    ensure!(
        version == VERSION,
        "recording format version {version} is not supported (this profiler reads {VERSION})"
    );
    let file_bytes = Cell::new(header.len() as u64);
    let mut gzip = GzDecoder::new(Counted { inner: input, bytes: &file_bytes });
    let mut bytes = Vec::new();
    loop {
        let start = bytes.len();
        bytes.resize(start + INFLATE_CHUNK, 0);
        let read = gzip.read(&mut bytes[start..]).context("corrupt or truncated recording")?;
        bytes.truncate(start + read);
        if read == 0 {
            break;
        }
        let allowed = memory_budget(file_bytes.get()) / PAYLOAD_SHARE;
        ensure!(
            bytes.len() as u64 <= allowed,
            TooLarge { needed: bytes.len() as u64 * PAYLOAD_SHARE, file_bytes: file_bytes.get() }
        );
    }
    decode_payload(&bytes, file_bytes.get())
}

/// Reads the protobuf payload of a raw recording (what follows the header, uncompressed), from a
/// file of `file_bytes`, which bounds the memory it may take.
pub fn decode_payload(bytes: &[u8], file_bytes: u64) -> Result<Recording> {
    let raw = RawRecording::decode(bytes).context("corrupt recording")?;
    let needed = memory_needed(&raw);
    ensure!(needed <= memory_budget(file_bytes), TooLarge { needed, file_bytes });
    decode(raw).context("corrupt recording")
}

fn memory_budget(file_bytes: u64) -> u64 {
    FREE_MEMORY.saturating_add(MAX_EXPANSION.saturating_mul(file_bytes))
}

/// A recording that would take more memory than its file's size allows.
#[derive(Debug)]
struct TooLarge {
    needed: u64,
    file_bytes: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not a recording of this profiler: {} KiB of it would take at least {} MiB of memory once read (a recording \
             takes at most {MAX_EXPANSION} times its size and {} MiB: {} MiB here)",
            self.file_bytes >> 10,
            self.needed >> 20,
            FREE_MEMORY >> 20,
            memory_budget(self.file_bytes) >> 20
        )
    }
}

/// About the memory `raw` takes once decoded: its samples, locations and symbols, the names and
/// file names each symbol holds a copy of, its stacks, command names and labels.
fn memory_needed(raw: &RawRecording) -> u64 {
    let string = |index: u32| raw.strings.get(index as usize).map_or(0, |s| s.len() as u64);
    let symbols: u64 = raw.locations.iter().map(|l| l.symbol_names.len() as u64).sum();
    let names: u64 = raw
        .locations
        .iter()
        .flat_map(|l| {
            let after_one =
                l.symbol_files.iter().chain(&l.symbol_languages).map(|&index| index.saturating_sub(1));
            l.symbol_names.iter().copied().chain(after_one)
        })
        .map(string)
        .sum();
    let stacks: u64 =
        raw.stacks.iter().map(|s| s.locations.len() as u64 * 4 + size_of::<Vec<u32>>() as u64).sum();
    let comms: u64 = raw.comms.iter().map(|c| c.len() as u64 + size_of::<String>() as u64).sum();
    let labels: u64 = raw
        .label_sets
        .iter()
        .flat_map(|set| set.keys.iter().chain(&set.values))
        .map(|&index| string(index) + size_of::<String>() as u64)
        .sum();
    let each = |count: usize, size: usize| count as u64 * size as u64;
    each(raw.sample_time_deltas_ns.len(), size_of::<Sample>())
        + each(raw.locations.len(), size_of::<Location>())
        + symbols * size_of::<Symbol>() as u64
        + names
        + stacks
        + comms
        + labels
}

/// A reader that counts the bytes read through it.
struct Counted<'a> {
    inner: &'a mut dyn Read,
    bytes: &'a Cell<u64>,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + read as u64);
        Ok(read)
    }
}

fn kind_code(kind: SymbolKind) -> u32 {
    match kind {
        SymbolKind::Function => 0,
        SymbolKind::Inlined => 1,
        SymbolKind::Kernel => 2,
        SymbolKind::Jit => 3,
        SymbolKind::Script => 4,
    }
}

fn kind(code: u32) -> Result<SymbolKind> {
    Ok(match code {
        0 => SymbolKind::Function,
        1 => SymbolKind::Inlined,
        2 => SymbolKind::Kernel,
        3 => SymbolKind::Jit,
        4 => SymbolKind::Script,
        other => bail!("unknown symbol kind {other}"),
    })
}

const WEIGHTS: [Weight; 4] = [Weight::Samples, Weight::Bytes, Weight::OffCpuNs, Weight::WallNs];
const STATES: [ThreadState; 4] =
    [ThreadState::OnCpu, ThreadState::Sleeping, ThreadState::Uninterruptible, ThreadState::Runnable];

fn weight_code(weight: Weight) -> u32 {
    WEIGHTS.iter().position(|&w| w == weight).unwrap_or_default() as u32
}

fn weight(code: u32) -> Result<Weight> {
    WEIGHTS.get(code as usize).copied().with_context(|| format!("unknown weight unit {code}"))
}

fn state_code(state: ThreadState) -> u32 {
    STATES.iter().position(|&s| s == state).unwrap_or_default() as u32
}

fn state(code: u32) -> Result<ThreadState> {
    STATES.get(code as usize).copied().with_context(|| format!("unknown thread state {code}"))
}

fn encode(recording: &Recording) -> RawRecording {
    let mut strings: IndexSet<String> = IndexSet::new();
    let locations = recording
        .locations
        .iter()
        .map(|l| RawLocation {
            module: l.module.map_or(0, |m| m + 1),
            address: l.address,
            symbol_names: l.symbols.iter().map(|s| intern(&mut strings, s.name.as_str()) as u32).collect(),
            symbol_kinds: l.symbols.iter().map(|s| kind_code(s.kind)).collect(),
            symbol_files: match l.symbols.iter().any(|s| s.source.is_some()) {
                true => l
                    .symbols
                    .iter()
                    .map(|s| {
                        s.source
                            .as_ref()
                            .map_or(0, |source| intern(&mut strings, source.file.as_str()) as u32 + 1)
                    })
                    .collect(),
                false => Vec::new(),
            },
            symbol_lines: match l.symbols.iter().any(|s| s.source.is_some()) {
                true => l.symbols.iter().map(|s| s.source.as_ref().map_or(0, |source| source.line)).collect(),
                false => Vec::new(),
            },
            symbol_columns: match l
                .symbols
                .iter()
                .any(|s| s.source.as_ref().is_some_and(|source| source.column != 0))
            {
                true => {
                    l.symbols.iter().map(|s| s.source.as_ref().map_or(0, |source| source.column)).collect()
                }
                false => Vec::new(),
            },
            symbol_languages: match l.symbols.iter().any(|s| s.language.is_some()) {
                true => l
                    .symbols
                    .iter()
                    .map(|s| {
                        s.language.as_ref().map_or(0, |language| intern(&mut strings, &**language) as u32 + 1)
                    })
                    .collect(),
                false => Vec::new(),
            },
        })
        .collect();
    let label_sets = recording
        .label_sets
        .iter()
        .map(|set| RawLabelSet {
            keys: set.iter().map(|(key, _)| intern(&mut strings, key.as_str()) as u32).collect(),
            values: set.iter().map(|(_, value)| intern(&mut strings, value.as_str()) as u32).collect(),
        })
        .collect();
    let meta = &recording.meta;
    let u = meta.unwind;
    let mut previous = 0;
    RawRecording {
        meta: Some(RawMeta {
            target: meta.target.clone(),
            frequency_hz: meta.frequency_hz,
            start_unix_ns: meta.start_unix_ns,
            duration_ns: meta.duration_ns,
            call_graph: meta.call_graph.clone(),
            lost_samples: meta.lost_samples,
            unwind: vec![u.complete, u.completed_with_frame_pointers, u.truncated, u.missing_cfi, u.lost],
            stack_copy_kib: meta.stack_copy_kib,
            weight: weight_code(meta.weight),
            allocations: meta.allocations.map(RawAllocationTotals::from),
        }),
        modules: recording
            .modules
            .iter()
            .map(|m| RawModule { path: m.path.clone(), build_id: m.build_id.clone() })
            .collect(),
        strings: strings.into_iter().collect(),
        locations,
        stacks: recording.stacks.iter().map(|s| RawStack { locations: s.clone() }).collect(),
        comms: recording.comms.clone(),
        sample_time_deltas_ns: recording
            .samples
            .iter()
            .map(|s| {
                let delta = s.time_ns.saturating_sub(previous);
                previous = s.time_ns;
                delta
            })
            .collect(),
        sample_pids: recording.samples.iter().map(|s| s.pid.0).collect(),
        sample_tids: recording.samples.iter().map(|s| s.tid.0).collect(),
        sample_comms: recording.samples.iter().map(|s| s.comm).collect(),
        sample_stacks: recording.samples.iter().map(|s| s.stack).collect(),
        sample_weights: if recording.samples.iter().all(|s| s.weight == 1) {
            Vec::new()
        } else {
            recording.samples.iter().map(|s| s.weight).collect()
        },
        sample_states: if recording.samples.iter().all(|s| s.state == ThreadState::OnCpu) {
            Vec::new()
        } else {
            recording.samples.iter().map(|s| state_code(s.state)).collect()
        },
        label_sets,
        sample_labels: match recording.samples.iter().all(|s| s.labels == 0) {
            true => Vec::new(),
            false => recording.samples.iter().map(|s| s.labels).collect(),
        },
    }
}

fn decode(raw: RawRecording) -> Result<Recording> {
    let raw_meta = raw.meta.unwrap_or_default();
    let unwind = match raw_meta.unwind[..] {
        [complete, completed_with_frame_pointers, truncated, missing_cfi, lost] => {
            UnwindSummary { complete, completed_with_frame_pointers, truncated, missing_cfi, lost }
        }
        [] => UnwindSummary::default(),
        _ => bail!("unwind summary has {} fields", raw_meta.unwind.len()),
    };
    let meta = Meta {
        target: printable_owned(raw_meta.target),
        frequency_hz: raw_meta.frequency_hz,
        start_unix_ns: raw_meta.start_unix_ns,
        duration_ns: raw_meta.duration_ns,
        call_graph: raw_meta.call_graph,
        lost_samples: raw_meta.lost_samples,
        stack_copy_kib: raw_meta.stack_copy_kib,
        unwind,
        weight: weight(raw_meta.weight)?,
        allocations: raw_meta.allocations.map(AllocationTotals::from),
    };
    let modules: Vec<ModuleInfo> = raw
        .modules
        .into_iter()
        .map(|m| ModuleInfo { path: printable_owned(m.path), build_id: m.build_id })
        .collect();
    let locations = raw
        .locations
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let count = l.symbol_names.len();
            ensure!(
                l.symbol_kinds.len() == count
                    && [&l.symbol_files, &l.symbol_lines, &l.symbol_columns, &l.symbol_languages]
                        .iter()
                        .all(|v| v.is_empty() || v.len() == count),
                "location {i}: names, kinds, source lines and languages differ in number"
            );
            let module = l.module.checked_sub(1);
            ensure!(
                module.is_none_or(|m| (m as usize) < modules.len()),
                "location {i}: no module {}",
                l.module - 1
            );
            let string = |index: u32| {
                raw.strings.get(index as usize).with_context(|| format!("location {i}: no string {index}"))
            };
            let symbols = l
                .symbol_names
                .iter()
                .zip(&l.symbol_kinds)
                .enumerate()
                .map(|(s, (&name, &code))| {
                    let source = match l.symbol_files.get(s).copied().unwrap_or(0) {
                        0 => None,
                        file => Some(SourceLine {
                            file: string(file - 1)?.clone(),
                            line: l.symbol_lines.get(s).copied().unwrap_or(0),
                            column: l.symbol_columns.get(s).copied().unwrap_or(0),
                        }),
                    };
                    let symbol = Symbol::new(string(name)?.clone(), kind(code)?).at(source);
                    Ok(match l.symbol_languages.get(s).copied().unwrap_or(0) {
                        0 => symbol,
                        language => symbol.in_language(string(language - 1)?.clone()),
                    })
                })
                .collect::<Result<_>>()?;
            Ok(Location { module, address: l.address, symbols })
        })
        .collect::<Result<Vec<_>>>()?;
    let stacks: Vec<Vec<u32>> = raw.stacks.into_iter().map(|s| s.locations).collect();
    for (i, stack) in stacks.iter().enumerate() {
        ensure!(
            stack.iter().all(|&l| (l as usize) < locations.len()),
            "stack {i} refers to a missing location"
        );
    }
    let n = raw.sample_time_deltas_ns.len();
    ensure!(
        [raw.sample_pids.len(), raw.sample_tids.len(), raw.sample_comms.len(), raw.sample_stacks.len()]
            == [n; 4],
        "sample columns differ in length"
    );
    ensure!(
        raw.sample_weights.is_empty() || raw.sample_weights.len() == n,
        "sample columns differ in length"
    );
    ensure!(raw.sample_states.is_empty() || raw.sample_states.len() == n, "sample columns differ in length");
    ensure!(raw.sample_labels.is_empty() || raw.sample_labels.len() == n, "sample columns differ in length");
    let label_sets = raw
        .label_sets
        .iter()
        .enumerate()
        .map(|(i, set)| {
            ensure!(set.keys.len() == set.values.len(), "label set {i}: keys and values differ in number");
            // Made printable, as names are: a crafted file's labels go into every output.
            let text = |index: u32| -> Result<String> {
                let string = raw.strings.get(index as usize);
                Ok(printable_owned(
                    string.with_context(|| format!("label set {i}: no string {index}"))?.clone(),
                ))
            };
            set.keys.iter().zip(&set.values).map(|(&key, &value)| Ok((text(key)?, text(value)?))).collect()
        })
        .collect::<Result<Vec<LabelSet>>>()?;
    let mut time_ns = 0u64;
    let samples = (0..n)
        .map(|i| {
            time_ns = time_ns.saturating_add(raw.sample_time_deltas_ns[i]);
            let sample = Sample {
                time_ns,
                pid: Tgid(raw.sample_pids[i]),
                tid: Tid(raw.sample_tids[i]),
                comm: raw.sample_comms[i],
                stack: raw.sample_stacks[i],
                weight: raw.sample_weights.get(i).copied().unwrap_or(1),
                state: raw.sample_states.get(i).map_or(Ok(ThreadState::OnCpu), |&code| state(code))?,
                labels: raw.sample_labels.get(i).copied().unwrap_or(0),
            };
            ensure!((sample.comm as usize) < raw.comms.len(), "sample {i} refers to a missing command name");
            ensure!(sample.labels as usize <= label_sets.len(), "sample {i} refers to a missing label set");
            ensure!((sample.stack as usize) < stacks.len(), "sample {i} refers to a missing stack");
            Ok(sample)
        })
        .collect::<Result<_>>()?;
    let comms = raw.comms.into_iter().map(printable_owned).collect();
    Ok(Recording { meta, modules, locations, stacks, comms, label_sets, samples })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::fixture;

    fn bytes(recording: &Recording) -> Vec<u8> {
        let mut out = Vec::new();
        write(recording, &mut out).unwrap();
        out
    }

    #[test]
    fn round_trips() {
        let mut recording = fixture();
        recording.meta.unwind = UnwindSummary {
            complete: 5,
            completed_with_frame_pointers: 1,
            truncated: 2,
            missing_cfi: 3,
            lost: 4,
        };
        recording.meta.lost_samples = 7;
        recording.meta.stack_copy_kib = 32;
        let data = bytes(&recording);
        assert_eq!(&data[..8], MAGIC);
        assert_eq!(read(&mut &data[..]).unwrap(), recording);
    }

    #[test]
    fn round_trips_weights_and_allocation_totals() {
        let mut recording = fixture();
        recording.meta.weight = Weight::Bytes;
        recording.meta.allocations = Some(AllocationTotals {
            calls: 10,
            frees: 7,
            failed: 1,
            peak_bytes: 8192,
            not_followed: 2,
            sample_every: 4,
            min_age_ns: Some(30_000_000_000),
        });
        recording.samples[1].weight = 4096;
        assert_eq!(read(&mut &bytes(&recording)[..]).unwrap(), recording);
    }

    #[test]
    fn round_trips_spans_off_the_cpu() {
        let mut recording = fixture();
        recording.meta.weight = Weight::WallNs;
        recording.samples[1].weight = 1_500_000;
        recording.samples[1].state = ThreadState::Sleeping;
        recording.samples[2].state = ThreadState::Uninterruptible;
        recording.samples[3].state = ThreadState::Runnable;
        assert_eq!(read(&mut &bytes(&recording)[..]).unwrap(), recording);
    }

    #[test]
    fn rejects_other_files() {
        let err = |data: &[u8]| format!("{:#}", read(&mut &data[..]).unwrap_err());
        assert_eq!(err(b"hello"), "not a profiler recording (too short)");
        assert_eq!(err(b"<?xml version=\"1.0\"?><svg/>"), "not a profiler recording");
        let mut future = bytes(&fixture());
        future[8] = 9;
        assert_eq!(err(&future), "recording format version 9 is not supported (this profiler reads 1)");
    }

    #[test]
    fn truncated_file_is_an_error() {
        let data = bytes(&fixture());
        for len in [12, 20, data.len() / 2, data.len() - 1] {
            let message = format!("{:#}", read(&mut &data[..len]).unwrap_err());
            assert!(message.starts_with("corrupt"), "{len}: {message}");
        }
    }

    #[test]
    fn dangling_indexes_are_errors() {
        let mut recording = fixture();
        recording.samples[0].stack = 99;
        let message = format!("{:#}", read(&mut &bytes(&recording)[..]).unwrap_err());
        assert_eq!(message, "corrupt recording: sample 0 refers to a missing stack");
        let mut recording = fixture();
        recording.stacks[0].push(42);
        assert!(read(&mut &bytes(&recording)[..]).is_err());
        let mut recording = fixture();
        recording.samples[3].labels = 2;
        let message = format!("{:#}", read(&mut &bytes(&recording)[..]).unwrap_err());
        assert_eq!(message, "corrupt recording: sample 3 refers to a missing label set");
    }

    #[test]
    fn a_small_file_cannot_unfold_into_a_huge_recording() {
        // One 64 KiB name, referred to by a hundred thousand locations: 6 GiB once unfolded.
        let raw = RawRecording {
            strings: vec!["x".repeat(64 << 10)],
            locations: vec![
                RawLocation { symbol_names: vec![0], symbol_kinds: vec![0], ..Default::default() };
                100_000
            ],
            ..Default::default()
        };
        let payload = raw.encode_to_vec();
        assert!(payload.len() < 2 << 20, "{} bytes", payload.len());
        let message = format!("{:#}", decode_payload(&payload, payload.len() as u64).unwrap_err());
        assert!(message.contains("would take at least 62"), "{message}");
        let message = format!("{:#}", read(&mut &file_of(&payload)[..]).unwrap_err());
        assert!(message.starts_with("not a recording of this profiler: "), "{message}");
    }

    #[test]
    fn columns_that_compress_to_nothing_are_refused_while_inflating() {
        // Twenty million samples of zeros: 100 MB of payload, 100 KB of file.
        let samples = 20_000_000;
        let raw = RawRecording {
            comms: vec![String::new()],
            stacks: vec![RawStack::default()],
            sample_time_deltas_ns: vec![0; samples],
            sample_pids: vec![0; samples],
            sample_tids: vec![0; samples],
            sample_comms: vec![0; samples],
            sample_stacks: vec![0; samples],
            ..Default::default()
        };
        let file = file_of(&raw.encode_to_vec());
        assert!(file.len() < 1 << 20, "{} bytes", file.len());
        let message = format!("{:#}", read(&mut &file[..]).unwrap_err());
        assert!(message.starts_with("not a recording of this profiler: "), "{message}");
    }

    #[test]
    fn recordings_written_here_fit_their_budget_with_room() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recording");
        for name in ["cpu.prof", "leaks.prof"] {
            let file = std::fs::read(fixtures.join(name)).unwrap();
            let payload = {
                let mut bytes = Vec::new();
                GzDecoder::new(&file[12..]).read_to_end(&mut bytes).unwrap();
                bytes
            };
            let needed = memory_needed(&RawRecording::decode(&payload[..]).unwrap());
            assert!(
                needed <= MAX_EXPANSION / 2 * file.len() as u64,
                "{name}: {needed} bytes for {}",
                file.len()
            );
        }
    }

    /// A recording file of `payload`.
    fn file_of(payload: &[u8]) -> Vec<u8> {
        let mut file = MAGIC.to_vec();
        file.extend(VERSION.to_le_bytes());
        let mut gzip = GzEncoder::new(file, Compression::best());
        gzip.write_all(payload).unwrap();
        gzip.finish().unwrap()
    }
}
