//! pprof: a gzipped `perftools.profiles.Profile` protobuf, as read by `go tool pprof`,
//! Pyroscope and Parca. Symbolized already: locations carry their functions (inlined ones as
//! extra lines), mappings their file name and build id; location addresses are file offsets.
//! Samples are counted per (stack, pid, tid) with `pid`, `tid` and `comm` labels.
use std::{collections::HashMap, io::Write};

use flate2::{Compression, write::GzEncoder};
use indexmap::IndexSet;
use prost::Message as _;

use crate::model::{Recording, ThreadState, Weight, intern};

/// The messages of profile.proto that profiler writes (field numbers from that schema).
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The string table: index 0 is the empty string, as the format requires.
struct Strings(IndexSet<String>);

impl Strings {
    fn new() -> Self {
        Self(IndexSet::from([String::new()]))
    }

    fn id(&mut self, s: &str) -> i64 {
        intern(&mut self.0, s) as i64
    }
}

pub fn profile(recording: &Recording) -> proto::Profile {
    let mut strings = Strings::new();
    let period_ns = recording.meta.period_ns() as i64;
    let value_type = |strings: &mut Strings, kind: &str, unit: &str| proto::ValueType {
        r#type: strings.id(kind),
        unit: strings.id(unit),
    };
    // A CPU profile's samples and time; a heap profile's live objects and bytes, as Go's.
    let (sample_type, period_type, period, default_type) = match recording.meta.weight {
        Weight::Samples => (
            vec![
                value_type(&mut strings, "samples", "count"),
                value_type(&mut strings, "cpu", "nanoseconds"),
            ],
            Some(value_type(&mut strings, "cpu", "nanoseconds")),
            period_ns,
            0,
        ),
        Weight::Bytes => (
            vec![
                value_type(&mut strings, "inuse_objects", "count"),
                value_type(&mut strings, "inuse_space", "bytes"),
            ],
            None,
            0,
            strings.id("inuse_space"),
        ),
        // Spans (and samples) counted, and their time.
        Weight::OffCpuNs | Weight::WallNs => {
            let kind = if recording.meta.weight == Weight::OffCpuNs { "off_cpu" } else { "wall" };
            (
                vec![
                    value_type(&mut strings, "samples", "count"),
                    value_type(&mut strings, kind, "nanoseconds"),
                ],
                Some(value_type(&mut strings, kind, "nanoseconds")),
                // Spans are measured, not sampled: one nanosecond between two (CPU samples
                // of a wall profile weigh their period already).
                1,
                strings.id(kind),
            )
        }
    };

    // Mapping ids: modules first (1..), then one each for the kernel and anonymous memory.
    let mut mapping: Vec<proto::Mapping> = recording
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let build_id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
            proto::Mapping {
                id: i as u64 + 1,
                memory_start: 0,
                memory_limit: u64::MAX,
                file_offset: 0,
                filename: strings.id(&m.path),
                build_id: strings.id(&build_id),
                has_functions: true,
                has_inline_frames: true,
            }
        })
        .collect();
    let kernel_mapping = mapping.len() as u64 + 1;
    let anonymous_mapping = kernel_mapping + 1;
    for (id, name) in [(kernel_mapping, "[kernel.kallsyms]"), (anonymous_mapping, "[anon]")] {
        let filename = strings.id(name);
        mapping.push(proto::Mapping {
            id,
            memory_limit: u64::MAX,
            filename,
            has_functions: true,
            ..Default::default()
        });
    }

    // Functions by name and source file, numbered from 1.
    let mut functions: IndexSet<(String, String)> = IndexSet::new();
    let location = recording
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mapping_id = match l.module {
                Some(m) => u64::from(m) + 1,
                None if l.is_kernel() => kernel_mapping,
                None => anonymous_mapping,
            };
            // pprof lists inlined functions innermost first; the last line is the caller. Names
            // are clean: pprof has inlining (lines) and the kernel (its mapping) of its own.
            let line = l
                .symbols
                .iter()
                .rev()
                .map(|symbol| {
                    let file = symbol.source.as_ref().map_or("", |source| source.file.as_str());
                    let key = (symbol.name.clone(), file.to_owned());
                    proto::Line {
                        function_id: functions.insert_full(key).0 as u64 + 1,
                        line: symbol.source.as_ref().map_or(0, |source| source.line.into()),
                    }
                })
                .collect();
            proto::Location { id: i as u64 + 1, mapping_id, address: l.address, line }
        })
        .collect();

    // Per (stack, pid, tid, comm, state): model samples and their summed weight.
    type Key = (u32, u32, u32, u32, ThreadState);
    let mut counts: HashMap<Key, (i64, i64)> = HashMap::new();
    for s in &recording.samples {
        let entry = counts.entry((s.stack, s.pid, s.tid, s.comm, s.state)).or_default();
        *entry = (entry.0 + 1, entry.1 + s.weight as i64);
    }
    let mut keys: Vec<_> = counts.keys().copied().collect();
    keys.sort_unstable();
    let function = functions
        .iter()
        .enumerate()
        .map(|(i, (name, file))| {
            let (name, filename) = (strings.id(name), strings.id(file));
            proto::Function { id: i as u64 + 1, name, system_name: name, filename }
        })
        .collect();
    let (pid_key, tid_key, comm_key) = (strings.id("pid"), strings.id("tid"), strings.id("comm"));
    let off_cpu = recording.samples.iter().any(|s| s.state != ThreadState::OnCpu);
    let state_key = if off_cpu { strings.id("thread_state") } else { 0 };
    let sample = keys
        .into_iter()
        .map(|key @ (stack, pid, tid, comm, state)| {
            let (count, weight) = counts[&key];
            // A CPU sample of the model may count several; a block is one object.
            let value = match recording.meta.weight {
                Weight::Samples => vec![weight, weight * period_ns],
                Weight::Bytes | Weight::OffCpuNs | Weight::WallNs => vec![count, weight],
            };
            proto::Sample {
                location_id: recording.stacks[stack as usize].iter().map(|&l| u64::from(l) + 1).collect(),
                value,
                label: vec![
                    proto::Label { key: pid_key, num: pid.into(), ..Default::default() },
                    proto::Label { key: tid_key, num: tid.into(), ..Default::default() },
                    proto::Label {
                        key: comm_key,
                        str: strings.id(&recording.comms[comm as usize]),
                        ..Default::default()
                    },
                ]
                .into_iter()
                .chain((state != ThreadState::OnCpu).then(|| proto::Label {
                    key: state_key,
                    str: strings.id(&state.letter().to_string()),
                    ..Default::default()
                }))
                .collect(),
            }
        })
        .collect();

    proto::Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings.0.into_iter().collect(),
        time_nanos: recording.meta.start_unix_ns as i64,
        duration_nanos: recording.meta.duration_ns as i64,
        period_type,
        period,
        default_sample_type: default_type,
    }
}

