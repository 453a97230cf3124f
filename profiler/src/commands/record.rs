//! `profiler record`: CPU samples from a cpu-clock event on every CPU, each weighing one period.
use anyhow::Result;
use profiler_common::Counter;

use crate::{
    aggregate::{Aggregate, Site},
    cli::RecordArgs,
    decode::Payload,
    kernel::sampler::{self, Sampler, SamplerConfig},
    model::{Meta, Weight},
    render::{RenderOptions, summary::Summary},
    session::{self, End, Mode, Progress, Settings, Target},
    walk::CallGraph,
};

pub async fn run(args: RecordArgs) -> Result<()> {
    let stack_copy_kib = if args.call_graph == CallGraph::Fp { 0 } else { args.stack_size };
    let config = SamplerConfig {
        frequency_hz: args.frequency,
        filter_processes: !args.system_wide,
        follow_forks: !args.no_inherit,
        stack_copy_cap: stack_copy_kib * 1024,
        frame_pointers: args.call_graph.frame_pointers(),
        ring_buffer_bytes: args.ring_buffer.map_or_else(sampler::default_ring_bytes, |mib| Ok(mib << 20))?,
    };
    let settings = Settings {
        pids: args.pids,
        command: args.command,
        frequency_hz: Some(args.frequency),
        duration: args.duration,
        call_graph: args.call_graph,
        stack_copy_kib,
        follow_forks: !args.no_inherit,
        max_records: args.max_samples,
        quiet: args.quiet,
        each_sample: false,
        outputs: args.output.resolve()?,
        render: RenderOptions { grouping: args.grouping.grouping(), ..RenderOptions::default() },
    };
    session::run(CpuProfile { config }, settings).await
}

struct CpuProfile {
    config: SamplerConfig,
}

impl Mode for CpuProfile {
    type Kernel = Sampler;

    fn load(&mut self, _: &Target) -> Result<Sampler> {
        Sampler::load(&self.config)
    }

    fn add(&mut self, site: Site, _: Payload, aggregate: &mut Aggregate) {
        aggregate.push(site, 1);
    }

    fn status(&self, sampler: &Sampler, progress: &Progress) -> String {
        let lost = sampler.count(Counter::Lost).unwrap_or(0);
        let processes = progress.processes;
        let plural = if processes == 1 { "" } else { "es" };
        format!("{} samples · {lost} lost · {processes} process{plural}", progress.weight)
    }

    fn finish(&mut self, _: &Sampler, _: &mut Aggregate, _: u64, meta: &mut Meta) -> Result<()> {
        meta.weight = Weight::Samples;
        Ok(())
    }

    fn report(&self, end: &End<'_, Sampler>) {
        let run_stats = end.kernel.run_stats();
        let summary = Summary {
            recording: end.recording,
            missing_cfi: &end.missing_cfi,
            processes: end.progress.processes,
            kernel_us_per_run: run_stats.map(|s| s.time.as_secs_f64() * 1e6 / s.runs as f64),
            ring_bytes_per_sample: end.kernel.ring_bytes_per_sample(),
            outputs: end.outputs,
        };
        summary.print();
    }
}
