//! `profiler agent`: `record`'s CPU profile, cut into windows; each window split by service and
//! handed to the exporter, which delivers it without holding sampling up.
use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{Context as _, Result};

use super::record::{SamplingPlan, sampling};
use crate::{
    aggregate::Detail,
    cli::{AGENT_DEFAULT_HZ, AgentArgs},
    export::{ExportConfig, Exporter, Retention, Window, service::Services},
    kernel::sampler::{self, Sampler},
    model::{Recording, Tgid, ThreadState, Weight, filter::Filter},
    session::{self, Consumer, End, Settings},
};

pub(super) async fn run(args: AgentArgs) -> Result<()> {
    // Two heaps for its few threads (the event loop, naming, the exporter) rather than glibc's
    // default of eight per CPU: what one thread frees stays in its own heap as holes the others
    // cannot fill, and a process that runs for weeks keeps them. glibc's own call.
    // SAFETY: mallopt has no preconditions; it is called before the other threads start.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    let pids = match &args.cgroup {
        Some(cgroup) => cgroup_processes(cgroup)?,
        None => args.pids.iter().map(|&pid| Tgid(pid)).collect(),
    };
    // Off the CPU as well: samples and spans in one aggregate, both weighing nanoseconds, told
    // apart by their state when a window is cut.
    let plan = SamplingPlan {
        default_hz: AGENT_DEFAULT_HZ,
        weight: if args.off_cpu { Weight::WallNs } else { Weight::Samples },
        // Waits for a CPU are CPU time's business here: only blocks are spans.
        runqueue: false,
        filter_processes: !pids.is_empty(),
        follow_forks: true,
        ring_buffer_bytes: ring_bytes(&args)?,
    };
    let (cpu, settings) = sampling(&args.sampling, plan);
    let exporter = Exporter::start(ExportConfig {
        pyroscope: args.pyroscope,
        otlp_grpc: args.otlp,
        otlp_http: args.otlp_http,
        output_dir: args
            .output_dir
            .map(|dir| (dir, Retention { files: args.keep, bytes: args.keep_size.saturating_mul(1 << 20) })),
        labels: args.labels,
        spool_bytes: (args.spool_size * (1 << 20) as f64) as usize,
    })?;
    let settings = Settings {
        pids,
        // Windows are split by process (its service); threads are not told apart.
        detail: Some(Detail { time: false, process: true, thread: false }),
        window: Some(Duration::from_secs_f64(args.interval)),
        ..settings
    };
    let services = Services::new(args.service_name);
    let agent = Agent { exporter, services, windows: 0, profiles: 0 };
    session::run(cpu, agent, settings).await
}

/// The ring: the default one scaled down to the sampling rate, at least 1 MiB (its pages stay
/// resident for weeks: at the agent's rates the default would be mostly idle memory); off the
/// CPU too, the default (spans come with context switches, not with the clock).
fn ring_bytes(args: &AgentArgs) -> Result<u32> {
    let default = u64::from(sampler::default_ring_bytes(args.off_cpu)?);
    if args.off_cpu {
        return Ok(default as u32);
    }
    let hz = args.sampling.frequency.unwrap_or(AGENT_DEFAULT_HZ);
    let scaled = (default * hz).div_ceil(sampler::DEFAULT_RING_HZ).next_power_of_two();
    Ok(scaled.clamp(1 << 20, default) as u32)
}

/// The processes of a cgroup (v2), from its `cgroup.procs`.
fn cgroup_processes(cgroup: &Path) -> Result<Vec<Tgid>> {
    let procs = cgroup.join("cgroup.procs");
    let text = std::fs::read_to_string(&procs).with_context(|| format!("cannot read {}", procs.display()))?;
    let pids: Vec<Tgid> = text.lines().filter_map(|line| Some(Tgid(line.trim().parse().ok()?))).collect();
    anyhow::ensure!(!pids.is_empty(), "no process in cgroup {}", cgroup.display());
    Ok(pids)
}

/// The agent's consumer of a CPU profile: each window's profiles, by service, to the exporter.
struct Agent {
    exporter: Exporter,
    services: Services,
    windows: u64,
    profiles: u64,
}

impl Consumer<Sampler> for Agent {
    fn ready(&mut self, _: &str, collecting: String) -> String {
        format!("agent {collecting}")
    }

    fn status(&self, collecting: String) -> String {
        format!("{collecting} · {} windows", self.windows)
    }

    fn sampling_ended(&mut self) {}

    fn report(&self, end: &End<'_, Sampler>) {
        eprintln!(
            "profiler agent: {} windows, {} profiles handed to the exporter, in {:.1} s",
            self.windows,
            self.profiles,
            end.recording.meta.duration_ns as f64 / 1e9
        );
    }

    fn window(&mut self, recording: Recording) {
        self.windows += 1;
        let mut services = Vec::new();
        for profile in self.profiles_of(recording) {
            services.extend(self.by_service(&profile));
        }
        self.services.forget();
        self.profiles += services.len() as u64;
        if !services.is_empty() {
            self.exporter.send(Window { services });
        }
        // The window's samples and names are freed by now: give the pages back (glibc keeps freed
        // heap for reuse), so that the agent's RSS follows what it holds rather than its peak,
        // after processes with big binaries (whose symbols and CFI were loaded) are gone.
        // glibc's own call, not a system call: from libc, not rustix.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
    }
}

impl Agent {
    /// The window's profiles: CPU samples, and with `--off-cpu` (thread time on and off the
    /// CPU) the time off the CPU.
    fn profiles_of(&self, window: Recording) -> Vec<Recording> {
        if window.meta.weight != Weight::WallNs {
            return vec![window];
        }
        let part = |states: Vec<ThreadState>, weight: Weight| {
            let mut part = window.filtered(&Filter { states, ..Filter::default() });
            part.meta.weight = weight;
            part
        };
        let mut cpu = part(vec![ThreadState::OnCpu], Weight::Samples);
        // Each CPU sample weighed one period: it counts one again.
        let period_ns = cpu.meta.period_ns();
        cpu.samples.iter_mut().for_each(|s| s.weight = s.weight.div_ceil(period_ns));
        let off_cpu = part(vec![ThreadState::Sleeping, ThreadState::Uninterruptible], Weight::OffCpuNs);
        vec![cpu, off_cpu]
    }

    /// A profile per service of `recording`'s processes (none when it has no samples).
    fn by_service(&mut self, recording: &Recording) -> Vec<(String, Recording)> {
        let mut by_service: BTreeMap<String, Vec<Tgid>> = BTreeMap::new();
        for sample in &recording.samples {
            let comm = &recording.comms[sample.comm as usize];
            let pids = by_service.entry(self.services.of(sample.pid, comm)).or_default();
            if !pids.contains(&sample.pid) {
                pids.push(sample.pid);
            }
        }
        by_service
            .into_iter()
            .map(|(service, pids)| (service, recording.filtered(&Filter { pids, ..Filter::default() })))
            .collect()
    }
}
