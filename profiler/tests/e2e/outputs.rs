//! End to end, as root: the output formats of one recording, raw recordings rendered again
//! with `report`, `diff`, and the errors on bad recordings.

use std::{
    collections::BTreeMap,
    io::Read as _,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use crate::common::*;
use profiler::pprof as proto;
use prost::Message as _;

/// Records the 60/30/10 workload (or another split) with every output format at once.
fn record_split(dir: &Path, split: [&str; 3], outputs: &[&str]) -> Folded {
    let workload = split_with_frame_pointers();
    let mut args = vec!["record", "-F", "999"];
    let paths: Vec<String> = outputs.iter().map(|o| dir.join(o).display().to_string()).collect();
    for path in &paths {
        args.extend(["-o", path]);
    }
    let program = workload.display().to_string();
    args.extend(["--", &program, "3", "0", "0"]);
    args.extend(split);
    let run = run_profiler(&args);
    assert!(run.status.success());
    Folded::read(&dir.join("live.folded"))
}

fn report(args: &[&str]) -> std::process::Output {
    let output = profiler().arg("report").args(args).output().unwrap();
    eprintln!("report {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

/// Samples per innermost frame (the leaf function), from folded stacks.
fn by_leaf(folded: &Folded) -> BTreeMap<String, u64> {
    let mut leaves = BTreeMap::new();
    for (frames, n) in &folded.stacks {
        let leaf = frames.iter().rev().find(|f| !f.ends_with("_[k]")).unwrap();
        *leaves.entry(leaf.clone()).or_default() += n;
    }
    leaves
}

/// One recording of the 60/30/10 workload, with every output format at once, shared by the
/// tests of each format: its directory, and its folded stacks.
fn recorded_in_every_format() -> &'static (PathBuf, Folded) {
    static RECORDING: OnceLock<(PathBuf, Folded)> = OnceLock::new();
    RECORDING.get_or_init(|| {
        let dir = scratch_dir("formats");
        let live = record_split(
            &dir,
            ["6", "3", "1"],
            &["live.folded", "run.prof", "cpu.pb.gz", "cpu.json", "cpu.svg"],
        );
        assert_split(&live, "main", 3.0, 0.99);
        (dir, live)
    })
}

#[test]
fn pprof_decodes_and_agrees_with_folded() {
    if !e2e_enabled() {
        return;
    }
    let (dir, live) = recorded_in_every_format();
    let leaves = by_leaf(live);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join("cpu.pb.gz")).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let profile = proto::Profile::decode(&*raw).unwrap();
    let location = |id: u64| &profile.location[id as usize - 1];
    let is_kernel = |id: u64| {
        let mapping = &profile.mapping[location(id).mapping_id as usize - 1];
        profile.string_table[mapping.filename as usize] == "[kernel.kallsyms]"
    };
    let name = |id: u64| {
        let function = location(id).line[0].function_id;
        profile.string_table[profile.function[function as usize - 1].name as usize].clone()
    };
    let mut pprof_leaves: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &profile.sample {
        // A process caught exiting may have no user frames left.
        if let Some(&leaf) = sample.location_id.iter().find(|&&id| !is_kernel(id)) {
            *pprof_leaves.entry(name(leaf)).or_default() += sample.value[0] as u64;
        }
    }
    for hot in ["hot_a", "hot_b", "hot_c"] {
        assert_eq!(pprof_leaves.get(hot), leaves.get(hot), "{hot}: pprof and folded agree");
    }
    assert!(profile.mapping.iter().any(|m| profile.string_table[m.filename as usize].ends_with("split-fp")));
}

#[test]
fn speedscope_follows_its_schema() {
    if !e2e_enabled() {
        return;
    }
    let (dir, live) = recorded_in_every_format();
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.tools/speedscope/package/dist/release/file-format-schema.json");
    let schema: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&schema_path)
            .unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask setup`)", schema_path.display())),
    )
    .unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cpu.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "speedscope schema: {errors:?}");
    let mut broken = json.clone();
    broken["profiles"][0]["type"] = "bogus".into();
    assert!(!validator.is_valid(&broken), "the schema check can fail");
    let frames: Vec<&str> =
        json["shared"]["frames"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    for hot in ["hot_a", "hot_b", "hot_c", "main"] {
        assert!(frames.contains(&hot), "speedscope names {hot}");
    }
    let samples: usize =
        json["profiles"].as_array().unwrap().iter().map(|p| p["samples"].as_array().unwrap().len()).sum();
    assert_eq!(samples as u64, live.total());
}

#[test]
fn svg_names_the_hot_functions_and_the_unwind_quality() {
    if !e2e_enabled() {
        return;
    }
    let (dir, _) = recorded_in_every_format();
    let svg = std::fs::read_to_string(dir.join("cpu.svg")).unwrap();
    assert!(svg.contains("hot_a") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("% of user stacks complete"), "subtitle with unwind quality");
}

#[test]
fn report_of_the_raw_recording_gives_the_live_folded_output() {
    if !e2e_enabled() {
        return;
    }
    let (dir, _) = recorded_in_every_format();
    let again = dir.join("again.folded");
    let run = report(&[dir.join("run.prof").to_str().unwrap(), "-o", again.to_str().unwrap()]);
    assert!(run.status.success());
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(dir.join("live.folded")).unwrap(),
        "byte for byte"
    );
}

#[test]
fn report_filters_keep_only_what_they_name() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("filters");
    let split = split_with_frame_pointers();
    let recurse = build_workload("recurse.c", "recurse", "gcc", &["-O2", "-fomit-frame-pointer"]);
    let script = format!("{} 1.5 & {} 1.5 50; wait", split.display(), recurse.display());
    let run_prof = dir.join("run.prof");
    let run = run_profiler(&[
        "record",
        "-F",
        "999",
        "-o",
        run_prof.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    assert!(run.status.success());
    let rendered = |name: &str, args: &[&str]| {
        let out = dir.join(name);
        let mut argv = vec![run_prof.to_str().unwrap(), "-o", out.to_str().unwrap()];
        argv.extend(args);
        assert!(report(&argv).status.success());
        Folded::read(&out)
    };
    let all = rendered("all.folded", &["--per-pid"]);
    let roots: Vec<String> = all.roots().into_keys().collect();
    assert!(
        roots.iter().any(|r| r.starts_with("split-fp-")) && roots.iter().any(|r| r.starts_with("recurse-")),
        "{roots:?}"
    );

    let by_comm = rendered("comm.folded", &["--comm", "recurse"]);
    assert_eq!(by_comm.roots().into_keys().collect::<Vec<_>>(), ["recurse"]);

    let split_root = roots.iter().find(|r| r.starts_with("split-fp-")).unwrap();
    let pid = split_root.rsplit('-').next().unwrap();
    // The pid was a forked `sh` until it exec'd split-fp, so samples from that
    // moment carry `sh-PID`: the filter keeps every root of that pid, no other.
    let by_pid = rendered("pid.folded", &["--pid", pid, "--per-pid"]);
    let pid_suffix = format!("-{pid}");
    let pid_roots = by_pid.roots();
    assert!(pid_roots.contains_key(split_root), "{pid_roots:?}");
    assert!(pid_roots.keys().all(|r| r.ends_with(&pid_suffix)), "{pid_roots:?}");
    let all_roots = all.roots();
    let expected: u64 = all_roots.iter().filter(|(r, _)| r.ends_with(&pid_suffix)).map(|(_, n)| n).sum();
    assert_eq!(by_pid.total(), expected);

    let threads = rendered("threads.folded", &["--per-thread", "--comm", "split-fp"]);
    let tid = threads.roots().into_keys().next().unwrap().rsplit('-').next().unwrap().to_owned();
    let by_tid = rendered("tid.folded", &["--tid", &tid, "--no-group"]);
    assert!(by_tid.total() > 0 && by_tid.total() <= all.total());
    assert!(by_tid.stacks.iter().all(|(frames, _)| frames[0] != "split-fp"), "no root frame with --no-group");

    let user_only = rendered("user.folded", &["--no-kernel"]);
    assert_eq!(user_only.total(), all.total());
    assert!(user_only.stacks.iter().all(|(frames, _)| frames.iter().all(|f| !f.ends_with("_[k]"))));

    let early = rendered("early.folded", &["--until", "0.5"]);
    let late = rendered("late.folded", &["--since", "0.5"]);
    assert!(early.total() > 0 && late.total() > 0);
    assert!(early.total() + late.total() >= all.total(), "the windows cover the recording");
    assert!(early.total() < all.total() / 2, "half a second of a 1.5 s recording");
}

#[test]
fn diff_shows_what_grew_and_what_shrank() {
    if !e2e_enabled() {
        return;
    }
    let before_dir = scratch_dir("diff-before");
    let after_dir = scratch_dir("diff-after");
    record_split(&before_dir, ["6", "3", "1"], &["live.folded", "run.prof"]);
    record_split(&after_dir, ["3", "6", "1"], &["live.folded", "run.prof"]);
    let svg_path = after_dir.join("diff.svg");
    let output = profiler()
        .args([
            "diff",
            before_dir.join("run.prof").to_str().unwrap(),
            after_dir.join("run.prof").to_str().unwrap(),
        ])
        .args(["--normalize", "-o", svg_path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (r, _, b) = frame_fill(&svg, "hot_a");
    assert!(b == 255 && r < 255, "hot_a shrank: blue, got {:?}", frame_fill(&svg, "hot_a"));
    let (r, _, b) = frame_fill(&svg, "hot_b");
    assert!(r == 255 && b < 255, "hot_b grew: red, got {:?}", frame_fill(&svg, "hot_b"));
}

#[test]
fn bad_recordings_are_one_line_errors() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("bad-recordings");
    record_split(&dir, ["6", "3", "1"], &["live.folded", "run.prof"]);
    let good = std::fs::read(dir.join("run.prof")).unwrap();
    let cases: [(&str, Vec<u8>); 4] = [
        ("truncated.prof", good[..good.len() / 2].to_vec()),
        ("empty.prof", Vec::new()),
        ("garbage.prof", b"this is not a recording at all".to_vec()),
        ("flipped.prof", good.iter().enumerate().map(|(i, b)| if i == 40 { !b } else { *b }).collect()),
    ];
    for (name, bytes) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let output = report(&[path.to_str().unwrap(), "-o", dir.join("out.svg").to_str().unwrap()]);
        assert!(!output.status.success(), "{name}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.starts_with(&format!("profiler: error: {}: ", path.display())), "{name}: {stderr}");
    }
    let missing = report(&["/nonexistent.prof"]);
    assert_eq!(String::from_utf8(missing.stderr).unwrap().lines().count(), 1);
    assert!(!dir.join("out.svg").exists(), "no output from a bad recording");
}

/// `bytes` as a protobuf varint.
fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[test]
fn a_small_recording_that_unpacks_to_gigabytes_is_refused_in_a_line() {
    if !e2e_enabled() {
        return;
    }
    let dir = scratch_dir("bomb-recording");
    // A recording's payload (see model::raw): a command name, an empty stack, and twenty million
    // samples of zeros in the five sample columns (fields 7 to 11, packed): 100 MB that gzip
    // makes 100 KiB, gigabytes once read as samples.
    let samples = 20_000_000;
    let mut payload = vec![0x32, 0, 0x2a, 0];
    for field in 7..=11u64 {
        varint(field << 3 | 2, &mut payload);
        varint(samples, &mut payload);
        payload.resize(payload.len() + samples as usize, 0);
    }
    let mut file = b"PROFILER".to_vec();
    file.extend(1u32.to_le_bytes());
    let mut gzip = flate2::write::GzEncoder::new(file, flate2::Compression::best());
    std::io::Write::write_all(&mut gzip, &payload).unwrap();
    let file = gzip.finish().unwrap();
    assert!(file.len() < 512 << 10, "{} bytes", file.len());
    let path = dir.join("bomb.prof");
    std::fs::write(&path, &file).unwrap();
    let cgroup = MemoryCgroup::new("bomb-recording", 512 << 20);
    let out = dir.join("out.svg");
    let output =
        cgroup.profiler(&["report", path.to_str().unwrap(), "-o", out.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a recording of this profiler"), "{stderr}");
    let peak = cgroup.peak();
    assert!(peak < 100 << 20, "{} MiB at the peak", peak >> 20);
    assert!(!out.exists());
}
