//! pprof: a gzipped `perftools.profiles.Profile` protobuf, as read by `go tool pprof`,
//! Pyroscope and Parca. Symbolized already: locations carry their functions (inlined ones as
//! extra lines), mappings their file name and build id; location addresses are file offsets.
//! Samples are counted per (stack, pid, tid, command, state, labels) with `pid`, `tid`, `comm`,
//! off the CPU `thread_state`, and the labels its runtime gave the sample (a goroutine's) as
//! labels. The tables are [`ProfileTables`], shared with OTLP.
use std::io::Write;

use flate2::{Compression, write::GzEncoder};
use indexmap::IndexSet;
use prost::Message as _;

use super::profile_tables::{ProfileTables, ValueType};
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
        #[prost(int64, tag = "3")]
        pub column: i64,
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

    fn value_type(&mut self, value_type: ValueType) -> proto::ValueType {
        proto::ValueType { r#type: self.id(value_type.kind), unit: self.id(value_type.unit) }
    }
}

/// The profile of a recording: its [`ProfileTables`], ids numbered from 1.
pub(crate) fn profile(recording: &Recording) -> proto::Profile {
    let tables = ProfileTables::of(recording);
    let mut strings = Strings::new();
    let types = tables.types;
    let sample_type = types.values.iter().map(|&value_type| strings.value_type(value_type)).collect();
    let period_type = types.period_type.map(|value_type| strings.value_type(value_type));
    // Unset for CPU profiles: readers then show the last value, the CPU time.
    let default_sample_type = match recording.meta.weight {
        Weight::Samples => 0,
        _ => strings.id(types.values[types.primary].kind),
    };
    let mapping = tables
        .mappings
        .iter()
        .enumerate()
        .map(|(i, m)| proto::Mapping {
            id: i as u64 + 1,
            memory_limit: u64::MAX,
            filename: strings.id(m.file),
            build_id: strings.id(&m.build_id),
            has_functions: true,
            has_inline_frames: i < recording.modules.len(),
            ..Default::default()
        })
        .collect();
    let location = tables
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| proto::Location {
            id: i as u64 + 1,
            mapping_id: l.mapping as u64 + 1,
            address: l.address,
            line: l
                .lines
                .iter()
                .map(|line| proto::Line {
                    function_id: line.function as u64 + 1,
                    line: line.line,
                    column: line.column,
                })
                .collect(),
        })
        .collect();
    let function = tables
        .functions
        .iter()
        .enumerate()
        .map(|(i, (name, file))| {
            let (name, filename) = (strings.id(name), strings.id(file));
            proto::Function { id: i as u64 + 1, name, system_name: name, filename }
        })
        .collect();
    let (pid_key, tid_key, comm_key) = (strings.id("pid"), strings.id("tid"), strings.id("comm"));
    let state_key = if tables.off_cpu() { strings.id("thread_state") } else { 0 };
    let sample = tables
        .samples
        .iter()
        .map(|row| proto::Sample {
            location_id: recording.stacks[row.stack as usize].iter().map(|&l| u64::from(l) + 1).collect(),
            value: row.values.to_vec(),
            label: [
                proto::Label { key: pid_key, num: row.pid.into(), ..Default::default() },
                proto::Label { key: tid_key, num: row.tid.into(), ..Default::default() },
                proto::Label {
                    key: comm_key,
                    str: strings.id(&recording.comms[row.comm as usize]),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain((row.state != ThreadState::OnCpu).then(|| proto::Label {
                key: state_key,
                str: strings.id(&row.state.letter().to_string()),
                ..Default::default()
            }))
            .chain(recording.label_set(row.labels).iter().map(|(key, value)| proto::Label {
                key: strings.id(key),
                str: strings.id(value),
                ..Default::default()
            }))
            .collect(),
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
        period: types.period,
        default_sample_type,
    }
}

pub(crate) fn write(recording: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
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
        // The sample of stack 1 has labels of its own (a goroutine's), after the profiler's.
        let labels: Vec<(&str, i64, &str)> =
            profile.sample[2].label.iter().map(|l| (s(l.key), l.num, s(l.str))).collect();
        assert_eq!(
            labels,
            [
                ("pid", 10, ""),
                ("tid", 11, ""),
                ("comm", 0, "app"),
                ("endpoint", 0, "/api"),
                ("worker", 0, "2")
            ]
        );
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
