//! The tables of a profile in the layout pprof and OTLP share: mappings, functions by (name,
//! source file), locations with their lines innermost first, samples counted per (stack,
//! process, thread, command, thread state, labels), and what their values measure. Built here once from
//! a recording; [`super::pprof`] and `export::otlp` only write them into their own messages, so
//! the two formats cannot disagree on what a profile says.
use std::collections::BTreeMap;

use indexmap::IndexSet;

use crate::model::{Meta, Recording, Tgid, ThreadState, Tid, Weight};

/// What a sample value measures, and its unit (`cpu`, `nanoseconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValueType {
    pub kind: &'static str,
    pub unit: &'static str,
}

impl ValueType {
    const fn new(kind: &'static str, unit: &'static str) -> Self {
        Self { kind, unit }
    }
}

/// The values of each sample, and how they were sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SampleTypes {
    /// How many (CPU samples, blocks, spans) and how much (CPU time, bytes, time off the CPU).
    pub values: [ValueType; 2],
    /// Which of the two a format with one value per sample (OTLP) carries: the count of CPU
    /// samples, whose period gives their time, as OpenTelemetry's profilers send; otherwise the
    /// bytes or the time, which no period could give.
    pub primary: usize,
    /// What the period is counted in, when samples are taken every period (CPU time) or time is
    /// measured (a period of one nanosecond); none for bytes.
    pub period_type: Option<ValueType>,
    pub period: i64,
}

impl SampleTypes {
    pub(crate) fn of(meta: &Meta) -> Self {
        let samples = ValueType::new("samples", "count");
        match meta.weight {
            Weight::Samples => {
                let cpu = ValueType::new("cpu", "nanoseconds");
                Self {
                    values: [samples, cpu],
                    primary: 0,
                    period_type: Some(cpu),
                    period: meta.period_ns() as i64,
                }
            }
            Weight::Bytes => Self {
                values: [ValueType::new("inuse_objects", "count"), ValueType::new("inuse_space", "bytes")],
                primary: 1,
                period_type: None,
                period: 0,
            },
            Weight::OffCpuNs | Weight::WallNs => {
                let kind = if meta.weight == Weight::OffCpuNs { "off_cpu" } else { "wall" };
                let time = ValueType::new(kind, "nanoseconds");
                Self { values: [samples, time], primary: 1, period_type: Some(time), period: 1 }
            }
        }
    }
}

/// A file code was mapped from; the kernel and anonymous memory have one each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MappingRow<'r> {
    pub file: &'r str,
    /// The GNU build id in hex, empty when the file has none.
    pub build_id: String,
}

/// A frame's function (index into [`ProfileTables::functions`]) and line (0 when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LineRow {
    pub function: usize,
    pub line: i64,
    /// 0 when not known.
    pub column: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocationRow {
    /// Index into [`ProfileTables::mappings`].
    pub mapping: usize,
    /// File offset in the mapping's file; else the address.
    pub address: u64,
    /// Innermost first: the last line is the function the others were inlined into.
    pub lines: Vec<LineRow>,
}

/// The samples of one (stack, process, thread, command, state, labels), their values summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SampleRow {
    /// Index into the recording's stacks, whose location indexes are the same in
    /// [`ProfileTables::locations`].
    pub stack: u32,
    pub pid: Tgid,
    pub tid: Tid,
    /// Index into the recording's command names.
    pub comm: u32,
    pub state: ThreadState,
    /// As [`crate::model::Sample::labels`] ([`Recording::label_set`]).
    pub labels: u32,
    /// As [`SampleTypes::values`] lists them.
    pub values: [i64; 2],
}

pub(crate) struct ProfileTables<'r> {
    pub types: SampleTypes,
    /// The recording's modules in order, then the kernel's, then anonymous memory's.
    pub mappings: Vec<MappingRow<'r>>,
    /// (name, source file); names are clean: both formats have inlining (lines) and the kernel
    /// (its mapping) of their own.
    pub functions: IndexSet<(&'r str, &'r str)>,
    /// One per location of the recording, in its order.
    pub locations: Vec<LocationRow>,
    /// In (stack, pid, tid, comm, state, labels) order.
    pub samples: Vec<SampleRow>,
}

