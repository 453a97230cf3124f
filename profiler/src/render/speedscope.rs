//! speedscope JSON (https://www.speedscope.app/file-format-schema.json): one sampled profile
//! per thread, its samples in time order, each weighing one sampling period (or, for
//! outstanding blocks, their bytes).
use std::{collections::HashMap, io::Write};

use indexmap::IndexSet;
use serde::Serialize;

use crate::model::{Recording, Tid, Weight};

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<SampledProfile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<SharedFrame>,
}

#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
struct SharedFrame {
    name: String,
    /// The source file, where the debug information gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    col: Option<u32>,
}

#[derive(Serialize)]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    /// Frame indexes, outermost first.
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

pub(crate) fn write(recording: &Recording, out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer(out, &file(recording)).map_err(std::io::Error::other)
}

fn file(recording: &Recording) -> File {
    let period_ns = recording.meta.period_ns();
    let weight = recording.meta.weight;
    // Thread time in microseconds, as the flame graphs show it.
    let us = |ns: u64| (ns + 500) / 1000;
    // Frames by name and source line; the frame indexes of each location, outermost first.
    let mut frames: IndexSet<SharedFrame> = IndexSet::new();
    let location_frames: Vec<Vec<usize>> = recording
        .locations
        .iter()
        .map(|l| {
            l.symbols
                .iter()
                .map(|symbol| {
                    let frame = SharedFrame {
                        name: symbol.name.clone(),
                        file: symbol.source.as_ref().map(|source| source.file.clone()),
                        line: symbol.source.as_ref().map(|source| source.line),
                        col: symbol.source.as_ref().map(|source| source.column).filter(|&column| column != 0),
                    };
                    frames.insert_full(frame).0
                })
                .collect()
        })
        .collect();
    let frames = frames.into_iter().collect();

    let mut profiles: Vec<SampledProfile> = Vec::new();
    let mut by_thread: HashMap<Tid, usize> = HashMap::new();
    for sample in &recording.samples {
        let index = *by_thread.entry(sample.tid).or_insert_with(|| {
            let comm = &recording.comms[sample.comm as usize];
            profiles.push(SampledProfile {
                kind: "sampled",
                name: format!("{comm} (pid {}, tid {})", sample.pid, sample.tid),
                unit: match weight {
                    Weight::Bytes => "bytes",
                    Weight::Samples => "nanoseconds",
                    Weight::OffCpuNs | Weight::WallNs => "microseconds",
                },
                start_value: match weight {
                    Weight::Bytes => 0,
                    Weight::Samples => sample.time_ns,
                    Weight::OffCpuNs | Weight::WallNs => us(sample.time_ns),
                },
                end_value: 0,
                samples: Vec::new(),
                weights: Vec::new(),
            });
            profiles.len() - 1
        });
        let profile = &mut profiles[index];
        let stack = recording.stacks[sample.stack as usize].iter().rev();
        profile.samples.push(stack.flat_map(|&l| location_frames[l as usize].iter().copied()).collect());
        let (weight, end) = match weight {
            Weight::Bytes => (sample.weight, profile.end_value + sample.weight),
            Weight::Samples => (sample.weight * period_ns, sample.time_ns + sample.weight * period_ns),
            Weight::OffCpuNs | Weight::WallNs => (us(sample.weight), us(sample.time_ns + sample.weight)),
        };
        profile.weights.push(weight);
        profile.end_value = profile.end_value.max(end);
    }
    File {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name: format!("profiler: {}", recording.meta.target),
        active_profile_index: 0,
        exporter: format!("profiler {}", env!("CARGO_PKG_VERSION")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::fixture;

    #[test]
    fn one_profile_per_thread_in_time_order() {
        let mut out = Vec::new();
        write(&fixture(), &mut out).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["$schema"], SCHEMA);
        let names: Vec<&str> =
            json["profiles"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["app (pid 10, tid 10)", "app (pid 10, tid 11)", "other (pid 20, tid 20)"]);
        let frames = json["shared"]["frames"].as_array().unwrap();
        let frame = |i: &serde_json::Value| frames[i.as_u64().unwrap() as usize]["name"].as_str().unwrap();
        let thread = &json["profiles"][1];
        let first: Vec<&str> = thread["samples"][0].as_array().unwrap().iter().map(frame).collect();
        assert_eq!(first, ["main", "work", "push_back"]);
        let inlined = thread["samples"][0].as_array().unwrap().last().unwrap();
        let inlined = &frames[inlined.as_u64().unwrap() as usize];
        assert_eq!(
            (&inlined["file"], &inlined["line"]),
            (&"/usr/include/c++/12/bits/stl_vector.h".into(), &1287.into())
        );
        assert_eq!(thread["weights"].as_array().unwrap().len(), 2);
        assert_eq!(thread["startValue"], 10);
    }

    #[test]
    fn outstanding_bytes_weigh_their_size() {
        let mut recording = fixture();
        recording.meta.weight = Weight::Bytes;
        recording.samples[1].weight = 4096;
        recording.samples[2].weight = 16;
        let mut out = Vec::new();
        write(&recording, &mut out).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let thread = &json["profiles"][1];
        assert_eq!(thread["unit"], "bytes");
        assert_eq!(thread["weights"], serde_json::json!([4096, 16]));
        assert_eq!((&thread["startValue"], &thread["endValue"]), (&0.into(), &4112.into()));
    }

    #[test]
    fn thread_time_in_microseconds() {
        let mut recording = fixture();
        recording.meta.weight = Weight::OffCpuNs;
        // Thread 11: blocked 10 to 2,000,010 ns, then 20 to 1,500,020 ns.
        (recording.samples[1].weight, recording.samples[2].weight) = (2_000_000, 1_500_000);
        let mut out = Vec::new();
        write(&recording, &mut out).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let thread = &json["profiles"][1];
        assert_eq!(thread["unit"], "microseconds");
        assert_eq!(thread["weights"], serde_json::json!([2000, 1500]));
        assert_eq!((&thread["startValue"], &thread["endValue"]), (&0.into(), &2000.into()));
    }
}
