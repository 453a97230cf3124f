//! The criterion micro-benchmarks of the userspace stages, read back from criterion's JSON.
use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::check;

pub fn table(root: &Path, quick: bool) -> Result<String> {
    let time = if quick { "1" } else { "3" };
    check(Command::new("cargo").current_dir(root).args([
        "bench",
        "--package",
        "profiler",
        "--bench",
        "stages",
        "--",
        "--warm-up-time",
        "1",
        "--measurement-time",
        time,
    ]))?;
    let mut table = String::from(
        "## Userspace stages\n\nCriterion micro-benchmarks (`cargo bench -p profiler`), one core.\n\n| benchmark | time per \
         iteration | throughput |\n|---|---|---|\n",
    );
    let criterion = root.join("target/criterion");
    for group in ["decode", "unwind", "aggregate", "symbolize"] {
        let mut benches: Vec<_> = std::fs::read_dir(criterion.join(group))
            .with_context(|| format!("no criterion results for {group}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("new/estimates.json").exists())
            .collect();
        benches.sort();
        for bench in benches {
            let estimates: serde_json::Value =
                serde_json::from_slice(&std::fs::read(bench.join("new/estimates.json"))?)?;
            let benchmark: serde_json::Value =
                serde_json::from_slice(&std::fs::read(bench.join("new/benchmark.json"))?)?;
            let ns = estimates["mean"]["point_estimate"].as_f64().context("criterion estimate")?;
            let elements = benchmark["throughput"]["Elements"].as_f64().unwrap_or(1.0);
            let name = benchmark["full_id"].as_str().unwrap_or_default();
            writeln!(table, "| {name} | {} | {}/s |", human_time(ns), human_count(elements * 1e9 / ns))?;
        }
    }
    table.push('\n');
    Ok(table)
}

fn human_time(ns: f64) -> String {
    match ns {
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns if ns >= 1e3 => format!("{:.2} µs", ns / 1e3),
        ns => format!("{ns:.0} ns"),
    }
}

fn human_count(per_second: f64) -> String {
    match per_second {
        n if n >= 1e6 => format!("{:.2} M", n / 1e6),
        n if n >= 1e3 => format!("{:.0} k", n / 1e3),
        n => format!("{n:.0}"),
    }
}