impl<'r> ProfileTables<'r> {
    pub(crate) fn of(recording: &'r Recording) -> Self {
        let mut mappings: Vec<MappingRow> = recording
            .modules
            .iter()
            .map(|m| MappingRow {
                file: &m.path,
                build_id: m.build_id.iter().map(|b| format!("{b:02x}")).collect(),
            })
            .collect();
        let kernel = mappings.len();
        let anonymous = kernel + 1;
        for file in ["[kernel.kallsyms]", "[anon]"] {
            mappings.push(MappingRow { file, build_id: String::new() });
        }
        let mut functions = IndexSet::new();
        let locations = recording
            .locations
            .iter()
            .map(|location| LocationRow {
                mapping: match location.module {
                    Some(module) => module as usize,
                    None if location.is_kernel() => kernel,
                    None => anonymous,
                },
                address: location.address,
                lines: location
                    .symbols
                    .iter()
                    .rev()
                    .map(|symbol| {
                        let file = symbol.source.as_ref().map_or("", |source| source.file.as_str());
                        LineRow {
                            function: functions.insert_full((symbol.name.as_str(), file)).0,
                            line: symbol.source.as_ref().map_or(0, |source| source.line.into()),
                            column: symbol.source.as_ref().map_or(0, |source| source.column.into()),
                        }
                    })
                    .collect(),
            })
            .collect();
        let types = SampleTypes::of(&recording.meta);
        Self { types, mappings, functions, locations, samples: samples(recording, types) }
    }

    /// Whether any sample is off the CPU (then samples are labelled with their state).
    pub(crate) fn off_cpu(&self) -> bool {
        self.samples.iter().any(|row| row.state != ThreadState::OnCpu)
    }
}

fn samples(recording: &Recording, types: SampleTypes) -> Vec<SampleRow> {
    type Key = (u32, Tgid, Tid, u32, ThreadState, u32);
    // Model samples and their summed weight.
    let mut counts: BTreeMap<Key, (i64, i64)> = BTreeMap::new();
    for s in &recording.samples {
        let entry = counts.entry((s.stack, s.pid, s.tid, s.comm, s.state, s.labels)).or_default();
        *entry = (entry.0 + 1, entry.1 + s.weight as i64);
    }
    counts
        .into_iter()
        .map(|((stack, pid, tid, comm, state, labels), (count, weight))| SampleRow {
            stack,
            pid,
            tid,
            comm,
            state,
            labels,
            // A CPU sample of the model may count several, each a period of CPU time; a block
            // or a span is one, of its bytes or time.
            values: match recording.meta.weight {
                Weight::Samples => [weight, weight * types.period],
                Weight::Bytes | Weight::OffCpuNs | Weight::WallNs => [count, weight],
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::fixture;

    #[test]
    fn every_weight_has_its_types_and_the_values_it_measures() {
        let mut recording = fixture();
        let tables = ProfileTables::of(&recording);
        assert_eq!(tables.types.values.map(|v| v.kind), ["samples", "cpu"]);
        let period = 1_000_000_000 / 99;
        let totals = tables.samples.iter().fold([0, 0], |[a, b], s| [a + s.values[0], b + s.values[1]]);
        assert_eq!(totals, [4, 4 * period]);
        recording.meta.weight = Weight::Bytes;
        let tables = ProfileTables::of(&recording);
        assert_eq!(tables.types.values[tables.types.primary], ValueType::new("inuse_space", "bytes"));
        assert_eq!(tables.types.period_type, None);
        recording.meta.weight = Weight::WallNs;
        let types = ProfileTables::of(&recording).types;
        assert_eq!((types.values[types.primary], types.period), (ValueType::new("wall", "nanoseconds"), 1));
    }

    #[test]
    fn kernel_and_anonymous_code_have_mappings_of_their_own() {
        let recording = fixture();
        let tables = ProfileTables::of(&recording);
        let files: Vec<&str> = tables.mappings.iter().map(|m| m.file).collect();
        assert_eq!(files, ["/usr/bin/app", "[kernel.kallsyms]", "[anon]"]);
        assert_eq!(tables.mappings[0].build_id, "abcd");
        let kernel = &tables.locations[3];
        assert_eq!(kernel.mapping, 1);
        assert_eq!(tables.functions[kernel.lines[0].function], ("sys_read", ""));
    }
}
