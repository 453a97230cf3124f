// Empty library target: it lets `profiler` name this crate as a build-dependency, so cargo
// rebuilds the eBPF object when this crate changes (see profiler/build.rs).
#![no_std]
