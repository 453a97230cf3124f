//! `profiler agent -a` at its default frequency, both CPUs busy, pushing to a local receiver
//! that answers like Pyroscope's ingest API: the agent's CPU (% of one core) and RSS over time.
use std::{
    fmt::Write as _,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::{
    compare::{cpu_ticks, ticks_to_seconds},
    long_run::{rss_mib, slope},
    workloads::KillOnDrop,
};
use crate::check;

/// The goals: the OpenTelemetry eBPF profiler's published budget is 1% CPU and 250 MB.
const CPU_GOAL_PERCENT: f64 = 0.5;
const RSS_GOAL_MIB: f64 = 64.0;

pub fn table(profiler: &Path, src: &Path, dir: &Path, quick: bool) -> Result<String> {
    let (minutes, every) =
        if quick { (1.0, Duration::from_secs(10)) } else { (10.0, Duration::from_secs(30)) };
    let split = dir.join("split-agent");
    check(
        Command::new("gcc").args(["-O2", "-g", "-o"]).arg(&split).arg(src.join("split.c")).arg("-lpthread"),
    )?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut busy = Vec::new();
    for _ in 0..cpus {
        busy.push(KillOnDrop(
            Command::new(&split).arg("0").stdin(Stdio::null()).stdout(Stdio::null()).spawn()?,
        ));
    }
    let (url, requests) = receiver()?;
    let seconds = minutes * 60.0;
    eprintln!("xtask bench: agent -a for {minutes} min");
    let mut agent = Command::new(profiler)
        .args(["agent", "-q", "--pyroscope", &url, "-d", &seconds.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the agent")?;
    let started = Instant::now();
    let mut points: Vec<(f64, f64, f64)> = Vec::new();
    let mut last_ticks = 0;
    let mut last_time = 0.0;
    while agent.try_wait()?.is_none() {
        sleep(every);
        let (ticks, now) = (cpu_ticks(agent.id()), started.elapsed().as_secs_f64());
        if let Some(rss) = rss_mib(agent.id()) {
            let cpu = 100.0 * ticks_to_seconds(ticks - last_ticks) / (now - last_time);
            points.push((now / 60.0, cpu, rss));
        }
        (last_ticks, last_time) = (ticks, now);
    }
    drop(busy);
    let cpu = points.iter().map(|p| p.1).sum::<f64>() / points.len().max(1) as f64;
    let rss = points.iter().map(|p| p.2).fold(0.0, f64::max);
    let after_first_minute: Vec<(f64, f64)> =
        points.iter().filter(|p| p.0 > 1.0).map(|&(t, _, rss)| (t, rss)).collect();
    let slope = slope(&after_first_minute);
    let verdict = |ok: bool| if ok { "met" } else { "**not met**" };
    let mut text = format!(
        "## Agent: `profiler agent -a`\n\n\
         `profiler agent -q --pyroscope URL -d {seconds:.0}` (19 Hz, 15 s windows) while {cpus} copies of `split` keep \
         every CPU busy, pushing to a local receiver that answers like Pyroscope's ingest API ({} requests received). \
         CPU (% of one core) and RSS every {} s.\n\n\
         | goal | measured | |\n|---|---|---|\n\
         | CPU ≤ {CPU_GOAL_PERCENT}% of one core | mean {cpu:.2}% | {} |\n\
         | RSS ≤ {RSS_GOAL_MIB} MiB | peak {rss:.1} MiB | {} |\n\
         | RSS flat | {slope:+.2} MiB per minute after the first | {} |\n\n\
         | minute | CPU (% of one core) | RSS (MiB) |\n|---|---|---|\n",
        requests.load(Ordering::Relaxed),
        every.as_secs(),
        verdict(cpu <= CPU_GOAL_PERCENT),
        verdict(rss <= RSS_GOAL_MIB),
        verdict(slope.abs() < 0.1),
    );
    for (minute, cpu, rss) in &points {
        writeln!(text, "| {minute:.1} | {cpu:.2} | {rss:.1} |")?;
    }
    text.push('\n');
    Ok(text)
}

/// A local HTTP server that takes any request and answers 200, counting them; its URL.
fn receiver() -> Result<(String, Arc<AtomicU64>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counted = counted.clone();
            std::thread::spawn(move || answer(stream, &counted));
        }
    });
    Ok((url, requests))
}

/// Answers the requests of one keep-alive connection until it closes.
fn answer(stream: TcpStream, requests: &AtomicU64) -> Option<()> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut writer = stream;
    loop {
        let mut length = 0;
        let mut line = String::new();
        reader.read_line(&mut line).ok().filter(|&n| n > 0)?;
        loop {
            line.clear();
            reader.read_line(&mut line).ok()?;
            if line.trim_end().is_empty() {
                break;
            }
            if let Some((key, value)) = line.split_once(':')
                && key.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().ok()?;
            }
        }
        reader.by_ref().take(length).read_to_end(&mut Vec::new()).ok()?;
        requests.fetch_add(1, Ordering::Relaxed);
        writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").ok()?;
    }
}
