//! The end-to-end tests, as root: the real eBPF programs loaded, real workloads profiled, the
//! profiles' contents checked. One binary, built once; `cargo xtask test` runs each module's
//! tests on their own, one module after another (a module's tests run beside one another as
//! [`common::beside_others`] and [`common::alone_on_the_machine`] say).
mod common;

mod agent;
mod dwarf;
mod go;
mod hostile;
mod java;
mod leaks;
mod node;
mod off_cpu;
mod outputs;
mod perl;
mod php;
mod planted;
mod python;
mod record;
mod ruby;
mod safety;
mod services;
mod shared_host;
mod symbols;
mod top;
