//! `profiler agent -a` at its default frequency, pushing to a local receiver that answers like
//! Pyroscope's ingest API, beside a load on every CPU: busy (CPU profiles), or switching all the
//! time (`--off-cpu` too). The agent's CPU (% of one core) and RSS over time.
use std::{
    fmt::Write as _,
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
use http_body_util::{BodyExt as _, Empty};
use hyper::{
    Request, Response,
    body::{Bytes, Incoming},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{
    compare::{cpu_ticks, ticks_to_seconds},
    long_run::{rss_mib, slope},
    verdict,
    workloads::{KillOnDrop, compile_c},
};

/// The goals: the OpenTelemetry eBPF profiler's published budget is 1% CPU and 250 MB.
const CPU_GOAL_PERCENT: f64 = 0.5;
const RSS_GOAL_MIB: f64 = 64.0;

/// What keeps every CPU of the host busy while the agent runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// A copy of `split` per CPU, computing; the agent profiles CPU time.
    Busy,
    /// A copy of `handoff` per CPU (two threads handing a token over, ~180,000 context switches
    /// a second each); the agent profiles CPU and off-CPU time (`--off-cpu`).
    Switching,
}

pub fn table(profiler: &Path, src: &Path, dir: &Path, load: Load, quick: bool) -> Result<String> {
    let (minutes, every) =
        if quick { (1.0, Duration::from_secs(10)) } else { (10.0, Duration::from_secs(30)) };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (program, source) = match load {
        Load::Busy => ("split", "split.c"),
        Load::Switching => ("handoff", "handoff.c"),
    };
    let binary = dir.join(format!("{program}-agent"));
    compile_c(&src.join(source), &binary, &["-O2", "-g"])?;
    let mut busy = Vec::new();
    for cpu in 0..cpus {
        let args = match load {
            Load::Busy => vec!["0".to_string()],
            // As long as the agent runs, 4 µs of work per hand-off, no lingering, on `cpu`.
            Load::Switching => {
                vec![(minutes * 60.0 + 5.0).to_string(), "4000".into(), "0".into(), cpu.to_string()]
            }
        };
        busy.push(KillOnDrop(
            Command::new(&binary).args(args).stdin(Stdio::null()).stdout(Stdio::null()).spawn()?,
        ));
    }
    let (url, requests) = receiver()?;
    let seconds = minutes * 60.0;
    let off_cpu: &[&str] = if load == Load::Switching { &["--off-cpu"] } else { &[] };
    eprintln!(
        "xtask bench: agent -a{} for {minutes} min",
        off_cpu.iter().map(|o| format!(" {o}")).collect::<String>()
    );
    let mut agent = Command::new(profiler)
        .args(["agent", "-q", "--pyroscope", &url, "-d", &seconds.to_string()])
        .args(off_cpu)
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
    let (title, option, beside) = match load {
        Load::Busy => ("", "", format!("{cpus} copies of `split` keep every CPU busy")),
        Load::Switching => (
            " --off-cpu",
            " --off-cpu",
            format!(
                "{cpus} copies of `handoff` (one per CPU: two threads handing a token over pipes with 4 µs of work \
                 each time, about 180,000 context switches a second each) keep every CPU switching"
            ),
        ),
    };
    let mut text = format!(
        "## Agent: `profiler agent -a{title}`\n\n\
         `profiler agent -q --pyroscope URL -d {seconds:.0}{option}` (19 Hz, 15 s windows) while {beside}, pushing to a \
         local receiver that answers like Pyroscope's ingest API ({} requests received). CPU (% of one core) and RSS \
         every {} s.\n\n\
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

/// A local HTTP server, on a thread of its own, that takes any request and answers 200,
/// counting them; its URL.
fn receiver() -> Result<(String, Arc<AtomicU64>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!("http://{}", listener.local_addr()?);
    let requests = Arc::new(AtomicU64::new(0));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let counted = requests.clone();
    std::thread::spawn(move || runtime.block_on(accept(listener, counted)));
    Ok((url, requests))
}

/// Serves every connection to `listener`, each request read whole and counted.
async fn accept(listener: std::net::TcpListener, requests: Arc<AtomicU64>) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let requests = requests.clone();
        let answer = service_fn(move |request: Request<Incoming>| {
            let requests = requests.clone();
            async move {
                request.into_body().collect().await?;
                requests.fetch_add(1, Ordering::Relaxed);
                Ok::<_, hyper::Error>(Response::new(Empty::<Bytes>::new()))
            }
        });
        tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
    }
}