pub fn write(recording: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&profile(recording).encode_to_vec())?;
    gzip.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::model::tests::fixture;

    fn decode(bytes: &[u8]) -> proto::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut raw).unwrap();
        proto::Profile::decode(&*raw).unwrap()
    }

    #[test]
    fn profile_round_trips_with_inline_lines_and_labels() {
        let mut out = Vec::new();
        write(&fixture(), &mut out).unwrap();
        let profile = decode(&out);
        let s = |i: i64| profile.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(profile.period, 1_000_000_000 / 99);
        let total: i64 = profile.sample.iter().map(|x| x.value[0]).sum();
        assert_eq!(total, 4);
        // The inlined location: push_back inlined into work, innermost first.
        let inlined = &profile.location[1];
        let lines: Vec<(&str, &str, i64)> = inlined
            .line
            .iter()
            .map(|l| {
                let function = &profile.function[l.function_id as usize - 1];
                (s(function.name), s(function.filename), l.line)
            })
            .collect();
        assert_eq!(
            lines,
            [("push_back", "/usr/include/c++/12/bits/stl_vector.h", 1287), ("work", "/src/app/work.cpp", 42)]
        );
        let mapping = &profile.mapping[inlined.mapping_id as usize - 1];
        assert_eq!((s(mapping.filename), s(mapping.build_id)), ("/usr/bin/app", "abcd"));
        assert_eq!(inlined.address, 0x1234);
        let kernel = &profile.location[3];
        assert_eq!(s(profile.mapping[kernel.mapping_id as usize - 1].filename), "[kernel.kallsyms]");
        // Kernel frames are told by their mapping, not by a suffix.
        assert_eq!(s(profile.function[kernel.line[0].function_id as usize - 1].name), "sys_read");
        let labels: Vec<(&str, i64, &str)> =
            profile.sample[0].label.iter().map(|l| (s(l.key), l.num, s(l.str))).collect();
        assert_eq!(labels, [("pid", 10, ""), ("tid", 10, ""), ("comm", 0, "app")]);
    }

    #[test]
    fn heap_profile_of_outstanding_bytes() {
        let mut recording = fixture();
        recording.meta.weight = Weight::Bytes;
        for (sample, bytes) in recording.samples.iter_mut().zip([100, 200, 300, 400]) {
            sample.weight = bytes;
        }
        let mut out = Vec::new();
        write(&recording, &mut out).unwrap();
        let profile = decode(&out);
        let s = |i: i64| profile.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = profile.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
        assert_eq!(types, [("inuse_objects", "count"), ("inuse_space", "bytes")]);
        assert_eq!(s(profile.default_sample_type), "inuse_space");
        let objects: i64 = profile.sample.iter().map(|x| x.value[0]).sum();
        let bytes: i64 = profile.sample.iter().map(|x| x.value[1]).sum();
        assert_eq!((objects, bytes), (4, 1000));
    }

    #[test]
    fn off_cpu_and_wall_profiles_in_nanoseconds() {
        for (weight, kind) in [(Weight::OffCpuNs, "off_cpu"), (Weight::WallNs, "wall")] {
            let mut recording = fixture();
            recording.meta.weight = weight;
            for (sample, ns) in recording.samples.iter_mut().zip([1_000, 2_000_000, 3_000, 4_000]) {
                sample.weight = ns;
            }
            recording.samples[1].state = ThreadState::Uninterruptible;
            let mut out = Vec::new();
            write(&recording, &mut out).unwrap();
            let profile = decode(&out);
            let s = |i: i64| profile.string_table[i as usize].as_str();
            let types: Vec<(&str, &str)> =
                profile.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
            assert_eq!(types, [("samples", "count"), (kind, "nanoseconds")]);
            let period_type = profile.period_type.as_ref().unwrap();
            assert_eq!(
                (s(period_type.r#type), s(period_type.unit), profile.period),
                (kind, "nanoseconds", 1)
            );
            assert_eq!(s(profile.default_sample_type), kind);
            let ns: i64 = profile.sample.iter().map(|x| x.value[1]).sum();
            assert_eq!(ns, 2_008_000);
            // The state of the blocked sample is a label.
            let states: Vec<&str> = profile
                .sample
                .iter()
                .flat_map(|x| &x.label)
                .filter(|l| s(l.key) == "thread_state")
                .map(|l| s(l.str))
                .collect();
            assert_eq!(states, ["D"]);
        }
    }
}
