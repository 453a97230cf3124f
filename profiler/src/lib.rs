//! profiler: a system-wide sampling profiler for Linux built on eBPF.
//!
//! Data flows one way (see ARCHITECTURE.md): sampler (kernel) → ring → decode → collect
//! (unwind, address → module + offset) → profile → symbolize → render → output. The stages are
//! public so that benchmarks and tests can drive them without BPF.
pub mod bpf;
pub mod check;
pub mod cli;
pub mod collect;
pub mod decode;
pub mod frame;
pub mod intake;
pub mod kernel_types;
pub mod leaks;
pub mod maps;
pub mod module;
pub mod output;
pub mod perf_map;
pub mod plt;
pub mod process;
pub mod profile;
pub mod record;
pub mod recording;
pub mod render;
pub mod report;
pub mod ring;
pub mod sampler;
pub mod stop;
pub mod summary;
pub mod symbolize;
pub mod target;
pub mod task_events;
pub mod unwind;
