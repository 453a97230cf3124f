//! Micro-benchmarks of the userspace stages, without BPF: decode, unwind, aggregate and
//! symbolize. `cargo bench -p profiler`; `cargo xtask bench` reports them in BENCHMARKS.md.
use std::{hint::black_box, path::Path};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use profiler::{
    Grouping, Meta, RecordKind, Tgid, ThreadState, Tid,
    stages::{
        AddressSpaces, Aggregate, DebugInfo, Frame, Namer, NewFrames, NoRuntime, PerfMaps, Runtimes,
        StackSnapshot, Symbolizer, Tracking, Unwinder, Walked, Want, folded,
    },
    testing::{Fixture, encode_sample, no_kernel_namer},
};
use profiler_common::SampleHeader;

fn fixture_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/unwind"))
}

fn decode_record(c: &mut Criterion) {
    let record = encode_sample(&SampleHeader::default(), &vec![0u8; 32 * 1024], &[0x1000; 30], &[0x2000; 20]);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("record_32k", |b| {
        b.iter(|| {
            RecordKind::Sample.decode(black_box(&record)).unwrap().sample.user_stack().iter().sum::<u64>()
        })
    });
    group.finish();
}

fn unwind_stack(c: &mut Criterion) {
    let fixture = Fixture::read(fixture_dir()).unwrap();
    let mut spaces = fixture.address_spaces(fixture_dir().join("snapshot"));
    let mut space = Fixture::view(&mut spaces);
    let stack = StackSnapshot::new(fixture.regs.sp, &fixture.stack, false);
    let mut unwinder = Unwinder::default();
    let frames = unwinder.unwind(fixture.regs, &stack, &mut space, &mut NoRuntime).frames.len();
    let mut group = c.benchmark_group("unwind");
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("warm_{frames}_frames"), |b| {
        b.iter(|| unwinder.unwind(black_box(fixture.regs), &stack, &mut space, &mut NoRuntime).frames.len())
    });
    group.finish();
}

/// Adds a sample of process 1 whose stack is `frames`.
fn add(aggregate: &mut Aggregate, time_ns: u64, frames: &[Frame]) {
    let site = aggregate.site(
        time_ns,
        Tgid(1),
        Tid(1),
        ThreadState::OnCpu,
        &Walked { comm: "app", frames, labels: &[] },
    );
    aggregate.push(site, 1);
}

/// An aggregate of `samples` samples over `distinct` stacks of 30 frames.
fn synthetic_aggregate(samples: usize, distinct: u64) -> Aggregate {
    let mut aggregate = Aggregate::default();
    for i in 0..samples as u64 {
        let frames: Vec<Frame> =
            (0..30).map(|d| Frame::Anonymous { tgid: Tgid(1), addr: (i % distinct) * 64 + d }).collect();
        add(&mut aggregate, i, &frames);
    }
    aggregate
}

fn aggregate(c: &mut Criterion) {
    let frames: Vec<Frame> = (0..30).map(|d| Frame::Anonymous { tgid: Tgid(1), addr: d }).collect();
    let mut group = c.benchmark_group("aggregate");
    group.throughput(Throughput::Elements(1));
    group.bench_function("add_sample_30_frames", |b| {
        b.iter_batched_ref(Aggregate::default, |a| add(a, 1, black_box(&frames)), BatchSize::SmallInput)
    });
    // The common case of a recording: a stack seen before, among a thousand.
    let mut known = synthetic_aggregate(10_000, 1_000);
    let seen: Vec<Frame> = (0..30).map(|d| Frame::Anonymous { tgid: Tgid(1), addr: 500 * 64 + d }).collect();
    group.bench_function("add_known_sample_30_frames", |b| b.iter(|| add(&mut known, 1, black_box(&seen))));
    let mut aggregate = synthetic_aggregate(100_000, 1_000);
    let spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
    let modules = spaces.modules();
    let mut namer = Namer::new(DebugInfo::Own, no_kernel_namer());
    namer.name(NewFrames::new(aggregate.new_frames(), &spaces, &Runtimes::new(false), 0));
    let symbols = namer.finish(0);
    group.throughput(Throughput::Elements(100_000));
    group.bench_function("recording_100k_samples", |b| {
        b.iter(|| aggregate.recording(&symbols, modules, 0, Meta::default()).samples.len())
    });
    let recording = aggregate.recording(&symbols, modules, 0, Meta::default());
    group.bench_function("collapse_100k_samples", |b| {
        b.iter(|| folded::collapse(&recording, Grouping::Command, None).len())
    });
    group.finish();
}

/// Symbolizing the addresses of this benchmark binary's own functions, warm: blazesym has parsed
/// the file once, as it has after the first recording of a long-lived profiler.
fn symbolize(c: &mut Criterion) {
    let pid = Tgid::own();
    let mut spaces = AddressSpaces::new(Tracking { all: false, follow_forks: false });
    let mut process = spaces.observe(pid, pid.main_thread(), "bench", 0);
    let base = symbolize as *const () as usize as u64;
    let frames: Vec<Frame> = (0..1000)
        .map(|i| base + i * 16)
        .map(|addr| Frame::user(pid, 0, addr, process.resolve(addr, Want::Any)))
        .collect();
    let modules = &spaces.modules().share(frames.iter().filter_map(|frame| match frame {
        Frame::Module { module, .. } => Some(*module),
        _ => None,
    }));
    let mut group = c.benchmark_group("symbolize");
    group.throughput(Throughput::Elements(frames.len() as u64));
    let (mut symbolizer, perf_maps, interpreters) =
        (Symbolizer::new(DebugInfo::Own, no_kernel_namer()), PerfMaps::default(), Default::default());
    symbolizer.symbolize(&frames, modules, &interpreters, &perf_maps);
    group.bench_function("warm_1000_addresses", |b| {
        b.iter(|| symbolizer.symbolize(black_box(&frames), modules, &interpreters, &perf_maps))
    });
    // Cold: a new symbolizer each time, so the module is opened and its symbols and DWARF
    // parsed again: the cost of the first address in a module not seen before.
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.bench_function("cold_module_first_address", |b| {
        b.iter(|| {
            Symbolizer::new(DebugInfo::Own, no_kernel_namer()).symbolize(
                black_box(&frames[..1]),
                modules,
                &interpreters,
                &perf_maps,
            )
        })
    });
    group.finish();
}

criterion_group!(benches, decode_record, unwind_stack, aggregate, symbolize);
criterion_main!(benches);
